"""LLM-layer benchmark, everything measured side by side in this one run:

1. vLLM continuous batching: the same prompts sent one at a time vs concurrently to one server of
   the same model: generated tokens/s and the ratio (goal >= 5x).
2. The whole default workflow, cold (empty results/ and call cache) vs warm (`--forceall` on the
   warm cache): wall time and ratio (goal: warm <= 10% of cold), model calls and servers started
   on the warm run (goal: 0 and none), and a byte comparison of every table, answer and judgment.
3. Wall time and peak memory (summed RSS of the workflow's processes and the vLLM server,
   sampled every second) of the cold run (goal: <= 15 min, <= 8 GiB).

    python bench/llm_layer.py [--skip-workflow] [--prompts 16] [--workdir DIR]

Prints one table; exits 0.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from srb.llm.backends import ChatRequest, OpenAICompatBackend  # noqa: E402
from srb.llm.cache import CallCache  # noqa: E402
from srb.llm.models import ensure_model, vllm_options  # noqa: E402
from srb.llm.server import acquire_server, stop_servers  # noqa: E402


def batching(model: str, spec: dict, models_dir: Path, n: int, max_tokens: int) -> dict:
    ensure_model(model, spec, models_dir)
    state = Path(tempfile.mkdtemp(prefix="srb-bench-servers-"))
    try:
        url, _ = acquire_server(model, str(models_dir / model), vllm_options(model, spec), state)
        backend = OpenAICompatBackend(url, model, timeout_s=600)
        prompts = [
            ChatRequest([{"role": "user", "content": f"Describe clinical trial design number {i} in detail."}],
                        max_tokens=max_tokens)
            for i in range(n)
        ]  # fmt: skip
        backend.chat(prompts[0])  # warm-up
        t0 = time.perf_counter()
        seq = [backend.chat(p) for p in prompts]
        t_seq = time.perf_counter() - t0
        t0 = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            conc = list(pool.map(backend.chat, prompts))
        t_conc = time.perf_counter() - t0
    finally:
        stop_servers(state)
        shutil.rmtree(state, ignore_errors=True)
    tok_seq = sum(c.completion_tokens for c in seq) / t_seq
    tok_conc = sum(c.completion_tokens for c in conc) / t_conc
    return {
        "seq_tok_s": tok_seq,
        "conc_tok_s": tok_conc,
        "ratio": tok_conc / tok_seq,
        "seq_s": t_seq,
        "conc_s": t_conc,
    }


class MemorySampler(threading.Thread):
    """Peak of summed RSS over a process tree plus any process whose command line names vLLM."""

    def __init__(self, root_pid: int):
        super().__init__(daemon=True)
        self.root_pid, self.peak, self._stop = root_pid, 0, threading.Event()

    def run(self) -> None:
        while not self._stop.is_set():
            total = 0
            try:
                procs = {
                    psutil.Process(self.root_pid),
                    *psutil.Process(self.root_pid).children(recursive=True),
                }
            except psutil.NoSuchProcess:
                procs = set()
            for p in psutil.process_iter(["cmdline"]):
                if "vllm.entrypoints" in " ".join(p.info["cmdline"] or []):
                    procs.add(p)
            for p in procs:
                try:
                    total += p.memory_info().rss
                except psutil.Error:
                    pass
            self.peak = max(self.peak, total)
            self._stop.wait(1.0)

    def stop(self) -> None:
        self._stop.set()


def run_workflow(workdir: Path, config: Path, *extra: str) -> tuple[float, int, str]:
    cmd = [
        sys.executable,
        "-m",
        "snakemake",
        "--snakefile",
        str(REPO / "Snakefile"),
        "--directory",
        str(workdir),
        "--configfile",
        str(config),
        "--cores",
        "2",
        *extra,
    ]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    sampler = MemorySampler(proc.pid)
    sampler.start()
    out, _ = proc.communicate()
    sampler.stop()
    if proc.returncode != 0:
        raise SystemExit(f"workflow failed ({proc.returncode}):\n{out[-4000:]}")
    return time.perf_counter() - t0, sampler.peak, out


def digests(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for sub in ("answers", "judgments", "leaderboard", "diagnostics", "retrieval")
        for p in sorted(root.glob(f"results/*/{sub}/**/*"))
        if p.is_file()
    }


def workflow_cold_warm(workdir: Path) -> dict:
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    src = config["corpus_sources"]["evidence-inference-ccby"]
    src["path"] = str(REPO / src["path"])
    llm = config["llm"]
    llm["cache"] = str(workdir / "cache/llm-calls.sqlite")
    llm["servers_dir"] = str(workdir / "cache/servers")
    llm["models_dir"] = str(REPO / "cache/models")  # prepared weights are shared, re-verified
    for key in ("synthesize", "synthesize_base", "judge"):
        llm.setdefault("prompts", {})[key] = str(REPO / f"config/prompts/{key}.md")
    cfg = workdir / "config.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    cfg.write_text(yaml.safe_dump(config))
    cold_s, cold_peak, _ = run_workflow(workdir, cfg)
    cold = digests(workdir)
    rows_before = len(CallCache(llm["cache"]))
    server_logs = sorted(Path(llm["servers_dir"]).glob("*.server.log"))
    log_sizes = {p: p.stat().st_size for p in server_logs}
    warm_s, warm_peak, out = run_workflow(workdir, cfg, "--forceall")
    warm = digests(workdir)
    new_calls = len(CallCache(llm["cache"])) - rows_before
    started = any(
        p.stat().st_size != log_sizes.get(p, -1)
        for p in Path(llm["servers_dir"]).glob("*.server.log")
    )
    differing = [k for k in cold if warm.get(k) != cold[k]]
    return {
        "cold_s": cold_s,
        "warm_s": warm_s,
        "ratio": warm_s / cold_s,
        "cold_peak": cold_peak,
        "warm_peak": warm_peak,
        "new_calls": new_calls,
        "server_started": started,
        "files": len(cold),
        "differing": differing,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=128)
    parser.add_argument("--skip-workflow", action="store_true")
    parser.add_argument("--skip-batching", action="store_true")
    parser.add_argument("--workdir", default=None)
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    model = config["llm"]["synthesizer"]
    spec = config["llm"]["models"][model]
    lines = [f"{'measure':<44} {'value':>14}  goal"]
    if not args.skip_batching:
        b = batching(model, spec, REPO / "cache/models", args.prompts, args.max_tokens)
        lines += [
            f"{'vLLM ' + model + ' sequential tokens/s':<44} {b['seq_tok_s']:>14.1f}",
            f"{'vLLM concurrent (' + str(args.prompts) + ') tokens/s':<44} {b['conc_tok_s']:>14.1f}",
            f"{'concurrent / sequential':<44} {b['ratio']:>13.1f}x  >= 5x",
        ]
    if not args.skip_workflow:
        workdir = Path(args.workdir or tempfile.mkdtemp(prefix="srb-bench-wf-"))
        w = workflow_cold_warm(workdir)
        gib = 1024**3
        lines += [
            f"{'default workflow cold wall s':<44} {w['cold_s']:>14.1f}  <= 900",
            f"{'default workflow cold peak memory GiB':<44} {w['cold_peak'] / gib:>14.2f}  <= 8",
            f"{'default workflow warm (--forceall) wall s':<44} {w['warm_s']:>14.1f}",
            f"{'warm / cold':<44} {w['ratio'] * 100:>13.1f}%  <= 10%",
            f"{'warm run: new model calls':<44} {w['new_calls']:>14d}  0",
            f"{'warm run: LLM server started':<44} {str(w['server_started']):>14}  False",
            f"{'output files byte-identical':<44} {w['files'] - len(w['differing']):>8d} of {w['files']:<4d}  all",
        ]
        if w["differing"]:
            lines.append("differing: " + ", ".join(w["differing"][:10]))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
