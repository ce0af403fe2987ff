"""How long a starting helper service may take, counted in the CPU time it got.

Why: helpers run at the helper priority (`srb.priority`), so beside a busy model server and
other jobs a start can stretch: in CI, Hindsight's API came up in 31 s early in a job and,
started again later beside more work, was still importing and migrating (not stuck) after 3
min. A wall-clock limit either fails such a start or waits far too long for a truly stuck one.
The clock below expires when the process tree has used `cpu_limit_s` of CPU without becoming
ready (it is working but not getting there), or when `wall_limit_s` passed (it is stuck, or
starved beyond reason).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
#: wall-clock cap as a multiple of the CPU limit, for a helper that gets little CPU
WALL_FACTOR = 6.0


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rfind(")") + 2 :].split()  # fields from 3 (state) on; comm may hold spaces


def process_tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system, with reaped children's) used by `pid` and its live
    descendants; 0 where /proc cannot be read."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if fields is None:
            continue
        children.setdefault(int(fields[1]), []).append(int(entry.name))  # field 4: ppid
        ticks[int(entry.name)] = sum(int(f) for f in fields[11:15])  # 14-17: utime..cstime
    tree, frontier = {pid}, [pid]
    while frontier:
        found = children.get(frontier.pop(), [])
        tree.update(found)
        frontier.extend(found)
    return sum(ticks.get(p, 0) for p in tree) / TICKS_PER_S


class StartClock:
    """Expires once the process tree of `pid` used `cpu_limit_s` of CPU or `wall_limit_s`
    (default `WALL_FACTOR` × the CPU limit) of wall time passed."""

    def __init__(self, pid: int, cpu_limit_s: float, wall_limit_s: float | None = None):
        self.pid = pid
        self.cpu_limit_s = float(cpu_limit_s)
        self.wall_limit_s = float(wall_limit_s or WALL_FACTOR * cpu_limit_s)
        self.started = time.monotonic()
        self.cpu_s = 0.0

    @property
    def wall_s(self) -> float:
        return time.monotonic() - self.started

    def expired(self) -> bool:
        self.cpu_s = process_tree_cpu_s(self.pid)
        return self.cpu_s >= self.cpu_limit_s or self.wall_s >= self.wall_limit_s

    def describe(self) -> str:
        """Which limit was reached, for an error message."""
        if self.cpu_s >= self.cpu_limit_s:
            return (
                f"it used its {self.cpu_limit_s:.0f} s CPU limit ({self.cpu_s:.0f} s of CPU in "
                f"{self.wall_s:.0f} s of wall time)"
            )
        return (
            f"it reached its {self.wall_limit_s:.0f} s wall-clock limit ({self.cpu_s:.0f} s of CPU "
            f"of its {self.cpu_limit_s:.0f} s CPU limit)"
        )


__all__ = ["StartClock", "process_tree_cpu_s", "WALL_FACTOR"]
