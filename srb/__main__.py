"""Command line: `python -m srb <command>` for the steps people run by hand."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path


def _anchor(args: argparse.Namespace) -> int:
    from srb.anchor import format_rows, run_anchor, write_anchor_table

    rows = run_anchor(
        args.data,
        args.expected,
        {"encoder": args.encoder},
        args.threads,
        set(args.only) if args.only else None,
    )
    print(format_rows(rows))
    if args.out:
        out = Path(args.out)
        write_anchor_table(rows, out.with_suffix(".tsv"), out.with_suffix(".md"))
    failed = [r for r in rows if r["grade"] == "FAIL"]
    return 1 if failed else 0


def _build_default(args: argparse.Namespace) -> int:
    import json
    from dataclasses import replace

    from srb.data.canonical import write_canonical
    from srb.data.evidence_inference import load_evidence_inference

    corpus = load_evidence_inference(args.source, name=Path(args.out).name)
    manifest_file = Path(args.out, "manifest.json")
    if manifest_file.exists():  # keep the attribution fields written with the resource
        corpus = replace(corpus, manifest=json.loads(manifest_file.read_text()))
    write_canonical(corpus, args.out)
    print(f"{len(corpus.papers)} papers, {len(corpus.questions)} questions -> {args.out}")
    return 0


def _validate(args: argparse.Namespace) -> int:
    from srb.data.canonical import load_canonical

    corpus = load_canonical(args.directory)
    print(f"ok: {len(corpus.papers)} papers, {len(corpus.questions)} questions")
    return 0


def _stop_servers(args: argparse.Namespace) -> int:
    from srb.llm.server import stop_servers

    print(f"stopped {stop_servers(args.servers_dir)} server(s)")
    return 0


def _answer_file(root: Path, label: str) -> tuple[tuple[str, str, str], Path]:
    """'simple_rag/hybrid/native' | 'base' | 'direct_read' -> (cell, its answers file)."""
    if label in ("base", "direct_read"):
        found = sorted((root / label / "none").glob("*.jsonl"))
        if len(found) != 1:
            raise FileNotFoundError(f"expected one answers file under {root / label / 'none'}")
        return (label, "none", found[0].stem), found[0]
    parts = label.split("/")
    if len(parts) != 3:
        raise ValueError(f"cell {label!r}: expected system/modality/budget, base or direct_read")
    path = root.joinpath(*parts[:2], parts[2] + ".jsonl")
    if not path.is_file():
        raise FileNotFoundError(f"cell {label}: no answers at {path}")
    return (parts[0], parts[1], parts[2]), path


def _draw_pairs(args: argparse.Namespace) -> int:
    from srb.data.canonical import iter_jsonl
    from srb.votes import draw_pairs

    root = Path(args.answers)
    answers = dict(_answer_file(root, label) for label in args.cells)
    if len(answers) < 2:
        raise ValueError("draw-pairs needs at least two distinct cells")
    records = [r for _, r in iter_jsonl(Path(args.questions))]
    questions = {r["id"]: r["question"] for r in records}
    references = {r["id"]: r.get("gold_answer", "") for r in records}
    ballot = Path(args.out)
    key = ballot.with_name(ballot.stem + ".key.csv")
    n = draw_pairs(answers, questions, args.n, args.seed, ballot, key, references)
    print(f"{n} blinded pairs -> {ballot} (vote 1, 2 or tie); key -> {key} (keep it from raters)")
    return 0


def _unblind(args: argparse.Namespace) -> int:
    from srb.votes import unblind

    counts = unblind(args.ballot, args.key, args.out)
    print(
        f"{counts.written} votes -> {args.out} (set analysis.votes to this file); "
        f"{counts.unvoted} pairs left blank, {counts.missing} key pairs missing from the ballot"
    )
    return 0


def _resume(args: argparse.Namespace) -> int:
    from srb.resume import ResumeRefused, prepare_resume

    try:
        for line in prepare_resume(args.workdir):
            print(f"srb resume: {line}", file=sys.stderr)
    except ResumeRefused as exc:
        print(f"srb resume: {exc}", file=sys.stderr)
        return 3
    return 0


def _stop(args: argparse.Namespace) -> int:
    from srb.resume import stop_run

    stopped, lines = stop_run(args.workdir, args.wait)
    for line in lines:
        print(f"srb stop: {line}", file=sys.stderr)
    return 0 if stopped else 1


def _paper_cost(args: argparse.Namespace) -> int:
    from srb.paper_cost import report

    text = report(args.configfile, args.measured)
    print(text, end="")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text, encoding="utf-8")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["run"]:  # every later argument is snakemake's, options included
        from srb.run import run_workflow

        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
        return run_workflow(argv[1:])
    parser = argparse.ArgumentParser(prog="python -m srb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("anchor", help="SciFact retrieval anchor, graded against expected values")
    p.add_argument("--data", default="../shared/data/scifact")
    p.add_argument("--expected", default="config/anchors/scifact.yaml")
    p.add_argument("--only", nargs="*", help="condition names, e.g. bm25-flat")
    p.add_argument("--encoder", default="minilm")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--out", help="write OUT.tsv and OUT.md")
    p.set_defaults(func=_anchor)
    p = sub.add_parser("build-default-corpus", help="convert Evidence Inference into canonical")
    p.add_argument("source")
    p.add_argument("out")
    p.set_defaults(func=_build_default)
    p = sub.add_parser("validate-corpus", help="load and validate a canonical corpus directory")
    p.add_argument("directory")
    p.set_defaults(func=_validate)
    p = sub.add_parser("stop-servers", help="stop vLLM servers the workflow left running")
    p.add_argument("--servers-dir", default="cache/servers")
    p.set_defaults(func=_stop_servers)
    p = sub.add_parser(
        "resume", help="after a killed run: stop its orphaned jobs, remove its stale lock"
    )
    p.add_argument("--workdir", default=".")
    p.set_defaults(func=_resume)
    p = sub.add_parser(
        "stop", help="stop the run in this directory now (a plain SIGTERM waits for its jobs)"
    )
    p.add_argument("--workdir", default=".")
    p.add_argument("--wait", type=float, default=120.0, help="seconds to wait for it to exit")
    p.set_defaults(func=_stop)
    sub.add_parser(
        "run",
        help="snakemake ARGS in its own session, yielding the CPU to the model server "
        "(what `make run` calls; every argument after `run` goes to snakemake)",
        add_help=False,
    )
    p = sub.add_parser("draw-pairs", help="draw blinded A/B answer pairs for human votes")
    p.add_argument("--answers", required=True, help="results/<corpus>/answers/<synthesizer>")
    p.add_argument("--questions", required=True, help="results/<corpus>/corpus/questions.jsonl")
    p.add_argument("--cells", nargs="+", required=True,
                   help="system/modality/budget, base or direct_read (two or more)")  # fmt: skip
    p.add_argument("--n", type=int, default=40, help="pairs to draw (capped by what exists)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="ballot CSV; the key goes beside it (.key.csv)")
    p.set_defaults(func=_draw_pairs)
    p = sub.add_parser("unblind-votes", help="filled ballot + key -> votes CSV for analysis.votes")
    p.add_argument("ballot")
    p.add_argument("key")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_unblind)
    p = sub.add_parser(
        "paper-cost",
        help="jobs, resources, tokens and GPU-hours of a grid, from a finished small run's costs",
    )
    p.add_argument("--configfile", default="config/paper.yaml")
    p.add_argument(
        "--measured",
        default="results/evidence-inference-ccby",
        help="results/<corpus> of a finished run: its ingest logs and answers give the costs",
    )
    p.add_argument("--out", help="also write the Markdown report here")
    p.set_defaults(func=_paper_cost)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    from srb.data.schema import DataError

    try:
        return args.func(args)
    except (DataError, FileNotFoundError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
