"""BM25 over units with Pyserini's Lucene (Anserini) on a real JVM.

Building goes through Anserini's own IndexCollection (JsonCollection, default analyzer: Porter
stemming + English stopwords, as in Pyserini's BEIR "flat" reproductions), in-process so the
JVM workarounds in `srb.java` apply.
"""

from __future__ import annotations

import json
import logging
import shutil
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from srb.java import prepare_jvm

log = logging.getLogger(__name__)

Hit = tuple[str, float]


def build_lucene_index(
    docs: Iterable[tuple[str, str]], index_dir: str | Path, threads: int = 1
) -> int:
    """Index (id, contents) pairs into `index_dir`; written beside it and renamed when complete."""
    prepare_jvm()
    from pyserini.pyclass import autoclass

    index_dir = Path(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=index_dir.parent, prefix=".lucene-") as tmp:
        collection = Path(tmp) / "collection"
        collection.mkdir()
        n = 0
        with open(collection / "docs.jsonl", "w", encoding="utf-8") as fh:
            for doc_id, contents in docs:
                fh.write(json.dumps({"id": doc_id, "contents": contents}) + "\n")
                n += 1
        if n == 0:
            raise ValueError(f"refusing to build an empty Lucene index at {index_dir}")
        staging = Path(tmp) / "index"
        args = [
            "-collection", "JsonCollection",
            "-generator", "DefaultLuceneDocumentGenerator",
            "-input", str(collection),
            "-index", str(staging),
            "-threads", str(max(1, threads)),
        ]  # fmt: skip
        autoclass("io.anserini.index.IndexCollection").main(args)
        indexed = lucene_doc_count(staging)
        if indexed != n:
            raise RuntimeError(f"Lucene indexed {indexed} of {n} documents into {index_dir}")
        if index_dir.exists():
            shutil.rmtree(index_dir)
        staging.rename(index_dir)
    log.info("Lucene index %s: %d documents", index_dir, n)
    return n


def lucene_doc_count(index_dir: str | Path) -> int:
    prepare_jvm()
    from pyserini.index.lucene import LuceneIndexReader

    return int(LuceneIndexReader(str(index_dir)).stats()["documents"])


class BM25Searcher:
    def __init__(self, index_dir: str | Path, k1: float = 0.9, b: float = 0.4):
        prepare_jvm()
        from pyserini.search.lucene import LuceneSearcher

        if not Path(index_dir).is_dir():
            raise FileNotFoundError(f"no Lucene index at {index_dir}")
        self._searcher = LuceneSearcher(str(index_dir))
        self._searcher.set_bm25(k1, b)

    @property
    def num_docs(self) -> int:
        return int(self._searcher.num_docs)

    def search(
        self, queries: Sequence[str], qids: Sequence[str], depth: int, threads: int = 1
    ) -> dict[str, list[Hit]]:
        results = self._searcher.batch_search(list(queries), list(qids), k=depth, threads=threads)
        return {qid: [(h.docid, float(h.score)) for h in results.get(qid, [])] for qid in qids}
