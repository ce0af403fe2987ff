"""`python -m srb run` (what `make run` calls), with real processes: snakemake's stand-in runs
as the leader of a new session at the helper priority, its exit status comes back, and the
stopping signals reach its whole process group, as a Ctrl-C at the terminal would; if the
wrapper is killed outright, the run is told to stop (SIGTERM) rather than left running."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from srb.priority import HELPER_NICE, autogroup_enabled, autogroup_nice
from srb.run import run_in_own_session

# argv: a report file. Writes its session facts, starts a child in its process group, then
# records the signals it and the child get until the child is gone.
CHILD = """
import os, signal, subprocess, sys, time
report = sys.argv[1]
def note(line):
    with open(report, "a") as fh:
        fh.write(line + "\\n")
ag = (open("/proc/self/autogroup").read().split() or ["-"])[-1] if os.path.exists("/proc/self/autogroup") else "-"
note(f"leader {os.getsid(0) == os.getpid()} nice {os.getpriority(os.PRIO_PROCESS, 0)} ag {ag}")
grandchild = subprocess.Popen([sys.executable, "-c", (
    "import signal, sys, time\\n"
    "def h(s, f):\\n"
    "    open(sys.argv[1], 'a').write(f'grandchild got {s}\\\\n'); sys.exit(0)\\n"
    "for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP): signal.signal(s, h)\\n"
    "open(sys.argv[1], 'a').write('grandchild ready\\\\n')\\n"
    "time.sleep(60)"), report])
def h(s, f):
    note(f"child got {s}")
    grandchild.wait()
    sys.exit(7)
for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
    signal.signal(s, h)
if len(sys.argv) > 2:
    sys.exit(int(sys.argv[2]))
time.sleep(60)
"""

WRAPPER = """
import sys
from srb.run import run_in_own_session
sys.exit(run_in_own_session([sys.executable, "-c", sys.argv[1], sys.argv[2]]))
"""


def lines(report: Path) -> list[str]:
    return report.read_text().splitlines() if report.exists() else []


def wait_for(report: Path, text: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not any(text in line for line in lines(report)):
        assert time.monotonic() < deadline, f"no {text!r} in {lines(report)}"
        time.sleep(0.05)


def test_the_run_leads_its_own_session_at_the_helper_priority(tmp_path: Path) -> None:
    report = tmp_path / "report"
    ours = autogroup_nice()
    assert run_in_own_session([sys.executable, "-c", CHILD, str(report), "3"]) == 3
    first = lines(report)[0].split()
    assert first[:2] == ["leader", "True"]
    if autogroup_enabled():
        assert first[5] == str(HELPER_NICE)  # the new session's autogroup, read in the child
        assert autogroup_nice() == ours  # the caller's session is left as it was
    else:
        assert first[3] == str(HELPER_NICE)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_stopping_signal_reaches_the_whole_run(tmp_path: Path, sig: signal.Signals) -> None:
    report = tmp_path / "report"
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER, CHILD, str(report)])
    wait_for(report, "grandchild ready")
    wrapper.send_signal(sig)  # to the wrapper alone: the run is in another session
    assert wrapper.wait(timeout=20) == 7  # the child's own exit status, passed through
    got = lines(report)
    assert f"child got {int(sig)}" in got and f"grandchild got {int(sig)}" in got


def test_a_killed_wrapper_stops_the_run(tmp_path: Path) -> None:
    report = tmp_path / "report"
    wrapper = subprocess.Popen([sys.executable, "-c", WRAPPER, CHILD, str(report)])
    wait_for(report, "grandchild ready")
    wrapper.kill()
    wrapper.wait()
    wait_for(report, f"child got {int(signal.SIGTERM)}")  # the parent-death signal
