"""LLM-layer benchmark, everything measured side by side in this one run:

0. Server settings on the workflow's own prompts (`--settings`, the default): the default grid's
   real synthesis prompts (contexts of native and budgeted simple_rag cells, fitted exactly as the
   synthesize jobs fit them) and judge prompts, sent to one vLLM server per candidate setting
   (dtype x thread binding) at each concurrency: prompt and generated tokens/s and wall time, with
   the CPU model and flags printed; the setting the workflow picks on this host is marked, and so is
   the fastest one measured. Needs the retrieval cells (run `snakemake --cores 2` or
   `make run` once; the bench builds missing ones with snakemake).
1. vLLM continuous batching: the same prompts sent one at a time vs concurrently to one server of
   the same model: generated tokens/s and the ratio (goal >= 5x).
2. The whole default workflow, cold (empty results/ and call cache) vs warm (`--forceall` on the
   warm cache): wall time and ratio (goal: warm <= 10% of cold), model calls and servers started
   on the warm run (goal: 0 and none), and a byte comparison of every table, answer and judgment.
3. Wall time and peak memory (summed RSS of the workflow's processes and the vLLM server,
   sampled every second) of the cold run (goal: <= 15 min, <= 8 GiB).

    python bench/llm_layer.py [--skip-settings] [--skip-batching] [--skip-workflow]
                              [--settings-prompts 24] [--concurrency 8 16] [--prompts 16]
                              [--workdir DIR]

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
from contextlib import contextmanager
from pathlib import Path

import psutil
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from srb.data.canonical import iter_jsonl, load_canonical  # noqa: E402
from srb.judge import JUDGE_SCHEMA, render_judge_prompt  # noqa: E402
from srb.llm import cpu  # noqa: E402
from srb.llm.backends import ChatRequest, OpenAICompatBackend  # noqa: E402
from srb.llm.cache import CallCache  # noqa: E402
from srb.llm.models import ensure_model, vllm_options  # noqa: E402
from srb.llm.server import acquire_server, stop_servers  # noqa: E402
from srb.synthesize import ContextFitter, select_questions, synthesis_requests  # noqa: E402

CORPUS = "evidence-inference-ccby"


@contextmanager
def private_server(model: str, model_dir: Path, opts: dict, timeout_s: float = 600):
    """A vLLM server of our own for one measurement (its own state dir), stopped afterwards."""
    state = Path(tempfile.mkdtemp(prefix="srb-bench-servers-"))
    try:
        url, _ = acquire_server(model, str(model_dir), opts, state)
        yield OpenAICompatBackend(url, model, timeout_s=timeout_s)
    finally:
        stop_servers(state)
        shutil.rmtree(state, ignore_errors=True)


def timed_concurrent(backend: OpenAICompatBackend, requests: list, concurrency: int) -> tuple:
    """(completions in request order, wall seconds) with `concurrency` requests in flight."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        done = list(pool.map(backend.chat, requests))
    return done, time.perf_counter() - t0


def workflow_prompts(config: dict, model_dir: Path, n: int) -> tuple[list[ChatRequest], str]:
    """`n` of the default run's real prompts: synthesis over simple_rag's native and budgeted
    cells (each modality), and judge prompts over the same questions, in a fixed interleaving."""
    llm = config["llm"]
    spec = llm["models"][llm["synthesizer"]]
    results = REPO / "results" / CORPUS
    cells = [
        results / "retrieval" / "simple_rag" / m / f"{b}.jsonl"
        for b in config["budgets"]
        for m in config["modalities"]
    ]
    missing = [c for c in cells if not c.is_file()]
    if missing:  # build just the retrieval cells (indexes, doctor, rankings): a few minutes
        subprocess.run(
            [
                sys.executable,
                "-m",
                "snakemake",
                "--cores",
                "2",
                *(str(c.relative_to(REPO)) for c in missing),
            ],  # fmt: skip
            cwd=REPO,
            check=True,
        )
    fitter = ContextFitter(str(model_dir), spec["max_model_len"], llm["max_answer_tokens"])
    prompts = llm.get("prompts", {})
    templates = {
        "context": REPO / prompts.get("synthesize", "config/prompts/synthesize.md"),
        "base": REPO / prompts.get("synthesize_base", "config/prompts/synthesize_base.md"),
    }
    corpus_dir = results / "corpus"
    synth = [
        synthesis_requests(c, corpus_dir, templates, fitter, llm["max_answer_tokens"],
                           llm["questions"])[0]
        for c in cells
    ]  # fmt: skip
    judge_template = (REPO / prompts.get("judge", "config/prompts/judge.md")).read_text()
    questions = select_questions(load_canonical(corpus_dir), llm["questions"])
    native = {r["question_id"]: r for _, r in iter_jsonl(cells[0])}
    judge = [
        ChatRequest(
            [{"role": "user", "content": render_judge_prompt(
                judge_template, q, q.gold_answer, native[q.id]["context"],
                llm.get("judge_context_chars", 2000))}],
            max_tokens=llm.get("judge_max_tokens", 96),
            json_schema=JUDGE_SCHEMA,
        )
        for q in questions
    ]  # fmt: skip
    # round-robin over cells and judge prompts, so any n mixes context sizes as a run does
    pools = [*synth, judge]
    picked: list[ChatRequest] = []
    for i in range(max(len(p) for p in pools)):
        picked += [p[i] for p in pools if i < len(p)]
    share = (
        f"{len(cells)} synthesis cells (budgets {', '.join(map(str, config['budgets']))}) + judge"
    )
    return picked[:n], share


def ingest_prompts(config: dict, n: int) -> tuple[list[ChatRequest], str]:
    """`n` of the default run's real memory-ingest prompts: Theoria's extraction passes over the
    memory slice (the prompt, JSON schema and answer cap its ingest sends), decode-heavy where
    synthesis is prefill-heavy."""
    from srb.store import memory_slice
    from srb.theoria.extract import ASPECT_INSTRUCTIONS, EXTRACT_PROMPT, _passes, claims_schema
    from srb.theoria.options import TheoriaOptions

    memory = config["memory"]
    opts = TheoriaOptions.from_config(memory.get("theoria"))
    corpus = load_canonical(REPO / config["corpus_sources"][CORPUS]["path"])
    papers, _ = memory_slice(corpus, memory["papers"])
    schema = claims_schema(opts.max_claims_per_pass, opts.max_claim_chars)
    requests = [
        ChatRequest(
            [{"role": "user", "content": EXTRACT_PROMPT.format(
                aspect=aspect, instruction=ASPECT_INSTRUCTIONS[aspect],
                max_claims=opts.max_claims_per_pass, paper_id=paper.id, chunk=paper.text[s:e])}],
            max_tokens=opts.extraction_max_tokens,
            json_schema=schema,
        )
        for paper in papers
        for _, s, e, aspect in _passes(paper, opts)
    ]  # fmt: skip
    return requests[:n], f"Theoria extraction passes over the {len(papers)}-paper memory slice"


def candidate_settings(
    host: cpu.HostCPU,
    dtypes: tuple[str, ...] = ("bfloat16", "float32"),
    bindings: tuple[str, ...] = ("auto", "all"),
) -> list[dict]:
    """dtype x binding: bfloat16 and float32, vLLM's auto binding (one core reserved for its
    engine) and the worker bound to every usable core ("all")."""
    every = cpu.format_cpu_list(host.cpus)
    known = {
        "auto": ("auto", {"omp_bind": "auto"}),
        "all": (f"all cores {every}", {"omp_bind": every, "reserved_cpus": 0}),
    }
    chosen = [known[b] for b in bindings]
    return [{"dtype": d, "binding": name, **opts} for d in dtypes for name, opts in chosen]


def settings_benchmark(
    model: str,
    spec: dict,
    config: dict,
    n: int,
    concurrencies: list[int],
    ingest: bool = False,
    dtypes: tuple[str, ...] = ("bfloat16", "float32"),
    bindings: tuple[str, ...] = ("auto", "all"),
) -> list[str]:
    models_dir = REPO / "cache/models"
    ensure_model(model, spec, models_dir)
    if ingest:
        requests, share = ingest_prompts(config, n)
    else:
        requests, share = workflow_prompts(config, models_dir / model, n)
    host = cpu.read_host()
    chosen_dtype, why = cpu.resolve_dtype(vllm_options(model, spec).get("dtype"), host)
    chosen = cpu.choose_binding(host)
    lines = [
        f"CPU: {platform_cpu_model()}; usable cores {cpu.format_cpu_list(host.cpus)}; "
        f"bf16 flags: {', '.join(f for f in cpu.NATIVE_BF16_FLAGS if f in host.flags) or 'none'}",
        f"model {model}; prompts: {len(requests)} real prompts of the default run ({share})",
        f"the workflow picks here: dtype {chosen_dtype} ({why}); binding "
        f"{chosen.env.get('VLLM_CPU_OMP_THREADS_BIND', 'auto')} ({chosen.reason})",
        "",
        "| dtype | binding | concurrency | wall s | prompt tok/s | generated tok/s |",
        "|---|---|---|---|---|---|",
    ]
    rows = []
    warm_up = ChatRequest([{"role": "user", "content": "Say OK."}], max_tokens=4)
    for setting in candidate_settings(host, dtypes, bindings):
        opts = {**vllm_options(model, spec), **{k: v for k, v in setting.items() if k != "binding"}}
        for conc in concurrencies:
            # a fresh server per measurement: a second pass over the same prompts would be served
            # from vLLM's prefix cache; the warm-up prompt shares no prefix with the measured ones
            with private_server(model, models_dir / model, opts, timeout_s=1200) as backend:
                backend.chat(warm_up)
                done, wall = timed_concurrent(backend, requests, conc)
            p_tok = sum(c.prompt_tokens for c in done)
            g_tok = sum(c.completion_tokens for c in done)
            rows.append((setting["dtype"], setting["binding"], conc, wall, p_tok / wall,
                         g_tok / wall))  # fmt: skip
    fastest = min(rows, key=lambda r: r[3])
    bind = chosen.env.get("VLLM_CPU_OMP_THREADS_BIND", "auto")
    pick = (chosen_dtype, "auto" if bind == "auto" else f"all cores {bind}")
    for r in rows:
        marks = [
            m for m, on in (("fastest", r is fastest), ("workflow's pick", r[:2] == pick)) if on
        ]
        mark = f" ({', '.join(marks)})" if marks else ""
        lines.append(f"| {r[0]} | {r[1]}{mark} | {r[2]} | {r[3]:.1f} | {r[4]:.0f} | {r[5]:.1f} |")
    verdict = "is the fastest" if fastest[:2] == pick else "is NOT the fastest"
    lines += [
        "",
        f"fastest measured: {fastest[0]}, {fastest[1]}, concurrency {fastest[2]}; "
        f"the workflow's pick ({pick[0]}, {pick[1]}) {verdict}",
    ]
    return lines


def platform_cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    import platform

    return platform.processor() or platform.machine()


def batching(model: str, spec: dict, models_dir: Path, n: int, max_tokens: int) -> dict:
    ensure_model(model, spec, models_dir)
    prompts = [
        ChatRequest([{"role": "user", "content": f"Describe clinical trial design number {i} in detail."}],
                    max_tokens=max_tokens)
        for i in range(n)
    ]  # fmt: skip
    with private_server(model, models_dir / model, vllm_options(model, spec)) as backend:
        backend.chat(prompts[0])  # warm-up
        t0 = time.perf_counter()
        seq = [backend.chat(p) for p in prompts]
        t_seq = time.perf_counter() - t0
        conc, t_conc = timed_concurrent(backend, prompts, n)
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
    parser.add_argument("--skip-settings", action="store_true")
    parser.add_argument("--settings-prompts", type=int, default=24)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 16])
    parser.add_argument("--skip-batching", action="store_true")
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--ingest",
        action="store_true",
        help="settings on the memory systems' ingest model and Theoria's extraction prompts",
    )
    parser.add_argument("--dtypes", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--bindings", nargs="+", choices=["auto", "all"], default=["auto", "all"])
    args = parser.parse_args()
    config = yaml.safe_load((REPO / "config/config.yaml").read_text())
    model = config["memory"]["llm"] if args.ingest else config["llm"]["synthesizer"]
    spec = config["llm"]["models"][model]
    if not args.skip_settings:
        print("\n".join(settings_benchmark(model, spec, config, args.settings_prompts,
                                           args.concurrency, args.ingest,
                                           tuple(args.dtypes), tuple(args.bindings))),
              flush=True)  # fmt: skip
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
