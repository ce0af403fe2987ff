"""Content-addressed cache of encoder outputs, beside the LLM call cache.

Key = encoder identity (path + weights hash) + the exact text; value = the float32 vector bytes.
A rerun (or `--forceall`) re-encodes nothing and, since the bytes are stored verbatim, builds a
byte-identical FAISS index. The encoder model itself is loaded only when something is missing.

A path ending in `.sqlite` is one SQLite file (WAL: one machine). Any other path is a directory
of immutable shards (`EmbeddingShards`), safe on a cluster's shared file system: each batch of
misses becomes one `.npz` file, written privately and hard-linked into place (atomic, and
refused if the name exists), and readers index every complete shard they find.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from srb.atomic import link_once, shared_cache_dir
from srb.sqlite_wal import open_wal

#: how vectors are computed (srb.index.dense: each text alone since "per-text"), so vectors
#: a cache holds from batched encoding, which depend on their batch, are not mixed with new ones
ENCODING_SCHEME = "per-text"


def encoder_fingerprint(model_path: str) -> str:
    """Hash of the encoder's weight files (names + sizes + contents), so a swapped model misses,
    and of the encoding scheme."""
    digest = hashlib.sha256(ENCODING_SCHEME.encode())
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


class EmbeddingShards:
    """The embedding cache as a directory of immutable shards, for shared storage (see the
    module). A text two jobs encoded at once lies in both their shards; the shard whose name
    sorts first is used, so every later reader replays the same vector."""

    def __init__(self, path: str | Path):
        self.path = shared_cache_dir(path, "embedding cache")
        self._where: dict[str, tuple[str, int]] = {}  # key -> (shard name, row)
        self._shards: dict[str, np.ndarray] = {}  # shard name -> its vectors, once read

    def _refresh(self) -> None:
        """Index shards written since the last look (by this job or any other)."""
        for shard in sorted(self.path.glob("*.npz")):
            if shard.name in self._shards:
                continue
            with np.load(shard) as data:
                keys, vectors = data["keys"], data["vectors"]
            self._shards[shard.name] = vectors
            for row, key in enumerate(keys.tolist()):
                known = self._where.get(key)
                if known is None or shard.name < known[0]:
                    self._where[key] = (shard.name, row)

    def _vector(self, key: str) -> np.ndarray:
        name, row = self._where[key]
        return self._shards[name][row]

    def _write(self, keys: list[str], vectors: np.ndarray) -> None:
        name = hashlib.sha256("\n".join(keys).encode()).hexdigest()[:32] + ".npz"
        link_once(self.path / name, lambda fh: np.savez(fh, keys=np.array(keys), vectors=vectors))

    def encode(
        self, fingerprint: str, texts: Sequence[str], encode_fn: Callable[[list[str]], np.ndarray]
    ) -> tuple[np.ndarray, int]:
        """Vectors for `texts` (cached ones replayed); returns them and the number encoded."""
        keys = [EmbeddingCache.key(fingerprint, t) for t in texts]
        self._refresh()
        missing = sorted(
            {k: t for k, t in zip(keys, texts, strict=True) if k not in self._where}.items()
        )
        if missing:
            vectors = np.ascontiguousarray(encode_fn([t for _, t in missing]), dtype=np.float32)
            self._write([k for k, _ in missing], vectors)
            self._refresh()
        return np.stack([self._vector(k) for k in keys]).astype(np.float32), len(missing)


def open_embedding_cache(path: str | Path) -> EmbeddingCache | EmbeddingShards:
    """`*.sqlite`: one SQLite file (a workstation); any other path: a directory of shards
    (shared storage on a cluster)."""
    return EmbeddingCache(path) if str(path).endswith(".sqlite") else EmbeddingShards(path)
