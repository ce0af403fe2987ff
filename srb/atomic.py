"""Atomic file writes: a killed job never leaves a truncated file that looks complete."""

from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync_dir(directory: Path) -> None:
    """Make a rename inside `directory` durable (a power cut must not undo a finished write)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def staging_prefix(path: Path) -> str:
    return f".{path.name}."


def clear_stale_staging(path: Path) -> int:
    """Remove what a killed writer of `path` left beside it (`.NAME.*.tmp`, files or
    directories); returns how many. Only one job writes an output at a time (Snakemake), so
    a staging file of `path` that exists when its writer starts is a dead writer's."""
    removed = 0
    for stale in path.parent.glob(f"{staging_prefix(path)}*.tmp"):
        if stale.is_dir() and not stale.is_symlink():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
        removed += 1
    return removed


@contextmanager
def atomic_write(path: str | Path, mode: str = "w") -> Iterator[IO[Any]]:
    """Write to a temporary file beside `path`, fsync it, then rename it over `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_staging(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=staging_prefix(path), suffix=".tmp")
    try:
        with os.fdopen(fd, mode, encoding=None if "b" in mode else "utf-8") as fh:
            yield fh
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
        _fsync_dir(path.parent)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextmanager
def atomic_directory(path: str | Path) -> Iterator[Path]:
    """Fill a staging directory beside `path`; on success it replaces `path` whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clear_stale_staging(path)
    staging = Path(tempfile.mkdtemp(dir=path.parent, prefix=staging_prefix(path), suffix=".tmp"))
    try:
        yield staging
        os.chmod(staging, 0o777 & ~_umask())
        if path.exists():
            shutil.rmtree(path)
        os.replace(staging, path)
        _fsync_dir(path.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


def write_jsonl(path: str | Path, records: Iterable[dict[str, Any]]) -> int:
    n = 0
    with atomic_write(path) as fh:
        for rec in records:
            fh.write(json.dumps(rec, ensure_ascii=False, sort_keys=True) + "\n")
            n += 1
    return n


def write_json(path: str | Path, obj: Any) -> None:
    with atomic_write(path) as fh:
        json.dump(obj, fh, indent=1, sort_keys=True, ensure_ascii=False)
        fh.write("\n")


def link_once(path: Path, write: Callable[[IO[bytes]], None]) -> None:
    """Create `path` with what `write` writes, unless it exists: written to a private file
    beside it, fsynced, then hard-linked into place. link() is atomic on network file systems
    (NFS, Lustre, GPFS) and refuses an existing name, so concurrent writers on any node agree on
    the first file and no reader sees a partial one; a writer killed midway leaves only its
    private `.NAME.*.tmp`, which no reader looks at."""
    tmp = path.with_name(
        f"{staging_prefix(path)}{socket.gethostname()}.{os.getpid()}.{threading.get_ident()}.tmp"
    )
    try:
        with open(tmp, "wb") as fh:
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another writer's came first: that one stands
    finally:
        tmp.unlink(missing_ok=True)


def shared_cache_dir(path: str | Path, what: str) -> Path:
    """The directory of a shared-storage cache (`what`: "LLM call cache", ...), made if absent;
    a file there is refused: a cache path without the .sqlite suffix names a directory."""
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise ValueError(
            f"{what} {path}: a file, but a path without the .sqlite suffix names a directory "
            "(the layout for shared storage)"
        )
    path.mkdir(parents=True, exist_ok=True)
    return path
