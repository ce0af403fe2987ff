"""`python -m srb run ARGS`: snakemake ARGS in a session of its own that yields the CPU to the
model server (what `make run` calls).

Why: the vLLM server runs in its own session, and Linux shares the CPU between sessions
(autogroups) before it looks at `nice`; beside it, the jobs' session took one of its two cores
and slowed every model call 2.6x (`srb/priority.py`). Only a session srb created may be given
a higher autogroup nice (it holds for every process of the session, and a terminal's session
is the user's), so snakemake runs in a new one. It stays a foreground run: Ctrl-C, SIGTERM and
SIGHUP sent to this process reach snakemake's whole process group, as a Ctrl-C at the terminal
does, and snakemake gets SIGTERM if this process dies however it dies.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from srb.priority import HELPER_NICE, deprioritise, die_with_parent

log = logging.getLogger(__name__)

FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def snakemake_command() -> str:
    """The snakemake beside this interpreter (the project's venv), else the one on PATH."""
    here = Path(sys.executable).parent / "snakemake"
    return str(here) if here.is_file() else (shutil.which("snakemake") or "snakemake")


def _new_session_dying_with_parent() -> None:
    die_with_parent(signal.SIGTERM)


def run_in_own_session(command: Sequence[str], nice: int = HELPER_NICE) -> int:
    """Run `command` as the leader of a new session with autogroup nice `nice`; forward the
    stopping signals to its process group; its exit status (128 + N when killed by signal N)."""
    proc = subprocess.Popen(list(command), preexec_fn=_new_session_dying_with_parent)
    if deprioritise(proc.pid, nice, what="the workflow's session"):
        log.info("workflow session pid %d runs at autogroup nice %d", proc.pid, nice)

    def forward(sig: int, _frame: object) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass

    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    try:
        status = proc.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return 128 - status if status < 0 else status


def run_workflow(args: Sequence[str], nice: int = HELPER_NICE) -> int:
    """`snakemake ARGS` in its own session (see the module docstring)."""
    return run_in_own_session([snakemake_command(), *args], nice)


__all__ = ["run_in_own_session", "run_workflow", "snakemake_command"]
