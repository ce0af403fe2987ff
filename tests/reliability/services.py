"""Which sockets a run listens on, and whether a planted secret leaks into its files.

`watch` runs a command (the README's `make run`, say) with a random canary set as every API-key
variable a library might read, samples the listening TCP sockets and the command lines of the
command's whole process tree every `interval` seconds until it exits (a `TextProbe` of the
corpus says whether any command line carries corpus text), and `canary_hits` then searches every
file the run wrote for the canary's bytes. Used by `bench/reliability.py services`.
"""

from __future__ import annotations

import ipaddress
import json
import os
import secrets
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

#: the environment variables a memory library or model client reads an API key from
CANARY_VARS = ("OPENAI_API_KEY", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "ANTHROPIC_API_KEY")


@dataclass(frozen=True)
class Listener:
    pid: int
    process: str
    address: str
    port: int

    @property
    def loopback(self) -> bool:
        return ipaddress.ip_address(self.address.split("%")[0]).is_loopback


@dataclass(frozen=True)
class CommandLineHit:
    pid: int
    process: str
    excerpt: str  # the corpus text found, as it stood in the command line


@dataclass
class Watched:
    returncode: int
    wall_s: float
    listeners: set[Listener]
    processes_seen: int
    command_lines_seen: int = 0  # distinct command lines sampled
    corpus_in_command_lines: list[CommandLineHit] = field(default_factory=list)


class TextProbe:
    """Finds any `width`-character stretch of some texts inside another string: a hash per
    window of the texts, each hit confirmed against the texts themselves. 40 characters of
    prose never occur by chance in a path, flag or number."""

    def __init__(self, texts: Iterable[str], width: int = 40) -> None:
        self.width = width
        self.joined = "\n".join(texts)
        self.hashes = {
            hash(self.joined[i : i + width]) for i in range(len(self.joined) - width + 1)
        }

    def find(self, line: str) -> str | None:
        for i in range(len(line) - self.width + 1):
            window = line[i : i + self.width]
            if hash(window) in self.hashes and window in self.joined:
                return window
        return None


def corpus_texts(corpus_dir: Path) -> list[str]:
    """Every paper's text and every question of a canonical corpus directory."""
    texts = []
    for name, field_name in (("papers.jsonl", "text"), ("questions.jsonl", "question")):
        with open(corpus_dir / name, encoding="utf-8") as fh:
            texts += [str(json.loads(line).get(field_name) or "") for line in fh if line.strip()]
    return [t for t in texts if t]


def planted_canary() -> str:
    return "srb-canary-" + secrets.token_hex(16)


def process_tree(root: psutil.Process) -> list[psutil.Process]:
    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def listening(pids: Iterable[int]) -> set[Listener]:
    """The listening TCP sockets (IPv4 and IPv6) held by `pids`."""
    wanted = set(pids)
    found = set()
    for conn in psutil.net_connections(kind="inet"):
        if conn.status != psutil.CONN_LISTEN or conn.pid not in wanted or not conn.laddr:
            continue
        try:
            name = psutil.Process(conn.pid).name()
        except psutil.NoSuchProcess:
            name = "?"
        found.add(Listener(conn.pid, name, conn.laddr.ip, conn.laddr.port))
    return found


def watch(
    command: Sequence[str],
    cwd: Path,
    env: dict[str, str],
    interval: float = 2.0,
    probe: TextProbe | None = None,
) -> Watched:
    """Run `command` to its end, sampling its process tree's listening sockets and, with a
    `probe`, whether any process's command line carries its text."""
    started = time.monotonic()
    proc = subprocess.Popen(list(command), cwd=cwd, env=env)
    root = psutil.Process(proc.pid)
    # one entry per socket, with the process first seen holding it: a child forked by a
    # listener holds its sockets until it execs, and psutil then names either process
    found: dict[tuple[str, int], Listener] = {}
    seen: set[int] = set()
    lines: set[str] = set()
    hits: list[CommandLineHit] = []
    while proc.poll() is None:
        tree = process_tree(root)
        seen.update(p.pid for p in tree)
        for lst in sorted(listening(p.pid for p in tree), key=lambda x: x.pid):
            found.setdefault((lst.address, lst.port), lst)
        if probe is not None:
            for p in tree:
                try:
                    line, name = " ".join(p.cmdline()), p.name()
                except (psutil.NoSuchProcess, psutil.AccessDenied):
                    continue
                if line not in lines:
                    lines.add(line)
                    if (excerpt := probe.find(line)) is not None:
                        hits.append(CommandLineHit(p.pid, name, excerpt))
        time.sleep(interval)
    return Watched(proc.returncode, time.monotonic() - started, set(found.values()), len(seen),
                   len(lines), hits)  # fmt: skip


def canary_env(canary: str, base: dict[str, str] | None = None) -> dict[str, str]:
    env = dict(os.environ if base is None else base)
    env.update({name: canary for name in CANARY_VARS})
    return env


def canary_hits(canary: str, roots: Iterable[Path], chunk: int = 1 << 22) -> tuple[int, list[Path]]:
    """(files searched, files holding the canary) under `roots`, read in chunks so a large
    cache database is searched without loading it whole."""
    needle = canary.encode()
    searched, hits = 0, []
    for root in roots:
        if not root.exists():
            continue
        for path in sorted(p for p in root.rglob("*") if p.is_file() and not p.is_symlink()):
            searched += 1
            tail = b""
            with open(path, "rb") as fh:
                while block := fh.read(chunk):
                    if needle in tail + block:
                        hits.append(path)
                        break
                    tail = block[-len(needle) :]
    return searched, hits
