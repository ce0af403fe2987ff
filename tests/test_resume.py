"""Resume after a killed run (srb/resume.py), with real processes: a stale lock is removed only
when no snakemake runs in the directory, and orphaned job scripts are stopped with their
children; `stop_run` stops a real background snakemake at once, exit status 1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from srb.resume import ResumeRefused, prepare_resume, stop_run, workflow_processes

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


SNAKEFILE = """
rule all:
    input: "slow.txt"

rule slow:
    output: "slow.txt"
    shell: "sleep 300 && touch {output}"
"""


def _sleepers(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [p for p in root.children(recursive=True) if p.name() == "sleep"]
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize("sigint", ["default", "ignored"])
def test_a_background_run_is_stopped_at_once_and_leaves_nothing_to_resume(
    tmp_path: Path, sigint: str
) -> None:
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    # a run started from a script: its own session, no terminal ("ignored": as a script's `cmd &`
    # starts it, SIGINT ignored); a shell between it and this test keeps snakemake from being
    # the test's own child, whose exit status psutil would reap
    trap = "trap '' INT; " if sigint == "ignored" else ""
    run = f"{sys.executable} -m snakemake --cores 1 --quiet >log 2>&1; echo $? >rc"
    wrapper = subprocess.Popen(["bash", "-c", trap + run], cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _sleepers(psutil.Process(wrapper.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        (sleeper,) = _sleepers(psutil.Process(wrapper.pid))  # the 300 s job is running
        (snakemake,) = workflow_processes(tmp_path).snakemake
        ignored = int(
            Path(f"/proc/{snakemake.pid}/status").read_text().split("SigIgn:")[1].split()[0], 16
        )
        assert bool(ignored & (1 << (signal.SIGINT - 1))) == (sigint == "ignored")
        started = time.monotonic()
        stopped, said = stop_run(tmp_path, wait_s=60)
        took = time.monotonic() - started
        wrapper.wait(timeout=10)
        assert stopped, said
        assert took < 30  # a SIGTERM would have waited for the 300 s job
        assert (tmp_path / "rc").read_text().strip() == "1"  # the truth: the target is missing
        assert not sleeper.is_running() or sleeper.status() == psutil.STATUS_ZOMBIE
        assert "stopped in" in said[-1] and not (tmp_path / "slow.txt").exists()
        assert prepare_resume(tmp_path) == []  # no lock, no orphan left behind
    finally:
        if wrapper.poll() is None:
            os.killpg(wrapper.pid, signal.SIGKILL)
            wrapper.wait()


def _background_snakemake(workdir: Path) -> subprocess.Popen:
    """`snakemake --cores 1` in `workdir`, in a session of its own, as this test's child."""
    return subprocess.Popen(
        [sys.executable, "-m", "snakemake", "--cores", "1", "--quiet"],
        cwd=workdir, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def test_a_run_whose_parent_waits_on_the_stop_is_not_waited_for_as_a_zombie(tmp_path: Path) -> None:
    """The caller is snakemake's parent and reaps it only after the stop returns (as the kill
    sweep does): the exited snakemake is a zombie until then and must count as stopped."""
    (tmp_path / "Snakefile").write_text(SNAKEFILE)
    run = _background_snakemake(tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not _sleepers(psutil.Process(run.pid)) and time.monotonic() < deadline:
            time.sleep(0.2)
        started = time.monotonic()
        stopped, said = stop_run(tmp_path, wait_s=60)
        assert stopped and time.monotonic() - started < 30, said
        assert run.wait(timeout=5) == 1  # its status was left for its parent to collect
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()


def test_stop_with_nothing_running_says_so(tmp_path: Path) -> None:
    assert stop_run(tmp_path) == (True, [f"no snakemake is running in {tmp_path.resolve()}"])


SESSION_SNAKEFILE = """
rule all:
    input: "slow.txt"

rule slow:
    output: "slow.txt"
    script: "own_session.py"
"""


def test_a_job_in_a_session_of_its_own_is_stopped_too(tmp_path: Path) -> None:
    """An ingest at the model server's priority leaves snakemake's process group for a session
    of its own (srb.priority.join_server_priority): `stop_run` still stops it at once, instead of
    waiting for it as Snakemake does after its SIGTERM."""
    (tmp_path / "Snakefile").write_text(SESSION_SNAKEFILE)
    (tmp_path / "own_session.py").write_text("import os, time\nos.setsid()\ntime.sleep(300)\n")
    run = _background_snakemake(tmp_path)
    try:
        deadline = time.monotonic() + 120
        while not workflow_processes(tmp_path).jobs and time.monotonic() < deadline:
            time.sleep(0.2)
        (job,) = workflow_processes(tmp_path).jobs
        while os.getsid(job.pid) != job.pid and time.monotonic() < deadline:
            time.sleep(0.1)
        assert os.getsid(job.pid) == job.pid  # out of snakemake's process group
        started = time.monotonic()
        stopped, said = stop_run(tmp_path, wait_s=60)
        assert stopped and time.monotonic() - started < 30, said
        assert run.wait(timeout=5) == 1
        assert not job.is_running() or job.status() == psutil.STATUS_ZOMBIE
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
