"""The ingest model's server started ahead of its clients, on a cold call cache only."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from srb.llm import cpu
from srb.llm import server as srv
from srb.llm.cache import CallCache
from srb.llm.cpu import HostCPU, parse_cpu_flags
from srb.llm.prestart import prestart_server
from tests.test_cpu_settings import RECORDING_VLLM, SKYLAKE
from tests.test_llm_identity import checkpoint, llm_config, path_spec


@pytest.fixture
def stand_in_vllm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """vLLM's command replaced by a process that records its argv and serves /v1/models; the
    file it writes shows whether a server was started."""
    record = tmp_path / "record" / "seen.json"
    record.parent.mkdir()
    real_command = srv.vllm_command

    def recording(model_dir: str, served_name: str, port: int, opts: dict) -> list[str]:
        cmd = real_command(model_dir, served_name, port, opts)
        return [sys.executable, "-c", RECORDING_VLLM, str(record), *cmd[3:]]

    monkeypatch.setattr(srv, "vllm_command", recording)
    monkeypatch.setattr(cpu, "read_host", lambda *a: HostCPU((0, 1), parse_cpu_flags(SKYLAKE)))
    monkeypatch.setattr(cpu, "vllm_runs_on_cpu", lambda: True)
    return record


def test_a_cold_cache_starts_the_server_ahead(tmp_path: Path, stand_in_vllm: Path) -> None:
    llm = llm_config(tmp_path, "ingest-model", path_spec(checkpoint(tmp_path / "ckpt")))
    try:
        decision = prestart_server(llm, "ingest-model")
        assert decision["started_ahead"] is True
        argv = json.loads(stand_in_vllm.read_text())["argv"]
        assert argv[argv.index("--served-model-name") + 1] == "ingest-model"
        # a second job joins the running server instead of starting another
        again = prestart_server(llm, "ingest-model")
        assert again["started_ahead"] is True and "already up" in again["why"]
    finally:
        srv.stop_servers(llm["servers_dir"])


def test_a_cache_holding_the_models_answers_starts_nothing(
    tmp_path: Path, stand_in_vllm: Path
) -> None:
    llm = llm_config(tmp_path, "ingest-model", path_spec(checkpoint(tmp_path / "ckpt")))
    cache = CallCache(llm["cache"])
    cache.put("k1", {"text": "an answer"}, kind="request", model="ingest-model")
    cache.put("k2", {"text": "another model's"}, model="synthesizer")
    cache.close()
    decision = prestart_server(llm, "ingest-model")
    assert decision["started_ahead"] is False
    assert "holds 1 answer(s) of ingest-model" in decision["why"]
    assert not stand_in_vllm.exists()  # no server process ran
    assert not list(Path(llm["servers_dir"]).glob("*.json"))


def test_a_directory_cache_starts_nothing(tmp_path: Path, stand_in_vllm: Path) -> None:
    llm = llm_config(tmp_path, "ingest-model", path_spec(checkpoint(tmp_path / "ckpt")))
    llm["cache"] = str(tmp_path / "calls")  # a cluster's shared call cache
    decision = prestart_server(llm, "ingest-model")
    assert decision["started_ahead"] is False and "cluster" in decision["why"]
    assert not stand_in_vllm.exists()
