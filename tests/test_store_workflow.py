"""Integration: Mem0 and Graphiti ingest the tiny corpus through the workflow, their real
libraries, the caching endpoint and a real vLLM server (CPU build) serving the packaged
Qwen2.5-Coder-0.5B; each store is then searched through its library; a forced re-ingest on the
warm cache makes zero model calls and exports identical items.

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
        memory={
            "systems": ["mem0", "graphiti"],
            "papers": papers,
            "llm": "qwen2.5-coder-0.5b",
            "max_completion_tokens": 512,
        },
    )


SYSTEMS = ("mem0", "graphiti")


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    root = tmp_path_factory.mktemp("store")
    config = store_config(root, write_tiny_corpus(root))
    targets = [f"results/tiny/units/{s}.ingest.json" for s in SYSTEMS]
    proc = snakemake(root, config, *targets)
    assert proc.returncode == 0, proc.stderr[-5000:]
    cold = {s: json.loads((root / t).read_text()) for s, t in zip(SYSTEMS, targets, strict=True)}
    items = {s: (root / f"results/tiny/units/{s}.jsonl").read_bytes() for s in SYSTEMS}
    proc = snakemake(root, config, *targets, "--forcerun", "ingest_store")
    assert proc.returncode == 0, proc.stderr[-5000:]
    warm = {s: json.loads((root / t).read_text()) for s, t in zip(SYSTEMS, targets, strict=True)}
    return root, cold, warm, items


def test_mem0_ingest_goes_through_vllm_and_is_accounted(ingested) -> None:
    root, cold_all, _, _ = ingested
    cold = cold_all["mem0"]
    assert cold["system"] == "mem0" and cold["llm"] == "qwen2.5-coder-0.5b"
    assert cold["papers"] == 2  # the slice: the two shortest papers
    calls = cold["model_calls"]
    # one extraction call per ~6K-char chunk (each tiny paper is one chunk), all sent to vLLM
    assert calls["chat_requests"] == 2 and calls["model_calls"] == 2
    assert calls["prompt_tokens"] > 2 * 5000  # Mem0's extraction prompt is several K tokens
    assert calls["failed_requests"] == 0
    log = (root / "results/logs/ingest_store/tiny/mem0.log").read_text()
    assert "vLLM for qwen2.5-coder-0.5b ready" in log  # the real server answered them


def test_graphiti_ingest_goes_through_vllm_and_is_accounted(ingested) -> None:
    _, cold_all, _, _ = ingested
    cold = cold_all["graphiti"]
    assert cold["papers"] == 2 and cold["llm"] == "qwen2.5-coder-0.5b"
    calls = cold["model_calls"]
    # at least entity and edge extraction per paper, every one sent to the real server
    assert calls["chat_requests"] >= 4 and calls["model_calls"] == calls["chat_requests"]
    assert calls["completion_tokens"] > 0 and calls["failed_requests"] == 0
    assert cold["items_by_kind"].get("episode") == 2 - cold["papers_failed"]


@pytest.mark.parametrize("system", SYSTEMS)
def test_warm_reingest_makes_no_model_call_and_identical_items(ingested, system) -> None:
    root, cold_all, warm_all, items = ingested
    cold, warm = cold_all[system], warm_all[system]
    assert warm["model_calls"]["model_calls"] == 0
    assert warm["model_calls"]["chat_requests"] == cold["model_calls"]["chat_requests"]
    assert warm["model_calls"]["prompt_tokens"] == cold["model_calls"]["prompt_tokens"]
    assert (root / f"results/tiny/units/{system}.jsonl").read_bytes() == items[system]
    assert warm["items_stored"] == cold["items_stored"]


@pytest.mark.parametrize("system", SYSTEMS)
def test_the_ingested_store_is_searched_through_its_library(ingested, system) -> None:
    """Search needs only the query's embedding: the same caching endpoint, no chat model."""
    from srb.ingest import read_units
    from srb.store import memory_endpoint
    from srb.systems import get_store_system

    root, cold_all, _, _ = ingested
    config = yaml.safe_load((root / "config.yaml").read_text())
    llm = {**config["llm"], "servers_dir": str(root / "cache/servers")}
    dense = {"encoder": "minilm", "cache": str(root / "cache/embeddings.sqlite")}
    units = read_units(root / f"results/tiny/units/{system}.jsonl")
    store = get_store_system(system).configure(config["memory"])
    with memory_endpoint(llm, "qwen2.5-coder-0.5b", dense) as (endpoint, server):
        handle = store.open(root / f"results/tiny/store/{system}", endpoint)
        try:
            modality = store.modalities[0]
            found = handle.search("salt reduction and blood pressure", modality, 50)
            exported = handle.items()
        finally:
            handle.close()
        assert server.stats.model_calls == 0
    assert len(exported) == cold_all[system]["items_stored"] == len(units)
    assert {i.item_id for i in found} <= set(units)  # search answers with exported items
    if system == "graphiti":
        assert any(i.kind == "episode" for i in found)  # native returns the episodes
