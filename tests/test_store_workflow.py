"""Integration: Mem0 ingests the tiny corpus through the workflow, its real library, the caching
endpoint and a real vLLM server (CPU build) serving the packaged Qwen2.5-Coder-0.5B; then a
forced re-ingest on the warm cache makes zero model calls and exports identical items.

What the tiny model extracts is not asserted (extraction quality needs GPU-class models); the
plumbing, the accounting and the replay are.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_llm_workflow import llm_config
from test_workflow import REPO, snakemake, write_config, write_tiny_corpus

pytestmark = pytest.mark.integration

QWEN = yaml.safe_load((REPO / "config/config.yaml").read_text())["llm"]["models"][
    "qwen2.5-coder-0.5b"
]


def store_config(root: Path, corpus: Path, papers: int = 2) -> Path:
    llm = llm_config(root, models={**llm_config(root)["models"], "qwen2.5-coder-0.5b": QWEN})
    return write_config(
        root,
        corpus,
        systems=["simple_rag"],
        modalities=["dense", "hybrid"],
        budgets=["native", "2K"],
        llm=llm,
        memory={"systems": ["mem0"], "papers": papers, "llm": "qwen2.5-coder-0.5b"},
    )


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    config = store_config(root, write_tiny_corpus(root))
    target = "results/tiny/units/mem0.ingest.json"
    proc = snakemake(root, config, target)
    assert proc.returncode == 0, proc.stderr[-5000:]
    cold = json.loads((root / target).read_text())
    items = (root / "results/tiny/units/mem0.jsonl").read_bytes()
    proc = snakemake(root, config, target, "--forcerun", "ingest_store")
    assert proc.returncode == 0, proc.stderr[-5000:]
    warm = json.loads((root / target).read_text())
    return root, cold, warm, items


def test_ingest_goes_through_vllm_and_is_accounted(ingested) -> None:
    root, cold, _, _ = ingested
    assert cold["system"] == "mem0" and cold["llm"] == "qwen2.5-coder-0.5b"
    assert cold["papers"] == 2  # the slice: the two shortest papers
    calls = cold["model_calls"]
    # one extraction call per ~6K-char chunk (each tiny paper is one chunk), all sent to vLLM
    assert calls["chat_requests"] == 2 and calls["model_calls"] == 2
    assert calls["prompt_tokens"] > 2 * 5000  # Mem0's extraction prompt is several K tokens
    assert calls["failed_requests"] == 0
    log = (root / "results/logs/ingest_store/tiny/mem0.log").read_text()
    assert "vLLM for qwen2.5-coder-0.5b ready" in log  # the real server answered them


def test_warm_reingest_makes_no_model_call_and_identical_items(ingested) -> None:
    root, cold, warm, items = ingested
    assert warm["model_calls"]["model_calls"] == 0
    assert warm["model_calls"]["chat_requests"] == cold["model_calls"]["chat_requests"]
    assert warm["model_calls"]["prompt_tokens"] == cold["model_calls"]["prompt_tokens"]
    assert (root / "results/tiny/units/mem0.jsonl").read_bytes() == items
    assert warm["items_stored"] == cold["items_stored"]
