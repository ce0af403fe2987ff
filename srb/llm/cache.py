"""Content-addressed cache of model calls: one SQLite file, or a directory of files.

The key hashes everything that determines an output (backend; the model identity from
`models.model_identity`: weights hash or pinned revision, tokenizer/chat-template/config file
hashes, the vLLM options that change answers with dtype resolved, or a served endpoint's URL and
name; prompt-template hash, rendered messages, sampling parameters, seed), so a warm cache
replays a whole run with zero model calls and byte-identical files. WAL mode + one short transaction per
write make it safe with concurrent Snakemake jobs and with kill -9 (a write commits or vanishes).

SQLite's WAL needs shared memory between its writers, so it is not safe on a network file
system (NFS, Lustre, GPFS), where a cluster's jobs on several nodes would share it. A cache path
that does not end in `.sqlite` is therefore a directory with one file per call (`CallFiles`):
each answer is written to a private temporary file, flushed, then hard-linked into place, and
link() is atomic on such file systems and refuses an existing name, so concurrent writers on
any node agree on the first stored answer, and a reader never sees a partial one.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

from srb.atomic import link_once, shared_cache_dir
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

    def answers_of(self, model: str) -> int:
        """How many answers of `model` the cache holds."""
        with self._lock:
            row = self._conn.execute("SELECT COUNT(*) FROM calls WHERE model = ?", (model,))
            return int(row.fetchone()[0])

    def close(self) -> None:
        self._conn.close()


class CallFiles:
    """The call cache as a directory, `<key[:2]>/<key>.json` per call: safe for concurrent
    writers on shared storage (see the module). Same interface as CallCache."""

    def __init__(self, path: str | Path):
        self.path = shared_cache_dir(path, "LLM call cache")

    def _file(self, key: str) -> Path:
        return self.path / key[:2] / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        try:
            data = json.loads(self._file(key).read_text(encoding="utf-8"))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise RuntimeError(f"LLM call cache {self._file(key)}: unreadable ({exc})") from exc
        return data["response"]

    def put(
        self, key: str, response: dict[str, Any], kind: str = "chat", model: str = ""
    ) -> dict[str, Any]:
        """Store a response unless the key is already there; return what the cache now holds
        (the first stored answer wins, as in CallCache)."""
        final = self._file(key)
        if not final.exists():
            final.parent.mkdir(exist_ok=True)
            record = {"key": key, "kind": kind, "model": model, "response": response}
            data = json.dumps(record, sort_keys=True, ensure_ascii=False).encode("utf-8")
            link_once(final, lambda fh: fh.write(data))
        stored = self.get(key)
        if stored is None:  # cannot happen unless the directory lost the file
            raise RuntimeError(f"LLM call cache {final}: vanished after it was written")
        return stored

    def __len__(self) -> int:
        return sum(1 for _ in self.path.glob("??/*.json"))

    def close(self) -> None:
        pass


def open_call_cache(path: str | Path) -> CallCache | CallFiles:
    """`*.sqlite`: one SQLite file (a workstation); any other path: a directory of call files
    (shared storage on a cluster)."""
    return CallCache(path) if str(path).endswith(".sqlite") else CallFiles(path)
