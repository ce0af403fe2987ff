"""The lazily started vLLM server: command line, failed starts, reuse via the registry, stopping."""

from __future__ import annotations

import importlib.util
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from srb.llm import server as srv
from srb.llm.server import ServerError, acquire_server, stop_servers, vllm_command
from tests.processes import FAKE_VLLM

FAST_FAIL = {"start_attempts": 2, "start_timeout_s": 5}


def only(paths: list[Path]) -> Path:
    assert len(paths) == 1, paths
    return paths[0]


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def reap_when_it_exits(pid: int) -> threading.Thread:
    """The test process is the server's parent: reap it so it does not linger as a zombie."""

    def wait() -> None:
        try:
            os.waitpid(pid, 0)
        except ChildProcessError:
            pass

    t = threading.Thread(target=wait, daemon=True)
    t.start()
    return t


# ---------------------------------------------------------------------- command line


def test_vllm_command_defaults() -> None:
    cmd = vllm_command("/models/tiny", "tiny", 8123, {"max_model_len": 2048})
    assert "--quantization" not in cmd
    assert cmd[:3] == [sys.executable, "-m", "vllm.entrypoints.openai.api_server"]
    assert "--enforce-eager" in cmd

    def arg(flag: str) -> str:
        return cmd[cmd.index(flag) + 1]

    assert arg("--model") == "/models/tiny"
    assert arg("--served-model-name") == "tiny"
    assert arg("--host") == "127.0.0.1"
    assert arg("--port") == "8123"
    assert arg("--max-model-len") == "2048"
    assert arg("--dtype") == "auto"  # unresolved options: vLLM's own choice
    assert arg("--seed") == "0"


def test_vllm_command_options() -> None:
    cmd = vllm_command(
        "/m",
        "tiny",
        9000,
        {
            "enforce_eager": False,
            "dtype": "float32",
            "quantization": "fp8",
            "extra_args": ["--x", 3],
        },
    )
    assert "--enforce-eager" not in cmd
    assert cmd[cmd.index("--dtype") + 1] == "float32"
    assert cmd[cmd.index("--quantization") + 1] == "fp8"
    assert "--max-model-len" not in cmd  # none given: the model's own length
    assert cmd[-2:] == ["--x", "3"]


# ---------------------------------------------------------------------- failed starts


def test_failed_start_raises_naming_model_and_port(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    launched: list[int] = []

    def exits_at_once(model_dir: str, served_name: str, port: int, opts: dict) -> list[str]:
        launched.append(port)
        return [sys.executable, "-c", "import sys; print('no model here'); sys.exit(3)"]

    monkeypatch.setattr(srv, "vllm_command", exits_at_once)
    started = time.monotonic()
    with pytest.raises(ServerError) as err:
        acquire_server("tiny-missing", str(tmp_path / "no-such-model"), FAST_FAIL, tmp_path)
    assert time.monotonic() - started < 30
    message = str(err.value)
    assert "'tiny-missing'" in message
    assert f"port {launched[-1]}" in message
    assert "2 attempt(s)" in message
    assert len(launched) == 2
    assert not list(tmp_path.glob("tiny-missing*.json"))  # no registry for a dead server
    log = only(list(tmp_path.glob("tiny-missing-*.server.log"))).read_text()
    assert log.count("no model here") == 2


@pytest.mark.integration
@pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vLLM is not installed")
def test_real_vllm_on_a_missing_model_fails_cleanly(tmp_path: Path) -> None:
    # vLLM needs ~15 s here to import and exit on a missing model; a 60 s start timeout lets it
    # exit by itself (with 5 s each attempt is killed instead), so this takes ~35 s rather than ~55 s
    model_dir = tmp_path / "no-such-model"
    with pytest.raises(ServerError, match=r"'tiny-missing'.*port \d+"):
        acquire_server(
            "tiny-missing", str(model_dir), {"start_attempts": 2, "start_timeout_s": 60}, tmp_path
        )
    assert not list(tmp_path.glob("tiny-missing*.json"))
    assert str(model_dir) in only(list(tmp_path.glob("tiny-missing-*.server.log"))).read_text()


def test_terminate_returns_once_its_own_child_is_dead() -> None:
    proc = subprocess.Popen(["sleep", "60"], start_new_session=True)
    try:
        started = time.monotonic()
        srv._terminate(proc.pid, grace=2.0)
        elapsed = time.monotonic() - started
    finally:
        proc.kill()
        proc.wait()
    assert elapsed < 1.0  # reaped as soon as SIGTERM ended it, no wait for the grace period
    assert not srv._alive(proc.pid)


# ---------------------------------------------------------------------- start, reuse, stop


def test_start_reuse_and_stop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def fake_vllm(model_dir: str, served_name: str, port: int, opts: dict) -> list[str]:
        return [sys.executable, "-c", FAKE_VLLM, str(port), served_name]

    monkeypatch.setattr(srv, "vllm_command", fake_vllm)
    url, started = acquire_server("tiny", str(tmp_path), {"start_timeout_s": 30}, tmp_path)
    assert started is True
    registry = only(list(tmp_path.glob("tiny-*.json")))
    info = json.loads(registry.read_text())
    assert info["url"] == url == f"http://127.0.0.1:{info['port']}/v1"
    assert info["host"] == socket.gethostname() and info["model"] == "tiny"
    assert srv.healthy(url, "tiny")

    # a second job reuses it: nothing is launched
    def no_launch(*a, **kw):
        raise AssertionError("a second server was started")

    monkeypatch.setattr(subprocess, "Popen", no_launch)
    # (start timeout is no answer-changing option: the same server is reused)
    assert acquire_server("tiny", str(tmp_path), {}, tmp_path) == (url, False)

    reaper = reap_when_it_exits(info["pid"])
    assert stop_servers(tmp_path) == 1
    reaper.join(timeout=10)
    assert not reaper.is_alive()
    assert not srv._alive(info["pid"])
    assert not registry.exists()
    assert not srv.healthy(url)


def test_stale_registry_is_replaced(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    registry = tmp_path / f"{srv.server_key('tiny', str(tmp_path), {})}.json"
    registry.write_text(
        json.dumps(
            {
                "pid": dead_pid(),
                "url": "http://127.0.0.1:1/v1",
                "port": 1,
                "host": socket.gethostname(),
                "model": "tiny",
            }
        )
    )
    launched: list[int] = []

    def exits_at_once(model_dir: str, served_name: str, port: int, opts: dict) -> list[str]:
        launched.append(port)
        return [sys.executable, "-c", "raise SystemExit(3)"]

    monkeypatch.setattr(srv, "vllm_command", exits_at_once)
    with pytest.raises(ServerError):
        acquire_server("tiny", str(tmp_path), {"start_attempts": 1}, tmp_path)
    assert len(launched) == 1  # the dead server's entry was not trusted
    assert not registry.exists()


def test_stop_servers_on_empty_or_missing_dir(tmp_path: Path) -> None:
    assert stop_servers(tmp_path) == 0
    assert stop_servers(tmp_path / "never-created") == 0


def test_stop_servers_skips_dead_servers_and_clears_their_entries(tmp_path: Path) -> None:
    (tmp_path / "gone.json").write_text(
        json.dumps({"pid": dead_pid(), "url": "x", "host": socket.gethostname()})
    )
    assert stop_servers(tmp_path) == 0
    # the entry is gone; only its lock file stays (unlinking a lock others may wait on is a race)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gone.lock"]
