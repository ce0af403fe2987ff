"""Process helpers shared by the server and service lifecycle tests: a stand-in vLLM server
and checks that a process is really gone."""

from __future__ import annotations

import os
import time
from pathlib import Path

# a stand-in for `vllm serve`: on port argv[1], GET /v1/models lists the model named argv[2];
# with argv[3], it first appends its pid to that file (a launch log)
FAKE_VLLM = """
import json, os, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
if len(sys.argv) > 3:
    with open(sys.argv[3], "a") as fh:
        fh.write(f"{os.getpid()}\\n")
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.end_headers()
        self.wfile.write(json.dumps({"object": "list", "data": [{"id": sys.argv[2]}]}).encode())
    def log_message(self, *a):
        pass
HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def gone(pid: int) -> bool:
    """Not running: no such process, or a zombie nobody reaped yet."""
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return True
    return "\nState:\tZ" in state


def wait_gone(pid: int, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if gone(pid):
            return True
        time.sleep(0.05)
    return gone(pid)


def session_nice(pid: int) -> int:
    """The CPU priority the kernel gives `pid`'s session: its autogroup nice, or on a kernel
    without autogroups its own nice."""
    from srb.priority import autogroup_enabled, autogroup_nice

    nice = autogroup_nice(pid) if autogroup_enabled() else None
    return os.getpriority(os.PRIO_PROCESS, pid) if nice is None else nice
