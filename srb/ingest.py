"""Ingestion stage: units per system, and the BM25 and dense indices over them.

Each step writes an ingest log with the counts it produced; the doctor later compares the
stores against these logs (a store that silently holds nothing is the paper's first failure).
"""

from __future__ import annotations

import logging
import statistics
from pathlib import Path
from typing import Any

from srb.atomic import write_json, write_jsonl
from srb.data.canonical import iter_jsonl, load_canonical
from srb.systems import get_system
from srb.units import Unit, make_units, unit_from_dict

log = logging.getLogger(__name__)


def build_units(
    corpus_dir: str | Path, system: str, units_file: str | Path, ingest_log: str | Path
) -> list[Unit]:
    spec = get_system(system)
    corpus = load_canonical(corpus_dir)
    units = make_units(corpus.papers, spec.granularity, spec.unit_chars, spec.overlap)
    if not units:
        raise ValueError(f"system {system}: no units produced from {corpus_dir}")
    write_jsonl(units_file, (u.to_dict() for u in units))
    lengths = [len(u.text) for u in units]
    write_json(
        ingest_log,
        {
            "system": system,
            "granularity": spec.granularity,
            "unit_chars": spec.unit_chars,
            "overlap": spec.overlap,
            "n_papers": len(corpus.papers),
            "n_papers_with_units": len({u.paper_id for u in units}),
            "n_units": len(units),
            "mean_unit_chars": statistics.fmean(lengths),
            "max_unit_chars": max(lengths),
        },
    )
    log.info("%s: %d units from %d papers", system, len(units), len(corpus.papers))
    return units


def read_units(units_file: str | Path) -> dict[str, Unit]:
    return {rec["id"]: unit_from_dict(rec) for _, rec in iter_jsonl(Path(units_file))}


def build_bm25(units_file: str | Path, index_dir: str | Path, threads: int = 1) -> int:
    from srb.index.lucene import build_lucene_index

    units = read_units(units_file)
    return build_lucene_index(((u.id, u.text) for u in units.values()), index_dir, threads)


def build_dense(
    units_file: str | Path, index_dir: str | Path, dense_cfg: dict[str, Any], threads: int = 1
) -> int:
    from srb.index.dense import Encoder, build_faiss_index, save_dense_index

    units = list(read_units(units_file).values())
    encoder = Encoder(
        dense_cfg.get("encoder", "minilm"), threads=threads, cache_path=dense_cfg.get("cache")
    )
    vectors = encoder.encode(
        [u.text for u in units], batch_size=dense_cfg.get("batch_size", 32), progress=True
    )
    log.info(
        "%d units: %d encoded with %s, %d from the embedding cache",
        len(units),
        encoder.encoded,
        encoder.path,
        len(units) - encoder.encoded,
    )
    kind = dense_cfg.get("index", "flat")
    index = build_faiss_index(vectors, kind, dense_cfg.get("hnsw_m", 32))
    save_dense_index(
        index,
        [u.id for u in units],
        index_dir,
        {"encoder": encoder.spec, "dim": int(vectors.shape[1]), "kind": kind},
    )
    return len(units)
