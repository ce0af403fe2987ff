"""vLLM server lifecycle with real processes: an interrupted start leaves nothing running, one
server per (model, answer-changing settings), a port serving another model is not taken for
ours, and one invocation's stop hook leaves a server another live invocation still uses.

A tiny HTTP server process stands in for vLLM (it answers /v1/models like vLLM does)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from srb.llm import server as srv
from srb.llm.server import ServerError, acquire_server, healthy, stop_servers
from tests.processes import FAKE_VLLM, gone, session_nice, wait_gone

REPO = Path(__file__).resolve().parents[1]
RUN_ID, RUN_PID = "SRB_RUN_ID", "SRB_RUN_PID"  # what rules/common.smk puts in the environment


# a server that never becomes healthy: writes its pid, then sleeps
NEVER_READY = (
    "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(600)"
)


def _default_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_quietly(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass


@pytest.fixture
def fake_vllm(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Serve the fake in place of vLLM; returns the file each launch appends its pid to."""
    launches = tmp_path / "launches.txt"

    def command(model_dir: str, served_name: str, port: int, opts: dict) -> list[str]:
        return [sys.executable, "-c", FAKE_VLLM, str(port), served_name, str(launches)]

    monkeypatch.setattr(srv, "vllm_command", command)
    monkeypatch.delenv(RUN_ID, raising=False)
    monkeypatch.delenv(RUN_PID, raising=False)
    return launches


@pytest.fixture
def invocations() -> Iterator[list[subprocess.Popen]]:
    """Stand-ins for Snakemake main processes (their pids are what leases check)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def launched(launches: Path) -> list[int]:
    return [int(x) for x in launches.read_text().split()] if launches.exists() else []


def registered_pids(state: Path) -> list[int]:
    return [json.loads(f.read_text())["pid"] for f in sorted(state.glob("*.json"))]


# ---------------------------------------------------------------------- interrupted starts

ACQUIRER = """
import sys
from srb.llm import server as srv
srv.vllm_command = lambda model_dir, name, port, opts: [sys.executable, "-c", {never!r}, {pidfile!r}]
srv.acquire_server("tiny", {state!r}, {{"start_timeout_s": 300, "start_attempts": 1}}, {state!r})
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_start_interrupted_by_a_signal_leaves_no_server(tmp_path: Path, sig: int) -> None:
    pidfile = tmp_path / "server.pid"
    script = ACQUIRER.format(never=NEVER_READY, pidfile=str(pidfile), state=str(tmp_path))
    # SIGINT at its default in the child, as under a terminal: a shell that starts the test run
    # in the background (`cmd &` without job control) hands its children SIGINT ignored, and
    # Python then installs no KeyboardInterrupt handler, so the signal would never arrive
    acquirer = subprocess.Popen(
        [sys.executable, "-c", script], cwd=REPO, preexec_fn=_default_sigint
    )
    server_pid = None
    try:
        deadline = time.monotonic() + 60
        while not (pidfile.exists() and pidfile.read_text()) and time.monotonic() < deadline:
            assert acquirer.poll() is None, "the acquiring process died before the start"
            time.sleep(0.05)
        server_pid = int(pidfile.read_text())
        time.sleep(0.5)  # inside the health wait now
        acquirer.send_signal(sig)
        acquirer.wait(timeout=60)
        assert acquirer.returncode != 0
        if sig == signal.SIGTERM:
            assert acquirer.returncode == 128 + signal.SIGTERM  # a clean exit, after cleanup
        assert wait_gone(server_pid, 30), f"server pid {server_pid} outlived the interrupted start"
        assert not list(tmp_path.glob("*.json"))
    finally:
        acquirer.kill()
        acquirer.wait()
        if server_pid is not None:
            kill_quietly(server_pid)


def test_an_exception_during_the_health_wait_stops_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pidfile = tmp_path / "server.pid"
    monkeypatch.setattr(
        srv, "vllm_command", lambda *a: [sys.executable, "-c", NEVER_READY, str(pidfile)]
    )

    def health_check_breaks(url: str, name: str | None = None, timeout: float = 2.0) -> bool:
        if pidfile.exists() and pidfile.read_text():
            raise RuntimeError("the health check broke")
        return False

    monkeypatch.setattr(srv, "healthy", health_check_breaks)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(RuntimeError, match="health check broke"):
            acquire_server("tiny", str(tmp_path), {"start_timeout_s": 60}, tmp_path)
        assert wait_gone(int(pidfile.read_text()), 30)
        assert signal.getsignal(signal.SIGTERM) == previous  # the handler is put back
    finally:
        if pidfile.exists() and pidfile.read_text():
            kill_quietly(int(pidfile.read_text()))


# ---------------------------------------------------------------------- one server per settings

CONCURRENT = """
import json, sys
from srb.llm import server as srv
srv.vllm_command = lambda model_dir, name, port, opts: [
    sys.executable, "-c", {fake!r}, str(port), name, {launches!r}]
url, started = srv.acquire_server("tiny", {state!r}, {{"start_timeout_s": 60}}, {state!r})
print(json.dumps([url, started]))
"""


def test_two_processes_acquiring_at_once_start_one_server(tmp_path: Path) -> None:
    launches = tmp_path / "launches.txt"
    script = CONCURRENT.format(fake=FAKE_VLLM, launches=str(launches), state=str(tmp_path))
    env = {k: v for k, v in os.environ.items() if k not in (RUN_ID, RUN_PID)}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", script], cwd=REPO, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    try:
        outs = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
        assert [p.returncode for p in procs] == [0, 0]
        assert outs[0][0] == outs[1][0]  # the same URL
        assert sorted(started for _, started in outs) == [False, True]
        assert len(launched(launches)) == 1
        assert registered_pids(tmp_path) == launched(launches)
    finally:
        for pid in launched(launches):
            kill_quietly(pid)


def test_changed_answer_settings_start_a_new_server(tmp_path: Path, fake_vllm: Path) -> None:
    try:
        url_a, started_a = acquire_server("tiny", str(tmp_path), {"dtype": "float32"}, tmp_path)
        url_b, started_b = acquire_server("tiny", str(tmp_path), {"dtype": "bfloat16"}, tmp_path)
        assert (started_a, started_b) == (True, True)
        assert url_a != url_b  # a bfloat16 server never answers for a float32 one
        url_c, started_c = acquire_server(
            "tiny", str(tmp_path), {"dtype": "bfloat16", "max_model_len": 1024}, tmp_path
        )
        assert started_c is True and url_c not in (url_a, url_b)
        # options that do not change answers reuse the running server
        again = acquire_server(
            "tiny", str(tmp_path), {"dtype": "float32", "kv_cache_gib": 7, "port": 0}, tmp_path
        )
        assert again == (url_a, False)
        assert len(launched(fake_vllm)) == 3
    finally:
        assert stop_servers(tmp_path) == 3


# ---------------------------------------------------------------------- which model a port serves


def test_a_port_serving_another_model_is_not_taken_for_ours(
    tmp_path: Path, fake_vllm: Path
) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    other = subprocess.Popen([sys.executable, "-c", FAKE_VLLM, str(port), "other-model"])
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 30
        while not healthy(url) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert healthy(url, "other-model")
        assert not healthy(url, "tiny")
        # configured to that (taken) port: our server cannot bind, and the other one's
        # answers must not pass for a healthy "tiny"
        with pytest.raises(ServerError, match="'tiny'"):
            acquire_server(
                "tiny",
                str(tmp_path),
                {"port": port, "start_attempts": 1, "start_timeout_s": 15},
                tmp_path,
            )
        assert not list(tmp_path.glob("*.json"))
        assert other.poll() is None  # the other model's server is untouched
    finally:
        other.kill()
        other.wait()


def test_a_registered_server_whose_port_now_serves_another_model_is_replaced(
    tmp_path: Path, fake_vllm: Path, invocations: list[subprocess.Popen]
) -> None:
    url, _ = acquire_server("tiny", str(tmp_path), {}, tmp_path)
    registry = next(tmp_path.glob("tiny-*.json"))
    info = json.loads(registry.read_text())
    stand_in = subprocess.Popen(["sleep", "300"], start_new_session=True)
    invocations.append(stand_in)
    other_port = int(info["port"])
    srv._terminate(info["pid"])  # our server died; a different model now holds its port
    other = subprocess.Popen([sys.executable, "-c", FAKE_VLLM, str(other_port), "other-model"])
    try:
        deadline = time.monotonic() + 30
        while not healthy(url) and time.monotonic() < deadline:
            time.sleep(0.1)
        # the registry names a live process (the stand-in) at that URL
        registry.write_text(json.dumps({**info, "pid": stand_in.pid, "start": None}))
        new_url, started = acquire_server("tiny", str(tmp_path), {}, tmp_path)
        assert started is True and new_url != url
        assert healthy(new_url, "tiny")
    finally:
        other.kill()
        other.wait()
        stop_servers(tmp_path)


# ---------------------------------------------------------------------- leases across invocations


def new_invocations(invocations: list[subprocess.Popen], n: int) -> list[subprocess.Popen]:
    """`n` live stand-in main processes, stopped by the `invocations` fixture afterwards."""
    procs = [subprocess.Popen(["sleep", "300"]) for _ in range(n)]
    invocations += procs
    return procs


def as_invocation(monkeypatch: pytest.MonkeyPatch, run_id: str, proc: subprocess.Popen) -> None:
    monkeypatch.setenv(RUN_ID, run_id)
    monkeypatch.setenv(RUN_PID, str(proc.pid))


def test_one_invocations_stop_leaves_a_server_another_still_uses(
    tmp_path: Path,
    fake_vllm: Path,
    monkeypatch: pytest.MonkeyPatch,
    invocations: list[subprocess.Popen],
) -> None:
    run_a, run_b = new_invocations(invocations, 2)
    as_invocation(monkeypatch, "run-a", run_a)
    url, started = acquire_server("tiny", str(tmp_path), {}, tmp_path)
    as_invocation(monkeypatch, "run-b", run_b)
    assert acquire_server("tiny", str(tmp_path), {}, tmp_path) == (url, False)
    (server_pid,) = launched(fake_vllm)

    assert stop_servers(tmp_path, "run-a") == 0  # run-b still holds it
    assert healthy(url, "tiny") and not gone(server_pid)
    assert stop_servers(tmp_path, "run-b") == 1  # the last holder's stop ends it
    assert wait_gone(server_pid, 10)
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.leases"))


def test_a_finished_invocations_lease_does_not_keep_a_server(
    tmp_path: Path,
    fake_vllm: Path,
    monkeypatch: pytest.MonkeyPatch,
    invocations: list[subprocess.Popen],
) -> None:
    run_a, run_b = new_invocations(invocations, 2)
    as_invocation(monkeypatch, "run-b", run_b)
    url, _ = acquire_server("tiny", str(tmp_path), {}, tmp_path)
    as_invocation(monkeypatch, "run-a", run_a)
    acquire_server("tiny", str(tmp_path), {}, tmp_path)
    run_b.kill()  # run-b ended (killed) without its stop hook
    run_b.wait()
    assert stop_servers(tmp_path, "run-a") == 1
    assert not healthy(url)


def test_stop_by_hand_stops_a_server_in_use(
    tmp_path: Path,
    fake_vllm: Path,
    monkeypatch: pytest.MonkeyPatch,
    invocations: list[subprocess.Popen],
) -> None:
    (run_a,) = new_invocations(invocations, 1)
    as_invocation(monkeypatch, "run-a", run_a)
    url, _ = acquire_server("tiny", str(tmp_path), {}, tmp_path)
    assert stop_servers(tmp_path) == 1  # `python -m srb stop-servers`: no run id, stops all
    assert not healthy(url)


def test_a_jobs_lease_names_its_invocation(tmp_path: Path) -> None:
    """What rules/common.smk does: the main process sets SRB_RUN_ID/SRB_RUN_PID (jobs inherit
    them) and its hooks pass the id; a job's lease then names the main process."""
    code = textwrap.dedent(
        """
        import json, os
        from srb.llm import server as srv
        print(json.dumps(srv.current_lease()))
        """
    )
    main = subprocess.Popen(["sleep", "60"])
    try:
        env = {**os.environ, RUN_ID: "run-x", RUN_PID: str(main.pid)}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
        )
        lease = json.loads(out.stdout)
        assert (lease["run_id"], lease["pid"]) == ("run-x", main.pid)
        bare = {k: v for k, v in env.items() if k not in (RUN_ID, RUN_PID)}
        out = subprocess.run(
            [sys.executable, "-c", code], cwd=REPO, env=bare, capture_output=True, text=True
        )
        alone = json.loads(out.stdout)
        assert alone["pid"] != main.pid and alone["run_id"] == f"pid-{alone['pid']}"
    finally:
        main.kill()
        main.wait()


def test_a_shared_priority_server_yields_like_a_helper_and_a_default_one_keeps_priority(
    tmp_path: Path, fake_vllm: Path
) -> None:
    """`cpu_priority: shared` (the synthesizer's server in config.yaml) runs at the helper nice,
    so the short jobs feeding it are not starved; the default keeps the new session's 0."""
    from srb.priority import HELPER_NICE

    try:
        acquire_server("tiny", str(tmp_path), {"cpu_priority": "shared"}, tmp_path / "shared")
        acquire_server("tiny", str(tmp_path), {}, tmp_path / "first")
        shared, first = launched(fake_vllm)
        assert session_nice(shared) == HELPER_NICE
        assert session_nice(first) == 0
    finally:
        stop_servers(tmp_path / "shared")
        stop_servers(tmp_path / "first")
    with pytest.raises(ValueError, match="first or shared"):
        acquire_server("tiny", str(tmp_path), {"cpu_priority": "last"}, tmp_path / "bad")
