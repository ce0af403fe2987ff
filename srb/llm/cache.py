"""Content-addressed cache of model calls in SQLite.

The key hashes everything that determines an output (backend; the model identity from
`models.model_identity`: weights hash or pinned revision, tokenizer/chat-template/config file
hashes, the vLLM options that change answers with dtype resolved, or a served endpoint's URL and
name; prompt-template hash, rendered messages, sampling parameters, seed), so a warm cache
replays a whole run with zero model calls and byte-identical files. WAL mode + one short transaction per
write make it safe with concurrent Snakemake jobs and with kill -9 (a write commits or vanishes).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from srb.sqlite_wal import open_wal


def call_key(**parts: Any) -> str:
    canonical = json.dumps(parts, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class CallCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._conn = open_wal(self.path, check_same_thread=False)
        self._lock = threading.Lock()  # one connection, shared by a job's calling threads
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS calls (key TEXT PRIMARY KEY, kind TEXT, model TEXT,"
            " response TEXT NOT NULL, created REAL NOT NULL)"
        )

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT response FROM calls WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def put(
        self, key: str, response: dict[str, Any], kind: str = "chat", model: str = ""
    ) -> dict[str, Any]:
        """Store a response unless the key is already there; return what the cache now holds.

        Two jobs (or two questions) can send the same prompt at once and, on a batching server,
        get different text back. The first stored one wins, and both callers must use *it*, or
        the files written now would differ from the ones a warm rerun replays.
        """
        with self._lock:
            self._conn.execute(
                "INSERT OR IGNORE INTO calls (key, kind, model, response, created) VALUES (?,?,?,?,?)",
                (
                    key,
                    kind,
                    model,
                    json.dumps(response, sort_keys=True, ensure_ascii=False),
                    time.time(),
                ),
            )
        stored = self.get(key)
        if stored is None:  # cannot happen unless the database lost the row
            raise RuntimeError(f"LLM call cache {self.path}: key {key} vanished after insert")
        return stored

    def __len__(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0])

    def close(self) -> None:
        self._conn.close()
