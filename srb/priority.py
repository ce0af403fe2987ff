"""CPU priority: the model server computes, everything else yields to it.

Why this exists: vLLM's CPU worker runs one OpenMP thread per core, and each of its steps waits
for the slowest thread. Linux shares the CPU between *autogroups* (one per session) before it
looks at `nice`, and the server runs in its own session, so a one-thread job beside it (a
MiniLM encoder) took a full core from it however it was niced: on 2 cores, 10 extraction
prompts took 89.7 s instead of 34.9 s, with the encoder at `nice 19` 91.7 s. With the
encoder's *autogroup* at nice 10 they took 36.4 s, and the encoder still ran at 57% of its
speed in the server's gaps (`bench/cpu_priority.py`). So helper services (Hindsight's API,
its PostgreSQL, Theoria's service) and the workflow's own session (when `python -m srb run`
started it) get a higher autogroup nice; the vLLM server keeps nice 0, unless its model's
`vllm.cpu_priority` is `shared` (`srb.llm.server.keeps_priority`), and so do the encoder
service and Cognee's worker, whose work is the critical path of the jobs waiting on them.

An autogroup nice set by an unprivileged process can only be raised, and it holds for every
process of the session, so it is only ever set on a session srb created itself.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import signal
import time
from pathlib import Path

log = logging.getLogger(__name__)

#: Autogroup nice of everything that is not a model server: 10 kept the server at 96-104% of
#: its speed alone (nice 5: 120%, 0: 257%) while the other work kept ~57% of its own.
HELPER_NICE = 10

AUTOGROUP_SWITCH = Path("/proc/sys/kernel/sched_autogroup_enabled")


def autogroup_enabled() -> bool:
    """Whether the kernel schedules by autogroup (else plain `nice` already does the job).
    Both the switch and a readable `/proc/self/autogroup` are required: some sandboxed kernels
    (a CI runner's) show the switch but an empty autogroup file."""
    try:
        switched_on = AUTOGROUP_SWITCH.read_text().strip() == "1"
    except OSError:
        return False
    return switched_on and autogroup_nice() is not None


def autogroup_nice(pid: int | str = "self") -> int | None:
    """The autogroup nice of `pid`'s session, or None where the kernel shows no autogroup."""
    try:
        text = Path(f"/proc/{pid}/autogroup").read_text()  # "/autogroup-123 nice 10"
    except OSError:
        return None
    found = re.search(r"\bnice\s+(-?\d+)", text)
    return int(found.group(1)) if found else None


#: How long to retry a write the kernel refused as too soon after another (EAGAIN).
AUTOGROUP_RETRY_S = 3.0


def set_autogroup_nice(nice: int, pid: int | str = "self") -> None:
    """Set the autogroup nice of `pid`'s session (it must be a session srb created). Raises
    OSError where it cannot be set (e.g. lowering it without privilege).

    Without CAP_SYS_ADMIN (any user but root) the kernel takes one such write per 100 ms on the
    whole machine and refuses the others with EAGAIN; helpers start together, so a refused
    write is retried (CI had a run's session left at nice 0 by exactly this)."""
    deadline = time.monotonic() + AUTOGROUP_RETRY_S
    while True:
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(int(nice)))
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.03)


def deprioritise(pid: int, nice: int = HELPER_NICE, what: str = "helper") -> bool:
    """Give the session that `pid` leads (a helper srb started with its own session) the
    helper nice: its autogroup's, or, on a kernel without autogroups, every process of its
    process group. Whether it was set; a failure is logged (the helper still works, only
    slower beside a model server)."""
    try:
        if autogroup_enabled():
            set_autogroup_nice(nice, pid)
        else:
            os.setpriority(os.PRIO_PGRP, os.getpgid(pid), nice)
    except OSError as err:
        log.warning("could not lower the CPU priority of %s (pid %d): %s", what, pid, err)
        return False
    return True


PR_SET_PDEATHSIG = 1


def die_with_parent(sig: int) -> None:
    """In a child before exec (or a process on itself): the kernel sends it `sig` when the
    thread that started it exits (so start servers from the job's main thread), and a new
    session keeps a Ctrl-C at the terminal from reaching it before the job can stop it in order.
    The new session is also a new autogroup, at nice 0."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, sig)
    os.setsid()


def caller_nice() -> int:
    """This process's CPU nice as the scheduler applies it: its session's autogroup nice where
    the kernel schedules by autogroup, else its own nice."""
    if autogroup_enabled():
        return autogroup_nice() or 0
    return os.getpriority(os.PRIO_PROCESS, 0)


def match_caller_priority(pid: int, what: str) -> bool:
    """Give a helper this process started in its own session (PostgreSQL, Hindsight's API) the
    caller's priority: the helper nice beside a job of the workflow's session, none beside an
    ingest that joined the model server's priority (`join_server_priority`), whose every step
    waits on that helper."""
    nice = caller_nice()
    return deprioritise(pid, nice, what) if nice > 0 else False


def join_server_priority() -> bool:
    """Move this job (an ingest, a model client on the ingest phase's critical path) out of the
    workflow's helper-niced session into one of its own, whose autogroup has the model server's
    nice 0. Measured (stop 39's cold run): at the helper nice beside the ingest model's server,
    which was busy with the first ingests' few requests, Graphiti's and Mem0's jobs sent their
    first request 3 min after they started, Hindsight's 4 min (its API came up after 3 min),
    and Prism and the sequential observer, which replay cached requests, took 1.5 min to start;
    the server meanwhile ran batches of 2-8 requests. Their own CPU is small (5-25 s each), so
    they take little from the server. It dies with its parent as a job does (SIGTERM). Whether
    it moved: not where the caller is not niced, or where the kernel has no autogroups (a nice
    cannot be lowered without privilege)."""
    if not autogroup_enabled() or not autogroup_nice():
        return False
    try:
        die_with_parent(signal.SIGTERM)
    except OSError as err:  # a process group leader cannot start a session
        log.warning("this job stays at the helper nice: %s", err)
        return False
    moved = autogroup_nice() == 0
    if moved:
        log.info("this job runs in a session of its own at the model server's priority (nice 0)")
    return moved


__all__ = [
    "HELPER_NICE",
    "autogroup_enabled",
    "autogroup_nice",
    "caller_nice",
    "deprioritise",
    "die_with_parent",
    "join_server_priority",
    "match_caller_priority",
    "set_autogroup_nice",
]
