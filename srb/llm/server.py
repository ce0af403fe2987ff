"""A local vLLM OpenAI-compatible server, started only when a job has a cache miss.

Why not a Snakemake service rule: a service starts whenever its consumers run, so a rerun on a
warm cache would start a server it does not need. Here the first job that misses the cache
starts the server (under a file lock, so concurrent jobs share one), later jobs reuse it through
a small registry file, and `stop_servers` (called from the workflow's onsuccess/onerror hooks
and usable by hand) stops it. On a cluster each node starts its own on 127.0.0.1.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

log = logging.getLogger(__name__)


class ServerError(RuntimeError):
    pass


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def healthy(base_url: str, timeout: float = 2.0) -> bool:
    try:
        return httpx.get(f"{base_url}/models", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def _alive(pid: int) -> bool:
    try:  # reap it first if it is our own exited child, else a zombie looks alive
        if os.waitpid(pid, os.WNOHANG)[0] == pid:
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    return True


def vllm_command(model_dir: str, served_name: str, port: int, opts: dict[str, Any]) -> list[str]:
    cmd = [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", served_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--dtype", str(opts.get("dtype", "bfloat16")),
        "--max-model-len", str(opts.get("max_model_len", 4096)),
        "--seed", "0",
    ]  # fmt: skip
    if opts.get("enforce_eager", True):
        cmd.append("--enforce-eager")
    cmd += [str(a) for a in opts.get("extra_args", [])]
    return [c for c in cmd if c]


@contextmanager
def _locked(lock_file: Path):
    lock_file.parent.mkdir(parents=True, exist_ok=True)
    with open(lock_file, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def acquire_server(
    name: str, model_dir: str, opts: dict[str, Any], state_dir: str | Path
) -> tuple[str, bool]:
    """(base URL of a healthy server for `name`, whether this call started it)."""
    state_dir = Path(state_dir)
    registry = state_dir / f"{name}.json"
    with _locked(state_dir / f"{name}.lock"):
        if registry.is_file():
            info = json.loads(registry.read_text())
            if (
                info.get("host") == socket.gethostname()
                and _alive(info["pid"])
                and healthy(info["url"])
            ):
                log.info(
                    "reusing vLLM server for %s at %s (pid %d)", name, info["url"], info["pid"]
                )
                return info["url"], False
            registry.unlink()
        return _start(name, model_dir, opts, state_dir, registry), True


def _start(name: str, model_dir: str, opts: dict[str, Any], state_dir: Path, registry: Path) -> str:
    attempts = int(opts.get("start_attempts", 2))
    timeout = float(opts.get("start_timeout_s", 600))
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": str(opts.get("kv_cache_gib", 2)),
        "OMP_NUM_THREADS": str(opts.get("threads", os.cpu_count() or 1)),
    }
    if "omp_bind" in opts:  # vLLM CPU: cores for the worker's OpenMP threads, e.g. "0-1"
        env["VLLM_CPU_OMP_THREADS_BIND"] = str(opts["omp_bind"])
    if "reserved_cpus" in opts:  # vLLM CPU reserves one core for its engine by default
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(opts["reserved_cpus"])
    for attempt in range(1, attempts + 1):
        port = int(opts.get("port") or free_port())
        url = f"http://127.0.0.1:{port}/v1"
        log_file = state_dir / f"{name}.server.log"
        cmd = vllm_command(model_dir, name, port, opts)
        log.info(
            "starting vLLM for %s on port %d (attempt %d/%d): %s",
            name,
            port,
            attempt,
            attempts,
            " ".join(cmd),
        )
        with open(log_file, "ab") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if proc.poll() is not None:
                break
            if healthy(url):
                registry.write_text(
                    json.dumps(
                        {
                            "pid": proc.pid,
                            "url": url,
                            "port": port,
                            "host": socket.gethostname(),
                            "model": name,
                        }
                    )
                )
                log.info("vLLM for %s ready in %.0f s", name, time.monotonic() - started)
                return url
            time.sleep(2)
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
        f"(last port {port}, timeout {timeout:.0f} s); see {state_dir / (name + '.server.log')}"
    )


def _terminate(pid: int, grace: float = 20.0) -> None:
    try:
        os.killpg(pid, signal.SIGTERM)
    except OSError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and _alive(pid):
        time.sleep(0.5)
    if _alive(pid):
        try:
            os.killpg(pid, signal.SIGKILL)
        except OSError:
            pass


def stop_servers(state_dir: str | Path) -> int:
    """Stop every server this workflow started on this host; returns how many."""
    stopped = 0
    for registry in Path(state_dir).glob("*.json"):
        info = json.loads(registry.read_text())
        if info.get("host") == socket.gethostname() and _alive(info["pid"]):
            _terminate(info["pid"])
            stopped += 1
        registry.unlink(missing_ok=True)
    return stopped
