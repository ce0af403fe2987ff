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
`kill pid` or a scheduler's time limit); after INT or TERM the run must stop on its own within
`STOP_BOUND_S` (else it is killed and counted as hung). Counted per point:
- whether the resumed run's exit status told the truth (0 exactly when every output of the
  uninterrupted run exists) and its outputs equal that run's (`latency_s` left out);
- model calls after the kill that repeat an answer already delivered (must be 0): requests
  the resumed run sent whose body the proxy had answered before it (counted once `srb resume`
  stopped the orphaned jobs, which may still finish calls after the kill);
- a call cache that fails SQLite's integrity check after the kill (must be 0);
- processes of the work directory alive after the resume finished (orphans; must be 0);
- for INT and TERM, seconds from the signal to snakemake's exit, and whether it hung.

Used by `tests/reliability/test_kill_sweep.py` (1 point) and `bench/reliability.py kill`
(`make reliability-kill`: 10 points).
"""

from __future__ import annotations

import contextlib
import hashlib
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
from tests.reliability.llm_faults import REPO, model_config, upstream_server
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
ANSWER_DELAY_S = 0.4  # per taped answer: the model phases then take seconds, as they do
RUN_TIMEOUT_S = 900
#: how an interruption is sent: to snakemake alone, or to its process group (a terminal's Ctrl-C)
SIGNALS: dict[str, tuple[signal.Signals, bool]] = {
    "KILL": (signal.SIGKILL, False),
    "INT": (signal.SIGINT, True),
    "TERM": (signal.SIGTERM, False),
}
#: a run told to stop (INT, TERM) must have exited this many seconds later; the jobs running then
#: are short on the tiny corpus (snakemake lets them finish on SIGTERM)
STOP_BOUND_S = 120.0
#: left out of the comparison, by design: wall clocks, and Lucene's segment files, which carry
#: a random segment id per build (every ranking and cell read from them is compared)
UNSTABLE = ("results/logs/", "results/benchmarks/")
LUCENE_SEGMENTS = re.compile(r"^results/[^/]+/index/[^/]+/bm25/")
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
    repeated_calls: int = 0
    cache_corrupt: bool = False
    orphans: list[str] = field(default_factory=list)
    wall_s: float = 0.0

    @property
    def ok(self) -> bool:
        return (self.truthful and self.identical and self.repeated_calls == 0
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
        if not p.is_file() or rel.startswith(UNSTABLE) or LUCENE_SEGMENTS.match(rel):
            continue
        if p.suffix == ".jsonl":
            rows = [{k: v for k, v in r.items() if k != "latency_s"} for r in read_jsonl(p)]
            data = json.dumps(rows, sort_keys=True).encode()
        else:
            data = p.read_bytes()
        found[rel] = hashlib.sha256(data).hexdigest()
    return found


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


def complete_run(root: Path, after_resume: Callable[[], None] | None = None) -> tuple[int, str]:
    """The command; `after_resume` runs once `python -m srb resume` stopped the orphans."""
    out = []
    for i, cmd in enumerate(run_command(root)):
        proc = subprocess.run(cmd, cwd=root, env=env(), capture_output=True, text=True,
                              timeout=RUN_TIMEOUT_S)  # fmt: skip
        out.append(proc.stdout + proc.stderr)
        if proc.returncode != 0:
            return proc.returncode, "\n".join(out)
        if i == 0 and after_resume is not None:
            after_resume()
    return 0, "\n".join(out)


def interrupt(proc: subprocess.Popen, point: Point) -> None:
    """Send `point.signal`; for INT and TERM, wait up to STOP_BOUND_S for snakemake to exit."""
    signum, to_group = SIGNALS[point.signal]
    sent = time.monotonic()
    if to_group:
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
                interrupt(proc, point)
                break
            time.sleep(0.05)
    finally:
        if proc.poll() is None and not point.killed:
            proc.kill()
        proc.wait()
    point.jobs_done_before = log.read_text(errors="replace").count("Finished jobid")


def choose_points(
    n: int, seed: int, reference_log: str, signals: Sequence[str] = ("KILL",)
) -> list[Point]:
    """n points, phases in a seeded cycle, each a random start of one of the phase's rules
    (among the starts the uninterrupted run logged) and a random delay of 0-2 s; the points'
    interruptions cycle through `signals` (keys of SIGNALS)."""
    unknown = [s for s in signals if s not in SIGNALS]
    if unknown or not signals:
        raise ValueError(f"unknown interruption {unknown or signals}: one of {', '.join(SIGNALS)}")
    rng = random.Random(seed)
    starts = RULE_LINE.findall(reference_log)
    phases = [p for p, rules in PHASES.items() if any(r in starts for r in rules)]
    order = phases[:]
    rng.shuffle(order)
    points = []
    for i in range(n):
        phase = order[i % len(order)]
        rules = [r for r in PHASES[phase] if r in starts]
        rule = rng.choice(rules)
        points.append(Point(i + 1, phase, rule, rng.randint(1, starts.count(rule)),
                            round(rng.uniform(0.0, 2.0), 2), signals[i % len(signals)]))  # fmt: skip
    return points


@dataclass
class Sweep:
    reference_wall_s: float
    reference_outputs: int
    points: list[Point]


@contextlib.contextmanager
def taped_model(workdir: Path) -> Iterator[FaultProxy]:
    with upstream_server(workdir / "upstream-servers") as upstream:
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


def sweep(workdir: Path, n: int, seed: int = 0, signals: Sequence[str] = ("KILL",)) -> Sweep:
    workdir.mkdir(parents=True, exist_ok=True)
    with taped_model(workdir) as proxy:
        ref_root = workdir / "reference"
        ref_root.mkdir()
        write_sweep_config(ref_root, proxy.url)
        started = time.monotonic()
        rc, text = complete_run(ref_root)
        ref_wall = time.monotonic() - started
        if rc != 0:
            raise RuntimeError(f"the uninterrupted run failed:\n{text[-4000:]}")
        reference = outputs(ref_root)
        slow_tape(proxy)
        points = choose_points(n, seed, text, signals)
        for point in points:
            root = workdir / f"point-{point.index:02d}"
            root.mkdir()
            write_sweep_config(root, proxy.url)
            t0 = time.monotonic()
            earlier = Counter(proxy.stats.delivered)  # the reference's and earlier points'
            run_until_killed(root, point)
            point.cache_corrupt = not cache_intact(root)
            marks: dict[str, Counter] = {}

            def mark(marks: dict[str, Counter] = marks, earlier: Counter = earlier) -> None:
                # the orphans are stopped: what this point's run was answered is cached
                marks["delivered"] = proxy.stats.delivered - earlier
                marks["received"] = Counter(proxy.stats.received)

            rc, said = complete_run(root, mark)
            point.resume_returncode = rc
            point.resume_said = " ".join(
                line for line in said.splitlines() if line.startswith("srb resume")
            )[:300]
            point.wall_s = time.monotonic() - t0
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
        where = (f"SIG{p.signal} {p.rule} #{p.occurrence} +{p.delay_s:.1f} s "
                 f"({p.killed_at_s:.0f} s in)" if p.killed
                 else f"{p.rule} #{p.occurrence}: run ended first")  # fmt: skip
        stopped = ("-" if p.signal == "KILL" or not p.killed
                   else f"HUNG (> {STOP_BOUND_S:.0f} s)" if p.hung else f"{p.stop_s:.1f} s")  # fmt: skip
        same = "yes" if p.identical else f"NO ({len(p.missing)} missing, {len(p.differing)} differ)"
        rows.append(f"| {p.index} | {p.phase} | {where} | {stopped} | {p.jobs_done_before} | "
                    f"{p.resume_returncode} | {'yes' if p.truthful else 'NO'} | {same} | "
                    f"{p.repeated_calls} | {'no' if p.cache_corrupt else 'yes'} | "
                    f"{len(p.orphans)} | {'ok' if p.ok else 'FAILED'} |")  # fmt: skip
    return rows


def summary(result: Sweep) -> str:
    pts = result.points
    how = {p.signal for p in pts}
    name = {"KILL": "kill -9", "INT": "Ctrl-C (SIGINT)", "TERM": "SIGTERM"}
    label = " / ".join(name[h] for h in SIGNALS if h in how) or "kill -9"
    stopped = [p.stop_s for p in pts if p.signal != "KILL" and p.killed and not p.hung]
    stops = ""
    if how - {"KILL"}:
        stops = f", hung {sum(p.hung for p in pts)}"
        stops += f", stopped within {max(stopped):.0f} s" if stopped else ""
    return (f"{label} resumes: {sum(p.ok for p in pts)}/{len(pts)} identical "
            f"({sum(p.killed for p in pts)} interrupted mid-run{stops}), "
            f"untruthful exits {sum(not p.truthful for p in pts)}, "
            f"repeated completed calls {sum(p.repeated_calls for p in pts)}, "
            f"partial outputs accepted {sum(bool(p.differing) for p in pts)}, "
            f"corrupt caches {sum(p.cache_corrupt for p in pts)}, "
            f"orphans {sum(len(p.orphans) for p in pts)}")  # fmt: skip


def dump(result: Sweep) -> str:
    return yaml.safe_dump({"reference_wall_s": result.reference_wall_s,
                           "points": [vars(p) for p in result.points]}, sort_keys=False)  # fmt: skip
