"""Reliability figures anyone can rerun, printed as one table.

Built so far:
- `inputs` (the default): the malformed-input catalogue (`tests/reliability/catalogue.py`):
  every case is run through the entry point a user would hit (the workflow or `python -m srb`)
  and must stop non-zero, with a message naming the file, the record and the field, leaving no
  output behind;
- `services -- COMMAND ...`: runs COMMAND (in a clean clone: `make run`) with a random canary
  as every API-key variable, lists every listening TCP socket of its process tree (sampled every
  2 s) and whether each is loopback, checks every command line sampled for text of the corpus
  (`--corpus`, the default's), then searches results/, cache/ and .snakemake/ for the canary
  (`tests/reliability/services.py`).
- `faults`: LLM faults through a fault-injecting proxy in front of a real vLLM server, each
  scenario a workflow run (`tests/reliability/llm_faults.py`): 5xx bursts, answers slower than
  the timeout, bodies cut or not JSON, empty choice lists, connection refused, a server that
  dies mid-run, judge answers whose JSON is cut or is prose.
- `kill`: kill -9 of `snakemake` at seeded random points of a whole run on the tiny corpus,
  each then resumed with the README's command (`tests/reliability/kill_sweep.py`); with
  `--signals INT` a Ctrl-C to its process group, with `--signals TERM` a SIGTERM, with
  `--signals STOP` `python -m srb stop`, after which the run must stop on its own within a
  bound (several: the points cycle through them); with
  `--grid stores`, the points fall in Mem0's and Theoria's ingests (Theoria's service up),
  their cells, Theoria's sequential evaluation, synthesis and judging; with `--grid server`, the
  units run on the workflow's own vLLM server (no tape), the points while it is up.

    python bench/reliability.py [inputs] [--only NAME ...] [--workdir DIR]
    python bench/reliability.py services [--interval S] [--corpus DIR] -- make run
    python bench/reliability.py faults [--only NAME ...] [--workdir DIR]
    python bench/reliability.py kill [--points N] [--seed S] [--signals KILL INT TERM STOP]
                                     [--grid units|stores|server] [--phases P ...]
                                     [--workdir DIR]
    python bench/reliability.py all [--points N] [--workdir DIR]   (make reliability)
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from tests.reliability.catalogue import CASES, run_case  # noqa: E402
from tests.reliability.services import (  # noqa: E402
    TextProbe,
    canary_env,
    canary_hits,
    corpus_texts,
    planted_canary,
    watch,
)

SUMMARIES: list[str] = []  # each part's one-line figure, printed together by `all`


def kill(
    points: int,
    seed: int,
    workdir: str | None,
    signals: Sequence[str] = ("KILL",),
    grid: str = "units",
    phases: Sequence[str] = (),
) -> int:
    """The kill -9 sweep (Ctrl-C / SIGTERM points with INT / TERM in `signals`): one table,
    one summary line."""
    from tests.reliability.kill_sweep import dump, summary, sweep, table

    root = Path(workdir or tempfile.mkdtemp(prefix="srb-kill-"))
    started = time.monotonic()
    result = sweep(root, points, seed, signals, grid, phases)
    print(f"uninterrupted run: {result.reference_wall_s:.0f} s, {result.reference_outputs} "
          f"output files compared")  # fmt: skip
    print("\n".join(table(result)))
    (root / "sweep.yaml").write_text(dump(result))
    print()
    print(f"{summary(result)} ({time.monotonic() - started:.0f} s; details in {root}/sweep.yaml)")
    SUMMARIES.append(summary(result))
    return 0 if all(p.ok for p in result.points) else 1


def faults(only: list[str] | None, workdir: str | None) -> int:
    """Every LLM fault scenario (or those named), one table."""
    from tests.reliability.llm_faults import SCENARIOS, run_all, summary, table

    names = tuple(s.name for s in SCENARIOS
                  if not only or any(o.lower() in s.name.lower() for o in only))  # fmt: skip
    root = Path(workdir or tempfile.mkdtemp(prefix="srb-faults-"))
    started = time.monotonic()
    ref, outcomes = run_all(root, names)
    print(f"fault-free run: {sum(ref.requests.values())} model calls, {ref.wall_s:.0f} s")
    print("\n".join(table(outcomes)))
    print()
    for o in outcomes:
        if o.message and o.scenario.expect == "fails":
            print(f"- {o.scenario.name}: {o.message.replace(str(root), '<workdir>')}")
    print()
    print(f"{summary(outcomes)} ({time.monotonic() - started:.0f} s; files under {root})")
    SUMMARIES.append(summary(outcomes))
    return 0 if all(o.ok for o in outcomes) else 1


DEFAULT_CORPUS = "resources/corpora/evidence-inference-ccby"


def services(command: list[str], interval: float, corpus: str = DEFAULT_CORPUS) -> int:
    """Listening sockets, corpus text on command lines and the planted canary of one run of
    `command` here."""
    if not command:
        print("services: give the command to run after --, e.g. -- make run", file=sys.stderr)
        return 2
    canary = planted_canary()
    probe = TextProbe(corpus_texts(Path(corpus)))
    watched = watch(command, Path.cwd(), canary_env(canary), interval, probe)
    print("| pid | process | address | port | loopback |")
    print("|---|---|---|---|---|")
    for lst in sorted(watched.listeners, key=lambda x: (x.process, x.pid, x.port)):
        print(f"| {lst.pid} | {lst.process} | {lst.address} | {lst.port} | "
              f"{'yes' if lst.loopback else 'NO'} |")  # fmt: skip
    wild = [lst for lst in watched.listeners if not lst.loopback]
    searched, hits = canary_hits(canary, [Path(d) for d in ("results", "cache", ".snakemake")])
    print()
    print(f"command: {' '.join(command)}: rc {watched.returncode} in {watched.wall_s / 60:.1f} min, "
          f"{watched.processes_seen} processes seen")  # fmt: skip
    print(f"services: {len(watched.listeners)} listening sockets from "
          f"{len({lst.pid for lst in watched.listeners})} processes, "
          f"{'loopback only' if not wild else f'{len(wild)} NOT on loopback'}")  # fmt: skip
    on_lines = watched.corpus_in_command_lines
    print(f"corpus text on a command line: {len(on_lines)} of {watched.command_lines_seen} "
          f"command lines ({len(probe.joined):,} characters of {corpus} probed)"
          + "".join(f"\n  pid {h.pid} {h.process}: {h.excerpt!r}" for h in on_lines))  # fmt: skip
    print(f"canary secret: found {len(hits)} times in {searched} files"
          + "".join(f"\n  {h}" for h in hits))  # fmt: skip
    return 0 if watched.returncode == 0 and not wild and not hits and not on_lines else 1


def main() -> int:
    argv = sys.argv[1:]
    if argv[:1] == ["services"]:
        parser = argparse.ArgumentParser(description=services.__doc__)
        parser.add_argument("--interval", type=float, default=2.0)
        parser.add_argument("--corpus", default=DEFAULT_CORPUS,
                            help="canonical corpus directory whose text must not reach a "
                                 "command line")  # fmt: skip
        parser.add_argument("command", nargs=argparse.REMAINDER)
        args = parser.parse_args(argv[1:])
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        return services(command, args.interval, args.corpus)
    if argv[:1] == ["faults"]:
        parser = argparse.ArgumentParser(description=faults.__doc__)
        parser.add_argument("--only", nargs="*", help="scenarios whose name contains one of these")
        parser.add_argument("--workdir", help="keep each scenario's files here")
        args = parser.parse_args(argv[1:])
        return faults(args.only, args.workdir)
    if argv[:1] == ["kill"]:
        parser = argparse.ArgumentParser(description=kill.__doc__)
        parser.add_argument("--points", type=int, default=10)
        parser.add_argument("--seed", type=int, default=0)
        parser.add_argument("--signals", nargs="+", default=["KILL"],
                            choices=["KILL", "INT", "TERM", "STOP"],
                            help="the points cycle through these: SIGKILL to snakemake "
                                 "(default), SIGINT to its process group (Ctrl-C), SIGTERM to "
                                 "snakemake, STOP = python -m srb stop")  # fmt: skip
        parser.add_argument("--grid", choices=["units", "stores", "server"], default="units",
                            help="units: the unit systems' whole run on the tiny corpus; "
                                 "stores: Mem0 and Theoria ingesting (Theoria's service up), "
                                 "their cells, the sequential evaluation, synthesis, judging; "
                                 "server: the units run on the workflow's own vLLM server, "
                                 "points while it is up")  # fmt: skip
        parser.add_argument("--phases", nargs="+", default=[],
                            help="only points in these of the grid's phases, e.g. --grid stores "
                                 "--phases ingest sequential")  # fmt: skip
        parser.add_argument("--workdir", help="keep each point's files here")
        args = parser.parse_args(argv[1:])
        return kill(args.points, args.seed, args.workdir, args.signals, args.grid, args.phases)
    if argv[:1] == ["all"]:
        parser = argparse.ArgumentParser(description="inputs, faults and the kill sweep")
        parser.add_argument("--points", type=int, default=10)
        parser.add_argument("--workdir", help="keep each part's files here")
        args = parser.parse_args(argv[1:])
        base = Path(args.workdir or tempfile.mkdtemp(prefix="srb-reliability-"))
        codes = [inputs(None, str(base / "inputs")), faults(None, str(base / "faults")),
                 kill(args.points, 0, str(base / "kill"))]  # fmt: skip
        print()
        print("\n".join(SUMMARIES))
        print(
            "services on loopback only / canary: python bench/reliability.py services -- make run"
        )
        return max(codes)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", help="run the cases whose name contains one of these")
    parser.add_argument("--workdir", help="keep each case's files here (default: a temp dir)")
    args = parser.parse_args(argv[1:] if argv[:1] == ["inputs"] else argv)
    return inputs(args.only, args.workdir)


def inputs(only: list[str] | None, workdir: str | None) -> int:
    """The malformed-input catalogue, one table."""
    root = Path(workdir or tempfile.mkdtemp(prefix="srb-reliability-"))
    cases = [c for c in CASES if not only or any(o.lower() in c.name.lower() for o in only)]
    print("| # | area | malformed input | exit | named | outputs left | message |")
    print("|---|---|---|---|---|---|---|")
    ok = 0
    started = time.monotonic()
    for i, case in enumerate(cases, start=1):
        o = run_case(case, root / f"case{i:02d}")
        ok += o.ok
        named = "yes" if not o.missing else f"NO: lacks {', '.join(o.missing)}"
        left = ", ".join(o.left) or "none"
        message = o.message.replace("|", "\\|").replace(str(root / f"case{i:02d}"), "<workdir>")
        print(f"| {i} | {case.area} | {case.name} | {o.returncode} | {named} | {left} | "
              f"{message} |", flush=True)  # fmt: skip
    print()
    SUMMARIES.append(f"malformed inputs: {ok}/{len(cases)} clear errors")
    print(f"malformed inputs: {ok}/{len(cases)} clear errors "
          f"({time.monotonic() - started:.0f} s; files under {root})")  # fmt: skip
    print("also: python bench/reliability.py faults | kill | services -- make run")
    return 0 if ok == len(cases) else 1


if __name__ == "__main__":
    sys.exit(main())
