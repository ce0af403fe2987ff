"""`srb.start_clock` on real processes: the CPU of a whole process tree is counted (a service's
work may run in a child), and the clock expires on CPU for a busy tree, on wall time for an
idle one."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from srb.start_clock import StartClock, process_tree_cpu_s

# spins until it used argv[1] s of CPU (not wall time: a loaded runner may give it little),
# then marks argv[2] and sleeps
SPIN = (
    "import sys, time\n"
    "while time.process_time() < float(sys.argv[1]): pass\n"
    "open(sys.argv[2], 'w').close()\n"
    "time.sleep(60)"
)
# a parent that only sleeps, whose child spins
PARENT = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', sys.argv[1], *sys.argv[2:]])\n"
    "time.sleep(60)"
)


def test_the_cpu_of_a_spinning_grandchild_is_counted(tmp_path: Path) -> None:
    done = tmp_path / "spun"
    proc = subprocess.Popen([sys.executable, "-c", PARENT, SPIN, "1.5", str(done)])
    try:
        deadline = time.monotonic() + 60
        while not done.exists():
            assert time.monotonic() < deadline, "the child never spun its 1.5 s of CPU"
            time.sleep(0.1)
        used = process_tree_cpu_s(proc.pid)
        assert 1.5 <= used <= 3.0, used  # the spin plus two interpreters' start-up
    finally:
        subprocess.run(["pkill", "-P", str(proc.pid)], check=False)
        proc.kill()
        proc.wait()


def test_a_busy_tree_expires_on_cpu_and_an_idle_one_on_wall_time(tmp_path: Path) -> None:
    busy = subprocess.Popen([sys.executable, "-c", SPIN, "30", str(tmp_path / "spun")])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy_clock = StartClock(busy.pid, cpu_limit_s=1.0, wall_limit_s=20)
        idle_clock = StartClock(idle.pid, cpu_limit_s=1.0, wall_limit_s=3.0)
        while not busy_clock.expired():
            time.sleep(0.1)
        assert busy_clock.cpu_s >= 1.0 and busy_clock.wall_s < 20
        assert "used its 1 s CPU limit" in busy_clock.describe()
        while not idle_clock.expired():
            time.sleep(0.1)
        assert idle_clock.cpu_s < 1.0 and idle_clock.wall_s >= 3.0
        assert "reached its 3 s wall-clock limit" in idle_clock.describe()
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()
