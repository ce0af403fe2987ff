"""Theoria's BM25 sparse vectors: stored in SQLite, scored exactly as Lucene scores them.

The oracle is a real Lucene index of the same items searched by Lucene's own IndexSearcher
with Anserini's bag-of-words query and `BM25Similarity(0.9, 0.4)`: every score must be the same
float, and the hit sets the same. A hand-computed weight checks the formula without Lucene.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from srb.data.canonical import load_canonical
from srb.index.lucene import build_lucene_index
from srb.java import prepare_jvm
from srb.theoria import sparse

CORPUS = Path(__file__).resolve().parents[1] / "resources/corpora/evidence-inference-ccby"


def _store(items: list[tuple[str, str]]) -> tuple[sparse.SparseIndex, sqlite3.Connection]:
    conn = sqlite3.connect(":memory:")
    conn.executescript(sparse.SCHEMA)
    stats = sparse.write_sparse_vectors(conn, items, 0.9, 0.4)
    rows = list(conn.execute("SELECT item_id, norm, term_ids, freqs FROM bm25_vectors"))
    terms = list(conn.execute("SELECT term_id, term, idf FROM bm25_terms"))
    return sparse.load_sparse_index(rows, terms, stats), conn


def test_a_weight_computed_by_hand() -> None:
    """'cat cat dog' / 'dog bird': N=2, df(cat)=1, avgdl=2.5, |d1|=3 (lengths < 24 are exact)."""
    index, conn = _store([("d1", "cat cat dog"), ("d2", "dog bird")])
    idf = math.log(1 + (2 - 1 + 0.5) / (1 + 0.5))
    norm_inverse = 1 / (0.9 * (0.6 + 0.4 * 3 / 2.5))
    expected = idf - idf / (1 + 2 * norm_inverse)  # 0.46645...
    (hit,) = index.rank("cats", 10)  # Porter: cats -> cat
    assert hit[0] == "d1" and hit[1] == pytest.approx(expected, rel=1e-6)
    stored = dict(
        (iid, np.frombuffer(w, dtype=np.float32))
        for iid, w in conn.execute("SELECT item_id, weights FROM bm25_vectors")
    )
    assert stored["d1"].max() == pytest.approx(expected, rel=1e-6)
    assert index.rank("the of and", 10) == []  # stopwords only: nothing matches


def _items() -> list[tuple[str, str]]:
    """~400-character pieces of three default papers: many lengths, shared and rare terms."""
    items = []
    for paper in load_canonical(CORPUS).papers[:3]:
        text = paper.text
        for start in range(0, min(len(text), 24_000), 400):
            items.append((f"{paper.id}:{start}", text[start : start + 400]))
    return items


def _lucene_scores(index_dir: Path, query: str) -> dict[str, float]:
    from pyserini.analysis import get_lucene_analyzer
    from pyserini.pyclass import autoclass

    paths = autoclass("java.nio.file.Paths")
    reader = autoclass("org.apache.lucene.index.DirectoryReader").open(
        autoclass("org.apache.lucene.store.FSDirectory").open(paths.get(str(index_dir)))
    )
    searcher = autoclass("org.apache.lucene.search.IndexSearcher")(reader.getContext())
    searcher.setSimilarity(
        autoclass("org.apache.lucene.search.similarities.BM25Similarity")(0.9, 0.4)
    )
    generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
    query = generator.buildQuery("contents", get_lucene_analyzer(), query)
    top = searcher.search(query, 10_000)
    stored = searcher.storedFields()
    out = {stored.document(sd.doc).get("id"): sd.score for sd in top.scoreDocs}
    reader.close()
    return out


def test_scores_equal_lucenes_float_for_float(tmp_path: Path) -> None:
    prepare_jvm()
    items = _items()
    index, _ = _store(items)
    build_lucene_index(items, tmp_path / "lucene")
    corpus = load_canonical(CORPUS)
    queries = (
        [q.question for q in corpus.questions[:15]]
        + [
            "patients patients patients treated",  # a repeated term is one clause boosted by 3
            items[5][1][:200],  # a whole passage as the query
        ]
    )
    compared = 0
    for query in queries:
        expected = _lucene_scores(tmp_path / "lucene", query)
        ours = dict(index.rank(query, len(items)))
        assert ours.keys() == expected.keys(), query
        for iid, score in expected.items():
            assert ours[iid] == score, (query, iid)
            compared += 1
    assert compared > 500
