"""BM25 over units with Pyserini's Lucene (Anserini) on a real JVM.

Building goes through Anserini's own IndexCollection (JsonCollection, default analyzer: Porter
stemming + English stopwords, as in Pyserini's BEIR "flat" reproductions), in-process so the
JVM workarounds in `srb.java` apply.

Searching returns what Pyserini's `LuceneSearcher.search(q, k)` (Anserini's SimpleSearcher)
returns, id for id and float for float, without its per-hit cost: Anserini reads every hit's
stored Lucene document for its id, and Pyserini turns every hit into a Python proxy of a Java
object read field by field over JNI. Here each query makes SimpleSearcher's own Lucene calls (the
same bag-of-words query on "contents", the same `IndexSearcher.search(query, k, sort by score
then id, doDocScores)`), the id is that sort's own value (the "id" doc value), and a whole batch
comes back as one JSON string (its scores are Float.toString text, read back to the exact
float). Those calls are made by srb's own Java class, `srb.BulkSearch` (srb/index/java, compiled
from the source beside it; reflection only, so any JDK 17+ builds it), on a pool of Java
threads in one JNI call: pyjnius itself is not safe for concurrent calls from Python threads.
Where the JVM was started without it, the same calls are made query by query over JNI.
SimpleSearcher's one remaining step, ScoreTiesAdjusterReranker (round to 4 decimals, lower tied
scores by 1e-6 steps), is replayed in its float32 arithmetic. Where that would not reproduce SimpleSearcher (an index it reads in its
Lucene 8 mode, RM3 or Rocchio, another reranker cascade), Pyserini's batch search is used.
"""

from __future__ import annotations

import gc
import json
import logging
import shutil
import tempfile
from binascii import a2b_base64
from collections.abc import Callable, Iterable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from srb.atomic import clear_stale_staging, staging_prefix
from srb.java import prepare_jvm

log = logging.getLogger(__name__)

Hit = tuple[str, float]

_FIELD = "contents"  # the field SimpleSearcher.search(String, int) queries
# SimpleSearcher.BREAK_SCORE_TIES_BY_DOCID as Lucene prints it: score, then id (binary doc value)
_SORT = '<score>,<string_val: "id">'
_TIES_RERANKER = "io.anserini.rerank.lib.ScoreTiesAdjusterReranker"
_TIE_GAP = np.float32(1e-4)  # ScoreTiesAdjusterReranker's constants, as Java float literals
_TIE_STEP = np.float32(1e-6)
_ID_CACHE = 1 << 18  # ids kept per searcher (Lucene doc number -> id), then the cache restarts


def build_lucene_index(
    docs: Iterable[tuple[str, str]], index_dir: str | Path, threads: int = 1
) -> int:
    """Index (id, contents) pairs into `index_dir`; written beside it and renamed when complete."""
    prepare_jvm()
    from pyserini.pyclass import autoclass

    index_dir = Path(index_dir)
    index_dir.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_staging(index_dir)  # a killed build's collection and half an index
    with tempfile.TemporaryDirectory(
        dir=index_dir.parent, prefix=staging_prefix(index_dir), suffix=".tmp"
    ) as tmp:
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
    """BM25 top-k over a Lucene index; scores and order are Pyserini's `LuceneSearcher.search`.

    After each `search`, `last_missing` is the number of queries Lucene returned nothing for
    because their search failed (they get []; a warning names them), and `last_missing_qids`
    lists them in input order. A query that merely matches no document is not missing.
    One searcher serves one Python thread at a time (pyjnius calls from several threads at once
    have been seen to lose results; the bulk path then raises rather than return them short).
    """

    def __init__(self, index_dir: str | Path, k1: float = 0.9, b: float = 0.4):
        """Anserini's SimpleSearcher straight from its class, as Pyserini's LuceneSearcher builds
        it: importing `pyserini.search.lucene` imports torch and transformers (~5 s per job)
        for encoders BM25 never uses; that wrapper is made only for the fallback path."""
        prepare_jvm()
        from pyserini.pyclass import autoclass

        if not Path(index_dir).is_dir():
            raise FileNotFoundError(f"no Lucene index at {index_dir}")
        self._index_dir, self._k1, self._b = str(index_dir), float(k1), float(b)
        self._simple = autoclass("io.anserini.search.SimpleSearcher")(self._index_dir)
        self._simple.set_bm25(self._k1, self._b)
        self._wrapper: Any = None
        self._bulk: _BulkSearch | None = None
        self._bulk_checked = False
        self.last_missing = 0
        self.last_missing_qids: list[str] = []

    @property
    def num_docs(self) -> int:
        return int(self._simple.get_total_num_docs())

    @property
    def bulk(self) -> bool:
        """Whether searches take the bulk path (False: Pyserini's batch search, see the module)."""
        return self._bulk_search() is not None

    def search(
        self, queries: Sequence[str], qids: Sequence[str], depth: int, threads: int = 1
    ) -> dict[str, list[Hit]]:
        """{qid: [(docid, score)]}, best first, at most `depth` hits per query.

        With `threads` > 1 the queries are searched on that many Java threads (srb.BulkSearch;
        without it, Anserini's own `batch_search`), and read back in one string as well.
        """
        queries, qids = list(queries), list(qids)
        if len(queries) != len(qids):
            raise ValueError(f"{len(queries)} queries but {len(qids)} query ids")
        if depth < 1:
            raise ValueError(f"search depth must be at least 1, got {depth}")
        self.last_missing, self.last_missing_qids = 0, []
        if not queries:
            return {}
        bulk = self._bulk_search()
        if bulk is None:
            found = self.pyserini_batch_search(queries, qids, depth, threads)
            results, errors = [found.get(qid) for qid in qids], [""] * len(qids)
        else:
            found_bulk = bulk.search(queries, depth, threads)
            results, errors = map(list, zip(*found_bulk, strict=True))
        missing = [i for i, hits in enumerate(results) if hits is None]
        self.last_missing = len(missing)
        self.last_missing_qids = [qids[i] for i in missing]
        if missing:
            why = next((errors[i] for i in missing if errors[i]), "")
            log.warning(
                "BM25: %d of %d queries got no Lucene result and rank nothing (first: %s)%s",
                len(missing), len(qids), ", ".join(self.last_missing_qids[:5]),
                f"; {why}" if why else "",
            )  # fmt: skip
        return {qid: hits or [] for qid, hits in zip(qids, results, strict=True)}

    def pyserini_batch_search(
        self, queries: Sequence[str], qids: Sequence[str], depth: int, threads: int = 1
    ) -> dict[str, list[Hit]]:
        """Pyserini's own batch search, hit by hit (the fallback, and the reference the bulk path
        is tested and benchmarked against); a qid Lucene returned nothing for is left out."""
        if self._wrapper is None:
            from pyserini.search.lucene import LuceneSearcher

            self._wrapper = LuceneSearcher(self._index_dir)
            self._wrapper.set_bm25(self._k1, self._b)
        results = self._wrapper.batch_search(list(queries), list(qids), k=depth, threads=threads)
        return {
            qid: [(h.docid, float(h.score)) for h in hits]
            for qid, hits in results.items()
            if hits is not None
        }

    def _bulk_search(self) -> _BulkSearch | None:
        if not self._bulk_checked:
            self._bulk_checked = True
            reason = _BulkSearch.unsupported(self._simple)
            if reason is None:
                self._bulk = _BulkSearch(self._simple)
            else:
                log.info("BM25: Pyserini batch search (the bulk path does not apply: %s)", reason)
        return self._bulk


class _BulkSearch:
    """SimpleSearcher.search(q, k) for a batch of queries, every hit read back in one string."""

    @staticmethod
    def unsupported(simple: Any) -> str | None:
        """Why this would not reproduce `simple.search(q, k)`; None when it does."""
        if simple.backwardsCompatibilityLucene8:
            return "Anserini reads this index in its Lucene 8 mode"
        if simple.use_rm3() or simple.use_rocchio():
            return "query expansion (RM3/Rocchio) is on"
        rerankers = simple.cascade.rerankers
        if rerankers.size() != 1 or rerankers.get(0).getClass().getName() != _TIES_RERANKER:
            return "the reranker cascade is not Anserini's default"
        if simple.searcher is None:
            return "the searcher has no IndexSearcher"
        sort = simple.BREAK_SCORE_TIES_BY_DOCID.toString()
        if sort != _SORT:
            return f"unexpected tie-break sort {sort}"
        return None

    def __init__(self, simple: Any):
        from jnius import autoclass

        self._simple = simple
        self._scored_json = _scored_docs_writer()
        self._searcher = simple.searcher
        self._analyzer = simple.analyzer
        self._sort = simple.BREAK_SCORE_TIES_BY_DOCID
        self._generator = autoclass("io.anserini.search.query.BagOfWordsQueryGenerator")()
        self._list = autoclass("java.util.ArrayList")
        self._json = _hits_writer()
        self._ids: dict[int, str] = {}  # Lucene doc number -> id, for this reader
        self._helper = _bulk_helper()

    def search(
        self, queries: Sequence[str], depth: int, threads: int = 1
    ) -> list[tuple[list[Hit] | None, str]]:
        """Per query, in order: (hits, "") or (None, why its Lucene search failed)."""
        from jnius import JavaException

        if self._helper is not None:
            return self._helped(queries, depth, threads)
        if threads > 1 and len(queries) > 1:
            try:
                return self._threaded(queries, depth, threads)
            except JavaException as exc:  # one failed query fails the batch: redo one by one
                log.info("BM25: threaded batch failed (%s); searching query by query", exc)

        batch = self._list(len(queries))
        errors: dict[int, str] = {}
        for i, text in enumerate(queries):
            try:  # SimpleSearcher.search(String, int) up to its reranking, call for call
                query = self._generator.buildQuery(_FIELD, self._analyzer, text)
                batch.add(self._searcher.search(query, depth, self._sort, True))
            except JavaException as exc:
                batch.add(None)
                errors[i] = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        names, scores, sizes = self._read(batch)
        if len(names) != len(queries):
            raise RuntimeError(f"Lucene returned {len(names)} results for {len(queries)} queries")
        adjusted = _adjust_ties(scores, sizes).tolist()
        out: list[tuple[list[Hit] | None, str]] = []
        start = 0
        for i, (ids, size) in enumerate(zip(names, sizes, strict=True)):
            if ids is None:
                out.append((None, errors.get(i, "")))
                continue
            out.append((list(zip(ids, adjusted[start : start + size], strict=True)), ""))
            start += size
        return out

    def _helped(
        self, queries: Sequence[str], depth: int, threads: int
    ) -> list[tuple[list[Hit] | None, str]]:
        """srb.BulkSearch: the same hits as the loop below, on `threads` Java threads in one
        JNI call, each hit back as [id, score] in one string. Its pruned search collects the top
        k + 10 by score alone (Lucene may skip documents that cannot enter them) and breaks ties
        by the id itself; a query whose tie at the k-th score reaches past those is searched the
        sorted way (BulkSearch.java)."""
        text = self._helper.searchPruned(
            self._searcher, self._generator, self._analyzer, self._sort, _FIELD,
            list(queries), depth, max(1, threads),
        )  # fmt: skip
        runs = _parse(text)  # per query [[id, score], ...], or the message its search failed with
        if len(runs) != len(queries):
            raise RuntimeError(f"Lucene returned {len(runs)} results for {len(queries)} queries")
        found = [run for run in runs if not isinstance(run, str)]
        scores = _exact_scores(text, runs, lambda parsed: [
            s for run in parsed if not isinstance(run, str) for _, s in run
        ])  # fmt: skip
        adjusted = _adjust_ties(scores, [len(run) for run in found]).tolist()
        out: list[tuple[list[Hit] | None, str]] = []
        start = 0
        for run in runs:
            if isinstance(run, str):
                out.append((None, run.strip().splitlines()[0] if run.strip() else "error"))
                continue
            out.append(([(doc, adjusted[start + n]) for n, (doc, _) in enumerate(run)], ""))
            start += len(run)
        return out

    def _threaded(
        self, queries: Sequence[str], depth: int, threads: int
    ) -> list[tuple[list[Hit] | None, str]]:
        """SimpleSearcher.batch_search: each query's `search(q, k)` (tie adjuster included) on a
        Java thread pool, keyed by position so repeated query ids cannot collide. A query that
        fails raises for the whole batch (Anserini counts its completed tasks)."""
        texts, keys = self._list(len(queries)), self._list(len(queries))
        for i, text in enumerate(queries):
            texts.add(text)
            keys.add(str(i))
        found = self._simple.batch_search(texts, keys, depth, threads)
        text = self._scored_json.writeValueAsString(found)
        runs = _parse(text)  # {"i": [[docid, score], ...]}; a query whose thread failed is absent
        scores = _exact_scores(text, runs, lambda parsed: [
            score for i in range(len(queries)) for _, score in parsed.get(str(i), ())
        ])  # fmt: skip
        out: list[tuple[list[Hit] | None, str]] = []
        start = 0
        listed = scores.tolist()
        for i in range(len(queries)):
            run = runs.get(str(i))
            if run is None:
                raise RuntimeError(f"Lucene batch_search returned no result for query {i}")
            out.append(([(doc, listed[start + n]) for n, (doc, _) in enumerate(run)], ""))
            start += len(run)
        return out

    def _read(self, batch: Any) -> tuple[list[list[str] | None], np.ndarray, list[int]]:
        """Per query None or its ids; all scores as float32, one ranking after another; sizes."""
        text = self._json.writeValueAsString(batch)
        known, lookup = self._ids, self._id
        names: list[list[str] | None] = []
        tops = _parse(text)  # see _hits_writer
        for top in tops:
            if top is None:
                names.append(None)
                continue
            names.append([known.get(doc) or lookup(doc, fields[1]) for doc, fields, _ in top[0]])
        scores = _exact_scores(text, tops, lambda parsed: [
            score for top in parsed if top is not None for _, _, score in top[0]
        ])  # fmt: skip
        return names, scores, [0 if ids is None else len(ids) for ids in names]

    def _id(self, doc: int, ref: list[Any]) -> str:
        raw, length, offset = ref  # the "id" doc value the hit was sorted by
        name = a2b_base64(raw)[offset : offset + length].decode("utf-8")
        if len(self._ids) >= _ID_CACHE:
            self._ids.clear()
        self._ids[doc] = name
        return name


def _parse(text: str, **kwargs: Any) -> Any:
    """json.loads with the cyclic GC paused: the nested lists of a large batch would otherwise
    set off full collections over the whole process heap (30x slower on a loaded process)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return json.loads(text, **kwargs)
    finally:
        if enabled:
            gc.enable()


def _exact_scores(text: str, parsed: Any, scores_of: Callable[[Any], list[Any]]) -> np.ndarray:
    """The float32 scores `scores_of` picks from the parsed JSON `text`, each the float Java's
    Float.parseFloat makes of its decimal text: where the double json.loads read lies exactly
    halfway between two float32 values (it may itself be a rounding), the text decides."""
    scores, halfway = _float32(np.array(scores_of(parsed), dtype=np.float64))
    if halfway.any():
        exact = scores_of(_parse(text, parse_float=Fraction))
        for i in np.flatnonzero(halfway):
            scores[i] = _nearest_float32(exact[i])
    return scores


def _float32(doubles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The float32 each double rounds to, and where a double lies exactly halfway between two
    float32 values (there the double may already be a rounding of the decimal text)."""
    scores = doubles.astype(np.float32)
    back = scores.astype(np.float64)
    toward = np.where(doubles > back, np.float32(np.inf), np.float32(-np.inf)).astype(np.float32)
    other = np.nextafter(scores, toward).astype(np.float64)
    halfway = (back != doubles) & ((back + other) / 2 == doubles)
    return scores, halfway


def _nearest_float32(value: Fraction) -> np.float32:
    """The float32 nearest to an exact decimal (ties to even), as Java's Float.parseFloat."""
    guess = np.float32(float(value))
    candidates = [
        guess,
        np.nextafter(guess, np.float32(np.inf)),
        np.nextafter(guess, np.float32(-np.inf)),
    ]
    return min(
        candidates,
        key=lambda c: (abs(Fraction(float(c)) - value), int(np.array(c).view(np.uint32)) & 1),
    )


def _adjust_ties(scores: np.ndarray, sizes: Sequence[int]) -> np.ndarray:
    """Anserini's ScoreTiesAdjusterReranker on each query's run (consecutive `sizes` slices of
    `scores`), in its own float32 arithmetic: every score becomes (float) (Math.round(score *
    10000.0) / 10000.0); then, down a ranking, a score within 1e-4 of the (adjusted) one above it
    is lowered by 1e-6 times its place in that run of ties."""
    x = scores.astype(np.float64) * 10000.0
    whole = np.floor(x)
    adjusted = ((whole + (x - whole >= 0.5)) / 10000.0).astype(np.float32)  # Math.round: half up
    tied = np.zeros(len(adjusted), dtype=bool)  # tied[i]: within 1e-4 of i-1, before lowering
    tied[1:] = ~(adjusted[:-1] - adjusted[1:] > _TIE_GAP)
    ends = np.cumsum(sizes)
    tied[ends[:-1][ends[:-1] < len(tied)]] = False  # a ranking's first score has no score above
    for end, size in zip(ends.tolist(), sizes, strict=True):
        first = end - size
        if size > 1 and tied[first + 1 : end].any():
            adjusted[first:end] = _lower_ties(adjusted[first:end], tied[first:end])
    return adjusted


def _lower_ties(adjusted: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """The sequential part of ScoreTiesAdjusterReranker over one ranking of rounded scores."""
    starts = np.flatnonzero(tied)
    i, count = int(starts[0]), 0
    while i < len(adjusted):
        if adjusted[i - 1] - adjusted[i] > _TIE_GAP:
            # the run ended; scores stay as rounded until the next raw tie
            count, later = 0, starts[starts > i]
            if not later.size:
                break
            i = int(later[0])
            continue
        count += 1
        adjusted[i] = adjusted[i] - _TIE_STEP * np.float32(count)
        i += 1
    return adjusted


def _bulk_helper() -> Any:
    """srb.BulkSearch (srb/index/java), or None where the JVM was started without it on its
    classpath (before srb.java.prepare_jvm ran): then the query-by-query loop is used."""
    from jnius import JavaException, autoclass

    try:
        return autoclass("srb.BulkSearch")
    except JavaException as exc:
        log.info(
            "BM25: srb.BulkSearch is not on the JVM's classpath (%s); one query at a time", exc
        )
        return None


def _scored_docs_writer() -> Any:
    """A Jackson ObjectMapper writing Anserini's ScoredDoc as [docid, score] (no document)."""
    return _array_mapper([("io.anserini.search.ScoredDoc", ("lucene_document", "lucene_docid"))])


def _array_mapper(classes: list[tuple[str, tuple[str, ...]]]) -> Any:
    """A Jackson ObjectMapper (Anserini's jar) writing each of `classes` as an array of its
    properties in name order, without the named ones."""
    from jnius import autoclass

    mapper = autoclass("com.fasterxml.jackson.databind.ObjectMapper")()
    feature = autoclass("com.fasterxml.jackson.databind.MapperFeature")
    mapper.configure(feature.SORT_PROPERTIES_ALPHABETICALLY, True)
    ignore = autoclass("com.fasterxml.jackson.annotation.JsonIgnoreProperties$Value")
    as_array = autoclass("com.fasterxml.jackson.annotation.JsonFormat$Value").forShape(
        autoclass("com.fasterxml.jackson.annotation.JsonFormat$Shape").ARRAY
    )
    for name, dropped in classes:
        override = mapper.configOverride(autoclass(name))
        override.setIgnorals(ignore.forIgnoredProperties(*dropped))
        override.setFormat(as_array)
    return mapper


def _hits_writer() -> Any:
    """A Jackson ObjectMapper (from Anserini's jar) that writes a list of TopFieldDocs as nested
    arrays, properties in name order: per query [[hit, ...]] (null where its search failed), per
    hit (a FieldDoc) [doc, fields, score]: the Lucene doc number, the sort values [score, id as
    a BytesRef [bytes in base64, length, offset]], and the score Anserini reports (the one
    IndexSearcher fills in for doDocScores). Floats are written by Float.toString."""
    return _array_mapper(
        [
            ("org.apache.lucene.search.TopDocs", ("totalHits", "fields")),
            ("org.apache.lucene.search.TopFieldDocs", ("totalHits", "fields")),
            ("org.apache.lucene.search.ScoreDoc", ("shardIndex",)),
            ("org.apache.lucene.search.FieldDoc", ("shardIndex",)),
            ("org.apache.lucene.util.BytesRef", ("valid",)),
        ]
    )
