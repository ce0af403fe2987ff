"""The content-addressed call cache: key sensitivity, first-write-wins, concurrency, kill -9."""

from __future__ import annotations

import json
import multiprocessing
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from srb.llm.cache import CallCache, call_key

BASE_PARTS = {
    "backend": "vllm",
    "model": "smollm2-135m",
    "weights": "a" * 64,
    "template": "0123456789abcdef",
    "messages": [{"role": "user", "content": "Did drug X lower blood pressure?"}],
    "sampling": {"max_tokens": 160, "temperature": 0.0, "seed": 0},
    "schema": None,
}

# one changed value per part; every one of them must change the key
CHANGES = {
    "backend": "openai",
    "model": "qwen2.5-coder-1.5b",
    "weights": "b" * 64,
    "template": "fedcba9876543210",
    "messages": [{"role": "user", "content": "Did drug X raise blood pressure?"}],
    "sampling": {"max_tokens": 161, "temperature": 0.0, "seed": 0},
    "schema": {"type": "object"},
}


KEY_IN_A_FRESH_PROCESS = """
import json, sys
from srb.llm.cache import call_key
print(call_key(**json.loads(sys.argv[1])))
"""


def test_call_key_is_a_sha256_digest_stable_across_processes() -> None:
    """The same parts give the same 64-hex-digit key in another interpreter (no per-process
    hash seed or object identity leaks in), so a later run finds what an earlier one stored."""
    key = call_key(**BASE_PARTS)
    assert len(key) == 64 and all(c in "0123456789abcdef" for c in key)
    assert call_key(**json.loads(json.dumps(BASE_PARTS))) == key  # equal values, new objects
    other = subprocess.run(
        [sys.executable, "-c", KEY_IN_A_FRESH_PROCESS, json.dumps(BASE_PARTS)],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
        cwd=Path(__file__).resolve().parents[1],
    )
    assert other.stdout.strip() == key


def test_call_key_tells_apart_parts_that_only_a_loose_encoding_would_merge() -> None:
    """Boundaries between parts are kept: moving text from one part to another, or a value's
    type, changes the key."""
    split = {**BASE_PARTS, "model": "smollm2", "weights": "-135m" + "a" * 59}
    joined = {**BASE_PARTS, "model": "smollm2-135m", "weights": "a" * 59}
    assert call_key(**split) != call_key(**joined)
    as_text = {**BASE_PARTS, "sampling": {"max_tokens": "160", "temperature": 0.0, "seed": 0}}
    assert call_key(**as_text) != call_key(**BASE_PARTS)
    assert call_key(**{**BASE_PARTS, "schema": {}}) != call_key(**BASE_PARTS)  # {} is not None


def test_call_key_is_stable_across_argument_order() -> None:
    reordered = dict(reversed(list(BASE_PARTS.items())))
    assert call_key(**reordered) == call_key(**BASE_PARTS)
    # nested dict order does not matter either
    sampling = {"seed": 0, "temperature": 0.0, "max_tokens": 160}
    assert call_key(**{**BASE_PARTS, "sampling": sampling}) == call_key(**BASE_PARTS)


@pytest.mark.parametrize("part", sorted(CHANGES))
def test_call_key_changes_with_each_part(part: str) -> None:
    assert call_key(**{**BASE_PARTS, part: CHANGES[part]}) != call_key(**BASE_PARTS)


@pytest.mark.parametrize("seed", [1, 2])
def test_call_key_changes_with_seed(seed: int) -> None:
    sampling = {**BASE_PARTS["sampling"], "seed": seed}
    assert call_key(**{**BASE_PARTS, "sampling": sampling}) != call_key(**BASE_PARTS)


def test_call_key_changes_with_temperature_and_message_role() -> None:
    hot = {**BASE_PARTS["sampling"], "temperature": 0.7}
    assert call_key(**{**BASE_PARTS, "sampling": hot}) != call_key(**BASE_PARTS)
    system = [{"role": "system", "content": BASE_PARTS["messages"][0]["content"]}]
    assert call_key(**{**BASE_PARTS, "messages": system}) != call_key(**BASE_PARTS)


def test_cache_round_trip(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "sub" / "calls.sqlite")  # parent directory created
    response = {"text": "Significantly lower (p<0.05).", "prompt_tokens": 12, "latency_s": 0.25}
    assert cache.get("k1") is None
    assert len(cache) == 0
    cache.put("k1", response, model="m")
    assert cache.get("k1") == response
    assert cache.get("k2") is None
    assert len(cache) == 1
    row = (
        sqlite3.connect(tmp_path / "sub" / "calls.sqlite")
        .execute("SELECT kind, model, response FROM calls WHERE key = 'k1'")
        .fetchone()
    )
    assert row[0] == "chat" and row[1] == "m"
    assert json.loads(row[2]) == response
    cache.close()


def test_cache_keeps_first_value(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "calls.sqlite")
    cache.put("k", {"text": "first"})
    cache.put("k", {"text": "second"})
    assert cache.get("k") == {"text": "first"}
    assert len(cache) == 1


def test_cache_persists_across_instances(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    a = CallCache(path)
    a.put("k", {"text": "Ünïcode answer – 5 %", "n": 3})
    a.close()
    b = CallCache(path)
    assert b.get("k") == {"text": "Ünïcode answer – 5 %", "n": 3}
    assert len(b) == 1
    b.close()


def _writer(path: str, worker: int, n: int, barrier) -> None:
    barrier.wait()  # every process opens the database and writes at once
    cache = CallCache(path)
    for i in range(n):
        cache.put(f"w{worker}-{i}", {"worker": worker, "i": i, "text": "x" * 200})
    cache.close()


def test_concurrent_writers_from_several_processes(tmp_path: Path) -> None:
    path = str(tmp_path / "calls.sqlite")
    CallCache(path).close()  # initialised (WAL) first; the fresh-file race is tested below
    ctx = multiprocessing.get_context("fork")
    n_workers, n_puts = 4, 50
    barrier = ctx.Barrier(n_workers)
    procs = [ctx.Process(target=_writer, args=(path, w, n_puts, barrier)) for w in range(n_workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * n_workers
    cache = CallCache(path)
    assert len(cache) == n_workers * n_puts
    for w in range(n_workers):
        for i in range(n_puts):
            assert cache.get(f"w{w}-{i}") == {"worker": w, "i": i, "text": "x" * 200}
    cache.close()


def test_first_open_waits_for_a_peer_still_creating_the_db(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    # a peer part-way through creating the file: still in rollback-journal mode, write lock held
    peer = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    peer.execute("CREATE TABLE IF NOT EXISTS scratch (x)")
    peer.execute("BEGIN IMMEDIATE")
    peer.execute("INSERT INTO scratch VALUES (1)")
    timer = threading.Timer(0.5, lambda: peer.execute("COMMIT"))
    timer.start()
    try:
        cache = CallCache(path)  # should wait out the 0.5 s lock (timeout is 120 s)
        cache.put("k", {"text": "ok"})
        assert cache.get("k") == {"text": "ok"}
        cache.close()
    finally:
        timer.join()
        peer.close()


KILL_CHILD = """
import sys
from srb.llm.cache import CallCache
cache = CallCache(sys.argv[1])
i = 0
while True:
    cache.put(f"k{i}", {"i": i, "text": "y" * 5000, "tail": "end"})
    i += 1
"""


def test_sigkill_mid_loop_leaves_readable_db(tmp_path: Path) -> None:
    path = tmp_path / "calls.sqlite"
    proc = subprocess.Popen([sys.executable, "-c", KILL_CHILD, str(path)])
    try:
        deadline = time.monotonic() + 60
        n = 0
        while time.monotonic() < deadline:
            if path.exists():
                try:
                    with sqlite3.connect(path, timeout=5) as conn:
                        n = conn.execute("SELECT COUNT(*) FROM calls").fetchone()[0]
                except sqlite3.OperationalError:
                    n = 0  # table not created yet
                if n >= 200:
                    break
            time.sleep(0.05)
        assert n >= 200, "writer made no progress"
        assert proc.poll() is None, "writer exited by itself"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    conn.close()
    cache = CallCache(path)
    rows = cache._conn.execute("SELECT key, response FROM calls").fetchall()
    assert len(rows) == len(cache) >= 200
    for key, response in rows:
        data = json.loads(response)  # every row is complete JSON
        assert key == f"k{data['i']}"
        assert data["tail"] == "end" and data["text"] == "y" * 5000
    # the writes are a prefix: k0..k(n-1) with no holes
    assert sorted(json.loads(r)["i"] for _, r in rows) == list(range(len(rows)))
    # and the database still takes writes
    cache.put("after", {"ok": True})
    assert cache.get("after") == {"ok": True}
    cache.close()


def test_put_returns_what_the_cache_holds(tmp_path: Path) -> None:
    cache = CallCache(tmp_path / "calls.sqlite")
    assert cache.put("k", {"text": "first"}) == {"text": "first"}
    assert cache.put("k", {"text": "second"}) == {"text": "first"}  # the first stored wins
