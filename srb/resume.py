"""Resume after an interrupted run: the stale lock and orphaned jobs, handled only when safe.

A `snakemake` killed with SIGKILL leaves its directory lock (`.snakemake/locks/`), so the
README's command would refuse to start until `snakemake --unlock`, and its job processes
(scripts Snakemake runs from `.snakemake/scripts/`) keep running as orphans that go on writing
outputs. Unlocking while another `snakemake` is alive in the same directory would let two runs
write the same files, so `prepare_resume` first looks for one: alive, it refuses and names its
pid; none, it stops the orphans (their whole process trees) and removes the lock, and says what
it did. Servers (vLLM, Theoria) are not touched: their leases already tell a dead run's from a
live one's (`srb.services`).
"""

from __future__ import annotations

import os
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
        elif any(JOB_SCRIPTS in arg or arg.startswith(".snakemake/scripts/") for arg in cmdline):
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
            "(kill -INT pid) before starting another run here; its lock was left in place"
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


__all__ = ["prepare_resume", "workflow_processes", "ResumeRefused", "WorkflowProcesses"]
