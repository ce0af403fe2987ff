"""The socket and canary scans of `bench/reliability.py services`, on real processes and files:
a child that listens on a wildcard address must be caught, a planted canary must be found."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.reliability.services import CANARY_VARS, canary_env, canary_hits, planted_canary, watch

LISTENER = """
import os, socket, subprocess, sys, time
a = socket.socket(); a.bind(("127.0.0.1", 0)); a.listen()
b = socket.socket(); b.bind(("0.0.0.0", 0)); b.listen()
# a grandchild listening too: the scan follows the whole process tree
subprocess.run([sys.executable, "-c",
    "import socket, time; s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(); "
    "time.sleep(2.5)"])
open(os.path.join(sys.argv[1], "log.txt"), "w").write("key=" + os.environ["HF_TOKEN"])
"""


def test_the_scan_sees_every_listener_of_the_tree_and_flags_a_wildcard(tmp_path: Path) -> None:
    canary = planted_canary()
    (tmp_path / "results").mkdir()
    watched = watch([sys.executable, "-c", LISTENER, str(tmp_path / "results")], tmp_path,
                    canary_env(canary), interval=0.5)  # fmt: skip
    assert watched.returncode == 0
    addresses = sorted(listener.address for listener in watched.listeners)
    assert addresses == ["0.0.0.0", "127.0.0.1", "127.0.0.1"]
    assert [lst.address for lst in watched.listeners if not lst.loopback] == ["0.0.0.0"]
    assert len({lst.pid for lst in watched.listeners}) == 2
    searched, hits = canary_hits(canary, [tmp_path / "results", tmp_path / "absent"])
    assert searched == 1 and hits == [tmp_path / "results" / "log.txt"]


def test_a_canary_across_a_chunk_boundary_is_found_and_others_are_not(tmp_path: Path) -> None:
    canary = planted_canary()
    (tmp_path / "big.bin").write_bytes(b"x" * 1000 + canary.encode() + b"y" * 10)
    (tmp_path / "clean.txt").write_text("nothing here " + planted_canary())
    searched, hits = canary_hits(canary, [tmp_path], chunk=1010)  # the canary spans 2 chunks
    assert searched == 2 and hits == [tmp_path / "big.bin"]
    assert set(canary_env(canary, {})) == set(CANARY_VARS)
