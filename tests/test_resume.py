"""Resume after a killed run (srb/resume.py), with real processes: a stale lock is removed only
when no snakemake runs in the directory, and orphaned job scripts are stopped with their
children."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from srb.resume import ResumeRefused, prepare_resume, workflow_processes

SLEEPER = "import time\ntime.sleep(120)\n"


def _lock(workdir: Path) -> Path:
    locks = workdir / ".snakemake" / "locks"
    locks.mkdir(parents=True)
    (locks / "0.input.lock").write_text("x\n")
    (locks / "0.output.lock").write_text("y\n")
    return locks


def _spawn(workdir: Path, script: Path, body: str) -> subprocess.Popen:
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(body)
    proc = subprocess.Popen([sys.executable, str(script.relative_to(workdir))], cwd=workdir)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until its command line is readable
        if psutil.Process(proc.pid).cmdline()[1:]:
            break
        time.sleep(0.05)
    return proc


def test_a_stale_lock_is_removed_and_said(tmp_path: Path) -> None:
    locks = _lock(tmp_path)
    done = prepare_resume(tmp_path)
    assert not list(locks.glob("*.lock"))
    assert len(done) == 1 and "stale lock" in done[0] and "2 files" in done[0]
    assert prepare_resume(tmp_path) == []  # nothing left to do


def test_a_live_snakemake_keeps_its_lock(tmp_path: Path) -> None:
    locks = _lock(tmp_path)
    runner = _spawn(tmp_path, tmp_path / "bin" / "snakemake", SLEEPER)
    try:
        assert [p.pid for p in workflow_processes(tmp_path).snakemake] == [runner.pid]
        with pytest.raises(ResumeRefused, match=rf"pid {runner.pid}"):
            prepare_resume(tmp_path)
        assert len(list(locks.glob("*.lock"))) == 2
        assert runner.poll() is None  # a live run is never stopped
    finally:
        runner.kill()
        runner.wait()


def test_orphaned_jobs_are_stopped_with_their_children(tmp_path: Path) -> None:
    _lock(tmp_path)
    parent_body = (
        "import subprocess, sys, time\n"
        f"subprocess.Popen([sys.executable, '-c', {SLEEPER!r}])\n"
        "time.sleep(120)\n"
    )
    job = _spawn(tmp_path, tmp_path / ".snakemake/scripts/tmpab12.ingest_store.py", parent_body)
    deadline = time.monotonic() + 10
    while not psutil.Process(job.pid).children() and time.monotonic() < deadline:
        time.sleep(0.05)
    (child,) = psutil.Process(job.pid).children()
    elsewhere = subprocess.Popen([sys.executable, "-c", SLEEPER])  # another directory: untouched
    try:
        done = prepare_resume(tmp_path, grace=5)
        job.wait(timeout=10)
        assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE
        assert any(f"pid {job.pid}, 2 processes" in line for line in done)
        assert any("stale lock" in line for line in done)
        assert elsewhere.poll() is None
    finally:
        elsewhere.kill()
        elsewhere.wait()
