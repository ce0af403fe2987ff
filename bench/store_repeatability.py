"""Store systems rebuilt from the same model answers: do their cells come back the same?

In a work directory where the workflow has completed (warm call cache), each store system's
ingest is forced `--rebuilds` times, with its restored cells as the only other targets, exactly
what `snakemake --forceall` does to it. After each rebuild:
- model calls made (new rows in the call cache; must be 0 on a warm cache),
- whether the exported items file is byte-identical to the one before the first rebuild,
- per cell, how many questions got the same restored context (what the synthesizer reads), the
  same unit set in any order, and the mean Jaccard of the unit sets (srb/repeatability.py).

A system whose items are identical but whose cells move (Hindsight) makes new synthesis calls
after a re-ingest: its store is not a function of its model answers alone.

    python bench/store_repeatability.py [--workdir DIR] [--systems hindsight mem0] [--rebuilds 2]

The work directory's stores and cells are replaced by the last rebuild's: run it in a copy
(`git clone` + `make run`) when the current results matter. Writes
bench/results/store_repeatability.{md,json}; exits 0 when every rebuild ran.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.llm_layer import platform_cpu_model  # noqa: E402
from srb.repeatability import compare_cells  # noqa: E402

CALL_CACHE = Path("cache/llm-calls.sqlite")


def md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def calls_since(workdir: Path, since: float) -> int:
    """Model answers the call cache gained since `since`."""
    path = workdir / CALL_CACHE
    if not path.is_file():
        raise FileNotFoundError(
            f"{path}: no call cache (run the workflow in {workdir} first; a shared_storage "
            "cache directory is not read by this bench)"
        )
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return conn.execute("select count(*) from calls where created > ?", (since,)).fetchone()[0]


def cell_files(workdir: Path, corpus: str, system: str) -> list[Path]:
    root = workdir / "results" / corpus / "retrieval" / system
    cells = sorted(root.rglob("*.jsonl"))
    if not cells:
        raise FileNotFoundError(f"{root}: no restored cells; run the workflow in {workdir} first")
    return cells


def rebuild(workdir: Path, corpus: str, system: str, cells: list[Path], cores: int, log: Path
            ) -> float:  # fmt: skip
    units = f"results/{corpus}/units/{system}.jsonl"
    cmd = [
        sys.executable, "-m", "snakemake", "--snakefile", str(workdir / "Snakefile"),
        "--directory", str(workdir), "--cores", str(cores), "--forcerun", units, "--",
        *(str(c.relative_to(workdir)) for c in cells),
    ]  # fmt: skip
    started = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=workdir)
    if proc.returncode != 0:
        raise SystemExit(f"{system}: the forced re-ingest exited {proc.returncode}; see {log}")
    return time.perf_counter() - started


def measure(workdir: Path, corpus: str, system: str, rebuilds: int, cores: int, scratch: Path
            ) -> list[dict[str, Any]]:  # fmt: skip
    cells = cell_files(workdir, corpus, system)
    cell_root = workdir / "results" / corpus / "retrieval" / system
    reference = scratch / system / "reference"
    shutil.copytree(cell_root, reference, ignore=shutil.ignore_patterns("*.json"))
    items = workdir / "results" / corpus / "units" / f"{system}.jsonl"
    items_md5 = md5(items)
    rows = []
    for n in range(1, rebuilds + 1):
        since = time.time()
        wall = rebuild(workdir, corpus, system, cells, cores, scratch / f"{system}-{n}.log")
        changes = compare_cells(reference, cell_root)
        questions = sum(c.questions for c in changes)
        row = {
            "system": system,
            "rebuild": n,
            "wall_s": round(wall, 1),
            "model_calls": calls_since(workdir, since),
            "items_identical": md5(items) == items_md5,
            "cells": len(changes),
            "cells_identical": sum(c.identical for c in changes),
            "questions": questions,
            "same_context": sum(c.same_context for c in changes),
            "same_set": sum(c.same_set for c in changes),
            "mean_jaccard": round(
                sum(c.mean_jaccard * c.questions for c in changes) / max(1, questions), 4
            ),  # fmt: skip
            "per_cell": [c.to_dict() for c in changes],
        }
        rows.append(row)
        print(table_row(row), flush=True)
    return rows


HEADER = (
    "| system | rebuild | wall s | model calls | items identical | cells identical | "
    "same context | same unit set | mean Jaccard |\n|---|---|---|---|---|---|---|---|---|"
)


def table_row(r: dict[str, Any]) -> str:
    return (
        f"| {r['system']} | {r['rebuild']} | {r['wall_s']} | {r['model_calls']} | "
        f"{'yes' if r['items_identical'] else 'no'} | {r['cells_identical']}/{r['cells']} | "
        f"{r['same_context']}/{r['questions']} | {r['same_set']}/{r['questions']} | "
        f"{r['mean_jaccard']:.3f} |"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--workdir", type=Path, default=REPO)
    parser.add_argument("--systems", nargs="+", help="default: memory.systems of the config")
    parser.add_argument("--rebuilds", type=int, default=2)
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results")
    args = parser.parse_args()
    workdir = args.workdir.resolve()
    config = yaml.safe_load((workdir / "config" / "config.yaml").read_text())
    systems = args.systems or config["memory"]["systems"]
    cpu = platform_cpu_model()
    print(f"CPU: {cpu}; work directory {workdir}; {args.rebuilds} rebuild(s) per system")
    print(HEADER)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="srb-repeat-") as tmp:
        for corpus in config["corpora"]:
            for system in systems:
                rows += measure(workdir, corpus, system, args.rebuilds, args.cores,
                                Path(tmp) / corpus)  # fmt: skip
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "store_repeatability.json").write_text(
        json.dumps({"cpu": cpu, "rebuilds": args.rebuilds, "rows": rows}, indent=1) + "\n"
    )
    lines = [f"Measured on {cpu}; each row is one forced re-ingest on a warm call cache.", "",
             HEADER, *map(table_row, rows)]  # fmt: skip
    (args.out / "store_repeatability.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
