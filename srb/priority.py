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

import logging
import os
import re
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


def set_autogroup_nice(nice: int, pid: int | str = "self") -> None:
    """Set the autogroup nice of `pid`'s session (it must be a session srb created). Raises
    OSError where it cannot be set (e.g. lowering it without privilege)."""
    Path(f"/proc/{pid}/autogroup").write_text(str(int(nice)))


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


__all__ = [
    "HELPER_NICE",
    "autogroup_enabled",
    "autogroup_nice",
    "set_autogroup_nice",
    "deprioritise",
]
