"""Cost at scale: the workflow of a unit system and a store system on 49 -> 200 -> 819 papers.

Each size is a nested slice of the Evidence Inference train/validation set read from `../shared`
(the first N papers by id, and the questions whose papers all lie in them), written in the
canonical layout under `--workdir`, outside the project: that set's mixed licences forbid copying
it in. Each size runs the real workflow in its own working directory (so no cache carries over
from a smaller size) with `--cores`: prepare the corpus, build the units, the Lucene BM25 and
FAISS dense indexes, the doctor, rank and restore every modality x budget cell of `--systems`.
Per rule the benchmark files give the seconds summed over its jobs and the largest peak RSS; the
invocation's wall time and its largest process come from `/usr/bin/time -v`. Then the paper grid's
DAG (`config/paper.yaml`, every system, with this corpus in place of Paim and PTr) is built by a
dry run, timed, and its jobs counted.

The cost exponent of each rule is the slope of log seconds on log papers (least squares over the
sizes). Writes `<out>.tsv` (one row per size and rule), `<out>.md` (the table, the exponents, the
CPU) and `<out>.png` (log-log); exits non-zero if any run fails, naming its log.

    python bench/scale.py [--sizes 49 200 819] [--systems simple_rag] [--stores mem0] [--cores 2]
        [--workdir /tmp/srb-scale] [--out bench/results/scale]

`--stores mem0` adds one store system, through its real library and store (Mem0, local Qdrant):
its ingest, the BM25 index over its exported items, its doctor and its restored cells (dense and
hybrid), with `memory.mem0.infer: false`, so each ~6K-character chunk is stored as one memory and
no model is called. The extraction is left out because it is an LLM call per chunk, 2 to 3 min per
paper per system with the packaged 0.5B model on 2 CPU cores (days at 819 papers);
`python -m srb paper-cost` estimates it at paper scale from a finished small run.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from srb.data.canonical import write_canonical  # noqa: E402
from srb.data.evidence_inference import load_evidence_inference  # noqa: E402
from srb.data.schema import Corpus  # noqa: E402

DATA = REPO.parent / "shared" / "data" / "evidence-inference-trainval"
RULES = [
    "prepare_corpus",
    "build_units",
    "bm25_index",
    "dense_index",
    "doctor",
    "rank",
    "restore_context",
]
STORE_RULES = ["ingest_store", "doctor_store", "restore_store"]  # Mem0 has no native-only cell


def cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.partition(":")[2].strip()
    return "unknown CPU"


def nested_slice(corpus: Corpus, n: int, name: str) -> Corpus:
    """The first `n` papers by id and the questions answerable from them alone."""
    if n > len(corpus.papers):
        raise SystemExit(f"--sizes: {n} papers asked, the corpus has {len(corpus.papers)}")
    papers = sorted(corpus.papers, key=lambda p: p.id)[:n]
    ids = {p.id for p in papers}
    questions = tuple(q for q in corpus.questions if set(q.paper_ids) <= ids)
    return replace(corpus, name=name, papers=tuple(papers), questions=questions)


def write_config(
    path: Path, name: str, corpus_dir: Path, systems: list[str], stores: list[str], cores: int
) -> None:
    """The embedded default's grid (modalities, budgets, retrieval settings) on this corpus; the
    encoder gets every core since one system's index builds at a time. Store systems ingest the
    whole corpus (no slice), Mem0 without its LLM extraction."""
    config = {
        "corpora": [name],
        "corpus_sources": {name: {"loader": "canonical", "path": str(corpus_dir)}},
        "systems": systems,
        "memory": {"systems": stores, "papers": None, "mem0": {"infer": False}},
        "llm": {"systems": systems + stores},  # no LLM job runs: the targets are retrieval cells
        "dense": {"threads": cores},
        "bm25": {"threads": cores},
    }
    path.write_text(yaml.safe_dump(config))


def targets(name: str, systems: list[str], stores: list[str], config: dict) -> list[str]:
    out = [f"results/{name}/doctor/{s}.json" for s in systems + stores]
    for system in systems:
        for modality in config["modalities"]:
            out += [
                f"results/{name}/retrieval/{system}/{modality}/{b}.jsonl" for b in config["budgets"]
            ]
    from srb.systems import get_store_system

    for store in stores:
        for modality in get_store_system(store).modalities:
            out += [
                f"results/{name}/retrieval/{store}/{modality}/{b}.jsonl" for b in config["budgets"]
            ]
    return out


def snakemake(workdir: Path, configfiles: list[Path], *args: str) -> list[str]:
    return [
        sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
        "--directory", str(workdir), "--configfile", *map(str, configfiles), *args,
    ]  # fmt: skip


def run_logged(cmd: list[str], log: Path) -> tuple[float, float]:
    """Run under /usr/bin/time -v; (wall seconds, largest process's peak RSS in MiB)."""
    started = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"exit {proc.returncode}: {' '.join(cmd[:6])} ...; see {log}")
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", log.read_text())
    return wall, (int(rss.group(1)) / 1024 if rss else float("nan"))


def rule_costs(workdir: Path, name: str, rules: list[str]) -> dict[str, tuple[float, float, int]]:
    """rule -> (seconds summed over its jobs, largest max_rss MiB, jobs) from benchmark files."""
    costs = {}
    for rule in rules:
        files = sorted((workdir / "results" / "benchmarks" / rule / name).rglob("*.tsv"))
        files += sorted((workdir / "results" / "benchmarks" / rule).glob(f"{name}.tsv"))
        rows = [next(csv.DictReader(f.open(), delimiter="\t")) for f in files]
        if not rows:
            raise SystemExit(f"no benchmark file of rule {rule} under {workdir}/results/benchmarks")
        # Snakemake samples a job's memory as it runs: a job done in a second or two shows
        # only its launcher's, so the rule's peak is left out (NaN) unless a job ran 5 s
        sampled = [float(r["max_rss"]) for r in rows if float(r["s"]) >= 5 and r["max_rss"] != "-"]
        costs[rule] = (
            sum(float(r["s"]) for r in rows),
            max(sampled, default=float("nan")),
            len(rows),
        )
    return costs


def dag_build(workdir: Path, name: str, corpus_dir: Path, log: Path) -> tuple[float, int]:
    """Dry-run the paper grid with this corpus as its only corpus: (seconds, jobs planned)."""
    override = workdir / "paper_override.yaml"
    override.write_text(
        yaml.safe_dump(
            {
                "corpora": [name],
                "corpus_sources": {name: {"loader": "canonical", "path": str(corpus_dir)}},
            }
        )
    )
    cmd = snakemake(workdir, [REPO / "config" / "paper.yaml", override], "-n", "--forceall")
    wall, _ = run_logged(cmd, log)
    total = re.search(r"^total\s+(\d+)", log.read_text(), re.MULTILINE)
    if not total:
        raise SystemExit(f"no job count in the paper grid's dry run; see {log}")
    return wall, int(total.group(1))


def exponent(papers: list[int], seconds: list[float]) -> float:
    return float(np.polyfit(np.log(papers), np.log(seconds), 1)[0])


def write_figure(rows: list[dict], sizes: list[int], path: Path, rules: list[str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for series in [*rules, "wall"]:
        ys = [r["seconds"] for r in rows if r["rule"] == series]
        style = {"linewidth": 2.5, "color": "black"} if series == "wall" else {}
        label = f"{series} (k={exponent(sizes, ys):.2f})"
        ax.loglog(sizes, ys, marker="o", label=label, **style)
    ax.set_xlabel("papers (Evidence Inference train/val, nested slices)")
    ax.set_ylabel("seconds (a rule: summed over its jobs; wall: the run)")
    ax.set_title("srb workflow cost vs corpus size (log-log)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--sizes", nargs="+", type=int, default=[49, 200, 819])
    parser.add_argument("--systems", nargs="+", default=["simple_rag"])
    parser.add_argument(
        "--stores", nargs="*", default=["mem0"], help="store systems (mem0); none: --stores"
    )
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--workdir", default="/tmp/srb-scale")
    parser.add_argument("--out", default=str(REPO / "bench" / "results" / "scale"))
    args = parser.parse_args()

    full = load_evidence_inference(args.data, name="trainval")
    defaults = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    root = Path(args.workdir)
    rows: list[dict] = []
    rules = RULES + (STORE_RULES if args.stores else [])
    print(f"CPU: {cpu_model()}; --cores {args.cores}; systems {' '.join(args.systems)}; "
          f"stores {' '.join(args.stores) or 'none'}")  # fmt: skip
    for n in args.sizes:
        name = f"trainval-{n}"
        corpus = nested_slice(full, n, name)
        corpus_dir = root / "corpora" / name
        write_canonical(corpus, corpus_dir)
        workdir = root / f"run-{n}"
        workdir.mkdir(parents=True, exist_ok=True)
        if not (workdir / "config").exists():  # config paths (prompts) are relative to the run
            (workdir / "config").symlink_to(REPO / "config")
        config = workdir / "scale.yaml"
        write_config(config, name, corpus_dir, args.systems, args.stores, args.cores)
        configs = [REPO / "config" / "config.yaml", config]  # --configfile replaces the default
        cmd = snakemake(
            workdir, configs, "--cores", str(args.cores),
            *targets(name, args.systems, args.stores, defaults),
        )  # fmt: skip
        wall, peak = run_logged(cmd, workdir / "snakemake.log")
        costs = rule_costs(workdir, name, rules)
        dag_s, dag_jobs = dag_build(workdir, name, corpus_dir, workdir / "paper_dry_run.log")
        units = sum(
            1
            for s in args.systems + args.stores
            for _ in (workdir / "results" / name / "units" / f"{s}.jsonl").open()
        )
        common = {
            "papers": n,
            "characters": sum(len(p.text) for p in corpus.papers),
            "questions": len(corpus.questions),
            "units": units,
        }
        for rule, (seconds, rss, jobs) in costs.items():
            rows.append({**common, "rule": rule, "jobs": jobs, "seconds": seconds, "peak_mib": rss})
        rows.append({**common, "rule": "wall", "jobs": "", "seconds": wall, "peak_mib": peak})
        rows.append(
            {**common, "rule": "paper_dag_dry_run", "jobs": dag_jobs, "seconds": dag_s,
             "peak_mib": float("nan")}
        )  # fmt: skip
        print(
            f"{n:4d} papers, {common['units']} units, {common['questions']} questions: "
            f"wall {wall:.1f} s, largest process {peak:.0f} MiB; paper-grid dry run "
            f"{dag_s:.1f} s for {dag_jobs} jobs",
            flush=True,
        )

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.with_suffix(".tsv").open("w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), delimiter="\t")
        writer.writeheader()
        writer.writerows(rows)
    sizes = args.sizes
    lines = [
        f"CPU: {cpu_model()}; `--cores {args.cores}`; systems: {', '.join(args.systems)}; "
        f"store systems: {', '.join(args.stores) or 'none'} (Mem0 with `infer: false`); "
        f"grid: modalities {', '.join(defaults['modalities'])} x budgets "
        f"{', '.join(map(str, defaults['budgets']))}",
        "",
        "| rule | " + " | ".join(f"{n} papers" for n in sizes) + " | exponent k |",
        "|---|" + "---|" * (len(sizes) + 1),
    ]
    for series in [*rules, "wall", "paper_dag_dry_run"]:
        mine = [r for r in rows if r["rule"] == series]
        cells = [f"{r['seconds']:.1f} s" for r in mine]
        if series not in ("paper_dag_dry_run",):
            cells = [
                f"{c} / {r['peak_mib']:.0f} MiB" if r["peak_mib"] == r["peak_mib"] else c
                for c, r in zip(cells, mine, strict=True)
            ]
        k = exponent(sizes, [r["seconds"] for r in mine])
        lines.append(f"| {series} | " + " | ".join(cells) + f" | {k:.2f} |")
    first = [r for r in rows if r["rule"] == "wall"]
    lines += [
        "",
        "seconds are summed over the rule's jobs; MiB is the largest peak RSS Snakemake sampled"
        " (left out for rules whose jobs all ran under 5 s); the wall row's MiB is the largest"
        " process of the run (`/usr/bin/time -v`).",
        "",
        "papers / characters / questions / units: "
        + "; ".join(
            f"{r['papers']} / {r['characters']:,} / {r['questions']} / {r['units']:,}"
            for r in first
        ),
    ]
    out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    write_figure(rows, sizes, out.with_suffix(".png"), rules)
    print("\n".join(lines))
    print(json.dumps({"tsv": str(out.with_suffix(".tsv")), "png": str(out.with_suffix(".png"))}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
