"""Local services (a vLLM server, Theoria's memory service) started only when a job needs one,
shared between concurrent Snakemake jobs, and stopped when the last invocation using it ends.

Why not a Snakemake service rule: a service starts whenever its consumers run, so a rerun on a
warm cache would start a process it does not need. Here the first job that needs a service
starts it (under a file lock, so concurrent jobs share one), later jobs reuse it through a small
registry file, and `stop_servers` (called from the workflow's onsuccess/onerror hooks and usable
by hand) stops it. On a cluster each node starts its own on 127.0.0.1.

A service is keyed by what changes its answers (`service_key`), so changed settings start a new
one instead of reusing the old. Each job that uses one leaves a lease naming its Snakemake
invocation (SRB_RUN_ID, with the invocation's pid in SRB_RUN_PID); an invocation's stop hook
only drops its own leases and stops a service no other live invocation still holds.

In the state dir, per key: `{key}.json` (registry), `{key}.lock`, `{key}.leases/` and
`{key}.server.log` (the service's output). This module must not import `srb.llm` (which builds
on it).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import httpx

from srb.priority import deprioritise
from srb.signals import shielded, sigterm_raises
from srb.start_clock import StartClock

log = logging.getLogger(__name__)

RUN_ID_ENV = "SRB_RUN_ID"  # the Snakemake invocation a job belongs to (set in rules/common.smk)
RUN_PID_ENV = "SRB_RUN_PID"  # that invocation's main process

# a live service may be slow to answer under load: these tries (read timeouts, s) before
# concluding that a registered one hangs
REUSE_TIMEOUTS = (2.0, 10.0, 10.0)
START_PROBE_TIMEOUT = 2.0  # each health probe while a service starts


class ServerError(RuntimeError):
    """A local service did not come up."""


class HealthCheck(Protocol):
    """`check(base_url)` -> whether the service there is up and is the one expected."""

    def __call__(self, url: str, timeout: float = 2.0) -> bool: ...


# ---------------------------------------------------------------------- small helpers


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


def service_key(name: str, settings: Mapping[str, Any]) -> str:
    """Registry/lock name: the service plus everything that changes its answers, and this host
    (a shared state dir holds each node's own services). Inside a SLURM job also that job: the
    scheduler kills a job's whole process tree when it ends, a service it started included, so
    a job on the same node must not lean on a service another job started."""
    ident = {"host": socket.gethostname(), "name": name, "settings": settings}
    if os.environ.get("SLURM_JOB_ID"):
        ident["slurm_job"] = os.environ["SLURM_JOB_ID"]
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True, default=str).encode()).hexdigest()
    return f"{_safe(name)}-{digest[:12]}"


def http_health(service: str | None = None, path: str = "/health") -> HealthCheck:
    """A check that GET `{base_url}{path}` answers 200 and, given `service`, JSON whose
    "service" is that name: a port another process took since must not pass for ours."""

    def check(url: str, timeout: float = 2.0) -> bool:
        try:
            resp = httpx.get(f"{url.rstrip('/')}{path}", timeout=timeout)
        except httpx.HTTPError:
            return False
        if resp.status_code != 200:
            return False
        if service is None:
            return True
        try:
            body = resp.json()
        except ValueError:
            return False
        return isinstance(body, dict) and body.get("service") == service

    return check


def _proc_start(pid: int) -> str | None:
    """The process's start time (clock ticks since boot), to tell a reused pid from ours."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rsplit(")", 1)[1].split()[19]


def _alive(pid: int, start: str | None = None) -> bool:
    try:  # reap it first if it is our own exited child, else a zombie looks alive
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return start is None or _proc_start(pid) in (None, start)


@contextmanager
def _locked(lock_file: Path) -> Iterator[None]:
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data))
    os.replace(tmp, path)


def _terminate(pid: int, grace: float = 20.0) -> None:
    """Stop the service's whole process group (it runs in its own session), SIGKILL after
    `grace` seconds."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.2)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


# ---------------------------------------------------------------------- leases


def current_lease() -> dict[str, Any]:
    """This job's lease: its invocation's id and main pid, or (outside Snakemake) this process
    itself, so the lease ends when it exits."""
    run_id = os.environ.get(RUN_ID_ENV)
    pid = int(os.environ.get(RUN_PID_ENV) or 0) if run_id else 0
    if not run_id or not pid:
        run_id, pid = run_id or f"pid-{os.getpid()}", os.getpid()
    return {"run_id": run_id, "pid": pid, "start": _proc_start(pid), "host": socket.gethostname()}


def _leases_dir(state_dir: Path, key: str) -> Path:
    return state_dir / f"{key}.leases"


def _add_lease(state_dir: Path, key: str) -> None:
    lease = current_lease()
    leases = _leases_dir(state_dir, key)
    leases.mkdir(parents=True, exist_ok=True)
    _write_json(leases / f"{_safe(lease['run_id'])}.json", lease)


def _live_leases(leases: Path) -> list[dict[str, Any]]:
    """Leases whose invocation still runs; a lease from another host counts as live (its pid
    cannot be checked from here)."""
    live = []
    for f in sorted(leases.glob("*.json")) if leases.is_dir() else []:
        try:
            lease = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if lease.get("host") != socket.gethostname() or _alive(
            int(lease["pid"]), lease.get("start")
        ):
            live.append(lease)
        else:
            f.unlink(missing_ok=True)
    return live


# ---------------------------------------------------------------------- acquire / start


def acquire_service(
    name: str,
    key: str,
    command: Callable[[int], list[str]],
    health: Callable[[str, float], bool],
    state_dir: str | Path,
    env: Mapping[str, str] | Callable[[], Mapping[str, str]] | None = None,
    url_template: str = "http://127.0.0.1:{port}",
    start_timeout_s: float = 120,
    start_attempts: int = 2,
    settings: Mapping[str, Any] | None = None,
    *,
    kind: str | None = None,
    label: str | None = None,
    port: int | None = None,
    record: Mapping[str, Any] | None = None,
    keeps_priority: bool = False,
) -> tuple[str, bool]:
    """(base URL of a healthy service registered under `key`, whether this call started it).
    The caller's invocation takes a lease on it (see `stop_servers`).

    A registered live service is reused if `health(url, timeout)` passes within a few patient
    tries; else it is stopped and a new one started: `command(port)` on a free port (or `port`),
    in its own session, output to `{key}.server.log`, up to `start_attempts` times, each given
    `start_timeout_s` to pass `health` (wall seconds for a service that `keeps_priority`; for any
    other, CPU seconds of its process tree, see `srb.start_clock`). `env` (extra variables over
    this process's environment) may be a function, called only when a start is needed, before
    the first `command`, for setup that costs or logs. The registry holds pid, start, url, port,
    host, key, kind (default `name`), name, settings, and `record`'s fields. `label` names it in
    log lines and errors. A service that `keeps_priority` (a model server with `cpu_priority:
    first`) keeps its session's nice 0; any other gets the helper nice, so it yields the cores to
    such a server (see `srb.priority`)."""
    state_dir = Path(state_dir)
    key = _safe(key)
    kind = kind or name
    label = label or (f"service {name!r}" if kind == name else f"{kind} service {name!r}")
    registry = state_dir / f"{key}.json"
    with _locked(state_dir / f"{key}.lock"):
        url = _reuse(registry, health, label, state_dir, key)
        started = url is None
        if url is None:
            extra = env() if callable(env) else env
            url = _start(
                key,
                command,
                health,
                state_dir,
                {**os.environ, **(extra or {})},
                url_template,
                float(start_timeout_s),
                int(start_attempts),
                port,
                label,
                {**(record or {}), "kind": kind, "name": name, "settings": dict(settings or {})},
                keeps_priority,
            )
        _add_lease(state_dir, key)
        return url, started


def _reuse(
    registry: Path, health: Callable[[str, float], bool], label: str, state_dir: Path, key: str
) -> str | None:
    """The registered service's URL if it is ours, alive and healthy; else clear its entry
    (stopping it if it lives but does not answer, so it is not left running unregistered)."""
    if not registry.is_file():
        return None
    info = json.loads(registry.read_text())
    alive = info.get("host") == socket.gethostname() and _alive(info["pid"], info.get("start"))
    for timeout in REUSE_TIMEOUTS if alive else ():
        if health(info["url"], timeout):
            log.info("reusing %s at %s (pid %d)", label, info["url"], info["pid"])
            return str(info["url"])
    if alive:
        log.warning("registered %s (pid %d) does not answer; stopping it", label, info["pid"])
        _terminate(info["pid"])
    registry.unlink()
    shutil.rmtree(_leases_dir(state_dir, key), ignore_errors=True)
    return None


def _start(
    key: str,
    command: Callable[[int], list[str]],
    health: Callable[[str, float], bool],
    state_dir: Path,
    env: dict[str, str],
    url_template: str,
    timeout: float,
    attempts: int,
    fixed_port: int | None,
    label: str,
    record: dict[str, Any],
    keeps_priority: bool = False,
) -> str:
    registry = state_dir / f"{key}.json"
    log_file = state_dir / f"{key}.server.log"
    port = 0
    for attempt in range(1, attempts + 1):
        port = int(fixed_port or free_port())
        url = url_template.format(port=port)
        cmd = command(port)
        log.info(
            "starting %s on port %d (attempt %d/%d): %s",
            label,
            port,
            attempt,
            attempts,
            " ".join(cmd),
        )
        proc: subprocess.Popen[bytes] | None = None
        try:
            with sigterm_raises():
                with open(log_file, "ab") as out:
                    proc = subprocess.Popen(
                        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
                    )
                if not keeps_priority:
                    deprioritise(proc.pid, what=label)
                started = time.monotonic()
                # a helper at the helper nice may get little CPU: its limit is the CPU it used
                clock = None if keeps_priority else StartClock(proc.pid, timeout)
                delay = 0.2
                while proc.poll() is None and (
                    not clock.expired() if clock else time.monotonic() - started < timeout
                ):
                    # still running after it answered: not some other process on the port
                    if health(url, START_PROBE_TIMEOUT) and proc.poll() is None:
                        _write_json(
                            registry,
                            {
                                **record,
                                "pid": proc.pid,
                                "start": _proc_start(proc.pid),
                                "url": url,
                                "port": port,
                                "host": socket.gethostname(),
                                "key": key,
                            },
                        )
                        log.info("%s ready in %.0f s", label, time.monotonic() - started)
                        return url
                    time.sleep(delay)
                    delay = min(2.0, delay * 1.5)
        except BaseException:
            if proc is not None:
                with shielded():
                    log.warning("start of %s interrupted; stopping pid %d", label, proc.pid)
                    registry.unlink(missing_ok=True)
                    _terminate(proc.pid)
            raise
        exit_code = proc.poll()  # before `_terminate` reaps it
        _terminate(proc.pid)
        if exit_code is not None:
            reason = f"exit {exit_code}"
        else:
            reason = (
                f"not ready: {clock.describe()}" if clock else f"timed out after {timeout:.0f} s"
            )
        tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
        log.warning("%s on port %d did not come up (%s); log tail:\n%s", label, port, reason, tail)
    raise ServerError(
        f"{label} did not start after {attempts} attempt(s) "
        f"(last port {port}: {reason}); see {log_file}"
    )


# ---------------------------------------------------------------------- stop


def stop_servers(
    state_dir: str | Path, run_id: str | None = None, match: Mapping[str, Any] | None = None
) -> int:
    """Stop services of any kind registered in `state_dir` on this host; returns how many were
    stopped.

    With `run_id` (an invocation's hooks): drop that invocation's leases and stop a service
    only when no other still-running invocation holds one. Without (by hand): stop every one.
    With `match`, only services whose registry record has those values (e.g. `{"model": m}`:
    a job that ends one model's phase of the run). Services of other hosts are left
    registered; dead ones are cleared."""
    state_dir = Path(state_dir)
    here = socket.gethostname()
    stopped = 0
    for registry in sorted(state_dir.glob("*.json")):
        key = registry.stem
        with _locked(state_dir / f"{key}.lock"):
            if not registry.is_file():  # another stopper got there first
                continue
            try:
                info = json.loads(registry.read_text())
                int(info["pid"])
            except (ValueError, KeyError, TypeError):
                log.warning("%s is no service registry; left alone", registry)
                continue
            if match and any(info.get(k) != v for k, v in match.items()):
                continue
            leases = _leases_dir(state_dir, key)
            if run_id is not None:
                (leases / f"{_safe(run_id)}.json").unlink(missing_ok=True)
            if info.get("host") not in (None, here):
                continue
            alive = _alive(int(info["pid"]), info.get("start"))
            if alive and run_id is not None:
                others = _live_leases(leases)
                if others:
                    log.info(
                        "%s service %s (pid %d) left running for invocation(s) %s",
                        info.get("kind", "vllm"),
                        key,
                        info["pid"],
                        ", ".join(sorted(str(lease["run_id"]) for lease in others)),
                    )
                    continue
            if alive:
                _terminate(int(info["pid"]))
                stopped += 1
            registry.unlink(missing_ok=True)
            shutil.rmtree(leases, ignore_errors=True)
    return stopped


def stop_service(state_dir: str | Path, key: str) -> bool:
    """Stop the one service registered under `key` on this host, whoever holds it (for a job
    that started a private service, such as a writable store, and must not leave it running).
    Returns whether one was stopped."""
    state_dir = Path(state_dir)
    key = _safe(key)
    registry = state_dir / f"{key}.json"
    with _locked(state_dir / f"{key}.lock"):
        if not registry.is_file():
            return False
        info = json.loads(registry.read_text())
        stopped = False
        if info.get("host") == socket.gethostname() and _alive(int(info["pid"]), info.get("start")):
            _terminate(int(info["pid"]))
            stopped = True
        registry.unlink(missing_ok=True)
        shutil.rmtree(_leases_dir(state_dir, key), ignore_errors=True)
        return stopped
