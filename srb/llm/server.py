"""A local vLLM OpenAI-compatible server, started only when a job has a cache miss.

The lifecycle (registry under a file lock, reuse if healthy, leases per Snakemake invocation,
start attempts, stopping from the workflow's hooks) is the generic one in `srb.services`, shared
with other local services; this module adds what is vLLM's own: its command line, a health check
that the port serves our model, the key (model plus the options that change answers), and the
CPU dtype/thread binding. The lifecycle helpers stay importable from here under their names.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any

import httpx

from srb.llm import cpu
from srb.llm.models import serving_identity
from srb.services import RUN_ID_ENV as RUN_ID_ENV
from srb.services import RUN_PID_ENV as RUN_PID_ENV
from srb.services import ServerError as ServerError
from srb.services import _add_lease as _add_lease
from srb.services import _alive as _alive
from srb.services import _leases_dir as _leases_dir
from srb.services import _live_leases as _live_leases
from srb.services import _locked as _locked
from srb.services import _proc_start as _proc_start
from srb.services import _safe as _safe
from srb.services import _terminate as _terminate
from srb.services import _write_json as _write_json
from srb.services import acquire_service
from srb.services import current_lease as current_lease
from srb.services import free_port as free_port
from srb.services import stop_servers as stop_servers

log = logging.getLogger(__name__)


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
    if opts.get("in_process_worker"):
        cmd += ["--distributed-executor-backend", "uni"]
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


def keeps_priority(opts: dict[str, Any]) -> bool:
    """Whether the server keeps its CPU priority (`cpu_priority: first`, the default): every job
    yields to it (srb/priority.py). `shared` runs it at the helper nice like the jobs: on 2 cores
    the synthesizer's server, serving a few answers at a time, starved the store restores its
    next answers waited on (Mem0's restore: 5.7 s of CPU in 232 s)."""
    priority = opts.get("cpu_priority", "first")
    if priority not in ("first", "shared"):
        raise ValueError(f"vllm.cpu_priority must be first or shared, not {priority!r}")
    return priority == "first"


def acquire_server(
    name: str, model_dir: str, opts: dict[str, Any], state_dir: str | Path
) -> tuple[str, bool]:
    """(base URL of a healthy server for `name` with these settings, whether this call started
    it). The caller's invocation takes a lease on it (see `stop_servers`)."""
    resolved: dict[str, Any] = dict(opts)

    def start_env() -> dict[str, str]:
        # called only when a server must start: a reuse neither reads the host nor logs this
        host = cpu.read_host()
        dtype, why = cpu.resolve_dtype(opts.get("dtype"), host)  # never `auto` on CPU
        resolved["dtype"] = dtype
        resolved["in_process_worker"] = in_process_worker(opts)
        return _server_env(name, resolved, host, f"dtype {dtype} ({why})")

    # module globals looked up at call time, so tests can stand in for vLLM
    return acquire_service(
        name,
        server_key(name, model_dir, opts),
        lambda port: vllm_command(model_dir, name, port, resolved),
        lambda url, timeout: healthy(url, name, timeout=timeout),
        state_dir,
        env=start_env,
        url_template="http://127.0.0.1:{port}/v1",
        start_timeout_s=float(opts.get("start_timeout_s", 600)),
        start_attempts=int(opts.get("start_attempts", 2)),
        settings=serving_identity(opts),
        kind="vllm",
        keeps_priority=keeps_priority(opts),
        label=f"vLLM server for model {name!r}",
        port=int(opts.get("port") or 0) or None,
        record={"model": name, "served_name": name},
    )


def in_process_worker(opts: dict[str, Any]) -> bool:
    """Whether the CPU build runs the model inside its engine process (`vllm.worker_process:
    false`, the default there) instead of spawning a worker process that imports vLLM and torch
    once more. Measured on 2 cores (SmolLM2, 120 real synthesis prompts): ready in 60.8 s with
    67.6 s of CPU against 76.9-86.4 s and 85.4-95.3 s; serving 146.1 s against 137.5-154.4 s
    (README). A GPU, or tensor/pipeline parallelism, keeps vLLM's own executor."""
    if opts.get("worker_process", False) or not cpu.vllm_runs_on_cpu():
        return False
    extra = [str(a) for a in opts.get("extra_args", [])]
    return not any(a.startswith(("--tensor-parallel", "--pipeline-parallel", "-tp", "-pp",
                                 "--distributed-executor-backend")) for a in extra)  # fmt: skip


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
        # vLLM's CPU platform turns a `uni` executor back into `mp` unless this is 0; the
        # engine core still runs in its own process, the model then in it
        **({"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if opts.get("in_process_worker") else {}),
        **binding.env,
    }
