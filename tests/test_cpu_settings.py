"""Host-derived vLLM CPU settings: dtype from the CPU's flags, OpenMP binding from the cores
this job may use, config overrides, and what a started server actually receives."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from srb.llm import cpu
from srb.llm import server as srv
from srb.llm.cpu import (
    JOB_THREAD_VARS,
    HostCPU,
    choose_binding,
    format_cpu_list,
    parse_cpu_flags,
    resolve_dtype,
)

# trimmed /proc/cpuinfo texts (first processor; real flag spellings)
SAPPHIRE_RAPIDS = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8480+
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
bogomips\t: 4000.00

processor\t: 1
flags\t\t: fpu vme sse sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16 amx_bf16 amx_tile amx_int8
"""
ZEN4 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9654
flags\t\t: fpu sse sse2 avx avx2 avx512f avx512dq avx512_bf16 avx512vbmi avx512_vnni
"""
SKYLAKE = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Gold 6148
flags\t\t: fpu sse sse2 avx avx2 avx512f avx512dq avx512cd avx512bw avx512vl
"""
GRAVITON3 = """processor\t: 0
BogoMIPS\t: 2100.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics fphp asimdhp sve bf16 i8mm
CPU implementer\t: 0x41
"""
OLD_ARM = """processor\t: 0
Features\t: fp asimd evtstrm crc32 cpuid
"""


@pytest.mark.parametrize(
    ("text", "dtype", "flag"),
    [
        (SAPPHIRE_RAPIDS, "bfloat16", "amx_bf16"),
        (ZEN4, "bfloat16", "avx512_bf16"),
        (GRAVITON3, "bfloat16", "bf16"),
        (SKYLAKE, "float32", None),
        (OLD_ARM, "float32", None),
        ("", "float32", None),
    ],
    ids=["sapphire-rapids", "zen4", "graviton3", "skylake", "old-arm", "unreadable"],
)
def test_auto_dtype_follows_native_bf16(text: str, dtype: str, flag: str | None) -> None:
    host = HostCPU((0, 1), parse_cpu_flags(text))
    got, why = resolve_dtype("auto", host, on_cpu=True)
    assert got == dtype
    if flag:
        assert flag in why
    else:
        assert "float32" in why and "emulated" in why


def test_config_dtype_wins_and_a_gpu_keeps_vllms_auto() -> None:
    no_bf16 = HostCPU((0, 1), parse_cpu_flags(SKYLAKE))
    assert resolve_dtype("bfloat16", no_bf16, on_cpu=True) == ("bfloat16", "set in config")
    assert resolve_dtype("Float16", no_bf16, on_cpu=True)[0] == "float16"
    assert resolve_dtype(None, no_bf16, on_cpu=True)[0] == "float32"  # unset means auto
    assert resolve_dtype("auto", no_bf16, on_cpu=False)[0] == "auto"


def test_flags_are_parsed_exactly() -> None:
    flags = parse_cpu_flags(SKYLAKE)
    assert "avx512f" in flags and "avx512_bf16" not in flags and len(flags) == 10
    assert parse_cpu_flags("model name\t: has flags: avx512_bf16 in its name\n") == frozenset()


def test_read_host_uses_this_process_affinity(tmp_path: Path) -> None:
    info = tmp_path / "cpuinfo"
    info.write_text(ZEN4)
    host = cpu.read_host(info)
    assert set(host.cpus) == os.sched_getaffinity(0)
    assert "avx512_bf16" in host.flags
    assert cpu.read_host(tmp_path / "missing").flags == frozenset()


@pytest.mark.parametrize(
    ("cpus", "text"),
    [((0, 1, 2, 5, 7, 8), "0-2,5,7-8"), ((3,), "3"), ((1, 0), "0-1"), ((4, 6, 8), "4,6,8")],
)
def test_format_cpu_list(cpus: tuple[int, ...], text: str) -> None:
    assert format_cpu_list(cpus) == text


def test_a_two_core_job_gives_vllm_both_cores_with_none_reserved() -> None:
    """Measured on the workflow's prompts: 1.4-1.65x faster than vLLM's 'auto' (worker on core
    0, core 1 fenced off for the engine)."""
    b = choose_binding(HostCPU((0, 1), frozenset()))
    assert b.env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert b.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert b.env["OMP_NUM_THREADS"] == "2"
    assert all(b.env[v] == "2" for v in JOB_THREAD_VARS)  # not a threads: 1 job's 1
    assert "vLLM gets 0-1 (0 reserved)" in b.reason


def test_a_small_cpuset_binds_its_own_cores() -> None:
    b = choose_binding(HostCPU((2, 3, 6), frozenset()))  # e.g. a Slurm job's cpuset
    assert b.env["VLLM_CPU_OMP_THREADS_BIND"] == "2-3,6"
    assert "3 usable core(s) 2-3,6" in b.reason
    assert b.env["OMP_NUM_THREADS"] == "3"  # this job's cores, not the machine's


def test_reserved_cpus_on_a_small_host_come_off_the_end() -> None:
    b = choose_binding(HostCPU((0, 1, 2, 3), frozenset()), reserved_cpus=2)
    assert b.env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert b.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "2"
    assert b.env["OMP_NUM_THREADS"] == "2"
    with pytest.raises(ValueError, match="leaves no core"):
        choose_binding(HostCPU((0, 1), frozenset()), reserved_cpus=2)
    one = choose_binding(HostCPU((5,), frozenset()))
    assert one.env["VLLM_CPU_OMP_THREADS_BIND"] == "5" and one.env["OMP_NUM_THREADS"] == "1"


def test_a_large_host_keeps_vllms_auto_binding() -> None:
    b = choose_binding(HostCPU(tuple(range(16)), frozenset()))
    assert b.env["VLLM_CPU_OMP_THREADS_BIND"] == "auto"
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in b.env  # vLLM's own default (one core)
    assert b.env["OMP_NUM_THREADS"] == "16"
    b = choose_binding(HostCPU(tuple(range(16)), frozenset()), reserved_cpus=2)
    assert b.env["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "2"


def test_config_binding_wins() -> None:
    b = choose_binding(HostCPU((0, 1), frozenset()), omp_bind="0-1", threads=2)
    assert b.env["VLLM_CPU_OMP_THREADS_BIND"] == "0-1"
    assert b.env["OMP_NUM_THREADS"] == "2"
    assert "set in config" in b.reason
    b = choose_binding(HostCPU((0, 1), frozenset()), omp_bind="nobind", threads=1)
    assert (b.env["VLLM_CPU_OMP_THREADS_BIND"], b.env["OMP_NUM_THREADS"]) == ("nobind", "1")


# a stand-in for vLLM that records its command line and environment, then serves /v1/models
RECORDING_VLLM = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
keys = ("VLLM_CPU_OMP_THREADS_BIND", "VLLM_CPU_NUM_OF_RESERVED_CPU", "OMP_NUM_THREADS",
        "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "VLLM_ENABLE_V1_MULTIPROCESSING")
with open(sys.argv[1], "w") as fh:
    json.dump({"argv": sys.argv[2:], "env": {k: os.environ.get(k) for k in keys}}, fh)
port, name = sys.argv[sys.argv.index("--port") + 1], sys.argv[sys.argv.index("--served-model-name") + 1]
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
        self.wfile.write(json.dumps({"data": [{"id": name}]}).encode())
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(port)), H).serve_forever()
"""


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [(SKYLAKE, "float32"), (SAPPHIRE_RAPIDS, "bfloat16")],
    ids=["skylake", "spr"],
)
def test_a_started_server_gets_the_host_settings(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, flags: str, dtype: str
) -> None:
    record = tmp_path / "record" / "seen.json"
    record.parent.mkdir()
    state = tmp_path / "servers"
    real_command = srv.vllm_command

    def recording(model_dir: str, served_name: str, port: int, opts: dict) -> list[str]:
        cmd = real_command(model_dir, served_name, port, opts)
        return [sys.executable, "-c", RECORDING_VLLM, str(record), *cmd[3:]]

    monkeypatch.setattr(srv, "vllm_command", recording)
    # the thread counts Snakemake exports to a job that declares threads: 3 (torch would take
    # MKL_NUM_THREADS over OMP_NUM_THREADS)
    for var in ("OMP_NUM_THREADS", *cpu.JOB_THREAD_VARS):
        monkeypatch.setenv(var, "3")
    # one usable core of the machine's two, as a cpuset would give a job
    monkeypatch.setattr(cpu, "read_host", lambda *a: HostCPU((1,), parse_cpu_flags(flags)))
    monkeypatch.setattr(cpu, "vllm_runs_on_cpu", lambda: True)
    try:
        srv.acquire_server("tiny", str(tmp_path), {"max_model_len": 512}, state)
        seen = json.loads(record.read_text())
    finally:
        srv.stop_servers(state)
    argv = seen["argv"]
    assert argv[argv.index("--dtype") + 1] == dtype
    assert seen["env"]["VLLM_CPU_OMP_THREADS_BIND"] == "1"  # the job's own core
    assert seen["env"]["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "0"
    assert seen["env"]["OMP_NUM_THREADS"] == "1"  # the job's one core, not os.cpu_count()
    assert seen["env"]["MKL_NUM_THREADS"] == seen["env"]["OPENBLAS_NUM_THREADS"] == "1"


@pytest.mark.parametrize(
    ("on_cpu", "opts", "in_process"),
    [
        (True, {}, True),  # the CPU build's default: the model in the engine process
        (True, {"worker_process": True}, False),
        (True, {"extra_args": ["--tensor-parallel-size", "2"]}, False),
        (False, {}, False),  # a GPU keeps vLLM's own executor
    ],
    ids=["cpu-default", "cpu-worker-process", "cpu-tensor-parallel", "gpu"],
)
def test_the_cpu_build_runs_the_model_without_a_worker_process(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    on_cpu: bool,
    opts: dict,
    in_process: bool,
) -> None:
    """vLLM's CPU platform turns `--distributed-executor-backend uni` back into `mp` unless
    VLLM_ENABLE_V1_MULTIPROCESSING=0, so the server gets both or neither."""
    record = tmp_path / "record" / "seen.json"
    record.parent.mkdir()
    state = tmp_path / "servers"
    real_command = srv.vllm_command

    def recording(model_dir: str, served_name: str, port: int, o: dict) -> list[str]:
        cmd = real_command(model_dir, served_name, port, o)
        return [sys.executable, "-c", RECORDING_VLLM, str(record), *cmd[3:]]

    monkeypatch.setattr(srv, "vllm_command", recording)
    monkeypatch.setattr(cpu, "read_host", lambda *a: HostCPU((0, 1), parse_cpu_flags(SKYLAKE)))
    monkeypatch.setattr(cpu, "vllm_runs_on_cpu", lambda: on_cpu)
    try:
        srv.acquire_server("tiny", str(tmp_path), {"max_model_len": 512, **opts}, state)
        seen = json.loads(record.read_text())
    finally:
        srv.stop_servers(state)
    argv = seen["argv"]
    uni = "--distributed-executor-backend" in argv and (
        argv[argv.index("--distributed-executor-backend") + 1] == "uni"
    )
    assert uni is in_process
    assert (seen["env"]["VLLM_ENABLE_V1_MULTIPROCESSING"] == "0") is in_process
