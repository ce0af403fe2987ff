"""The socket, command-line and canary scans of `bench/reliability.py services`, on real
processes and files: a child that listens on a wildcard address must be caught, a grandchild
with corpus text on its command line must be caught, a planted canary must be found."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.reliability.services import (
    CANARY_VARS,
    TextProbe,
    canary_env,
    canary_hits,
    corpus_texts,
    planted_canary,
    watch,
)

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


PAPER = (
    "Reducing salt intake lowered systolic blood pressure by 5 mmHg after six months, "
    "while the control group saw no significant difference."
)
QUESTION = "Did the intervention change diastolic blood pressure compared with usual care?"
# one grandchild carries 45 characters of the paper on its command line, split over two
# arguments as a shell would split them; the other only the paper's id and short words of it
SPAWNER = """
import subprocess, sys
subprocess.run([sys.executable, "-c", "import time; time.sleep(1.5)", "--paper", "P1",
                "--words", "salt", "blood pressure"])
subprocess.run([sys.executable, "-c", "import time; time.sleep(1.5)", "--text",
                *sys.argv[1].split(" ", 1)])
"""


def _tiny_corpus(root: Path) -> Path:
    root.mkdir()
    (root / "papers.jsonl").write_text(json.dumps({"id": "P1", "text": PAPER}) + "\n")
    (root / "questions.jsonl").write_text(json.dumps({"id": "Q1", "question": QUESTION}) + "\n")
    return root


def test_corpus_text_on_a_grandchilds_command_line_is_found(tmp_path: Path) -> None:
    probe = TextProbe(corpus_texts(_tiny_corpus(tmp_path / "corpus")))
    leaked = PAPER[10:55]
    watched = watch([sys.executable, "-c", SPAWNER, leaked], tmp_path, canary_env("x"),
                    interval=0.3, probe=probe)  # fmt: skip
    assert watched.returncode == 0
    assert watched.command_lines_seen >= 3  # the spawner and both grandchildren
    excerpts = {hit.excerpt for hit in watched.corpus_in_command_lines}
    assert excerpts and all(e in leaked for e in excerpts)  # the spawner's argv and the leaker's
    assert not any("--paper" in e or "--words" in e for e in excerpts)


def test_the_probe_finds_a_question_and_ignores_short_or_foreign_text(tmp_path: Path) -> None:
    probe = TextProbe(corpus_texts(_tiny_corpus(tmp_path / "corpus")))
    assert probe.find("python -m srb ask --q '" + QUESTION[5:50] + "'") == QUESTION[5:45]
    assert probe.find("snakemake --cores 2 results/P1/retrieval/simple_rag/bm25/2K.jsonl") is None
    assert probe.find("salt intake lowered systolic") is None  # under 40 characters
    assert probe.find(PAPER[:39]) is None and probe.find(PAPER[:40]) == PAPER[:40]
