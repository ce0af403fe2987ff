"""Retrieval-correctness anchor: BM25, dense and hybrid on BEIR SciFact, graded Pyserini-2CR style.

If our BM25 does not reproduce the published 0.6789 nDCG@10, nothing built on it can be trusted.
Metrics come from pytrec_eval (trec_eval's own code), never from a hand-written formula; each
condition is graded OK when within the YAML's tolerance of its expected value, else FAIL.
"""

from __future__ import annotations

import csv
import gzip
import json
import logging
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from srb.atomic import atomic_write
from srb.retrieve import Hit, rrf, sort_hits
from srb.tables import markdown_table

log = logging.getLogger(__name__)

Run = dict[str, list[Hit]]


@dataclass(frozen=True)
class SciFact:
    doc_ids: list[str]
    doc_texts: list[str]  # title + " " + text: the BEIR "flat" contents Pyserini indexes
    qids: list[str]
    queries: list[str]
    qrels: dict[str, dict[str, int]]


def load_scifact(root: str | Path) -> SciFact:
    root = Path(root)
    if not (root / "corpus.jsonl.gz").is_file():
        raise FileNotFoundError(f"SciFact not found at {root} (expected corpus.jsonl.gz)")
    doc_ids, doc_texts = [], []
    with gzip.open(root / "corpus.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            rec = json.loads(line)
            doc_ids.append(rec["_id"])
            doc_texts.append(f"{rec.get('title', '')} {rec['text']}".strip())
    qids, queries = [], []
    with gzip.open(root / "topics.beir-v1.0.0-scifact.test.tsv.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            qid, text = line.rstrip("\n").split("\t", 1)
            qids.append(qid)
            queries.append(text)
    qrels: dict[str, dict[str, int]] = {}
    for line in (root / "qrels.beir-v1.0.0-scifact.test.txt").read_text().splitlines():
        qid, _, docid, rel = line.split()
        qrels.setdefault(qid, {})[docid] = int(rel)
    return SciFact(doc_ids, doc_texts, qids, queries, qrels)


def remove_self_hits(run: Run) -> Run:
    """Pyserini's BEIR runs drop a hit whose doc id equals the query id (--remove-query)."""
    return {q: [h for h in hits if h[0] != q] for q, hits in run.items()}


def evaluate(run: Run, qrels: dict[str, dict[str, int]]) -> dict[str, float]:
    """Mean nDCG@10 and R@100 over the judged queries, by pytrec_eval."""
    import pytrec_eval

    evaluator = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10", "recall.100"})
    per_query = evaluator.evaluate(
        {q: {d: s for d, s in hits} for q, hits in run.items() if q in qrels}
    )
    n = len(qrels)  # trec_eval -c: a judged query without results counts as 0
    return {
        "nDCG@10": sum(v["ndcg_cut_10"] for v in per_query.values()) / n,
        "R@100": sum(v["recall_100"] for v in per_query.values()) / n,
    }


def bm25_run(data: SciFact, workdir: Path, depth: int, k1: float, b: float, threads: int) -> Run:
    from srb.index.lucene import BM25Searcher, build_lucene_index

    index = workdir / "bm25"
    build_lucene_index(zip(data.doc_ids, data.doc_texts, strict=True), index, threads)
    hits = BM25Searcher(index, k1, b).search(data.queries, data.qids, depth, threads)
    return {q: sort_hits(h) for q, h in hits.items()}


def dense_run(data: SciFact, depth: int, dense_cfg: dict[str, Any], threads: int) -> Run:
    from srb.index.dense import Encoder, build_faiss_index

    encoder = Encoder(
        dense_cfg.get("encoder", "minilm"), threads=threads, cache_path=dense_cfg.get("cache")
    )
    batch = dense_cfg.get("batch_size", 32)
    vectors = encoder.encode(data.doc_texts, batch_size=batch, progress=True)
    index = build_faiss_index(vectors, dense_cfg.get("index", "flat"), dense_cfg.get("hnsw_m", 32))
    scores, idx = index.search(encoder.encode(data.queries, batch_size=batch), depth)
    return {
        q: sort_hits([(data.doc_ids[j], float(s)) for j, s in zip(idx[r], scores[r], strict=True)])
        for r, q in enumerate(data.qids)
    }


def grade(measured: float, expected: float | None, tolerance: float) -> str:
    if expected is None:
        return "NEW"
    return "OK" if abs(measured - expected) <= tolerance else "FAIL"


def run_anchor(
    data_dir: str | Path,
    expected_yaml: str | Path,
    dense_cfg: dict[str, Any],
    threads: int = 2,
    only: set[str] | None = None,
) -> list[dict[str, Any]]:
    """Run every condition in the YAML (or those in `only`) and grade each metric."""
    spec = yaml.safe_load(Path(expected_yaml).read_text())
    tolerance = float(spec.get("tolerance", 0.0005))
    depth = int(spec.get("depth", 1000))
    data = load_scifact(data_dir)
    runs: dict[str, Run] = {}
    rows = []
    with tempfile.TemporaryDirectory(prefix="srb-scifact-") as tmp:
        builders: dict[str, Callable[[], Run]] = {
            "bm25": lambda: bm25_run(
                data, Path(tmp), depth, spec["bm25"]["k1"], spec["bm25"]["b"], threads
            ),
            "dense": lambda: dense_run(data, depth, dense_cfg, threads),
            "hybrid": lambda: {
                q: rrf([runs["bm25"][q], runs["dense"][q]], k=spec.get("rrf_k", 60), depth=depth)
                for q in data.qids
            },
        }
        for condition in spec["conditions"]:
            name, modality = condition["name"], condition["modality"]
            if only and name not in only:
                continue
            if modality == "hybrid":
                for dep in ("bm25", "dense"):
                    if dep not in runs:
                        runs[dep] = builders[dep]()
            started = time.perf_counter()
            if modality not in runs:
                runs[modality] = builders[modality]()
            seconds = time.perf_counter() - started
            metrics = evaluate(remove_self_hits(runs[modality]), data.qrels)
            for metric, value in metrics.items():
                expected = condition.get("expected", {}).get(metric)
                rows.append(
                    {
                        "condition": name,
                        "metric": metric,
                        "measured": round(value, 4),
                        "expected": expected,
                        "grade": grade(value, expected, tolerance),
                        "source": condition.get("source", ""),
                        "seconds": round(seconds, 1),
                    }
                )
                log.info(
                    "%s %s %.4f expected %s -> %s", name, metric, value, expected, rows[-1]["grade"]
                )
    return rows


COLUMNS = ["condition", "metric", "measured", "expected", "grade", "source", "seconds"]


def write_anchor_table(rows: list[dict[str, Any]], tsv: str | Path, md: str | Path) -> None:
    with atomic_write(tsv) as fh:
        writer = csv.DictWriter(fh, fieldnames=COLUMNS, delimiter="\t", lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    with atomic_write(md) as fh:
        fh.write("# Retrieval anchor: BEIR SciFact (test, 300 queries)\n\n")
        fh.write("Graded by pytrec_eval; OK = within tolerance of the expected value.\n\n")
        fh.write(markdown_table(rows, COLUMNS))


def format_rows(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'condition':<16} {'metric':<8} {'measured':>8} {'expected':>8}  grade"]
    for r in rows:
        exp = "-" if r["expected"] is None else f"{r['expected']:.4f}"
        lines.append(
            f"{r['condition']:<16} {r['metric']:<8} {r['measured']:>8.4f} {exp:>8}  {r['grade']}"
        )
    return "\n".join(lines)
