"""BM25Searcher's bulk path against Pyserini itself, on a small real Lucene index.

Every comparison runs the real JVM: Pyserini's plain per-query `LuceneSearcher.search` (the
independent path), Pyserini's batch search (the path BM25Searcher used before), Anserini's own
ScoreTiesAdjusterReranker and Java's Float.parseFloat.
"""

from __future__ import annotations

import logging
from fractions import Fraction

import numpy as np
import pytest

from srb.index.lucene import (
    BM25Searcher,
    _adjust_ties,
    _float32,
    _nearest_float32,
    build_lucene_index,
)

pytestmark = pytest.mark.integration

TEXTS = [
    "Aspirin lowers the risk of heart attack in adults over fifty.",
    "Daily aspirin use increases gastrointestinal bleeding.",
    "Statins reduce cholesterol and cardiovascular events.",
    "High cholesterol is a risk factor for heart disease.",
    "Regular exercise improves insulin sensitivity.",
    "Insulin resistance precedes type 2 diabetes.",
    "Metformin is the first-line treatment for type 2 diabetes.",
    "Vitamin D supplements do not prevent fractures in older adults.",
    "Calcium intake and bone density in postmenopausal women.",
    "Smoking causes lung cancer and chronic bronchitis.",
    "E-cigarettes deliver nicotine without combustion.",
    "Air pollution is linked to asthma in children.",
    "Measles vaccination prevents outbreaks in schools.",
    "Vaccines do not cause autism, large cohort studies show.",
    "Antibiotic resistance spreads through horizontal gene transfer.",
    "Gut microbiota composition changes with diet.",
    "A high-fibre diet feeds beneficial gut bacteria.",
    "Sleep deprivation impairs memory consolidation.",
    "Caffeine improves alertness but disrupts sleep.",
    "Mediterranean diet lowers cardiovascular mortality.",
    "Red meat consumption and colorectal cancer risk.",
    "Sugar-sweetened beverages raise obesity risk in children.",
    "Obesity is associated with type 2 diabetes and heart disease.",
    "Tumour suppressor p53 regulates the cell cycle.",
    "BRCA1 mutations increase breast cancer risk.",
    "CRISPR enables targeted gene editing in human cells.",
    "Stem cells can differentiate into cardiac muscle cells.",
    "Telomere shortening accompanies cellular ageing.",
    "Cell cell cell: repeated terms in one short text.",
    "Influenza virus mutates its surface proteins every season.",
    "Hand washing reduces hospital infections.",
    "Malaria parasites are transmitted by Anopheles mosquitoes.",
    "Zinc lozenges shorten the common cold.",
    "Omega-3 fatty acids and depression.",
    "Mindfulness training reduces anxiety symptoms.",
    "Müller's café study: naïve résumé of coffee and heart health.",
    "Καφές και καρδιά: μελέτη στην Ελλάδα.",
    "咖啡 与 心脏 健康 的 研究",
    "Coffee ☕ and the heart ❤ — an emoji-laden abstract.",
    "Ärzte empfehlen Bewegung gegen Diabetes.",
]
DUPLICATE = "Identical abstract about aspirin and heart attack prevention."

QUERIES = {
    "aspirin": "aspirin",
    "heart": "heart attack risk",
    "diabetes": "type 2 diabetes insulin",
    "dup": "identical abstract aspirin prevention",
    "cells": "cell cell cells",
    "long": "does a mediterranean diet with red meat and sugar lower heart disease and cancer "
    "risk in adults and children",
    "cafe": "café naïve résumé",
    "greek": "καρδιά",
    "chinese": "咖啡 心脏",
    "emoji": "☕ ❤",
    "umlaut": "Ärzte Bewegung",
    "punct": "e-cigarettes? (nicotine) -- combustion!!",
    "stop": "the of and to a",
    "none": "zyzzyva quux",
    "empty": "",
    "case": "ASPIRIN Heart",
}


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    docs = [(f"d{i}", text) for i, text in enumerate(TEXTS)]
    # Exact duplicates tie; their ids sort differently as strings and as numbers (d10 < d9).
    docs += [(doc_id, DUPLICATE) for doc_id in ["dup-b", "dup-a", "dup-10", "dup-9", "dup-é"]]
    docs += [("文档-1", "Aspirin and heart: 文档 in Chinese."), ("x", "aspirin heart heart")]
    path = tmp_path_factory.mktemp("lucene") / "index"
    assert build_lucene_index(docs, path) == len(docs)
    return path


def per_query(index, k1, b, depth):
    """Pyserini's plain per-query search, one Java call and one Python object per hit."""
    from pyserini.search.lucene import LuceneSearcher

    searcher = LuceneSearcher(str(index))
    searcher.set_bm25(k1, b)
    return {
        qid: [(h.docid, float(h.score)) for h in searcher.search(text, k=depth)]
        for qid, text in QUERIES.items()
    }


@pytest.mark.parametrize("threads", [1, 2])
@pytest.mark.parametrize("depth", [1, 2, 3, 7, 100])
@pytest.mark.parametrize(("k1", "b"), [(0.9, 0.4), (1.2, 0.75)])
def test_bulk_path_returns_pyserinis_ids_and_scores(index, depth, k1, b, threads):
    searcher = BM25Searcher(index, k1, b)
    assert searcher.bulk
    found = searcher.search(list(QUERIES.values()), list(QUERIES), depth, threads)
    assert list(found) == list(QUERIES)
    assert found == per_query(index, k1, b, depth)
    assert found == searcher.pyserini_batch_search(list(QUERIES.values()), list(QUERIES), depth, 2)
    assert searcher.last_missing == 0 and searcher.last_missing_qids == []
    assert found["none"] == found["stop"] == found["empty"] == []
    assert all(found[q] for q in ["cafe", "greek", "chinese", "umlaut", "punct", "case"])
    if depth >= 5:  # the five duplicates tie: ordered by id as a string, lowered by 1e-6 each
        dup = [h for h in found["dup"] if h[0].startswith("dup-")]
        assert [d for d, _ in dup] == ["dup-10", "dup-9", "dup-a", "dup-b", "dup-é"]
        steps = np.diff(np.array([s for _, s in dup], dtype=np.float32))
        assert np.all((steps < 0) & (steps > -1e-5))


@pytest.mark.parametrize("threads", [1, 2])
def test_failed_queries_are_counted_and_reported(index, caplog, threads):
    searcher = BM25Searcher(index)
    too_many_clauses = " ".join(f"term{i}" for i in range(1500))  # over Lucene's 1024 clauses
    queries, qids = ["aspirin", too_many_clauses, "heart attack risk"], ["a", "huge", "h"]
    with caplog.at_level(logging.WARNING, logger="srb.index.lucene"):
        found = searcher.search(queries, qids, 10, threads)
    assert found["huge"] == []
    assert searcher.last_missing == 1 and searcher.last_missing_qids == ["huge"]
    expected = per_query(index, 0.9, 0.4, 10)
    assert found["a"] == expected["aspirin"] and found["h"] == expected["heart"]
    (record,) = [r for r in caplog.records if "no Lucene result" in r.getMessage()]
    assert "1 of 3 queries" in record.getMessage() and "huge" in record.getMessage()
    assert "TooManyClauses" in record.getMessage() or "maxClauseCount" in record.getMessage()

    searcher.search(["aspirin"], ["a"], 10)
    assert searcher.last_missing == 0 and searcher.last_missing_qids == []


def test_search_rejects_bad_arguments(index):
    searcher = BM25Searcher(index)
    with pytest.raises(ValueError, match="query ids"):
        searcher.search(["aspirin"], [], 10)
    with pytest.raises(ValueError, match="depth"):
        searcher.search(["aspirin"], ["a"], 0)
    assert searcher.search([], [], 10) == {}


def test_tie_adjustment_is_anserinis(index):
    """`_adjust_ties` against Anserini's ScoreTiesAdjusterReranker on tie-heavy rankings."""
    from jnius import autoclass

    searcher = BM25Searcher(index)
    scored_docs = autoclass("io.anserini.search.ScoredDocs")
    reranker = autoclass("io.anserini.rerank.lib.ScoreTiesAdjusterReranker")()
    top_docs = autoclass("org.apache.lucene.search.TopDocs")
    total = autoclass("org.apache.lucene.search.TotalHits")
    equal_to = autoclass("org.apache.lucene.search.TotalHits$Relation").EQUAL_TO
    score_doc = autoclass("org.apache.lucene.search.ScoreDoc")

    def anserini(scores):
        hits = [score_doc(i, float(s)) for i, s in enumerate(scores)]
        docs = scored_docs.fromTopDocs(
            top_docs(total(len(hits), equal_to), hits), searcher._simple.searcher
        )
        return list(reranker.rerank(docs, None).scores)

    rng = np.random.default_rng(7)
    rankings = []
    for _ in range(60):
        n = int(rng.integers(1, searcher.num_docs + 1))
        step = rng.choice([1e-6, 3e-5, 5e-5, 1e-4, 2e-4, 0.01])
        gaps = rng.integers(0, 4, size=n) * step  # many exact and near ties
        base = rng.uniform(0.2, 30.0)
        rankings.append((base - np.cumsum(gaps)).astype(np.float32))
    rankings.append(np.array([5.0, 4.99995, 4.99991, 4.5, 4.5, 4.5, 4.49999, 3.0], np.float32))
    for ranking in rankings:
        assert _adjust_ties(ranking.copy(), [len(ranking)]).tolist() == anserini(ranking)
    batch = _adjust_ties(np.concatenate(rankings), [len(r) for r in rankings]).tolist()
    assert batch == [s for ranking in rankings for s in anserini(ranking)]


def test_decimal_scores_read_as_javas_float(index):
    """Reading Float.toString text back: as Java's Float.parseFloat, even where the text's
    nearest double lies exactly halfway between two floats."""
    from jnius import autoclass

    BM25Searcher(index)  # the JVM
    parse_float = autoclass("java.lang.Float").parseFloat
    rng = np.random.default_rng(11)
    texts = [repr(float(x)) for x in rng.uniform(0, 50, 300).astype(np.float32)]
    texts += [f"{x:.9g}" for x in rng.uniform(0, 50, 300)]
    lows = rng.uniform(0.01, 50, 100).astype(np.float32)
    for low in lows:  # decimals just around the midpoint of two adjacent floats
        high = np.nextafter(low, np.float32(np.inf))
        mid = (Fraction(float(low)) + Fraction(float(high))) / 2
        for nudge in (Fraction(0), Fraction(1, 10**40), -Fraction(1, 10**40)):
            value = mid + nudge
            texts.append(_decimal(value))
    texts.append("1.00000017881393432617187499")

    scores, halfway = _float32(np.array([float(t) for t in texts]))
    assert halfway.sum() >= 100  # the hard case is exercised
    for i in np.flatnonzero(halfway):
        scores[i] = _nearest_float32(Fraction(texts[i]))
    assert scores.astype(np.float64).tolist() == [parse_float(t) for t in texts]


def _decimal(value: Fraction) -> str:
    """The exact decimal text of a fraction whose denominator is a power of two."""
    digits = 60
    scaled = value * 10**digits
    assert scaled.denominator == 1
    whole, frac = divmod(scaled.numerator, 10**digits)
    return f"{whole}.{frac:0{digits}d}"


def test_searches_go_through_srbs_java_helper(index):
    """srb.BulkSearch (srb/index/java) is on the JVM's classpath and takes the searches: the
    comparisons above are its results."""
    searcher = BM25Searcher(index)
    assert searcher.bulk and searcher._bulk._helper is not None
    assert searcher._bulk._helper.__name__ == "srb.BulkSearch"


def test_the_committed_java_helper_is_compiled_from_its_source(tmp_path):
    """The .class beside BulkSearch.java is what javac makes of it (`make java` rebuilds it):
    a changed source with a stale class would search with the old code."""
    import shutil
    import subprocess

    from srb.java import HELPERS

    javac = shutil.which("javac")
    if javac is None:
        pytest.skip("no javac here: the committed class is used as it is")
    source = HELPERS / "srb" / "BulkSearch.java"
    subprocess.run([javac, "--release", "17", "-d", str(tmp_path), str(source)], check=True)
    built = (tmp_path / "srb" / "BulkSearch.class").read_bytes()
    assert built == (HELPERS / "srb" / "BulkSearch.class").read_bytes(), "run `make java`"


@pytest.mark.parametrize("threads", [1, 2])
def test_without_the_java_helper_the_jni_paths_return_the_same(index, threads):
    """A JVM started without srb.BulkSearch searches query by query (1 thread) or through
    Anserini's batch_search (2): the same ids and floats as Pyserini's per-query search."""
    searcher = BM25Searcher(index)
    assert searcher.bulk
    searcher._bulk._helper = None
    found = searcher.search(list(QUERIES.values()), list(QUERIES), 100, threads)
    assert found == per_query(index, 0.9, 0.4, 100)


@pytest.fixture(scope="module")
def wide_tie_index(tmp_path_factory):
    """More identical documents than BulkSearch.MARGIN, indexed out of id order."""
    ids = [f"t{n}" for n in (13, 2, 11, 7, 0, 5, 12, 9, 1, 8, 3, 10, 6, 4)]
    docs = [(doc_id, DUPLICATE) for doc_id in ids] + [(f"d{i}", t) for i, t in enumerate(TEXTS)]
    path = tmp_path_factory.mktemp("lucene-ties") / "index"
    assert build_lucene_index(docs, path) == len(docs)
    return path


@pytest.mark.parametrize("depth", [1, 3, 13, 14, 15, 100])
def test_pruned_search_falls_back_to_the_sorted_search_when_a_tie_outgrows_its_margin(
    wide_tie_index, depth
):
    """14 documents tie on "dup"'s top score: when all k + 10 collected hits tie with the k-th,
    more may tie beyond them, so that query is searched the sorted way (counted); the hits are
    Pyserini's either way, ties ordered by id as a string."""
    from jnius import autoclass

    helper = autoclass("srb.BulkSearch")
    searcher = BM25Searcher(wide_tie_index)
    before = helper.fallbacks()
    found = searcher.search(list(QUERIES.values()), list(QUERIES), depth, 2)
    assert found == per_query(wide_tie_index, 0.9, 0.4, depth)
    tied = [d for d, _ in found["dup"] if d.startswith("t")]
    assert tied == sorted(f"t{n}" for n in range(14))[: min(depth, 14)]
    if depth <= 3:  # k + 10 <= 14: every collected hit ties with the k-th
        assert helper.fallbacks() > before
    if depth == 100:  # fewer documents than k + 10: every match was collected
        assert helper.fallbacks() == before
