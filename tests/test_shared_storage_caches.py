"""The call and embedding caches on shared storage (a cluster's NFS): a directory of files
linked into place, no SQLite. Several processes write at once, as jobs on several nodes would:
each key ends with exactly one stored answer, every writer gets that answer back, and a reader
never sees a partial file."""

from __future__ import annotations

import json
import multiprocessing
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from srb.index.embed_cache import (
    EmbeddingCache,
    EmbeddingShards,
    encoder_fingerprint,
    open_embedding_cache,
)
from srb.llm.cache import CallCache, CallFiles, open_call_cache
from tests.test_embed_cache import fake_encoder
from tests.test_llm_client import T_HASH, FakeBackend, expected, make_model_dir, requests


def test_the_path_chooses_the_layout(tmp_path: Path) -> None:
    assert type(open_call_cache(tmp_path / "calls.sqlite")) is CallCache
    assert type(open_call_cache(tmp_path / "calls")) is CallFiles
    assert (tmp_path / "calls").is_dir()
    assert type(open_embedding_cache(tmp_path / "emb.sqlite")) is EmbeddingCache
    assert type(open_embedding_cache(tmp_path / "emb")) is EmbeddingShards
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(ValueError, match="a-file: a file, but a path without the .sqlite suffix"):
        open_call_cache(tmp_path / "a-file")
    with pytest.raises(ValueError, match="a-file: a file"):
        open_embedding_cache(tmp_path / "a-file")


def test_call_files_round_trip_and_keep_the_first_answer(tmp_path: Path) -> None:
    cache = CallFiles(tmp_path / "calls")
    assert cache.get("ab" * 32) is None and len(cache) == 0
    first = {"text": "first", "prompt_tokens": 3}
    assert cache.put("ab" * 32, first, model="m") == first
    assert cache.put("ab" * 32, {"text": "second"}) == first  # the stored one, not the new one
    assert CallFiles(tmp_path / "calls").get("ab" * 32) == first  # another job sees it
    stored = json.loads((tmp_path / "calls" / "ab" / f"{'ab' * 32}.json").read_text())
    assert stored == {"key": "ab" * 32, "kind": "chat", "model": "m", "response": first}
    assert len(cache) == 1


def _race(path: str, worker: int, keys: int, barrier) -> None:
    """Every worker stores its own answer for the same keys at once, and checks what it got."""
    cache = CallFiles(path)
    barrier.wait()
    got = [cache.put(f"{k:064x}", {"worker": worker, "text": "x" * 3000}) for k in range(keys)]
    Path(path, f"got-{worker}.json").write_text(json.dumps(got))


def test_concurrent_writers_agree_on_one_answer_per_key(tmp_path: Path) -> None:
    path = str(tmp_path / "calls")
    CallFiles(path)
    ctx = multiprocessing.get_context("fork")
    n_workers, n_keys = 4, 60
    barrier = ctx.Barrier(n_workers)
    procs = [ctx.Process(target=_race, args=(path, w, n_keys, barrier)) for w in range(n_workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [p.exitcode for p in procs] == [0] * n_workers
    cache = CallFiles(path)
    assert len(cache) == n_keys
    stored = [cache.get(f"{k:064x}") for k in range(n_keys)]
    for w in range(n_workers):  # every writer was handed the answer the cache kept
        assert json.loads(Path(path, f"got-{w}.json").read_text()) == stored
    assert not list(Path(path).glob("*/.*.tmp"))  # no private file left behind


READER = """
import json, sys, time
from pathlib import Path
from srb.llm.cache import CallFiles
cache, bad, seen, end = CallFiles(sys.argv[1]), 0, set(), time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    for f in Path(sys.argv[1]).glob("??/*.json"):
        got = cache.get(f.stem)
        if got is None or got.get("tail") != "end":
            bad += 1
        seen.add(f.stem)
print(json.dumps({"bad": bad, "seen": len(seen)}))
"""


def test_a_reader_never_sees_a_partial_answer(tmp_path: Path) -> None:
    path = tmp_path / "calls"
    cache = CallFiles(path)
    reader = subprocess.Popen([sys.executable, "-c", READER, str(path), "3"],
                              stdout=subprocess.PIPE, text=True,
                              cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    i, end = 0, time.monotonic() + 2.5
    while time.monotonic() < end:
        cache.put(f"{i:064x}", {"text": "y" * 20000, "tail": "end"})
        i += 1
    out, _ = reader.communicate(timeout=60)
    result = json.loads(out)
    assert result["bad"] == 0 and result["seen"] > 10


KILLED_WRITER = """
import sys
from srb.llm.cache import CallFiles
cache, i = CallFiles(sys.argv[1]), 0
while True:
    cache.put(f"{i:064x}", {"i": i, "text": "z" * 50000, "tail": "end"})
    i += 1
"""


def test_sigkill_mid_write_leaves_only_complete_answers(tmp_path: Path) -> None:
    path = tmp_path / "calls"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(path)],
                            cwd=Path(__file__).resolve().parents[1])  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and len(list(path.glob("??/*.json"))) < 100:
            time.sleep(0.05)
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    cache = CallFiles(path)
    files = sorted(path.glob("??/*.json"))
    assert len(files) >= 100 and len(cache) == len(files)
    for f in files:
        got = cache.get(f.stem)
        assert got is not None and got["tail"] == "end" and f.stem == f"{got['i']:064x}"


def test_the_llm_client_replays_from_call_files(tmp_path: Path) -> None:
    from srb.llm.client import LLMClient

    def client(backend: FakeBackend) -> LLMClient:
        return LLMClient("vllm", "tiny-model", {"max_model_len": 2048},
                         str(make_model_dir(tmp_path)), CallFiles(tmp_path / "calls"),
                         tmp_path / "servers", concurrency=3,
                         backend_factory=lambda: backend)  # fmt: skip

    first_backend, second_backend = FakeBackend(), FakeBackend()
    assert client(first_backend).run(requests(5), T_HASH) == [expected(i) for i in range(5)]
    assert client(second_backend).run(requests(5), T_HASH) == [expected(i) for i in range(5)]
    assert len(first_backend.calls) == 5 and second_backend.calls == []


def test_embedding_shards_replay_byte_identical_vectors(tmp_path: Path) -> None:
    calls: list[list[str]] = []
    texts = ["alpha", "beta", "gamma", "alpha"]
    first, n1 = EmbeddingShards(tmp_path / "emb").encode("fp", texts, fake_encoder(calls))
    second, n2 = EmbeddingShards(tmp_path / "emb").encode("fp", texts, fake_encoder(calls))
    assert (n1, n2) == (3, 0) and sorted(calls[0]) == ["alpha", "beta", "gamma"]
    assert first.tobytes() == second.tobytes() and first.dtype == np.float32
    # the values are the encoder's: [len, count of "a", 0.5] / 3
    np.testing.assert_allclose(first[1], np.array([4, 1, 0.5], dtype=np.float32) / 3)
    cache = EmbeddingShards(tmp_path / "emb")
    _, n = cache.encode("fp", ["beta", "delta"], fake_encoder(calls))
    assert n == 1 and calls[-1] == ["delta"]
    _, n = cache.encode("other-model", ["beta"], fake_encoder(calls))
    assert n == 1
    assert len(list((tmp_path / "emb").glob("*.npz"))) == 3 and not list(
        (tmp_path / "emb").glob(".*.tmp")
    )


def test_a_text_two_jobs_encoded_at_once_gets_one_vector_from_then_on(tmp_path: Path) -> None:
    """Jobs A and B both miss "shared" (each has not seen the other's shard yet) and encode it
    differently; every reader afterwards takes the vector of the shard named first."""
    a, b = EmbeddingShards(tmp_path / "emb"), EmbeddingShards(tmp_path / "emb")
    a._refresh()
    b._refresh()

    def constant(value: float):
        return lambda texts: np.full((len(texts), 2), value, dtype=np.float32)

    # each writes its shard without looking at the other's (what a race between nodes does)
    a._write(["k-shared", "k-a"], constant(1.0)(["shared", "a"]))
    b._write(["k-shared"], constant(2.0)(["shared"]))
    shards = sorted(p.name for p in (tmp_path / "emb").glob("*.npz"))
    with np.load(tmp_path / "emb" / shards[0]) as first_named:
        winner = float(first_named["vectors"][list(first_named["keys"]).index("k-shared")][0])
    for reader in (a, b, EmbeddingShards(tmp_path / "emb")):
        reader._refresh()
        assert float(reader._vector("k-shared")[0]) == winner


def test_encoder_fingerprint_is_shared_by_both_layouts(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors").write_bytes(b"w")
    key = EmbeddingCache.key(encoder_fingerprint(str(tmp_path)), "text")
    shards = EmbeddingShards(tmp_path / "emb")
    shards.encode(encoder_fingerprint(str(tmp_path)), ["text"], fake_encoder([]))
    assert list(shards._where) == [key]


def test_shared_storage_turns_the_sqlite_caches_into_directories() -> None:
    from srb.config import apply_shared_storage

    config = {"llm": {"cache": "cache/llm-calls.sqlite"}, "dense": {"cache": "x/emb.sqlite"}}
    apply_shared_storage(config)  # not asked for: unchanged
    assert config["llm"]["cache"] == "cache/llm-calls.sqlite"
    config["shared_storage"] = True
    apply_shared_storage(config)
    assert (config["llm"]["cache"], config["dense"]["cache"]) == ("cache/llm-calls", "x/emb")
    kept = {"shared_storage": True, "dense": {"cache": None}, "llm": {"cache": "/nfs/calls"}}
    apply_shared_storage(kept)  # the cache off, and a directory already, stay as they are
    assert kept == {
        "shared_storage": True,
        "dense": {"cache": None},
        "llm": {"cache": "/nfs/calls"},
    }
    no_llm = {"shared_storage": True, "dense": {"cache": "cache/embeddings.sqlite"}}
    apply_shared_storage(no_llm)  # a retrieval-only config gets no llm section
    assert no_llm == {"shared_storage": True, "dense": {"cache": "cache/embeddings"}}
