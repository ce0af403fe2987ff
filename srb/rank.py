"""Ranking and restoration stage: per-modality rankings at a fixed depth, then budget cells."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from srb.atomic import write_json, write_jsonl
from srb.budget_check import BudgetVerdict, apply_gate, cell_verdict
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


def rank_system(
    corpus_dir: str | Path,
    outputs: Mapping[str, str | Path],
    depth: int,
    bm25_index: str | Path | None = None,
    bm25_params: Mapping[str, float] | None = None,
    dense_index: str | Path | None = None,
    dense_cfg: Mapping[str, Any] | None = None,
    hybrid_channels: Sequence[str] = ("bm25", "dense"),
    rrf_k: int = 60,
    threads: int = 1,
) -> None:
    """Every requested ranking of one system in one process: `outputs` maps a modality (bm25,
    dense, hybrid) to its file. One JVM start and one encoder load serve all of them; hybrid is
    RRF over the enabled channels' rankings at the same depth."""
    qids, texts = _questions(corpus_dir)
    channels = set(outputs) - {"hybrid"}
    if "hybrid" in outputs:
        channels |= set(hybrid_channels)
    runs: dict[str, dict[str, list[Hit]]] = {}
    if "bm25" in channels:
        from srb.index.lucene import BM25Searcher

        if bm25_index is None or bm25_params is None:
            raise ValueError("a bm25 ranking needs the Lucene index and its k1/b")
        searcher = BM25Searcher(bm25_index, bm25_params["k1"], bm25_params["b"])
        found = searcher.search(texts, qids, depth, threads)
        runs["bm25"] = {q: sort_hits(found[q]) for q in qids}
    if "dense" in channels:
        from srb.index.dense import open_dense_searcher

        if dense_index is None or dense_cfg is None:
            raise ValueError("a dense ranking needs the FAISS index and the dense config")
        searcher = open_dense_searcher(dense_index, dense_cfg, threads)
        found = searcher.search(texts, qids, depth, dense_cfg.get("batch_size", 32))
        runs["dense"] = {q: sort_hits(found[q]) for q in qids}
    if "hybrid" in outputs:
        fused = [runs[c] for c in hybrid_channels]
        if not fused:
            raise ValueError("hybrid ranking needs at least one channel")
        runs["hybrid"] = {q: rrf([run[q] for run in fused], k=rrf_k, depth=depth) for q in qids}
    for modality, path in outputs.items():
        _write_ranking(path, qids, runs[modality])
        log.info("%s ranking: %d questions at depth %d -> %s", modality, len(qids), depth, path)


def restore_cells(
    ranking_file: str | Path,
    units_file: str | Path,
    system: str,
    budgets: Sequence[str],
    mode: str,
    cell_outs: Sequence[str | Path],
    verdict_outs: Sequence[str | Path],
    tolerance: float = 0.25,
    gate: str = "fail",
    where: str = "",
) -> dict[str, BudgetVerdict | None]:
    """Write every budget's cell of one system/modality, each with its budget verdict.

    The native restoration (the system's own top_k) is computed once and is what calibrated
    budgets derive their top_k from. Each budgeted cell is checked against its budget
    (srb.budget_check); with `gate: fail` off-budget cells stop the job after every cell and
    verdict is written, naming `where` (corpus/system/modality), each budget and the numbers.
    """
    ranking = read_ranking(ranking_file)
    units = read_units(units_file)
    spec = get_system(system)
    native = [restore_top_k(q, h, units, spec.native_top_k, None) for q, h in ranking.items()]
    native_records = [c.to_record(units) for c in native]
    verdicts: dict[str, BudgetVerdict | None] = {}
    for budget, cell_out, verdict_out in zip(budgets, cell_outs, verdict_outs, strict=True):
        requested = parse_budget(budget)
        if requested is None:
            write_jsonl(cell_out, native_records)
            write_json(verdict_out, {"requested": None, "status": "native",
                                     "top_k": spec.native_top_k})  # fmt: skip
            verdicts[budget] = None
            continue
        cells, calibration = restore_budget(
            ranking, units, requested, mode, tolerance, native_records
        )
        verdict = cell_verdict(
            cells, [len(ranking[c.question_id]) for c in cells], requested, tolerance, calibration
        )
        write_jsonl(cell_out, (c.to_record(units) for c in cells))
        write_json(verdict_out, verdict.to_dict())
        log.info("budget %s: %s (%s)", budget, verdict.status, verdict.reason)
        verdicts[budget] = verdict
    apply_gate(verdicts, gate, where or system)
    return verdicts
