"""One way to open the project's SQLite caches: WAL mode, long busy timeout, safe first open."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path


def open_wal(path: str | Path, check_same_thread: bool = True) -> sqlite3.Connection:
    """Autocommit connection in WAL mode. SQLite skips the busy handler when switching the
    journal mode, so a first open racing another process's write is retried here."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(
        path, timeout=120, isolation_level=None, check_same_thread=check_same_thread
    )
    for attempt in range(200):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return conn
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 199:
                raise
            time.sleep(0.05)
    return conn
