"""Ranking and restoration stage: per-modality rankings at a fixed depth, then budget cells."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from srb.atomic import write_json, write_jsonl
from srb.budget_check import BudgetError, BudgetVerdict, cell_verdict
from srb.data.canonical import iter_jsonl, load_canonical
from srb.ingest import read_units
from srb.retrieve import (
    Hit,
    parse_budget,
    restore_budget,
    restore_top_k,
    rrf,
    sort_hits,
)
from srb.systems import get_system

log = logging.getLogger(__name__)


def _questions(corpus_dir: str | Path) -> tuple[list[str], list[str]]:
    corpus = load_canonical(corpus_dir)
    return [q.id for q in corpus.questions], [q.question for q in corpus.questions]


def _write_ranking(path: str | Path, qids: Sequence[str], hits: dict[str, list[Hit]]) -> None:
    write_jsonl(path, ({"question_id": q, "hits": [[d, s] for d, s in hits[q]]} for q in qids))


def read_ranking(path: str | Path) -> dict[str, list[Hit]]:
    return {r["question_id"]: [(d, s) for d, s in r["hits"]] for _, r in iter_jsonl(Path(path))}


def rank_bm25(
    corpus_dir: str | Path,
    index_dir: str | Path,
    out: str | Path,
    depth: int,
    k1: float,
    b: float,
    threads: int = 1,
) -> None:
    from srb.index.lucene import BM25Searcher

    qids, texts = _questions(corpus_dir)
    searcher = BM25Searcher(index_dir, k1, b)
    hits = searcher.search(texts, qids, depth, threads)
    _write_ranking(out, qids, {q: sort_hits(h) for q, h in hits.items()})


def rank_dense(
    corpus_dir: str | Path,
    index_dir: str | Path,
    out: str | Path,
    depth: int,
    dense_cfg: dict[str, Any],
    threads: int = 1,
) -> None:
    from srb.index.dense import open_dense_searcher

    qids, texts = _questions(corpus_dir)
    searcher = open_dense_searcher(index_dir, dense_cfg, threads)
    hits = searcher.search(texts, qids, depth, dense_cfg.get("batch_size", 32))
    _write_ranking(out, qids, {q: sort_hits(h) for q, h in hits.items()})


def rank_hybrid(
    channel_files: Sequence[str | Path], out: str | Path, depth: int, k: int = 60
) -> None:
    """RRF over the enabled channels' rankings (retrieval.hybrid_channels; the doctor fails a
    hybrid that fuses fewer than both)."""
    runs = [read_ranking(f) for f in channel_files]
    if not runs:
        raise ValueError("hybrid ranking needs at least one channel")
    for f, run in zip(channel_files[1:], runs[1:], strict=True):
        if run.keys() != runs[0].keys():
            raise ValueError(f"{channel_files[0]} and {f} rank different question sets")
    fused = {q: rrf([run[q] for run in runs], k=k, depth=depth) for q in runs[0]}
    _write_ranking(out, list(runs[0]), fused)


def restore_cell(
    ranking_file: str | Path,
    units_file: str | Path,
    system: str,
    budget: str,
    mode: str,
    out: str | Path,
    native_file: str | Path | None = None,
    tolerance: float = 0.25,
    verdict_out: str | Path | None = None,
    gate: str = "fail",
    where: str = "",
) -> BudgetVerdict | None:
    """Write one retrieval cell: per question, the restored units, scores, spans and context.

    A budgeted cell is checked against its budget (srb.budget_check); its verdict goes to
    `verdict_out`, and with `gate: fail` a failing verdict stops the job naming `where`
    (corpus/system/modality/budget) and the numbers.
    """
    ranking = read_ranking(ranking_file)
    units = read_units(units_file)
    requested = parse_budget(budget)
    spec = get_system(system)
    verdict = None
    if requested is None:
        cells = [restore_top_k(q, h, units, spec.native_top_k, None) for q, h in ranking.items()]
    else:
        if mode == "calibrated" and native_file is None:
            raise ValueError("calibrated budgets need the native cell of the same system/modality")
        native = [r for _, r in iter_jsonl(Path(native_file))] if mode == "calibrated" else []
        cells, calibration = restore_budget(ranking, units, requested, mode, tolerance, native)
        lengths = [len(ranking[c.question_id]) for c in cells]
        verdict = cell_verdict(cells, lengths, requested, tolerance, calibration)
    short = [c for c in cells if c.top_k and len(c.hits) < c.top_k and not c.truncated]
    if short:
        log.warning(
            "%d questions got fewer units than top_k (ranking depth or corpus size)", len(short)
        )
    write_jsonl(out, (c.to_record(units) for c in cells))
    if verdict is None and verdict_out is not None:
        write_json(verdict_out, {"requested": None, "status": "native", "top_k": spec.native_top_k})
    if verdict is not None:
        log.info("budget %s: %s (%s)", budget, verdict.status, verdict.reason)
        if verdict_out is not None:
            write_json(verdict_out, verdict.to_dict())
        if verdict.failed and gate == "fail":
            raise BudgetError(
                f"budget gate: {where or system + '/' + budget}: {verdict.status}: "
                f"{verdict.reason} (budget_gate: warn records it instead of failing)"
            )
    return verdict
