"""Resume after an interrupted run: the stale lock and orphaned jobs, handled only when safe.

A `snakemake` killed with SIGKILL leaves its directory lock (`.snakemake/locks/`), so the
README's command would refuse to start until `snakemake --unlock`, and its job processes
(scripts Snakemake runs from `.snakemake/scripts/`) keep running as orphans that go on writing
outputs. Unlocking while another `snakemake` is alive in the same directory would let two runs
write the same files, so `prepare_resume` first looks for one: alive, it refuses and names its
pid; none, it stops the orphans (their whole process trees) and removes the lock, and says what
it did. Servers (vLLM, Theoria) are not touched: their leases already tell a dead run's from a
live one's (`srb.services`).

`stop_run` stops a live run that is not in the caller's terminal, at once. A signal to the
`snakemake` pid alone is not enough: after SIGTERM or SIGINT Snakemake 9 starts no new job but
waits for every running one (minutes for the default's ingests), and a run started in the
background by a script ignores SIGINT altogether. So it sends SIGTERM to `snakemake` first (no new
job starts) and then to its running jobs (the processes of its tree in its process group; servers
started in their own session are left to their leases), and waits for it to exit. An LLM job
caches the answers already on their way before it exits (`srb.signals`).
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

LOCKS = Path(".snakemake") / "locks"
JOB_SCRIPTS = f"{os.sep}.snakemake{os.sep}scripts{os.sep}"


class ResumeRefused(RuntimeError):
    """Another snakemake is running in this directory."""


@dataclass(frozen=True)
class WorkflowProcesses:
    snakemake: list[psutil.Process]  # main snakemake processes with this working directory
    jobs: list[psutil.Process]  # job scripts (.snakemake/scripts/...) running in it


def _is_snakemake(cmdline: list[str]) -> bool:
    """`snakemake ...` or `python -m snakemake ...` (not a job script, not this check)."""
    for i, arg in enumerate(cmdline[:3]):
        if Path(arg).name == "snakemake":
            return True
        if arg == "-m" and i + 1 < len(cmdline) and cmdline[i + 1] == "snakemake":
            return True
    return False


def _is_job_script(cmdline: list[str]) -> bool:
    """A job script Snakemake runs (`.snakemake/scripts/...`), not a server a job started."""
    return any(JOB_SCRIPTS in arg or arg.startswith(".snakemake/scripts/") for arg in cmdline)


def workflow_processes(workdir: str | Path) -> WorkflowProcesses:
    """Processes of a workflow run in `workdir`: main snakemake processes and job scripts."""
    here = Path(workdir).resolve()
    mine = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    main, jobs = [], []
    for proc in psutil.process_iter(["pid", "cmdline", "cwd"]):
        info = proc.info
        if info["pid"] in mine or not info["cmdline"] or not info["cwd"]:
            continue
        try:
            if Path(info["cwd"]).resolve() != here:
                continue
        except OSError:
            continue
        cmdline = info["cmdline"]
        if _is_snakemake(cmdline):
            main.append(proc)
        elif _is_job_script(cmdline):
            jobs.append(proc)
    return WorkflowProcesses(main, jobs)


def _stop_tree(proc: psutil.Process, grace: float) -> int:
    """SIGTERM the process and its descendants, SIGKILL what is left after `grace` seconds."""
    try:
        tree = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0
    for p in tree:
        try:
            p.terminate()
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for p in alive:
        try:
            p.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=grace)
    return len(tree)


def prepare_resume(workdir: str | Path = ".", grace: float = 10.0) -> list[str]:
    """Make `workdir` ready for the README's command again; returns what was done, one line each.

    Raises ResumeRefused when a snakemake process is alive in `workdir`.
    """
    workdir = Path(workdir)
    found = workflow_processes(workdir)
    if found.snakemake:
        pids = ", ".join(str(p.pid) for p in found.snakemake)
        raise ResumeRefused(
            f"snakemake is running in {workdir.resolve()} (pid {pids}): wait for it or stop it "
            "(python -m srb stop) before starting another run here; its lock was left in place"
        )
    done = []
    for proc in found.jobs:
        try:
            cmd = " ".join(proc.cmdline())[:160]
        except psutil.NoSuchProcess:
            continue
        n = _stop_tree(proc, grace)
        done.append(
            f"stopped an orphaned job of an interrupted run (pid {proc.pid}, {n} processes): {cmd}"
        )
    locks = workdir / LOCKS
    stale = sorted(locks.glob("*.lock")) if locks.is_dir() else []
    for lock in stale:
        lock.unlink(missing_ok=True)
    if stale:
        done.append(
            f"removed the stale lock of an interrupted run ({len(stale)} files in {locks}): "
            "no snakemake process is alive in this directory"
        )
    return done


def _terminate_run(main: psutil.Process) -> int:
    """SIGTERM to `main`, then to its descendants in its process group and to its job scripts
    that run in a session of their own (an ingest at the model server's priority,
    `srb.priority.join_server_priority`); how many jobs' processes were signalled."""
    try:
        group = os.getpgid(main.pid)
        jobs = main.children(recursive=True)
        main.send_signal(signal.SIGTERM)
    except (psutil.NoSuchProcess, ProcessLookupError):
        return 0
    sent = 0
    for proc in jobs:
        try:
            if os.getpgid(proc.pid) == group or _is_job_script(proc.cmdline()):
                proc.send_signal(signal.SIGTERM)
                sent += 1
        except (psutil.NoSuchProcess, psutil.AccessDenied, ProcessLookupError):
            pass
    return sent


def _exited(proc: psutil.Process) -> bool:
    """Gone, or a zombie: exited, its status not yet collected by its parent (which may be
    the very process waiting on this stop)."""
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_exited(procs: list[psutil.Process], wait_s: float) -> list[psutil.Process]:
    """Those of `procs` still running after up to `wait_s` seconds."""
    deadline = time.monotonic() + wait_s
    alive = [p for p in procs if not _exited(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = [p for p in alive if not _exited(p)]
    return alive


def stop_run(workdir: str | Path = ".", wait_s: float = 120.0) -> tuple[bool, list[str]]:
    """Stop the snakemake run(s) in `workdir` now; (all stopped, what was done). Snakemake
    removes the interrupted jobs' outputs as incomplete and its lock, so the README's command
    resumes from what was finished."""
    workdir = Path(workdir).resolve()
    runs = workflow_processes(workdir).snakemake
    if not runs:
        return True, [f"no snakemake is running in {workdir}"]
    started = time.monotonic()
    done = [f"sent SIGTERM to snakemake pid {p.pid}, then to {_terminate_run(p)} processes of "
            "its running jobs" for p in runs]  # fmt: skip
    alive = _wait_exited(runs, wait_s)
    took = time.monotonic() - started
    if alive:
        pids = ", ".join(str(p.pid) for p in alive)
        done.append(
            f"snakemake (pid {pids}) is still running after {took:.0f} s; run this again, or "
            "kill -9 it and then `python -m srb resume`"
        )
        return False, done
    done.append(f"stopped in {took:.1f} s; `make run` (or your snakemake command) resumes")
    return True, done


__all__ = [
    "prepare_resume",
    "stop_run",
    "workflow_processes",
    "ResumeRefused",
    "WorkflowProcesses",
]
