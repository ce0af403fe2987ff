"""kill -9 (or Ctrl-C, or SIGTERM) of `snakemake` at seeded random points, then the README's
resume, judged byte for byte.

The run is the whole phase structure on the tiny corpus: corpus preparation, units, dense and
BM25 indexes, doctors, ranking, restored cells, synthesis, judging (the rubric judge and an LLM
judge), the leaderboards, paired bootstrap, figures and qualitative tables. The synthesizer and
the LLM judge are the packaged SmolLM2-135M behind the fault proxy (no faults, a tape of the
real vLLM server's answers, a small delay per answer so the model phases take time to kill in):
CPU vLLM's batching makes fresh answers differ between runs, and the sweep must compare the
resume, not the model's noise.

Each point: a clean work directory, the command (`python -m srb resume`, then `snakemake
--cores 2`, as `make run`), an interruption when a seeded random job of a seeded phase has
started plus a seeded delay, then the same command again. The interruption is one of `SIGNALS`:
KILL (SIGKILL to the main `snakemake` process, as a lost terminal or the OOM killer would), INT
(SIGINT to its whole process group, as Ctrl-C in a terminal) or TERM (SIGTERM to `snakemake`, as
`kill pid` or a scheduler's time limit) or STOP (`python -m srb stop`, the README's way to stop a
background run at once); after INT, TERM or STOP the run must stop on its own within
`STOP_BOUND_S` (else it is killed and counted as hung). Counted per point:
- whether the resumed run's exit status told the truth (0 exactly when every output of the
  uninterrupted run exists) and its outputs equal that run's (`latency_s` left out);
- model calls after the kill that repeat an answer already delivered (must be 0): requests
  the resumed run sent whose body the proxy had answered before it (counted once `srb resume`
  stopped the orphaned jobs, which may still finish calls after the kill);
- a call cache that fails SQLite's integrity check after the kill (must be 0);
- processes of the work directory alive after the resume finished (orphans; must be 0);
- for INT, TERM and STOP, seconds from the signal to snakemake's exit, and whether it hung.

Three grids (`grid`): `units`, the above; `stores`, two short papers ingested by Mem0 (its store
inside the job) and Theoria (a service the job starts, through which Prism and the sequential
/observe evaluation also go), their doctors and cells, then synthesis and judging, with every
call answered by a taped Qwen2.5-Coder-0.5B. A store's own files are left out of the
comparison (not byte-stable even on a warm cache) in favour of what is read from them, and so
are fields that describe the run rather than the result (`RUN_FIELDS`); `server`, the units grid
with no tape: the workflow starts its own vLLM server for the packaged SmolLM2 on the first cache
miss (as `make run` does) and the points fall while it is up (synthesis, judging). The server is
made deterministic (one sequence at a time, no prefix cache: `SERVER_ARGS`) so the resumed run's
answers can be compared byte for byte; with no proxy between the jobs and the server, repeated
calls are not counted there (`None`), while an orphaned vLLM counts as an orphan like any job.

Used by `tests/reliability/test_kill_sweep.py` (1 point) and `bench/reliability.py kill`
(`make reliability-kill`: 10 points; `--grid stores` for the store grid).
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import yaml

from tests.reliability.fault_proxy import FaultProxy
from tests.reliability.llm_faults import MODEL, MODEL_SPEC, REPO, model_config, upstream_server
from tests.test_workflow import read_jsonl, write_config, write_tiny_corpus

#: phases and the rules whose start marks them; points cycle through phases (seeded order)
PHASES: dict[str, tuple[str, ...]] = {
    "corpus": ("prepare_corpus",),
    "indexing": ("build_units", "bm25_index", "dense_index", "doctor"),
    "ranking": ("rank",),
    "restore": ("restore_context", "llm_only_context", "retrieval_diagnostics"),
    "synthesis": ("synthesize",),
    "judging": ("judge",),
    "analysis": ("leaderboard", "paired_bootstrap", "tier_bars", "qualitative",
                 "judge_calibration", "router_headroom"),
}  # fmt: skip
#: the store grid's phases: Mem0 (its store in the job) and Theoria (a service the job starts),
#: Prism from Theoria's calls, Theoria's sequential /observe evaluation, then the model phases
STORE_PHASES: dict[str, tuple[str, ...]] = {
    "ingest": ("ingest_store",),
    "store cells": ("doctor_store", "restore_store", "restore_store_native"),
    "sequential": ("sequential_theoria_observe", "sequential_theoria"),
    "synthesis": ("synthesize",),
    "judging": ("judge",),
}
#: the server grid's points: while the workflow's own vLLM server is starting or answering
SERVER_PHASES: dict[str, tuple[str, ...]] = {"synthesis": ("synthesize",), "judging": ("judge",)}
#: vLLM settings under which the same request gets the same answer whatever else it serves (CPU
#: batching and prefix reuse change the float sums, and so a greedy answer)
SERVER_ARGS = ("--max-num-seqs", "1", "--no-enable-prefix-caching")
#: the longest seeded delay after a phase's job started (s): an ingest job spends its first
#: seconds importing its library, and the kill should also come while its calls are in flight
MAX_DELAY_S = {"ingest": 30.0, "sequential": 10.0}
ANSWER_DELAY_S = 0.4  # per taped answer: the model phases then take seconds, as they do
RUN_TIMEOUT_S = 900
REFERENCE_TIMEOUT_S = 3600  # the uninterrupted run asks the real model: the store grid's ingests
#: how an interruption is sent: to snakemake alone, or to its process group (a terminal's Ctrl-C);
#: STOP is `python -m srb stop` (SIGTERM to snakemake, then to its running jobs)
SIGNALS: dict[str, tuple[signal.Signals, bool]] = {
    "KILL": (signal.SIGKILL, False),
    "INT": (signal.SIGINT, True),
    "TERM": (signal.SIGTERM, False),
    "STOP": (signal.SIGTERM, False),
}
#: a run told to stop (INT, TERM) must have exited this many seconds later; the jobs running then
#: are short on the tiny corpus (snakemake lets them finish on SIGTERM)
STOP_BOUND_S = 120.0
#: left out of the comparison, by design: wall clocks, and Lucene's segment files, which carry
#: a random segment id per build (every ranking and cell read from them is compared)
UNSTABLE = ("results/logs/", "results/benchmarks/")
LUCENE_SEGMENTS = re.compile(r"^results/[^/]+/index/[^/]+/bm25/")
#: a store's own files (Qdrant segments, Theoria's SQLite and arrays) are not byte-stable
#: across runs even on a warm cache (README): what is read from them — exported items, every
#: cell, the doctor's report — is compared instead
STORE_FILES = re.compile(r"^results/[^/]+/store/")
#: fields that describe this run rather than the result: wall clocks, and how many answers and
#: vectors the run had to compute instead of reading them from the caches (a resumed ingest
#: computes fewer: the killed run's are cached)
RUN_FIELDS = frozenset(
    {"latency_s", "wall_s", "wall_s_per_paper", "seconds", "model_calls_made", "encoded_texts"}
)
ANALYSIS = {
    "contrasts": [{"a": "simple_rag/hybrid/native", "b": "base"},
                  {"a": "simple_rag/hybrid/2K", "b": "simple_rag/bm25/2K"}],
    "bootstrap": {"resamples": 2000, "seed": 0},
    "qualitative": {"questions": 2},
}  # fmt: skip
RULE_LINE = re.compile(r"^(?:local)?rule (\w+):", re.M)


@dataclass
class Point:
    index: int
    phase: str
    rule: str
    occurrence: int  # kill after this many starts of `rule`
    delay_s: float
    signal: str = "KILL"  # a key of SIGNALS
    killed: bool = False  # the run was still going when the signal came
    killed_at_s: float = 0.0
    stop_s: float = 0.0  # INT/TERM: seconds from the signal to snakemake's exit
    hung: bool = False  # INT/TERM: still running STOP_BOUND_S after the signal (then killed)
    jobs_done_before: int = 0
    resume_returncode: int | None = None
    resume_said: str = ""  # what `python -m srb resume` printed
    truthful: bool = False
    identical: bool = False
    differing: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    repeated_calls: int | None = 0  # None: not observable (no proxy in front of the server)
    cache_corrupt: bool = False
    orphans: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.truthful and self.identical and not self.repeated_calls
                and not self.cache_corrupt and not self.orphans and not self.hung)  # fmt: skip


# ------------------------------------------------------------------------------ set-up


def write_sweep_config(root: Path, url: str) -> Path:
    corpus = write_tiny_corpus(root)
    llm = model_config(root, url)
    llm.update({"systems": ["simple_rag", "paper_rag"], "llm_only": ["base", "direct_read"],
                "direct_read_budget": "3K"})  # fmt: skip
    return write_config(root, corpus, systems=["simple_rag", "paper_rag"],
                        modalities=["dense", "bm25", "hybrid"], budgets=["native", "2K"],
                        llm=llm, analysis=ANALYSIS)  # fmt: skip


#: the store grid's model: Qwen2.5-Coder-0.5B, whose window holds Mem0's and Theoria's prompts
QWEN = "qwen2.5-coder-0.5b"


def qwen_spec() -> dict[str, Any]:
    return yaml.safe_load((REPO / "config/config.yaml").read_text())["llm"]["models"][QWEN]


def write_store_corpus_beside_tiny(root: Path, write_store_corpus: Callable[[Path], Path]) -> Path:
    """The tiny corpus (units enough for the unit systems' doctor) plus the store tests' three
    one-sentence papers, ids prefixed `M-`: the memory slice (the 2 shortest papers) is two of
    them, whose extraction stays within the small model's answer cap."""
    corpus = write_tiny_corpus(root)
    extra = write_store_corpus(root / "store-papers")
    for name in ("papers.jsonl", "questions.jsonl"):
        records = read_jsonl(extra / name)
        for r in records:
            r["id"] = "M-" + r["id"]
            if "paper_ids" in r:
                r["paper_ids"] = ["M-" + pid for pid in r["paper_ids"]]
                for span in r["evidence"]:
                    span["paper_id"] = "M-" + span["paper_id"]
        with (corpus / name).open("a") as fh:
            fh.write("".join(json.dumps(r) + "\n" for r in records))
    return corpus


def write_store_sweep_config(root: Path, url: str) -> Path:
    """Mem0, Theoria and Prism ingest two short papers (the sequential evaluation on), beside the
    unit grid on the tiny corpus, then synthesis and judging: every model call is the taped
    Qwen's."""
    if str(REPO / "tests") not in sys.path:  # the test module imports its siblings by name
        sys.path.insert(0, str(REPO / "tests"))
    from tests.test_store_workflow import write_store_corpus

    corpus = write_store_corpus_beside_tiny(root, write_store_corpus)
    llm = model_config(root, url)
    served = {**llm["models"][MODEL], "source": {"served_name": QWEN, "base_url": url},
              "max_model_len": qwen_spec()["max_model_len"]}  # fmt: skip
    llm.update({"models": {QWEN: served}, "synthesizer": QWEN, "judges": ["rubric", QWEN],
                "systems": ["simple_rag", "mem0", "theoria", "prism"], "llm_only": ["base"]})  # fmt: skip
    memory = {"systems": ["mem0", "theoria", "prism"], "papers": 2, "llm": QWEN,
              "max_completion_tokens": 1024,
              "theoria": {"max_claims_per_pass": 2, "extraction_max_tokens": 256},
              "sequential": {"enabled": True, "batch_size": 1, "seed": 0}}  # fmt: skip
    return write_config(root, corpus, systems=["simple_rag"],
                        modalities=["dense", "bm25", "hybrid"], budgets=["native", "2K"],
                        llm=llm, memory=memory, analysis=ANALYSIS)  # fmt: skip


def write_server_sweep_config(root: Path, url: str = "") -> Path:
    """The units grid with the packaged SmolLM2 as a model the workflow serves itself (`url` is
    not used: there is no tape), on a deterministic vLLM (`SERVER_ARGS`)."""
    path = write_sweep_config(root, url)
    config = yaml.safe_load(path.read_text())
    served = config["llm"]["models"][MODEL]
    vllm = {**MODEL_SPEC["vllm"], "extra_args": list(SERVER_ARGS)}
    config["llm"]["models"][MODEL] = {**MODEL_SPEC, "vllm": vllm,
                                      "timeout_s": served["timeout_s"],
                                      "retries": served["retries"],
                                      "backoff_s": served["backoff_s"]}  # fmt: skip
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass(frozen=True)
class Grid:
    """What a sweep runs: each work directory's config (given the taped model's URL), the
    phases its points are drawn from, and the model behind the tape (`taped` False: the
    workflow serves the model itself)."""

    write_config: Callable[[Path, str], Path]
    phases: dict[str, tuple[str, ...]]
    model: str
    spec: dict[str, Any]
    taped: bool = True


def grid(name: str) -> Grid:
    """`units`: the unit systems' whole run (SmolLM2); `stores`: store systems' ingest,
    their cells and the sequential evaluation, then the model phases (Qwen 0.5B); `server`: the
    units run on the workflow's own vLLM server."""
    if name == "server":
        return Grid(write_server_sweep_config, SERVER_PHASES, MODEL, MODEL_SPEC, taped=False)
    if name == "units":
        return Grid(write_sweep_config, PHASES, MODEL, MODEL_SPEC)
    if name == "stores":
        return Grid(write_store_sweep_config, STORE_PHASES, QWEN, qwen_spec())
    raise ValueError(f"unknown grid {name!r}: units, stores or server")


def run_command(root: Path) -> list[list[str]]:
    """What `make run` runs, in `root`."""
    py = sys.executable
    return [[py, "-m", "srb", "resume"],
            [py, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "--configfile",
             str(root / "config.yaml"), "--cores", "2"]]  # fmt: skip


def env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1",
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}  # fmt: skip


def outputs(root: Path) -> dict[str, str]:
    """Digest of every file under results/ but logs and benchmarks (`latency_s` left out)."""
    found: dict[str, str] = {}
    for p in sorted((root / "results").rglob("*")):
        rel = str(p.relative_to(root))
        if (not p.is_file() or rel.startswith(UNSTABLE) or LUCENE_SEGMENTS.match(rel)
                or STORE_FILES.match(rel)):  # fmt: skip
            continue
        if p.suffix == ".jsonl":
            data = json.dumps([_result_only(r) for r in read_jsonl(p)], sort_keys=True).encode()
        elif p.suffix == ".json":
            data = json.dumps(_result_only(json.loads(p.read_text())), sort_keys=True).encode()
        elif p.suffix == ".csv":
            data = _csv_result_only(p.read_text()).encode()
        elif p.suffix == ".md":
            data = _markdown_result_only(p.read_text()).encode()
        else:
            data = p.read_bytes()
        found[rel] = hashlib.sha256(data).hexdigest()
    return found


def _result_only(value: Any) -> Any:
    """`value` without the RUN_FIELDS at any depth."""
    if isinstance(value, dict):
        return {k: _result_only(v) for k, v in value.items() if k not in RUN_FIELDS}
    if isinstance(value, list):
        return [_result_only(v) for v in value]
    return value


def _csv_result_only(text: str) -> str:
    """A CSV table without its RUN_FIELDS columns."""
    rows = list(csv.reader(io.StringIO(text)))
    if not rows:
        return text
    keep = [i for i, name in enumerate(rows[0]) if name not in RUN_FIELDS]
    return "\n".join(",".join(row[i] for i in keep if i < len(row)) for row in rows)


def _markdown_result_only(text: str) -> str:
    """A Markdown file with its tables' RUN_FIELDS columns dropped (a table's first row names
    them)."""
    out, keep = [], None
    for line in text.splitlines():
        if not line.startswith("|"):
            out.append(line)
            keep = None
            continue
        cells = line.strip().strip("|").split("|")
        if keep is None:
            keep = [i for i, name in enumerate(cells) if name.strip() not in RUN_FIELDS]
        out.append("|".join(cells[i] for i in keep if i < len(cells)))
    return "\n".join(out)


def cache_intact(root: Path) -> bool:
    path = root / "cache/llm-calls.sqlite"
    if not path.is_file():
        return True
    try:
        with contextlib.closing(sqlite3.connect(path)) as db:
            return db.execute("pragma integrity_check").fetchone()[0] == "ok"
    except sqlite3.DatabaseError:
        return False


def processes_in(root: Path) -> list[str]:
    """Live processes whose working directory is `root` or below, or that name it."""
    here, found = str(root.resolve()), []
    mine = {os.getpid()}
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        info = proc.info
        if info["pid"] in mine or not info["cmdline"]:
            continue
        cwd = info["cwd"] or ""
        if cwd == here or cwd.startswith(here + os.sep) or any(here in a for a in info["cmdline"]):
            found.append(f"{info['pid']} {' '.join(info['cmdline'])[:120]}")
    return found


# ------------------------------------------------------------------------------ runs


def complete_run(
    root: Path, after_resume: Callable[[], None] | None = None, timeout_s: float = RUN_TIMEOUT_S
) -> tuple[int, str]:
    """The command; `after_resume` runs once `python -m srb resume` stopped the orphans."""
    out = []
    for i, cmd in enumerate(run_command(root)):
        proc = subprocess.run(cmd, cwd=root, env=env(), capture_output=True, text=True,
                              timeout=timeout_s)  # fmt: skip
        out.append(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            return proc.returncode, "\n".join(out)
        if i == 0 and after_resume is not None:
            after_resume()
    return 0, "\n".join(out)


def interrupt(proc: subprocess.Popen, point: Point, root: Path) -> None:
    """Send `point.signal`; for INT, TERM and STOP, wait up to STOP_BOUND_S for snakemake to
    exit."""
    signum, to_group = SIGNALS[point.signal]
    sent = time.monotonic()
    if point.signal == "STOP":
        subprocess.run([sys.executable, "-m", "srb", "stop", "--workdir", str(root),
                        "--wait", str(STOP_BOUND_S)], cwd=root, env=env(),
                       capture_output=True, timeout=STOP_BOUND_S + 30)  # fmt: skip
    elif to_group:
        os.killpg(proc.pid, signum)  # its own session: the group is snakemake and its jobs
    else:
        proc.send_signal(signum)
    if signum == signal.SIGKILL:
        return
    try:
        proc.wait(timeout=STOP_BOUND_S)
    except subprocess.TimeoutExpired:
        point.hung = True
        proc.kill()
    point.stop_s = time.monotonic() - sent


def run_until_killed(root: Path, point: Point) -> None:
    """The command, interrupted with `point.signal` once `point.rule` started `occurrence`
    times (plus `delay_s`)."""
    subprocess.run(run_command(root)[0], cwd=root, env=env(), capture_output=True, check=True)
    log = root / "snakemake.out"
    started = time.monotonic()
    with log.open("w") as fh:
        proc = subprocess.Popen(run_command(root)[1], cwd=root, env=env(), stdout=fh,
                                stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
    try:
        seen_at = None
        while proc.poll() is None and time.monotonic() - started < RUN_TIMEOUT_S:
            text = log.read_text(errors="replace")
            if seen_at is None and RULE_LINE.findall(text).count(point.rule) >= point.occurrence:
                seen_at = time.monotonic()
            if seen_at is not None and time.monotonic() - seen_at >= point.delay_s:
                point.killed = True
                point.killed_at_s = time.monotonic() - started
                interrupt(proc, point, root)
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None and not point.killed:
            proc.kill()
        proc.wait()
    point.jobs_done_before = log.read_text(errors="replace").count("Finished jobid")


def choose_points(
    n: int,
    seed: int,
    reference_log: str,
    signals: Sequence[str] = ("KILL",),
    phases: dict[str, tuple[str, ...]] = PHASES,
) -> list[Point]:
    """n points, phases in a seeded cycle, each a random start of one of the phase's rules
    (among the starts the uninterrupted run logged) and a random delay of 0-2 s (up to
    MAX_DELAY_S for a phase there); the points' interruptions cycle through `signals` (keys of
    SIGNALS)."""
    unknown = [s for s in signals if s not in SIGNALS]
    if unknown or not signals:
        raise ValueError(f"unknown interruption {unknown or signals}: one of {', '.join(SIGNALS)}")
    rng = random.Random(seed)
    starts = RULE_LINE.findall(reference_log)
    logged = [p for p, rules in phases.items() if any(r in starts for r in rules)]
    order = logged[:]
    rng.shuffle(order)
    points = []
    for i in range(n):
        phase = order[i % len(order)]
        rules = [r for r in phases[phase] if r in starts]
        rule = rng.choice(rules)
        delay = round(rng.uniform(0.0, MAX_DELAY_S.get(phase, 2.0)), 2)
        points.append(Point(i + 1, phase, rule, rng.randint(1, starts.count(rule)), delay,
                            signals[i % len(signals)]))  # fmt: skip
    return points


@dataclass
class Sweep:
    reference_wall_s: float
    reference_outputs: int
    points: list[Point]


@contextlib.contextmanager
def taped_model(workdir: Path, model: str = MODEL, spec: dict[str, Any] | None = None
                ) -> Iterator[FaultProxy]:  # fmt: skip
    with upstream_server(workdir / "upstream-servers", model, spec) as upstream:
        proxy = FaultProxy(upstream).start()
        try:
            yield proxy
        finally:
            proxy.stop()


def slow_tape(proxy: FaultProxy) -> None:
    """Every answer after the fault-free run waits ANSWER_DELAY_S (the tape answers at once)."""
    answer = proxy.answer

    def delayed(body: dict[str, Any]) -> bytes:
        time.sleep(ANSWER_DELAY_S)
        return answer(body)

    proxy.answer = delayed  # type: ignore[method-assign]


def selected_phases(grid_name: str, phases: Sequence[str] = ()) -> dict[str, tuple[str, ...]]:
    """The grid's phases named in `phases` (all when empty), in the grid's order."""
    known = grid(grid_name).phases
    unknown = sorted(set(phases) - set(known))
    if unknown:
        raise ValueError(f"grid {grid_name!r} has no phase {', '.join(map(repr, unknown))}: "
                         f"one of {', '.join(map(repr, known))}")  # fmt: skip
    return {k: v for k, v in known.items() if not phases or k in phases}


def sweep(
    workdir: Path,
    n: int,
    seed: int = 0,
    signals: Sequence[str] = ("KILL",),
    grid_name: str = "units",
    phases: Sequence[str] = (),
) -> Sweep:
    """`phases`: only points in these of the grid's phases (all when empty)."""
    workdir.mkdir(parents=True, exist_ok=True)
    chosen = grid(grid_name)
    wanted = selected_phases(grid_name, phases)
    tape = taped_model(workdir, chosen.model, chosen.spec) if chosen.taped else None
    with tape or contextlib.nullcontext() as proxy:
        url = proxy.url if proxy is not None else ""
        ref_root = workdir / "reference"
        ref_root.mkdir()
        chosen.write_config(ref_root, url)
        started = time.monotonic()
        rc, text = complete_run(ref_root, timeout_s=REFERENCE_TIMEOUT_S)
        ref_wall = time.monotonic() - started
        if rc != 0:
            raise RuntimeError(f"the uninterrupted run failed:\n{text[-4000:]}")
        reference = outputs(ref_root)
        if proxy is not None:
            slow_tape(proxy)
        points = choose_points(n, seed, text, signals, wanted)
        for point in points:
            root = workdir / f"point-{point.index:02d}"
            root.mkdir()
            chosen.write_config(root, url)
            t0 = time.monotonic()
            # the reference's and earlier points' answers
            earlier = Counter(proxy.stats.delivered) if proxy is not None else Counter()
            run_until_killed(root, point)
            point.cache_corrupt = not cache_intact(root)
            marks: dict[str, Counter] = {}

            def mark(marks: dict[str, Counter] = marks, earlier: Counter = earlier) -> None:
                # the orphans are stopped: what this point's run was answered is cached
                if proxy is not None:
                    marks["delivered"] = proxy.stats.delivered - earlier
                    marks["received"] = Counter(proxy.stats.received)

            rc, said = complete_run(root, mark)
            point.resume_returncode = rc
            point.resume_said = " ".join(
                line for line in said.splitlines() if line.startswith("srb resume")
            )[:300]
            point.wall_s = time.monotonic() - t0
            if proxy is None:
                point.repeated_calls = None
            else:
                asked = proxy.stats.received - marks.get("received", Counter())
                done = marks.get("delivered", Counter())
                point.repeated_calls = sum(n for key, n in asked.items() if done[key])
            got = outputs(root)
            point.missing = sorted(set(reference) - set(got))
            point.differing = sorted(k for k in reference if k in got and got[k] != reference[k])
            point.identical = (
                not point.missing and not point.differing and set(got) == set(reference)
            )
            point.truthful = (rc == 0) == (not point.missing)
            time.sleep(1.0)
            point.orphans = processes_in(root)
            if point.ok:
                shutil.rmtree(root / "results", ignore_errors=True)
    return Sweep(ref_wall, len(reference), points)


def table(result: Sweep) -> list[str]:
    rows = ["| # | phase | signal at | stopped in | jobs done | resume exit | truthful | "
            "outputs equal | repeated calls | cache intact | orphans | verdict |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in result.points:
        how = "srb stop" if p.signal == "STOP" else f"SIG{p.signal}"
        where = (f"{how} {p.rule} #{p.occurrence} +{p.delay_s:.1f} s "
                 f"({p.killed_at_s:.0f} s in)" if p.killed
                 else f"{p.rule} #{p.occurrence}: run ended first")  # fmt: skip
        stopped = ("-" if p.signal == "KILL" or not p.killed
                   else f"HUNG (> {STOP_BOUND_S:.0f} s)" if p.hung else f"{p.stop_s:.1f} s")  # fmt: skip
        same = "yes" if p.identical else f"NO ({len(p.missing)} missing, {len(p.differing)} differ)"
        rows.append(f"| {p.index} | {p.phase} | {where} | {stopped} | {p.jobs_done_before} | "
                    f"{p.resume_returncode} | {'yes' if p.truthful else 'NO'} | {same} | "
                    f"{'n/a' if p.repeated_calls is None else p.repeated_calls} | "
                    f"{'no' if p.cache_corrupt else 'yes'} | "
                    f"{len(p.orphans)} | {'ok' if p.ok else 'FAILED'} |")  # fmt: skip
    return rows


def repeated(points: Sequence[Point]) -> str:
    """The repeated completed calls, or why they were not counted."""
    counted = [p.repeated_calls for p in points if p.repeated_calls is not None]
    return str(sum(counted)) if counted else "not counted (no proxy before the server)"


def summary(result: Sweep) -> str:
    pts = result.points
    how = {p.signal for p in pts}
    name = {"KILL": "kill -9", "INT": "Ctrl-C (SIGINT)", "TERM": "SIGTERM", "STOP": "srb stop"}
    label = " / ".join(name[h] for h in SIGNALS if h in how) or "kill -9"
    stopped = [p.stop_s for p in pts if p.signal != "KILL" and p.killed and not p.hung]
    stops = ""
    if how - {"KILL"}:
        stops = f", hung {sum(p.hung for p in pts)}"
        stops += f", stopped within {max(stopped):.0f} s" if stopped else ""
    return (f"{label} resumes: {sum(p.ok for p in pts)}/{len(pts)} identical "
            f"({sum(p.killed for p in pts)} interrupted mid-run{stops}), "
            f"untruthful exits {sum(not p.truthful for p in pts)}, "
            f"repeated completed calls {repeated(pts)}, "
            f"partial outputs accepted {sum(bool(p.differing) for p in pts)}, "
            f"corrupt caches {sum(p.cache_corrupt for p in pts)}, "
            f"orphans {sum(len(p.orphans) for p in pts)}")  # fmt: skip


def dump(result: Sweep) -> str:
    return yaml.safe_dump({"reference_wall_s": result.reference_wall_s,
                           "points": [vars(p) for p in result.points]}, sort_keys=False)  # fmt: skip
