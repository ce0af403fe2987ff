"""A local vLLM OpenAI-compatible server, started only when a job has a cache miss.

Why not a Snakemake service rule: a service starts whenever its consumers run, so a rerun on a
warm cache would start a server it does not need. Here the first job that misses the cache
starts the server (under a file lock, so concurrent jobs share one), later jobs reuse it through
a small registry file, and `stop_servers` (called from the workflow's onsuccess/onerror hooks
and usable by hand) stops it. On a cluster each node starts its own on 127.0.0.1.

A server is keyed by its model and the options that change answers (`server_key`), so changed
settings start a new one instead of reusing the old. Each job that uses a server leaves a lease
naming its Snakemake invocation (SRB_RUN_ID, with the invocation's pid in SRB_RUN_PID); an
invocation's stop hook only drops its own leases and stops a server no other live invocation
still holds.
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
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from srb.llm import cpu
from srb.llm.models import serving_identity

log = logging.getLogger(__name__)

RUN_ID_ENV = "SRB_RUN_ID"  # the Snakemake invocation a job belongs to (set in rules/common.smk)
RUN_PID_ENV = "SRB_RUN_PID"  # that invocation's main process


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(base_url: str, served_name: str | None = None, timeout: float = 2.0) -> bool:
    """The endpoint answers /models, and (given a name) lists that model: a port another server
    took, or one a dead server's successor now holds, must not pass for ours."""
    try:
        resp = httpx.get(f"{base_url}/models", timeout=timeout)
    except httpx.HTTPError:
        return False
    if resp.status_code != 200:
        return False
    if served_name is None:
        return True
    try:
        return served_name in {m.get("id") for m in resp.json().get("data", [])}
    except (ValueError, AttributeError, TypeError):
        return False


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


def vllm_command(model_dir: str, served_name: str, port: int, opts: dict[str, Any]) -> list[str]:
    """The server's command line from resolved options (`resolved_options`)."""
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", served_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", str(opts.get("dtype") or "auto"),
        "--seed", "0",
    ]  # fmt: skip
    if opts.get("max_model_len") is not None:
        cmd += ["--max-model-len", str(opts["max_model_len"])]
    if opts.get("quantization"):
        cmd += ["--quantization", str(opts["quantization"])]
    if opts.get("enforce_eager", True):
        cmd.append("--enforce-eager")
    cmd += [str(a) for a in opts.get("extra_args", [])]
    return [c for c in cmd if c]


def server_key(name: str, model_dir: str, opts: dict[str, Any]) -> str:
    """Registry/lock name: the model plus everything that changes its answers."""
    settings = {
        "host": socket.gethostname(),  # a shared state dir holds each node's own servers
        "model": name,
        "model_dir": os.path.abspath(model_dir),
        "serving": serving_identity(opts),
    }
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
    return f"{_safe(name)}-{digest[:12]}"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", text)


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


def acquire_server(
    name: str, model_dir: str, opts: dict[str, Any], state_dir: str | Path
) -> tuple[str, bool]:
    """(base URL of a healthy server for `name` with these settings, whether this call started
    it). The caller's invocation takes a lease on it (see `stop_servers`)."""
    state_dir = Path(state_dir)
    key = server_key(name, model_dir, opts)
    registry = state_dir / f"{key}.json"
    with _locked(state_dir / f"{key}.lock"):
        if registry.is_file():
            info = json.loads(registry.read_text())
            ours = info.get("host") == socket.gethostname()
            alive = ours and _alive(info["pid"], info.get("start"))
            # a live server may be slow to answer under load: a few patient tries before
            # concluding it hangs (stopping it then, so it is not left running unregistered)
            for timeout in (2.0, 10.0, 10.0) if alive else ():
                if healthy(info["url"], info.get("served_name", name), timeout=timeout):
                    log.info(
                        "reusing vLLM server for %s at %s (pid %d)", name, info["url"], info["pid"]
                    )
                    _add_lease(state_dir, key)
                    return info["url"], False
            if alive:
                log.warning(
                    "registered vLLM server pid %d does not answer; stopping it", info["pid"]
                )
                _terminate(info["pid"])
            registry.unlink()
            shutil.rmtree(_leases_dir(state_dir, key), ignore_errors=True)
        host = cpu.read_host()
        dtype, why = cpu.resolve_dtype(opts.get("dtype"), host)  # never `auto` on CPU
        env = _server_env(name, opts, host, f"dtype {dtype} ({why})")
        url = _start(name, model_dir, {**opts, "dtype": dtype}, env, state_dir, key)
        _add_lease(state_dir, key)
        return url, True


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While a server starts, SIGTERM raises (SystemExit 143) instead of killing this process
    outright, so the half-started server in its own session is stopped, not orphaned. Only in
    the main thread, and only over the default handler; the previous one is restored."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def raise_exit(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, raise_exit)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextmanager
def _shielded() -> Iterator[None]:
    """Ignore SIGINT/SIGTERM while a half-started server is being stopped, so a second signal
    cannot interrupt the cleanup and orphan it after all."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    for s in saved:
        signal.signal(s, signal.SIG_IGN)
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)


def _server_env(name: str, opts: dict[str, Any], host: cpu.HostCPU, dtype: str) -> dict[str, str]:
    """Environment for the server: offline, KV cache size, and the CPU thread binding chosen
    for this host (logged, with the dtype, and why)."""
    binding = cpu.choose_binding(
        host, opts.get("omp_bind"), opts.get("reserved_cpus"), opts.get("threads")
    )
    log.info(
        "vLLM settings for %s: %s; threads: %s (%s)",
        name,
        dtype,
        " ".join(f"{k}={v}" for k, v in sorted(binding.env.items())),
        binding.reason,
    )
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": str(opts.get("kv_cache_gib", 2)),
        **binding.env,
    }


def _start(
    name: str, model_dir: str, opts: dict[str, Any], env: dict[str, str], state_dir: Path, key: str
) -> str:
    attempts = int(opts.get("start_attempts", 2))
    timeout = float(opts.get("start_timeout_s", 600))
    registry = state_dir / f"{key}.json"
    log_file = state_dir / f"{key}.server.log"
    port = 0
    for attempt in range(1, attempts + 1):
        port = int(opts.get("port") or free_port())
        url = f"http://127.0.0.1:{port}/v1"
        cmd = vllm_command(model_dir, name, port, opts)
        log.info(
            "starting vLLM for %s on port %d (attempt %d/%d): %s",
            name,
            port,
            attempt,
            attempts,
            " ".join(cmd),
        )
        proc: subprocess.Popen[bytes] | None = None
        try:
            with _sigterm_raises():
                with open(log_file, "ab") as out:
                    proc = subprocess.Popen(
                        cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
                    )
                started = time.monotonic()
                delay = 0.2
                while time.monotonic() - started < timeout and proc.poll() is None:
                    if healthy(url, name) and proc.poll() is None:
                        _write_json(
                            registry,
                            {
                                "pid": proc.pid,
                                "start": _proc_start(proc.pid),
                                "url": url,
                                "port": port,
                                "host": socket.gethostname(),
                                "model": name,
                                "served_name": name,
                                "key": key,
                                "settings": serving_identity(opts),
                            },
                        )
                        log.info("vLLM for %s ready in %.0f s", name, time.monotonic() - started)
                        return url
                    time.sleep(delay)
                    delay = min(2.0, delay * 1.5)
        except BaseException:
            if proc is not None:
                with _shielded():
                    log.warning("vLLM start for %s interrupted; stopping pid %d", name, proc.pid)
                    registry.unlink(missing_ok=True)
                    _terminate(proc.pid)
            raise
        _terminate(proc.pid)
        tail = log_file.read_text(errors="replace")[-2000:] if log_file.exists() else ""
        log.warning(
            "vLLM for %s on port %d did not come up (exit %s); log tail:\n%s",
            name,
            port,
            proc.poll(),
            tail,
        )
    raise ServerError(
        f"vLLM server for model {name!r} did not start after {attempts} attempt(s) "
        f"(last port {port}, timeout {timeout:.0f} s); see {log_file}"
    )


def _terminate(pid: int, grace: float = 20.0) -> None:
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


# ---------------------------------------------------------------------- stop


def stop_servers(state_dir: str | Path, run_id: str | None = None) -> int:
    """Stop servers registered in `state_dir` on this host; returns how many were stopped.

    With `run_id` (an invocation's hooks): drop that invocation's leases and stop a server only
    when no other still-running invocation holds one. Without (by hand): stop every one.
    Servers of other hosts are left registered; dead ones are cleared."""
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
                log.warning("%s is no server registry; left alone", registry)
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
                        "vLLM server %s (pid %d) left running for invocation(s) %s",
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
