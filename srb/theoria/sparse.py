"""Theoria's BM25 sparse vectors, stored in its SQLite file and scored as Lucene scores them.

The paper keeps "BM25 sparse vectors as SQLite BLOBs" beside the dense index and fuses the two
by RRF (k = 60). Here every item (claim and summary) is analysed by the same Lucene analyzer as
the workflow's BM25 index (Anserini's default: Porter stemming, English stopwords) and stored as
its terms, term frequencies, Lucene length norm and boost-1 BM25 weights. Scoring replays
Lucene 9's `BM25Similarity` step for step in float32 (idf, the 256-entry norm cache, the
`weight - weight / (1 + freq * normInverse)` form, double sums cast to float), so a query's
scores equal what Pyserini's searcher gives over the same items; `tests/test_theoria_sparse.py`
checks that against a real Lucene index. Only the analyzer needs the JVM, so the service starts
it on the first hybrid request, never for dense retrieval.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from srb.java import prepare_jvm

ANALYZER = "anserini-default (Porter stemming, English stopwords)"


class LuceneAnalyzer:
    """Anserini's default analyzer through Pyserini, plus Lucene's own length-norm codec."""

    def __init__(self) -> None:
        prepare_jvm()
        from pyserini.analysis import Analyzer, get_lucene_analyzer
        from pyserini.pyclass import autoclass

        self._analyzer = Analyzer(get_lucene_analyzer())
        self._small_float = autoclass("org.apache.lucene.util.SmallFloat")
        self._length_table: np.ndarray | None = None

    def terms(self, text: str) -> list[str]:
        return list(self._analyzer.analyze(text))

    def norm(self, length: int) -> int:
        """Lucene's one-byte length norm (`SmallFloat.intToByte4`), as an unsigned byte."""
        return int(self._small_float.intToByte4(int(length))) & 0xFF

    def norm_lengths(self) -> np.ndarray:
        """`BM25Similarity.LENGTH_TABLE`: the length each of the 256 norms stands for (256 JNI
        calls, made once per analyzer rather than per write and per load)."""
        if self._length_table is None:
            self._length_table = np.array(
                [self._small_float.byte4ToInt(_signed_byte(i)) for i in range(256)],
                dtype=np.float32,
            )
        return self._length_table


def _signed_byte(i: int) -> int:
    return i - 256 if i > 127 else i


@cache
def lucene_analyzer() -> LuceneAnalyzer:
    return LuceneAnalyzer()


def lucene_idf(df: np.ndarray, docs: int) -> np.ndarray:
    """`(float) Math.log(1 + (docCount - docFreq + 0.5D) / (docFreq + 0.5D))`."""
    df = np.asarray(df, dtype=np.float64)
    return np.log(1.0 + (docs - df + 0.5) / (df + 0.5)).astype(np.float32)


def norm_inverse_cache(
    length_table: np.ndarray, avgdl: np.float32, k1: float, b: float
) -> np.ndarray:
    """`cache[i] = 1f / (k1 * ((1 - b) + b * LENGTH_TABLE[i] / avgdl))`, all in float."""
    k1f, bf = np.float32(k1), np.float32(b)
    one = np.float32(1)
    return (one / (k1f * ((one - bf) + bf * length_table / avgdl))).astype(np.float32)


def term_scores(
    boost: float, idf: np.float32 | np.ndarray, freqs: np.ndarray, norm_inverse: Any
) -> np.ndarray:
    """`BM25Scorer.score`: weight - weight / (1f + freq * normInverse), weight = boost * idf."""
    weight = np.float32(boost) * np.float32(idf)
    return (weight - weight / (np.float32(1) + freqs.astype(np.float32) * norm_inverse)).astype(
        np.float32
    )


@dataclass(frozen=True)
class SparseIndex:
    """The stored vectors, inverted for scoring: term -> (item positions, freqs, norm inverses)."""

    item_ids: list[str]
    postings: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]
    idf: dict[str, np.float32]

    def rank(self, query: str, depth: int, analyzer: LuceneAnalyzer | None = None) -> list[Any]:
        """The top `depth` (item id, score) by BM25, ties by id, as Anserini's bag of words
        query orders them (a repeated query term is one clause boosted by its count)."""
        counts = Counter((analyzer or lucene_analyzer()).terms(query))
        total = np.zeros(len(self.item_ids), dtype=np.float64)
        matched = np.zeros(len(self.item_ids), dtype=bool)
        for term, count in counts.items():
            if term not in self.postings:
                continue
            items, freqs, norm_inverse = self.postings[term]
            total[items] += term_scores(count, self.idf[term], freqs, norm_inverse)
            matched[items] = True
        scores = total.astype(np.float32)
        hits = [(self.item_ids[i], float(scores[i])) for i in np.flatnonzero(matched)]
        hits.sort(key=lambda h: (-h[1], h[0]))
        return hits[:depth]


SCHEMA = """
CREATE TABLE IF NOT EXISTS bm25_terms (term_id INTEGER PRIMARY KEY, term TEXT NOT NULL UNIQUE,
    df INTEGER NOT NULL, idf REAL NOT NULL);
CREATE TABLE IF NOT EXISTS bm25_vectors (item_id TEXT PRIMARY KEY, length INTEGER NOT NULL,
    norm INTEGER NOT NULL, term_ids BLOB NOT NULL, freqs BLOB NOT NULL, weights BLOB NOT NULL);
"""


def write_sparse_vectors(
    conn: sqlite3.Connection,
    items: Sequence[tuple[str, str]],
    k1: float,
    b: float,
    analyzer: LuceneAnalyzer | None = None,
) -> dict[str, Any]:
    """Replace the stored vectors with those of `items` (id, text); returns the BM25 statistics.

    Called inside the caller's transaction, so the vectors always match the committed items.
    """
    analyzer = analyzer or lucene_analyzer()
    analysed = [(iid, Counter(analyzer.terms(text))) for iid, text in items]
    lengths = [sum(c.values()) for _, c in analysed]
    df = Counter(t for _, c in analysed for t in c)
    vocab = sorted(df)
    term_id = {t: i for i, t in enumerate(vocab)}
    docs = len(items)
    idf = lucene_idf(np.array([df[t] for t in vocab]), docs) if vocab else np.zeros(0, np.float32)
    avgdl = np.float32(sum(lengths) / docs) if docs else np.float32(0)
    cache_ = norm_inverse_cache(analyzer.norm_lengths(), avgdl, k1, b) if docs else None
    conn.execute("DELETE FROM bm25_terms")
    conn.execute("DELETE FROM bm25_vectors")
    conn.executemany(
        "INSERT INTO bm25_terms VALUES (?, ?, ?, ?)",
        [(i, t, df[t], float(idf[i])) for i, t in enumerate(vocab)],
    )
    rows = []
    for (iid, counts), length in zip(analysed, lengths, strict=True):
        terms = sorted(counts, key=term_id.__getitem__)
        ids = np.array([term_id[t] for t in terms], dtype=np.int32)
        freqs = np.array([counts[t] for t in terms], dtype=np.int32)
        norm = analyzer.norm(length)
        weights = term_scores(1.0, idf[ids], freqs, cache_[norm])
        rows.append((iid, length, norm, ids.tobytes(), freqs.tobytes(), weights.tobytes()))
    conn.executemany("INSERT INTO bm25_vectors VALUES (?, ?, ?, ?, ?, ?)", rows)
    return {
        "k1": k1,
        "b": b,
        "analyzer": ANALYZER,
        "docs": docs,
        "terms": len(vocab),
        "avgdl": float(avgdl),
    }


def load_sparse_index(
    rows: Sequence[tuple[Any, ...]],
    terms: Sequence[tuple[Any, ...]],
    stats: dict[str, Any],
    analyzer: LuceneAnalyzer | None = None,
) -> SparseIndex:
    """Invert stored `bm25_vectors` rows (item_id, norm, term_ids, freqs) for scoring."""
    analyzer = analyzer or lucene_analyzer()
    vocab = {int(i): (t, np.float32(idf)) for i, t, idf in terms}
    cache_ = norm_inverse_cache(
        analyzer.norm_lengths(), np.float32(stats["avgdl"]), stats["k1"], stats["b"]
    )
    lists: dict[str, list[tuple[int, int, np.float32]]] = {}
    item_ids = []
    for pos, (iid, norm, term_blob, freq_blob) in enumerate(rows):
        item_ids.append(iid)
        ids = np.frombuffer(term_blob, dtype=np.int32)
        freqs = np.frombuffer(freq_blob, dtype=np.int32)
        for i, f in zip(ids, freqs, strict=True):
            lists.setdefault(vocab[int(i)][0], []).append((pos, int(f), cache_[norm]))
    postings = {
        term: (
            np.array([p for p, _, _ in entries], dtype=np.int64),
            np.array([f for _, f, _ in entries], dtype=np.float32),
            np.array([n for _, _, n in entries], dtype=np.float32),
        )
        for term, entries in lists.items()
    }
    idf = {t: v for t, v in vocab.values()}
    return SparseIndex(item_ids, postings, idf)


__all__ = [
    "ANALYZER",
    "LuceneAnalyzer",
    "SparseIndex",
    "SCHEMA",
    "lucene_analyzer",
    "lucene_idf",
    "norm_inverse_cache",
    "term_scores",
    "write_sparse_vectors",
    "load_sparse_index",
]
