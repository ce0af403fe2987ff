"""Content-addressed cache of encoder outputs, beside the LLM call cache.

Key = encoder identity (path + weights hash) + the exact text; value = the float32 vector bytes.
A rerun (or `--forceall`) re-encodes nothing and, since the bytes are stored verbatim, builds a
byte-identical FAISS index. The encoder model itself is loaded only when something is missing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from srb.sqlite_wal import open_wal


def encoder_fingerprint(model_path: str) -> str:
    """Hash of the encoder's weight files (names + sizes + contents), so a swapped model misses."""
    digest = hashlib.sha256()
    for f in sorted(Path(model_path).rglob("*")):
        if f.is_file() and f.suffix in {".safetensors", ".bin", ".json", ".txt"}:
            digest.update(str(f.relative_to(model_path)).encode())
            digest.update(f.read_bytes())
    return digest.hexdigest()[:24]


class EmbeddingCache:
    def __init__(self, path: str | Path):
        self._conn = open_wal(path, check_same_thread=False)  # callers serialise
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, dim INTEGER, vec BLOB)"
        )

    @staticmethod
    def key(fingerprint: str, text: str) -> str:
        return hashlib.sha256(f"{fingerprint}\0{text}".encode()).hexdigest()

    def encode(
        self, fingerprint: str, texts: Sequence[str], encode_fn: Callable[[list[str]], np.ndarray]
    ) -> tuple[np.ndarray, int]:
        """Vectors for `texts` (cached ones replayed); returns them and the number encoded."""
        keys = [self.key(fingerprint, t) for t in texts]
        found: dict[str, np.ndarray] = {}
        for i in range(0, len(keys), 500):
            chunk = keys[i : i + 500]
            rows = self._conn.execute(
                f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})", chunk
            ).fetchall()
            found.update({k: np.frombuffer(v, dtype=np.float32) for k, v in rows})
        missing = sorted({k: t for k, t in zip(keys, texts, strict=True) if k not in found}.items())
        if missing:
            vectors = encode_fn([t for _, t in missing])
            self._conn.execute("BEGIN")
            for (k, _), v in zip(missing, vectors, strict=True):
                v32 = np.ascontiguousarray(v, dtype=np.float32)
                self._conn.execute(
                    "INSERT OR IGNORE INTO vectors VALUES (?,?,?)", (k, len(v32), v32.tobytes())
                )
                found[k] = v32
            self._conn.execute("COMMIT")
        return np.stack([found[k] for k in keys]).astype(np.float32), len(missing)
