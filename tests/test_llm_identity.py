"""What a cached answer is keyed on, for every model source: weights (or a pinned revision),
tokenizer / chat-template / config files, the vLLM options that change answers (with `auto`
dtype resolved), a served endpoint's address; and what it must not be keyed on.

The keys come from the client the workflow's jobs build (`open_client`), so these tests see the
same identity the synthesis and judge jobs use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from srb.llm import cpu
from srb.llm.backends import ChatRequest
from srb.llm.cpu import HostCPU
from srb.llm.models import MODEL_CARD, ModelError, check_sources_present
from srb.llm.session import open_client

REPO = Path(__file__).resolve().parents[1]
T_HASH = "0011223344556677"
REQUEST = ChatRequest([{"role": "user", "content": "Did drug X lower blood pressure?"}], 64)

TOKENIZER_FILES = {
    "tokenizer.json": '{"model": {"type": "BPE", "vocab": {"a": 0}}}',
    "tokenizer_config.json": '{"eos_token": "<|im_end|>"}',
    "chat_template.jinja": "{% for m in messages %}<|im_start|>{{ m.content }}{% endfor %}",
    "generation_config.json": '{"temperature": 1.0}',
    "config.json": '{"model_type": "llama", "torch_dtype": "bfloat16"}',
}


def checkpoint(root: Path, weights: bytes = b"weights-1") -> Path:
    """A local model directory (a GPU host's HF checkpoint), tiny."""
    root.mkdir(parents=True, exist_ok=True)
    for name, text in TOKENIZER_FILES.items():
        (root / name).write_text(text)
    (root / "model.safetensors").write_bytes(weights)
    return root


def path_spec(path: Path, revision: str | None = "rev-1", **extra: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {"source": {"path": str(path)}, "max_model_len": 2048, **extra}
    if revision:
        spec["revision"] = revision
    return spec


def llm_config(tmp: Path, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "backend": "vllm",
        "models": {name: spec},
        "models_dir": str(tmp / "models"),
        "cache": str(tmp / "calls.sqlite"),
        "servers_dir": str(tmp / "servers"),
        "concurrency": 1,
    }


def key(tmp: Path, spec: dict[str, Any], name: str = "local-model") -> str:
    client, _ = open_client(llm_config(tmp, name, spec), name)
    return client.key(REQUEST, T_HASH)


@pytest.fixture
def bf16_host(monkeypatch: pytest.MonkeyPatch) -> None:
    """A CPU host with native bfloat16, whatever this machine is."""
    monkeypatch.setattr(cpu, "read_host", lambda *a: HostCPU((0, 1), frozenset({"amx_bf16"})))
    monkeypatch.setattr(cpu, "vllm_runs_on_cpu", lambda: True)


# ---------------------------------------------------------------------- files beside the weights


@pytest.mark.parametrize(
    ("file", "text"),
    [
        ("tokenizer.json", '{"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}}}'),
        ("tokenizer_config.json", '{"eos_token": "</s>"}'),
        ("chat_template.jinja", "{% for m in messages %}[INST] {{ m.content }}{% endfor %}"),
        ("special_tokens_map.json", '{"bos_token": "<s>"}'),  # absent before
        ("generation_config.json", '{"temperature": 0.6, "top_p": 0.9}'),
    ],
)
def test_tokenizer_and_template_files_change_a_local_models_key(
    tmp_path: Path, bf16_host: None, file: str, text: str
) -> None:
    model = checkpoint(tmp_path / "ckpt")
    spec = path_spec(model)
    before = key(tmp_path, spec)
    (model / file).write_text(text)
    assert key(tmp_path, spec) != before


def test_unrelated_files_keep_the_key(tmp_path: Path, bf16_host: None) -> None:
    model = checkpoint(tmp_path / "ckpt")
    spec = path_spec(model)
    before = key(tmp_path, spec)
    (model / "README.md").write_text("a model card for humans")
    (model / "LICENSE").write_text("licence text")
    assert key(tmp_path, spec) == before


def test_a_packaged_models_tokenizer_changes_the_key(tmp_path: Path, bf16_host: None) -> None:
    prepared = checkpoint(tmp_path / "models" / "smol")
    (prepared / MODEL_CARD).write_text(json.dumps({"name": "smol", "weights_sha256": "a" * 64}))
    spec = {"source": {"package": "llm_smol", "file": "smol.gguf"}, "max_model_len": 2048}
    before = key(tmp_path, spec, "smol")
    (prepared / "chat_template.jinja").write_text("{{ messages[0].content }}")
    assert key(tmp_path, spec, "smol") != before


# ---------------------------------------------------------------------- server options


@pytest.mark.parametrize(
    "change",
    [
        {"vllm": {"dtype": "float32"}},
        {"max_model_len": 4096},
        {"vllm": {"quantization": "fp8"}},
        {"vllm": {"extra_args": ["--tensor-parallel-size", "2"]}},
        {"vllm": {"enforce_eager": False}},
    ],
    ids=["dtype", "max_model_len", "quantization", "extra_args", "enforce_eager"],
)
def test_answer_changing_server_options_change_the_key(
    tmp_path: Path, bf16_host: None, change: dict[str, Any]
) -> None:
    model = checkpoint(tmp_path / "ckpt")
    base = path_spec(model, vllm={"dtype": "bfloat16"})
    changed = {**base, **change}
    assert key(tmp_path, changed) != key(tmp_path, base)


@pytest.mark.parametrize(
    "option",
    [
        {"port": 8123},
        {"kv_cache_gib": 7},
        {"start_timeout_s": 30},
        {"start_attempts": 5},
        {"threads": 1},
        {"omp_bind": "0-1"},
        {"reserved_cpus": 1},
    ],
    ids=lambda o: next(iter(o)),
)
def test_options_that_do_not_change_answers_keep_the_key(
    tmp_path: Path, bf16_host: None, option: dict[str, Any]
) -> None:
    model = checkpoint(tmp_path / "ckpt")
    base = path_spec(model, vllm={"dtype": "bfloat16"})
    changed = path_spec(model, vllm={"dtype": "bfloat16", **option})
    assert key(tmp_path, changed) == key(tmp_path, base)


def test_auto_dtype_enters_the_key_as_resolved_on_this_host(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = checkpoint(tmp_path / "ckpt")
    monkeypatch.setattr(cpu, "vllm_runs_on_cpu", lambda: True)

    def on_host(flags: set[str], dtype: str | None) -> str:
        monkeypatch.setattr(cpu, "read_host", lambda *a: HostCPU((0, 1), frozenset(flags)))
        return key(tmp_path, path_spec(model, vllm={"dtype": dtype} if dtype else {}))

    auto_bf16 = on_host({"avx512_bf16"}, "auto")
    auto_no_bf16 = on_host({"avx2"}, None)
    assert auto_bf16 != auto_no_bf16  # the same config answers differently on the two hosts
    assert auto_bf16 == on_host({"avx2"}, "bfloat16")
    assert auto_no_bf16 == on_host({"avx512_bf16"}, "float32")


# ---------------------------------------------------------------------- weights of a local model

PREPARE = """
import runpy, sys, json
from types import SimpleNamespace as NS
name, spec, models_dir, log = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
snakemake = NS(log=[log], wildcards=NS(model=name), params=NS(spec=spec, models_dir=models_dir),
               output=NS(card=f"{models_dir}/{name}.card.json"))
runpy.run_path("workflow/scripts/prepare_model.py", init_globals={"snakemake": snakemake})
"""


def run_prepare_model(tmp: Path, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """Rule prepare_model's script, in its own process, writing the card where the rule's
    output says (rules/models.smk: `<models_dir>/<model>.card.json`)."""
    models_dir = tmp / "models"
    subprocess.run(
        [sys.executable, "-c", PREPARE, name, json.dumps(spec), str(models_dir), str(tmp / "log")],
        cwd=REPO,
        check=True,
    )
    return json.loads((models_dir / f"{name}.card.json").read_text())


def test_the_card_prepare_model_writes_is_found_for_a_local_model(
    tmp_path: Path, bf16_host: None
) -> None:
    spec = path_spec(checkpoint(tmp_path / "ckpt-1", b"weights-1"), revision=None)
    card = run_prepare_model(tmp_path, "local-model", spec)
    client, _ = open_client(llm_config(tmp_path, "local-model", spec), "local-model")
    assert client.identity["weights"] == card["weights_sha256"]
    first = client.key(REQUEST, T_HASH)

    # other weights (same tokenizer and settings), prepared the same way: another key
    other = tmp_path / "other"
    spec2 = path_spec(checkpoint(other / "ckpt-1", b"weights-2"), revision=None)
    card2 = run_prepare_model(other, "local-model", spec2)
    assert card2["weights_sha256"] != card["weights_sha256"]
    assert key(other, spec2) != first


def test_a_local_model_needs_its_card_or_a_pinned_revision(tmp_path: Path, bf16_host: None) -> None:
    spec = path_spec(checkpoint(tmp_path / "ckpt"), revision=None)
    with pytest.raises(ModelError, match="local-model"):
        key(tmp_path, spec)
    pinned = path_spec(tmp_path / "ckpt", revision="abc123")
    assert key(tmp_path, pinned) != key(tmp_path, path_spec(tmp_path / "ckpt", revision="abc124"))


# ---------------------------------------------------------------------- served endpoints


def served(base_url: str, **extra: Any) -> dict[str, Any]:
    source = {"served_name": "gpt-x", "base_url": base_url, "api_key_env": "KEY_A", **extra}
    return {"source": source, "revision": "2024-01", "max_model_len": 8192}


def test_a_served_models_endpoint_changes_the_key(tmp_path: Path) -> None:
    a = key(tmp_path, served("https://api.one.example/v1"), "gpt")
    assert key(tmp_path, served("https://api.two.example/v1"), "gpt") != a
    assert key(tmp_path, served("https://api.one.example/v1/"), "gpt") == a  # same endpoint
    assert key(tmp_path, served("https://api.one.example/v1", api_key_env="KEY_B"), "gpt") == a
    renamed = served("https://api.one.example/v1")
    renamed["source"]["served_name"] = "gpt-y"
    assert key(tmp_path, renamed, "gpt") != a


# ---------------------------------------------------------------------- one max_model_len


def test_disagreeing_max_model_lens_fail_naming_the_model(tmp_path: Path) -> None:
    spec = path_spec(checkpoint(tmp_path / "ckpt"), vllm={"max_model_len": 4096})
    with pytest.raises(ModelError, match=r"'local-model'.*4096.*2048"):
        check_sources_present({"local-model": spec}, ["local-model"])
    with pytest.raises(ModelError, match="'local-model'"):
        key(tmp_path, spec)
    agreeing = path_spec(tmp_path / "ckpt", vllm={"max_model_len": 2048})
    check_sources_present({"local-model": agreeing}, ["local-model"])


class Captured(Exception):
    pass


def test_the_server_gets_the_models_max_model_len(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, bf16_host: None
) -> None:
    from srb.llm import server

    seen: list[dict[str, Any]] = []

    def capture(name: str, model_dir: str, opts: dict[str, Any], state_dir: Any) -> Any:
        seen.append(opts)
        raise Captured

    monkeypatch.setattr(server, "acquire_server", capture)
    spec = path_spec(checkpoint(tmp_path / "ckpt"), vllm={"kv_cache_gib": 1})  # no vllm length
    client, _ = open_client(llm_config(tmp_path, "local-model", spec), "local-model")
    with pytest.raises(Captured):
        client.run([REQUEST], T_HASH)
    assert seen[0]["max_model_len"] == 2048 and seen[0]["kv_cache_gib"] == 1
