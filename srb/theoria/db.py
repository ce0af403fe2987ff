"""Theoria's store: one SQLite file (evidence, RAPTOR summaries, links, communities, theories,
embeddings as float32 BLOBs, BM25 sparse vectors) plus a FAISS index derived from it.

Why SQLite: the paper keeps its tables in SQLite; each ingest step commits in one transaction,
so a crash leaves the last committed state and a rerun resumes from it. The FAISS file is
rebuilt from the BLOBs after every structural change (written to a temporary name, then
renamed), so it can never disagree with the tables for long.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from srb.theoria import sparse

DB_FILE = "theoria.sqlite"
#: the canonical order of evidence: arrival batch, then paper, then position in the paper, so
#: concurrently ingested papers give the same clustering and theories as sequential ones
ORDER = "batch, paper_id, local, id"
FAISS_FILE = "vectors.faiss"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS papers (
    paper_id TEXT PRIMARY KEY, chars INTEGER NOT NULL, chunks INTEGER NOT NULL,
    passes INTEGER NOT NULL, failed_passes TEXT NOT NULL, batch INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS evidence (
    id TEXT PRIMARY KEY, paper_id TEXT NOT NULL, aspect TEXT NOT NULL, chunk INTEGER NOT NULL,
    text TEXT NOT NULL, start INTEGER, end_ INTEGER, batch INTEGER NOT NULL,
    local INTEGER NOT NULL, embedding BLOB);
CREATE INDEX IF NOT EXISTS evidence_paper ON evidence(paper_id);
CREATE TABLE IF NOT EXISTS raptor (
    id TEXT PRIMARY KEY, level INTEGER NOT NULL, text TEXT NOT NULL, children TEXT NOT NULL,
    paper_ids TEXT NOT NULL, embedding BLOB);
CREATE TABLE IF NOT EXISTS links (
    src TEXT NOT NULL, dst TEXT NOT NULL, relation TEXT NOT NULL, cosine REAL NOT NULL,
    PRIMARY KEY (src, dst));
CREATE TABLE IF NOT EXISTS link_decisions (src TEXT PRIMARY KEY, candidates INTEGER NOT NULL,
    outcome TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS communities (
    id TEXT PRIMARY KEY, level TEXT NOT NULL, parent TEXT, size INTEGER NOT NULL,
    centroid BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS membership (
    item_id TEXT NOT NULL, community_id TEXT NOT NULL, weight REAL NOT NULL,
    PRIMARY KEY (item_id, community_id));
CREATE TABLE IF NOT EXISTS community_edges (
    a TEXT NOT NULL, b TEXT NOT NULL, weight REAL NOT NULL, PRIMARY KEY (a, b));
CREATE TABLE IF NOT EXISTS theories (
    id TEXT PRIMARY KEY, community_id TEXT NOT NULL, statement TEXT NOT NULL,
    support INTEGER NOT NULL, contradict INTEGER NOT NULL, confidence TEXT NOT NULL,
    batch INTEGER NOT NULL, embedding BLOB NOT NULL);
CREATE TABLE IF NOT EXISTS theory_evidence (
    theory_id TEXT NOT NULL, item_id TEXT NOT NULL, stance TEXT NOT NULL,
    PRIMARY KEY (theory_id, item_id));
CREATE TABLE IF NOT EXISTS theory_events (
    batch INTEGER NOT NULL, theory_id TEXT NOT NULL, event TEXT NOT NULL,
    before_ TEXT, after_ TEXT NOT NULL);
"""


def to_blob(vector: np.ndarray) -> bytes:
    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes) -> np.ndarray:
    return np.frombuffer(blob, dtype="<f4")


@dataclass(frozen=True)
class Evidence:
    id: str
    paper_id: str
    aspect: str
    text: str
    start: int | None
    end: int | None


@dataclass(frozen=True)
class Summary:
    id: str
    text: str
    children: tuple[str, ...]
    paper_ids: tuple[str, ...]


class TheoriaDB:
    """The SQLite file, shared by threads (one connection, one lock)."""

    def __init__(self, store_dir: str | Path, readonly: bool = False):
        self.dir = Path(store_dir)
        self.path = self.dir / DB_FILE
        if readonly:
            if not self.path.is_file():
                raise FileNotFoundError(f"theoria: no store at {self.path}")
            uri = f"file:{self.path}?mode=ro"
            self.conn = sqlite3.connect(uri, uri=True, check_same_thread=False)
        else:
            self.dir.mkdir(parents=True, exist_ok=True)
            self.conn = sqlite3.connect(self.path, check_same_thread=False)
            self.conn.executescript(SCHEMA + sparse.SCHEMA)
        self.lock = threading.RLock()
        self.readonly = readonly
        #: a read-only store never changes: its rows and vectors are read once, not per query
        self._memo: dict[Any, Any] = {}

    def _once(self, key: Any, compute: Any) -> Any:
        if not self.readonly:
            return compute()
        with self.lock:
            if key not in self._memo:
                self._memo[key] = compute()
            return self._memo[key]

    def close(self) -> None:
        self.conn.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """One atomic step: committed whole or rolled back whole."""
        with self.lock:
            try:
                yield self.conn
                self.conn.commit()
            except BaseException:
                self.conn.rollback()
                raise

    def query(self, sql: str, args: Iterable[Any] = ()) -> list[tuple[Any, ...]]:
        with self.lock:
            return list(self.conn.execute(sql, tuple(args)))

    # -------------------------------------------------------------- meta
    def get_meta(self, key: str, default: Any = None) -> Any:
        rows = self.query("SELECT value FROM meta WHERE key = ?", (key,))
        return json.loads(rows[0][0]) if rows else default

    def set_meta(self, conn: sqlite3.Connection, key: str, value: Any) -> None:
        conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value))
        )

    # -------------------------------------------------------------- evidence
    def paper_ids(self) -> list[str]:
        return [r[0] for r in self.query("SELECT paper_id FROM papers ORDER BY paper_id")]

    def evidence(self, where: str = "", args: Iterable[Any] = ()) -> list[Evidence]:
        args = tuple(args)
        return list(self._once(("evidence", where, args), lambda: self._evidence(where, args)))

    def _evidence(self, where: str, args: tuple[Any, ...]) -> list[Evidence]:
        rows = self.query(
            f"SELECT id, paper_id, aspect, text, start, end_ FROM evidence {where} "
            f"ORDER BY {ORDER}",
            args,
        )
        return [Evidence(*r) for r in rows]

    def evidence_vectors(self, ids: list[str] | None = None) -> tuple[list[str], np.ndarray]:
        if ids is None:
            return self._once(
                "evidence_vectors",
                lambda: _stack(self.query(f"SELECT id, embedding FROM evidence ORDER BY {ORDER}")),
            )
        wanted = set(ids)
        rows = self.query(f"SELECT id, embedding FROM evidence ORDER BY {ORDER}")
        return _stack([r for r in rows if r[0] in wanted])

    def summaries(self) -> list[Summary]:
        rows = self._once(
            "summaries",
            lambda: self.query("SELECT id, text, children, paper_ids FROM raptor ORDER BY id"),
        )
        return [Summary(r[0], r[1], tuple(json.loads(r[2])), tuple(json.loads(r[3]))) for r in rows]

    def summary_vectors(self) -> tuple[list[str], np.ndarray]:
        return self._once(
            "summary_vectors",
            lambda: _stack(self.query("SELECT id, embedding FROM raptor ORDER BY id")),
        )

    def items_text(self) -> list[tuple[str, str]]:
        """(id, text) of every retrievable item: claims in canonical order, then summaries."""
        return [(e.id, e.text) for e in self.evidence()] + [
            (s.id, s.text) for s in self.summaries()
        ]

    def sparse_index(self) -> sparse.SparseIndex:
        """The stored BM25 vectors, inverted for scoring (needs the JVM for the analyzer)."""
        return self._once("sparse_index", self._sparse_index)

    def _sparse_index(self) -> sparse.SparseIndex:
        stats = self.get_meta("bm25")
        if stats is None:
            raise RuntimeError(f"theoria: {self.path} holds no BM25 vectors (built before them?)")
        order = {iid: i for i, (iid, _) in enumerate(self.items_text())}
        rows = self.query("SELECT item_id, norm, term_ids, freqs FROM bm25_vectors")
        rows.sort(key=lambda r: order.get(r[0], len(order)))
        return sparse.load_sparse_index(
            rows, self.query("SELECT term_id, term, idf FROM bm25_terms"), stats
        )

    def counts(self) -> dict[str, int]:
        tables = (
            "papers",
            "evidence",
            "raptor",
            "links",
            "theories",
            "theory_evidence",
            "bm25_vectors",
        )
        out = {t: int(self.query(f"SELECT COUNT(*) FROM {t}")[0][0]) for t in tables}
        for level in ("coarse", "fine"):
            out[f"{level}_communities"] = int(
                self.query("SELECT COUNT(*) FROM communities WHERE level = ?", (level,))[0][0]
            )
        out["community_edges"] = int(self.query("SELECT COUNT(*) FROM community_edges")[0][0])
        return out


def _stack(rows: list[tuple[Any, ...]]) -> tuple[list[str], np.ndarray]:
    """(ids, one float32 row per id) from (id, BLOB) rows."""
    if not rows:
        return [], np.zeros((0, 0), dtype=np.float32)
    return [r[0] for r in rows], np.vstack([from_blob(r[1]) for r in rows])


def write_faiss(db: TheoriaDB) -> None:
    """The dense index over evidence and summaries (inner product of unit vectors), rebuilt
    from the BLOBs; ids are positions in meta `faiss_ids`."""
    import faiss

    ev_ids, ev = db.evidence_vectors()
    sm_ids, sm = db.summary_vectors()
    ids = ev_ids + sm_ids
    parts = [m for m in (ev, sm) if m.size]
    if not parts:
        return
    vectors = np.vstack(parts).astype(np.float32)
    index = faiss.IndexFlatIP(vectors.shape[1])
    index.add(vectors)
    tmp = db.dir / (FAISS_FILE + ".tmp")
    faiss.write_index(index, str(tmp))
    os.replace(tmp, db.dir / FAISS_FILE)
    with db.transaction() as conn:
        db.set_meta(conn, "faiss_ids", ids)


def write_bm25(db: TheoriaDB, k1: float, b: float) -> dict[str, Any]:
    """Replace the BM25 sparse vectors with those of every current item, in one transaction
    (idf and the average length change with every item, so every vector is rewritten)."""
    items = db.items_text()
    with db.transaction() as conn:
        stats = sparse.write_sparse_vectors(conn, items, k1, b)
        db.set_meta(conn, "bm25", stats)
    return stats
