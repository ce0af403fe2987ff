"""The generic local-service lifecycle with real processes: a service is started once and
reused, stopped by an invocation's hook, a start that never becomes healthy fails cleanly, a
dead or hung registered service is replaced, and the health check tells our service from
another process on the same port. The stand-in services answer /health like Theoria's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from srb.llm import server as srv
from srb.services import (
    RUN_ID_ENV,
    RUN_PID_ENV,
    ServerError,
    acquire_service,
    free_port,
    http_health,
    service_key,
    stop_servers,
)
from srb.start_clock import WALL_FACTOR
from tests.processes import FAKE_VLLM, session_nice, wait_gone

# argv: port, service name, launch log; /health answers its name, pid and SRB_TEST_MARK
SERVICE = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
with open(sys.argv[3], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        ok = self.path == "/health"
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        body = {"status": "ok", "service": sys.argv[2], "pid": os.getpid(),
                "mark": os.environ.get("SRB_TEST_MARK")}
        self.wfile.write(json.dumps(body).encode() if ok else b"{}")
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""

# argv: port, service name, launch log; a FastAPI app under uvicorn, as Theoria's will be
UVICORN_SERVICE = """
import os, sys
import uvicorn
from fastapi import FastAPI
with open(sys.argv[3], "a") as fh:
    fh.write(f"{os.getpid()}\\n")
app = FastAPI()
@app.get("/health")
def health() -> dict:
    return {"status": "ok", "service": sys.argv[2], "pid": os.getpid()}
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""

# never healthy: records its pid, then sleeps without listening
SILENT = "import os, sys, time; open(sys.argv[3], 'a').write(f'{os.getpid()}\\n'); time.sleep(600)"


NAME = "memory"


def launched(launches: Path) -> list[int]:
    return [int(x) for x in launches.read_text().split()] if launches.exists() else []


def health_of(url: str) -> dict:
    """What the process at `url` says about itself (read directly, not through srb)."""
    resp = httpx.get(f"{url}/health", timeout=5)
    assert resp.status_code == 200
    return resp.json()


def refuses(url: str) -> bool:
    try:
        httpx.get(f"{url}/health", timeout=2)
    except httpx.ConnectError:
        return True
    return False


def registry(state: Path) -> dict:
    (path,) = state.glob("*.json")
    return json.loads(path.read_text())


@pytest.fixture
def launches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The file each launched service appends its pid to; whatever is left is killed after."""
    monkeypatch.delenv(RUN_ID_ENV, raising=False)
    monkeypatch.delenv(RUN_PID_ENV, raising=False)
    path = tmp_path / "launches.txt"
    yield path
    for pid in launched(path):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


@pytest.fixture
def invocations() -> Iterator[list[subprocess.Popen]]:
    """Stand-ins for Snakemake main processes (their pids are what leases check)."""
    procs: list[subprocess.Popen] = []
    yield procs
    for p in procs:
        p.kill()
        p.wait()


def as_invocation(
    monkeypatch: pytest.MonkeyPatch, invocations: list[subprocess.Popen], run_id: str
) -> None:
    proc = subprocess.Popen(["sleep", "300"])
    invocations.append(proc)
    monkeypatch.setenv(RUN_ID_ENV, run_id)
    monkeypatch.setenv(RUN_PID_ENV, str(proc.pid))


def acquire(
    state: Path, launches: Path, script: str = SERVICE, served_as: str = NAME, **kw
) -> tuple[str, bool]:
    """Acquire the `memory` service, run as `script` answering as `served_as`."""
    kw.setdefault("start_timeout_s", 8)
    return acquire_service(
        NAME,
        service_key(NAME, {"store": str(state)}),
        lambda port: [sys.executable, "-c", script, str(port), served_as, str(launches)],
        http_health(NAME),
        state,
        **kw,
    )


# ---------------------------------------------------------------------- start, reuse, stop


def test_first_call_starts_the_service_and_a_second_reuses_it(
    tmp_path: Path, launches: Path
) -> None:
    calls: list[int] = []

    def env() -> dict[str, str]:
        calls.append(1)
        return {"SRB_TEST_MARK": "from-env"}

    url, started = acquire(tmp_path, launches, env=env)
    assert started is True
    (pid,) = launched(launches)
    answer = health_of(url)
    assert answer["pid"] == pid and answer["service"] == NAME
    assert answer["mark"] == "from-env"  # the service got the extra environment
    info = registry(tmp_path)
    assert (info["pid"], info["kind"], info["url"]) == (pid, NAME, url)

    assert acquire(tmp_path, launches, env=env) == (url, False)
    assert launched(launches) == [pid]  # nothing new was launched
    assert health_of(url)["pid"] == pid and registry(tmp_path)["pid"] == pid
    assert calls == [1]  # the environment is only built for a start
    assert (tmp_path / f"{info['key']}.server.log").is_file()

    assert stop_servers(tmp_path) == 1
    assert wait_gone(pid)


def test_an_invocations_stop_hook_stops_its_service(
    tmp_path: Path,
    launches: Path,
    monkeypatch: pytest.MonkeyPatch,
    invocations: list[subprocess.Popen],
) -> None:
    as_invocation(monkeypatch, invocations, "run-a")
    url, started = acquire(tmp_path, launches)
    (pid,) = launched(launches)
    assert started and health_of(url)["pid"] == pid

    assert stop_servers(tmp_path, "run-a") == 1
    assert wait_gone(pid)
    assert refuses(url)
    assert not list(tmp_path.glob("*.json")) and not list(tmp_path.glob("*.leases"))
    assert stop_servers(tmp_path, "run-a") == 0


def test_a_uvicorn_service_starts_is_reused_and_stops(tmp_path: Path, launches: Path) -> None:
    url, started = acquire(tmp_path, launches, script=UVICORN_SERVICE)
    assert started is True
    (pid,) = launched(launches)
    assert health_of(url) == {"status": "ok", "service": NAME, "pid": pid}
    assert acquire(tmp_path, launches, script=UVICORN_SERVICE) == (url, False)
    assert stop_servers(tmp_path) == 1
    assert wait_gone(pid) and refuses(url)


# ---------------------------------------------------------------------- failed starts


@pytest.mark.parametrize(
    "script, served_as",
    [(SILENT, NAME), (SERVICE, "another-service")],
    ids=["never-listens", "answers-as-another-service"],
)
def test_a_service_that_never_becomes_healthy_fails_cleanly(
    tmp_path: Path, launches: Path, script: str, served_as: str
) -> None:
    started = time.monotonic()
    with pytest.raises(ServerError) as err:
        acquire(
            tmp_path,
            launches,
            script=script,
            served_as=served_as,
            start_timeout_s=0.5,
            start_attempts=2,
        )
    # an idle helper that never answers is given up at its wall-clock cap (WALL_FACTOR x 0.5 s)
    assert time.monotonic() - started < 2 * (WALL_FACTOR * 0.5) + 8
    pids = launched(launches)
    assert len(pids) == 2  # both attempts launched
    assert all(wait_gone(pid, 5) for pid in pids)  # neither is left running
    log_file = next(tmp_path.glob("*.server.log"))
    assert str(log_file) in str(err.value) and "2 attempt(s)" in str(err.value)
    assert not list(tmp_path.glob("*.json"))


BUSY = "import os, sys; open(sys.argv[3], 'a').write(f'{os.getpid()}\\n')\nwhile True: pass"


def test_a_helper_that_works_but_never_answers_is_given_up_on_its_cpu_time(
    tmp_path: Path, launches: Path
) -> None:
    """A helper's start limit is the CPU it used: a busy one that never listens fails once it
    spent the limit, long before the wall-clock cap that an idle or starved one gets."""
    started = time.monotonic()
    with pytest.raises(ServerError, match="used its 2 s CPU limit"):
        acquire(tmp_path, launches, script=BUSY, start_timeout_s=2, start_attempts=1)
    assert time.monotonic() - started < WALL_FACTOR * 2 + 8
    assert all(wait_gone(pid, 5) for pid in launched(launches))


# ---------------------------------------------------------------------- stale registrations


def test_a_registered_service_that_died_is_restarted(tmp_path: Path, launches: Path) -> None:
    url, _ = acquire(tmp_path, launches)
    (old,) = launched(launches)
    os.kill(old, signal.SIGKILL)
    assert wait_gone(old) and refuses(url)

    new_url, started = acquire(tmp_path, launches)
    assert started is True
    (new,) = set(launched(launches)) - {old}
    assert health_of(new_url)["pid"] == new
    assert registry(tmp_path)["pid"] == new
    assert stop_servers(tmp_path) == 1
    assert wait_gone(new)


def test_a_registered_service_that_hangs_is_stopped_and_replaced(
    tmp_path: Path, launches: Path, invocations: list[subprocess.Popen]
) -> None:
    url, _ = acquire(tmp_path, launches)
    (first,) = launched(launches)
    os.kill(first, signal.SIGKILL)
    assert wait_gone(first)
    # the registry now names a live process that answers nothing at that URL
    hung = subprocess.Popen(["sleep", "300"], start_new_session=True)
    invocations.append(hung)
    path = next(tmp_path.glob("*.json"))
    path.write_text(json.dumps({**json.loads(path.read_text()), "pid": hung.pid, "start": None}))

    new_url, started = acquire(tmp_path, launches)
    assert started is True
    assert wait_gone(hung.pid)  # stopped, not left running unregistered
    assert health_of(new_url)["pid"] == registry(tmp_path)["pid"] != hung.pid
    assert stop_servers(tmp_path) == 1


# ---------------------------------------------------------------------- health check


def test_http_health_tells_our_service_from_another_on_the_port(
    tmp_path: Path, launches: Path
) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    assert not http_health(NAME)(url)  # nothing listens yet
    other = subprocess.Popen(
        [sys.executable, "-c", SERVICE, str(port), "another-service", str(launches)]
    )
    try:
        deadline = time.monotonic() + 8
        while not http_health()(url) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert http_health()(url)  # answers 200, no name asked
        assert http_health("another-service")(url)
        assert not http_health(NAME)(url)  # a port another service holds is not ours
        assert not http_health("another-service", path="/nope")(url)  # 404
    finally:
        other.kill()
        other.wait()


# ---------------------------------------------------------------------- both kinds in one dir


def test_stop_hooks_stop_both_kinds_with_the_same_lease_rules(
    tmp_path: Path,
    launches: Path,
    monkeypatch: pytest.MonkeyPatch,
    invocations: list[subprocess.Popen],
) -> None:
    monkeypatch.setattr(
        srv,
        "vllm_command",
        lambda model_dir, name, port, opts: [sys.executable, "-c", FAKE_VLLM, str(port), name],
    )
    as_invocation(monkeypatch, invocations, "run-a")
    llm_url, _ = srv.acquire_server("tiny", str(tmp_path), {"start_timeout_s": 8}, tmp_path)
    url, _ = acquire(tmp_path, launches)
    as_invocation(monkeypatch, invocations, "run-b")
    assert acquire(tmp_path, launches) == (url, False)  # run-b holds only the service

    kinds = {json.loads(p.read_text())["kind"]: p for p in tmp_path.glob("*.json")}
    assert sorted(kinds) == ["memory", "vllm"]
    llm_pid = json.loads(kinds["vllm"].read_text())["pid"]
    (pid,) = launched(launches)

    assert stop_servers(tmp_path, "run-a") == 1  # the vLLM server; run-b still uses the service
    assert wait_gone(llm_pid) and not srv.healthy(llm_url)
    assert health_of(url)["pid"] == pid
    assert stop_servers(tmp_path, "run-b") == 1
    assert wait_gone(pid) and refuses(url)


def test_ending_one_models_phase_stops_only_that_models_server(
    tmp_path: Path,
    launches: Path,
    monkeypatch: pytest.MonkeyPatch,
    invocations: list[subprocess.Popen],
) -> None:
    """rules/models.smk end_llm_phase: the ingest model's server stops; the synthesizer's and
    any other service stay up for the rest of the run."""
    monkeypatch.setattr(
        srv,
        "vllm_command",
        lambda model_dir, name, port, opts: [sys.executable, "-c", FAKE_VLLM, str(port), name],
    )
    as_invocation(monkeypatch, invocations, "run-a")
    ingest_url, _ = srv.acquire_server("ingest", str(tmp_path), {"start_timeout_s": 8}, tmp_path)
    synth_url, _ = srv.acquire_server("synth", str(tmp_path), {"start_timeout_s": 8}, tmp_path)
    url, _ = acquire(tmp_path, launches)
    pids = {
        info["name"]: info["pid"]
        for info in (json.loads(p.read_text()) for p in tmp_path.glob("*.json"))
    }

    assert stop_servers(tmp_path, "run-a", match={"model": "ingest"}) == 1
    assert wait_gone(pids["ingest"]) and not srv.healthy(ingest_url)
    assert srv.healthy(synth_url, "synth") and health_of(url)["pid"] == pids[NAME]
    assert stop_servers(tmp_path, "run-a", match={"model": "ingest"}) == 0
    assert stop_servers(tmp_path, "run-a") == 2


def test_inside_a_slurm_job_a_service_is_that_job_s_own(monkeypatch) -> None:
    """SLURM kills a job's process tree when the job ends, so two jobs on one node must not
    share a service: the key differs per job, and outside SLURM it is the host's alone."""
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    plain = service_key("vllm", {"model": "m"})
    assert plain == service_key("vllm", {"model": "m"})
    monkeypatch.setenv("SLURM_JOB_ID", "101")
    job_101 = service_key("vllm", {"model": "m"})
    monkeypatch.setenv("SLURM_JOB_ID", "102")
    job_102 = service_key("vllm", {"model": "m"})
    assert len({plain, job_101, job_102}) == 3
    assert all(k.startswith("vllm-") for k in (plain, job_101, job_102))


# ---------------------------------------------------------------------- CPU priority


def test_a_helper_service_yields_the_cpu_and_a_model_server_keeps_it(
    tmp_path: Path, launches: Path
) -> None:
    """Beside vLLM's worker a helper at the session's priority takes a core from it (2.6x
    slower model calls, srb/priority.py): a helper's session is lowered, a model server's not."""
    from srb.priority import HELPER_NICE

    acquire(tmp_path / "helper", launches)
    acquire(tmp_path / "model", launches, keeps_priority=True)
    helper, model = launched(launches)
    assert session_nice(helper) == HELPER_NICE
    assert session_nice(model) == 0  # a new session's priority, left as it was
    assert stop_servers(tmp_path / "helper") == stop_servers(tmp_path / "model") == 1
