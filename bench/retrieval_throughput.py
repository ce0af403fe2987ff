"""Retrieval throughput on BEIR SciFact: index build times and queries/s for bm25, dense, hybrid.

Everything is measured in this one run on the same machine, so the ratios mean something even on a
noisy shared host: bm25s (a pure-Python sparse BM25) is the peer for Pyserini's Lucene BM25, and
the dense and hybrid figures are reported against Lucene BM25 at the same depth. The Lucene row is
srb's BM25Searcher; Pyserini's own batch search (what it used before, same ids and scores) is
timed beside it. The JVM's JIT takes a few thousand Lucene queries to settle, so both Lucene
searches first run `--warmup` times untimed (the others once); then each search is repeated and
the median taken. Prints one table; exits 0. `--only bm25` skips the dense encoder (minutes on a
CPU).

    OMP_NUM_THREADS=1 python bench/retrieval_throughput.py [--max-docs N] [--max-queries N]
        [--only bm25]
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
    parser.add_argument("--warmup", type=int, default=10, help="untimed Lucene passes first")
    parser.add_argument(
        "--only", choices=["all", "bm25"], default="all", help="bm25: Lucene and bm25s rows only"
    )
    args = parser.parse_args()

    data = load_scifact(args.data)
    docs_ids, docs = data.doc_ids[: args.max_docs], data.doc_texts[: args.max_docs]
    qids, queries = data.qids[: args.max_queries], data.queries[: args.max_queries]

    with tempfile.TemporaryDirectory(prefix="srb-bench-") as tmp:
        from srb.index.lucene import BM25Searcher, build_lucene_index

        t_lucene, _ = timed(
            lambda: build_lucene_index(
                zip(docs_ids, docs, strict=True), Path(tmp) / "bm25", args.threads
            )
        )
        searcher = BM25Searcher(Path(tmp) / "bm25", 0.9, 0.4)

        def search_lucene():
            return searcher.search(queries, qids, args.depth, args.threads)

        def search_pyserini():
            return searcher.pyserini_batch_search(queries, qids, args.depth, args.threads)

        if search_lucene() != search_pyserini():
            raise SystemExit("BM25Searcher and Pyserini's batch search disagree")
        for _ in range(args.warmup - 1):
            search_lucene()
            search_pyserini()
        s_lucene = median_seconds(search_lucene, args.repeats)
        s_pyserini = median_seconds(search_pyserini, args.repeats)

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

        search_bm25s()
        s_bm25s = median_seconds(search_bm25s, args.repeats)
        timings: dict[str, tuple[float, float | None]] = {
            "lucene": (s_lucene, t_lucene),
            "pyserini": (s_pyserini, None),
            "bm25s": (s_bm25s, t_bm25s),
        }
        if args.only == "bm25":
            print_table(len(docs), len(queries), args, timings)
            return 0

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

    timings["dense"] = (s_dense, t_encode + t_faiss)
    timings["hybrid"] = (s_hybrid, None)
    print_table(len(docs), len(queries), args, timings)
    print(
        f"(encode {t_encode:.1f} s = {len(docs) / t_encode:.1f} docs/s; FAISS add {t_faiss:.3f} s)"
    )
    return 0


ROWS = {  # name -> (retriever, what is built, the row its queries/s are compared with)
    "lucene": ("bm25 (Pyserini/Lucene)", "Lucene index", "bm25s"),
    "pyserini": ("bm25 (Pyserini batch_search)", "same index", "bm25s"),
    "bm25s": ("bm25 (bm25s, peer)", "bm25s index", "bm25s"),
    "dense": ("dense (MiniLM + FAISS flat)", "encode + FAISS", "lucene"),
    "hybrid": ("hybrid (RRF k=60)", "both above", "lucene"),
}


def print_table(
    n_docs: int,
    n_queries: int,
    args: argparse.Namespace,
    timings: dict[str, tuple[float, float | None]],
) -> None:
    qps = {name: n_queries / seconds for name, (seconds, _) in timings.items()}
    print(
        f"SciFact: {n_docs} docs, {n_queries} queries, depth {args.depth}, threads {args.threads}, "
        f"Lucene warm-up {args.warmup} passes, median of {args.repeats}"
    )
    print(f"{'retriever':<30} {'build':<16} {'build s':>8} {'queries/s':>10}  ratio")
    for name, (_, t_build) in timings.items():
        label, build, peer = ROWS[name]
        build_s = "-" if t_build is None else f"{t_build:.1f}"
        peer_label = "bm25s" if peer == "bm25s" else "Lucene bm25"
        ratio = f"{qps[name] / qps[peer]:.2f}x {peer_label}"
        print(f"{label:<30} {build:<16} {build_s:>8} {qps[name]:>10.1f}  {ratio}")


if __name__ == "__main__":
    sys.exit(main())
