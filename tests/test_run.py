"""`python -m srb run` (what `make run` calls), with real processes: snakemake's stand-in runs
as the leader of a new session at the helper priority, its exit status comes back, and the
stopping signals reach its whole process group, as a Ctrl-C at the terminal would; if the
wrapper is killed outright, the run is told to stop (SIGTERM) rather than left running."""

from __future__ import annotations

import shutil
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


# argv: a report file. A job of the run's session (started by the stand-in below, as Snakemake
# starts a job script): joins the model server's priority, reports, then waits for a signal.
JOB = """
import os, signal, sys, time
from srb.priority import autogroup_nice, join_server_priority
report = sys.argv[1]
def h(s, f):
    open(report, "a").write(f"job got {s}\\n")
    sys.exit(0)
signal.signal(signal.SIGTERM, h)
before, moved = autogroup_nice(), join_server_priority()
open(report, "a").write(
    f"before {before} moved {moved} after {autogroup_nice()} leader {os.getsid(0) == os.getpid()}\\n"
)
time.sleep(60)
"""

# argv: JOB's code, the report file. Starts the job and exits once the job has reported.
STARTER = """
import subprocess, sys, time
subprocess.Popen([sys.executable, "-c", sys.argv[1], sys.argv[2]])
while "leader" not in (open(sys.argv[2]).read() if __import__("os").path.exists(sys.argv[2]) else ""):
    time.sleep(0.05)
"""


def test_an_ingest_job_joins_the_model_servers_priority_and_still_dies_with_its_parent(
    tmp_path: Path,
) -> None:
    """join_server_priority: a job of the helper-niced run leaves for a session of its own at
    nice 0 (where the kernel schedules by autogroup); when the process that started it exits,
    it gets SIGTERM, as a job that stayed in the run's process group would from Snakemake."""
    if not autogroup_enabled():
        pytest.skip("no autogroups: a nice cannot be lowered without privilege, the job stays")
    report = tmp_path / "report"
    assert run_in_own_session([sys.executable, "-c", STARTER, JOB, str(report)]) == 0
    wait_for(report, "job got")
    assert lines(report)[0] == f"before {HELPER_NICE} moved True after 0 leader True"
    assert lines(report)[1] == f"job got {int(signal.SIGTERM)}"


# Starts 4 sessions at once and gives each the helper nice, as a workflow starting its helpers
# together does; prints their autogroup nices.
BURST = """
import os, subprocess, sys
from srb.priority import autogroup_nice, deprioritise
procs = [subprocess.Popen(["sleep", "30"], preexec_fn=os.setsid) for _ in range(4)]
try:
    print([deprioritise(p.pid) for p in procs], [autogroup_nice(p.pid) for p in procs])
finally:
    for p in procs:
        p.kill()
"""


def without_sys_admin() -> list[str]:
    """A prefix that runs a command without CAP_SYS_ADMIN (as any user but root is): the
    kernel then takes one autogroup write per 100 ms on the machine. Empty where we lack it."""
    effective = next(
        int(line.split()[1], 16)
        for line in Path("/proc/self/status").read_text().splitlines()
        if line.startswith("CapEff:")
    )
    if not effective >> 21 & 1:  # CAP_SYS_ADMIN is bit 21
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("root without setpriv: cannot drop CAP_SYS_ADMIN to test the rate limit")
    return [setpriv, "--inh-caps=-sys_admin", "--bounding-set=-sys_admin"]


def test_helpers_started_together_all_get_the_helper_nice() -> None:
    """The kernel refuses an unprivileged autogroup write within 100 ms of another (EAGAIN);
    a refused write is retried rather than leaving a helper beside the server at nice 0."""
    if not autogroup_enabled():
        pytest.skip("no autogroups")
    out = subprocess.run(
        [*without_sys_admin(), sys.executable, "-c", BURST],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert out == f"[True, True, True, True] {[HELPER_NICE] * 4}"


def test_a_helper_gets_its_callers_priority(tmp_path: Path) -> None:
    """match_caller_priority: PostgreSQL or Hindsight's API started by a job at the helper nice
    gets it too; started by a caller at nice 0 (an ingest that joined the server's priority,
    or this test) it keeps its new session's 0."""
    from srb.priority import caller_nice, die_with_parent, match_caller_priority

    helper = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        preexec_fn=lambda: die_with_parent(signal.SIGTERM),
    )
    try:
        ours = caller_nice()
        assert match_caller_priority(helper.pid, "a helper") is (ours > 0)
        if autogroup_enabled():
            assert autogroup_nice(helper.pid) == ours
    finally:
        helper.kill()
        helper.wait()
