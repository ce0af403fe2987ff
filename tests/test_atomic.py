"""Atomic writes: fsynced before the rename; a failed write leaves the previous file or index."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import faiss
import numpy as np
import pytest

from srb import atomic
from srb.atomic import atomic_directory, atomic_write, write_json, write_jsonl
from srb.index.dense import save_dense_index


def test_atomic_write_fsyncs_the_file_and_its_directory(tmp_path: Path, monkeypatch) -> None:
    synced: list[str] = []
    real_fsync = os.fsync

    def recording_fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", recording_fsync)
    write_json(tmp_path / "out.json", {"a": 1})
    assert (tmp_path / "out.json").read_text() == '{\n "a": 1\n}\n'
    # the temporary file (renamed afterwards) and then the directory holding the rename
    assert len(synced) == 2
    assert Path(synced[0]).parent == tmp_path and Path(synced[0]).name.startswith(".out.json.")
    assert Path(synced[1]) == tmp_path


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "table.csv"
    target.write_text("old\n")
    with pytest.raises(RuntimeError), atomic_write(target) as fh:
        fh.write("half of the new")
        raise RuntimeError("killed")
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["table.csv"]


def _index(n: int) -> faiss.Index:
    index = faiss.IndexFlatIP(4)
    index.add(np.eye(n, 4, dtype="float32"))
    return index


def test_dense_index_is_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    directory = tmp_path / "dense"
    save_dense_index(_index(3), ["a", "b", "c"], directory, {"encoder": "e"})
    assert faiss.read_index(str(directory / "index.faiss")).ntotal == 3

    def ids_then_crash() -> Iterator[str]:
        yield "a"
        raise RuntimeError("killed while writing ids")

    with pytest.raises(RuntimeError):
        save_dense_index(_index(4), ids_then_crash(), directory, {"encoder": "e"})  # type: ignore[arg-type]
    # the old index, ids and meta still agree with each other; nothing half-written remains
    assert faiss.read_index(str(directory / "index.faiss")).ntotal == 3
    assert (directory / "ids.txt").read_text() == "a\nb\nc\n"
    assert '"n": 3' in (directory / "meta.json").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dense"]
    save_dense_index(_index(4), ["w", "x", "y", "z"], directory, {"encoder": "e"})
    assert faiss.read_index(str(directory / "index.faiss")).ntotal == 4
    assert (directory / "ids.txt").read_text().split() == ["w", "x", "y", "z"]


def test_a_killed_writers_staging_is_cleared_by_the_next_write(tmp_path: Path) -> None:
    """SIGKILL (or the SIGTERM `srb resume` sends an orphan) runs no cleanup: the next writer
    of the same output removes what the dead one left, and only that."""
    import subprocess
    import sys

    target = tmp_path / "cells.jsonl"
    other = tmp_path / ".other.jsonl.x.tmp"
    other.write_text("another output's staging")
    script = (
        "import os, signal\n"
        "from srb.atomic import atomic_directory, atomic_write\n"
        f"with atomic_directory({str(tmp_path / 'index')!r}) as d:\n"
        "    (d / 'part').write_text('half')\n"
        f"    with atomic_write({str(target)!r}) as fh:\n"
        "        fh.write('half a record'); fh.flush()\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script])
    assert proc.returncode == -9
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp"))
    assert len(left) == 3  # the dead writer's file and directory, and the other output's
    write_jsonl(target, [{"a": 1}])
    with atomic_directory(tmp_path / "index") as d:
        (d / "part").write_text("whole")
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.jsonl.x.tmp", "cells.jsonl",
                                                           "index"]  # fmt: skip
    assert (tmp_path / "index/part").read_text() == "whole"
