"""Retrieval throughput on BEIR SciFact: index build times and queries/s for bm25, dense, hybrid.

Everything is measured in this one run on the same machine, so the ratios mean something even on a
noisy shared host: bm25s (a pure-Python sparse BM25) is the peer for Pyserini's Lucene BM25, and
the dense and hybrid figures are reported against Lucene BM25 at the same depth. Each search is
repeated and the median taken. Prints one table; exits 0.

    OMP_NUM_THREADS=1 python bench/retrieval_throughput.py [--max-docs N] [--max-queries N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from srb.anchor import load_scifact  # noqa: E402
from srb.retrieve import rrf  # noqa: E402


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


def median_seconds(fn: Callable[[], object], repeats: int) -> float:
    return statistics.median(timed(fn)[0] for _ in range(repeats))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(REPO / ".." / "shared" / "data" / "scifact"))
    parser.add_argument("--max-docs", type=int, default=None)
    parser.add_argument("--max-queries", type=int, default=None)
    parser.add_argument("--depth", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    data = load_scifact(args.data)
    docs_ids, docs = data.doc_ids[: args.max_docs], data.doc_texts[: args.max_docs]
    qids, queries = data.qids[: args.max_queries], data.queries[: args.max_queries]
    rows: list[tuple[str, str, float | None, float | None, str]] = []

    with tempfile.TemporaryDirectory(prefix="srb-bench-") as tmp:
        from srb.index.lucene import BM25Searcher, build_lucene_index

        t_lucene, _ = timed(
            lambda: build_lucene_index(
                zip(docs_ids, docs, strict=True), Path(tmp) / "bm25", args.threads
            )
        )
        searcher = BM25Searcher(Path(tmp) / "bm25", 0.9, 0.4)
        searcher.search(queries[:5], qids[:5], args.depth, args.threads)  # JVM warm-up
        s_lucene = median_seconds(
            lambda: searcher.search(queries, qids, args.depth, args.threads), args.repeats
        )

        import bm25s
        import Stemmer

        stemmer = Stemmer.Stemmer("english")

        def build_bm25s():
            retriever = bm25s.BM25(k1=0.9, b=0.4)
            retriever.index(
                bm25s.tokenize(docs, stopwords="en", stemmer=stemmer, show_progress=False),
                show_progress=False,
            )
            return retriever

        t_bm25s, retriever = timed(build_bm25s)

        def search_bm25s():
            tokens = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, show_progress=False)
            return retriever.retrieve(
                tokens, k=min(args.depth, len(docs)), show_progress=False, n_threads=args.threads
            )

        s_bm25s = median_seconds(search_bm25s, args.repeats)

        from srb.index.dense import Encoder, build_faiss_index

        encoder = Encoder("minilm", threads=args.threads)
        t_encode, vectors = timed(lambda: encoder.encode(docs, batch_size=32))
        t_faiss, index = timed(lambda: build_faiss_index(vectors, "flat"))

        def search_dense():
            return index.search(encoder.encode(queries, batch_size=32), min(args.depth, len(docs)))

        s_dense = median_seconds(search_dense, args.repeats)

        def search_hybrid():
            lexical = searcher.search(queries, qids, args.depth, args.threads)
            scores, idx = search_dense()
            return {
                q: rrf(
                    [
                        lexical[q],
                        [(docs_ids[j], float(s)) for j, s in zip(idx[r], scores[r], strict=True)],
                    ],
                    depth=args.depth,
                )
                for r, q in enumerate(qids)
            }

        s_hybrid = median_seconds(search_hybrid, args.repeats)

    n = len(queries)
    qps = {
        name: n / s
        for name, s in [
            ("lucene", s_lucene),
            ("bm25s", s_bm25s),
            ("dense", s_dense),
            ("hybrid", s_hybrid),
        ]
    }
    rows = [
        (
            "bm25 (Pyserini/Lucene)",
            "Lucene index",
            t_lucene,
            qps["lucene"],
            f"{qps['lucene'] / qps['bm25s']:.2f}x bm25s",
        ),
        ("bm25 (bm25s, peer)", "bm25s index", t_bm25s, qps["bm25s"], "1.00x bm25s"),
        (
            "dense (MiniLM + FAISS flat)",
            "encode + FAISS",
            t_encode + t_faiss,
            qps["dense"],
            f"{qps['dense'] / qps['lucene']:.2f}x Lucene bm25",
        ),
        (
            "hybrid (RRF k=60)",
            "both above",
            None,
            qps["hybrid"],
            f"{qps['hybrid'] / qps['lucene']:.2f}x Lucene bm25",
        ),
    ]
    print(
        f"SciFact: {len(docs)} docs, {n} queries, depth {args.depth}, threads {args.threads}, median of {args.repeats}"
    )
    print(f"{'retriever':<30} {'build':<16} {'build s':>8} {'queries/s':>10}  ratio")
    for name, build, t_build, q, ratio in rows:
        build_s = "-" if t_build is None else f"{t_build:.1f}"
        print(f"{name:<30} {build:<16} {build_s:>8} {q:>10.1f}  {ratio}")
    print(
        f"(encode {t_encode:.1f} s = {len(docs) / t_encode:.1f} docs/s; FAISS add {t_faiss:.3f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
