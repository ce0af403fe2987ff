"""`srb.start_clock` on real processes: the CPU of a whole process tree is counted (a service's
work may run in a child), and the clock expires on CPU for a busy tree, on wall time for an
idle one."""

from __future__ import annotations

import subprocess
import sys
import time

from srb.start_clock import StartClock, process_tree_cpu_s

SPIN = "import time\nend = time.monotonic() + float(__import__('sys').argv[1])\nwhile time.monotonic() < end: pass\ntime.sleep(60)"
# a parent that only sleeps, whose child spins for argv[1] s
PARENT = (
    "import subprocess, sys, time\n"
    "subprocess.Popen([sys.executable, '-c', sys.argv[2], sys.argv[1]])\n"
    "time.sleep(60)"
)


def test_the_cpu_of_a_spinning_grandchild_is_counted() -> None:
    proc = subprocess.Popen([sys.executable, "-c", PARENT, "1.5", SPIN])
    try:
        time.sleep(3.0)  # the child spun for 1.5 s of (mostly) CPU and now sleeps
        used = process_tree_cpu_s(proc.pid)
        assert 1.0 <= used <= 3.0, used
    finally:
        subprocess.run(["pkill", "-P", str(proc.pid)], check=False)
        proc.kill()
        proc.wait()


def test_a_busy_tree_expires_on_cpu_and_an_idle_one_on_wall_time() -> None:
    busy = subprocess.Popen([sys.executable, "-c", SPIN, "30"])
    idle = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy_clock = StartClock(busy.pid, cpu_limit_s=1.0, wall_limit_s=20)
        idle_clock = StartClock(idle.pid, cpu_limit_s=1.0, wall_limit_s=2.5)
        while not busy_clock.expired():
            time.sleep(0.1)
        assert busy_clock.cpu_s >= 1.0 and busy_clock.wall_s < 20
        assert "s of CPU" in busy_clock.describe()
        while not idle_clock.expired():
            time.sleep(0.1)
        assert idle_clock.cpu_s < 1.0 and idle_clock.wall_s >= 2.5
    finally:
        for proc in (busy, idle):
            proc.kill()
            proc.wait()
