"""LLMClient: cache first, backend only on a miss, answers in request order, failures lose little."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from srb.llm.backends import ChatRequest, Completion
from srb.llm.cache import CallCache
from srb.llm.client import LLMClient
from srb.llm.models import MODEL_CARD, ModelError, model_identity

T_HASH = "0011223344556677"


class FakeBackend:
    """Answers "answer to <prompt>"; `delays` maps a question number to seconds of latency."""

    name = "fake"

    def __init__(self, fail_on: str | None = None, delays: dict[int, float] | None = None):
        self.calls: list[str] = []
        self.completed: list[str] = []
        self.fail_on = fail_on
        self.delays = delays or {}
        self._lock = threading.Lock()

    def chat(self, request: ChatRequest) -> Completion:
        prompt = request.messages[0]["content"]
        with self._lock:
            self.calls.append(prompt)
        time.sleep(self.delays.get(int(prompt.rsplit(" ", 1)[1]), 0.0))
        if prompt == self.fail_on:
            raise RuntimeError(f"backend died on {prompt!r}")
        with self._lock:
            self.completed.append(prompt)
        return Completion(
            text=f"answer to {prompt} (seed {request.seed})",
            prompt_tokens=len(prompt.split()),
            completion_tokens=4,
            latency_s=0.0123456,
            finish_reason="stop",
        )


class Factory:
    def __init__(self, backend: FakeBackend):
        self.backend = backend
        self.calls = 0

    def __call__(self) -> FakeBackend:
        self.calls += 1
        return self.backend


def make_model_dir(root: Path, weights: str = "w" * 64, name: str = "tiny-model") -> Path:
    model_dir = root / f"model-{weights[:4]}"
    model_dir.mkdir(parents=True, exist_ok=True)
    (model_dir / MODEL_CARD).write_text(json.dumps({"name": name, "weights_sha256": weights}))
    return model_dir


def make_client(
    tmp_path: Path, backend: FakeBackend, concurrency: int = 1, weights: str = "w" * 64
) -> tuple[LLMClient, Factory]:
    factory = Factory(backend)
    client = LLMClient(
        "vllm",
        "tiny-model",
        {"max_model_len": 2048},
        str(make_model_dir(tmp_path, weights)),
        CallCache(tmp_path / "cache" / "calls.sqlite"),
        tmp_path / "servers",
        concurrency=concurrency,
        backend_factory=factory,
    )
    return client, factory


def requests(n: int, start: int = 0) -> list[ChatRequest]:
    return [
        ChatRequest([{"role": "user", "content": f"question {i}"}], max_tokens=32)
        for i in range(start, start + n)
    ]


def expected(i: int, seed: int = 0) -> dict:
    return {
        "text": f"answer to question {i} (seed {seed})",
        "prompt_tokens": 2,
        "completion_tokens": 4,
        "latency_s": 0.012,
        "finish_reason": "stop",
    }


def test_identity_comes_from_the_model_card(tmp_path: Path) -> None:
    model_dir = make_model_dir(tmp_path, "ab" * 32)
    identity = model_identity("tiny-model", {}, "vllm", model_dir=str(model_dir))
    assert (identity["model"], identity["weights"]) == ("tiny-model", "ab" * 32)
    client, _ = make_client(tmp_path, FakeBackend(), weights="ab" * 32)
    assert client.identity["weights"] == "ab" * 32


def test_identity_without_a_card_needs_a_prepared_model(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no model card"):
        model_identity(
            "x", {"source": {"package": "llm_x", "file": "x.gguf"}}, "vllm", model_dir=str(tmp_path)
        )
    served = {"source": {"served_name": "gpt-x", "base_url": "https://h/v1"}, "revision": "2024-01"}
    identity = model_identity("gpt", served, "openai")
    assert (identity["model"], identity["weights"]) == ("gpt-x", "2024-01")
    assert identity["endpoint"] == "https://h/v1"


def test_first_run_calls_and_caches_second_run_replays(tmp_path: Path) -> None:
    backend = FakeBackend()
    client, factory = make_client(tmp_path, backend)
    first = client.run(requests(5), T_HASH)
    assert first == [expected(i) for i in range(5)]
    assert len(backend.calls) == 5 and factory.calls == 1
    assert (client.stats.model_calls, client.stats.cache_hits) == (5, 0)
    assert len(client.cache) == 5

    backend2 = FakeBackend()
    client2, factory2 = make_client(tmp_path, backend2)
    second = client2.run(requests(5), T_HASH)
    assert second == first
    assert [json.dumps(r, sort_keys=True) for r in second] == [
        json.dumps(r, sort_keys=True) for r in first
    ]
    assert backend2.calls == []
    assert factory2.calls == 0  # no backend, so no server, was ever made
    assert client2._backend is None
    assert (client2.stats.model_calls, client2.stats.cache_hits) == (0, 5)
    assert client2.stats.server_started is False
    assert client2.stats.server_used is False


def test_partial_cache_only_calls_the_misses(tmp_path: Path) -> None:
    backend = FakeBackend()
    client, _ = make_client(tmp_path, backend)
    client.run([requests(6)[i] for i in (1, 3)], T_HASH)
    assert backend.calls == ["question 1", "question 3"]

    backend2 = FakeBackend()
    client2, factory2 = make_client(tmp_path, backend2, concurrency=3)
    out = client2.run(requests(6), T_HASH)
    assert out == [expected(i) for i in range(6)]
    assert sorted(backend2.calls) == ["question 0", "question 2", "question 4", "question 5"]
    assert factory2.calls == 1
    assert (client2.stats.model_calls, client2.stats.cache_hits) == (4, 2)
    assert len(client2.cache) == 6


def test_results_in_request_order_under_concurrency(tmp_path: Path) -> None:
    backend = FakeBackend(delays={i: 0.01 * (10 - i) for i in range(10)})  # 0 slowest
    client, _ = make_client(tmp_path, backend, concurrency=4)
    out = client.run(requests(10), T_HASH)
    assert out == [expected(i) for i in range(10)]
    assert backend.completed != sorted(backend.completed)  # they did finish out of order


def test_every_part_of_the_request_is_in_the_key(tmp_path: Path) -> None:
    client, _ = make_client(tmp_path, FakeBackend())
    req = requests(1)[0]
    base = client.key(req, T_HASH)
    assert client.key(req, T_HASH) == base
    assert client.key(req, "ffffffffffffffff") != base
    variants = [
        ChatRequest(req.messages, max_tokens=33),
        ChatRequest(req.messages, max_tokens=32, seed=1),
        ChatRequest(req.messages, max_tokens=32, temperature=0.5),
        ChatRequest(req.messages, max_tokens=32, json_schema={"type": "object"}),
        ChatRequest([{"role": "user", "content": "question 1"}], max_tokens=32),
    ]
    keys = {client.key(v, T_HASH) for v in variants}
    assert len(keys) == len(variants) and base not in keys


def test_changed_weights_give_different_keys_and_no_replay(tmp_path: Path) -> None:
    backend_a = FakeBackend()
    client_a, _ = make_client(tmp_path, backend_a, weights="a" * 64)
    client_a.run(requests(3), T_HASH)

    backend_b = FakeBackend()
    client_b, factory_b = make_client(tmp_path, backend_b, weights="b" * 64)
    req = requests(1)[0]
    assert client_a.key(req, T_HASH) != client_b.key(req, T_HASH)
    client_b.run(requests(3), T_HASH)
    assert len(backend_b.calls) == 3 and factory_b.calls == 1  # nothing replayed
    assert len(client_b.cache) == 6


def test_backend_failure_keeps_completed_answers(tmp_path: Path) -> None:
    # questions 0 and 1 are answered (and seen by the client) well before question 2 fails
    backend = FakeBackend(fail_on="question 2", delays={2: 0.3})
    client, _ = make_client(tmp_path, backend, concurrency=1)
    with pytest.raises(RuntimeError, match="question 2"):
        client.run(requests(5), T_HASH)
    reqs = requests(5)
    for i in (0, 1):  # answered before the failure
        assert client.cache.get(client.key(reqs[i], T_HASH)) == expected(i)
    assert client.cache.get(client.key(reqs[2], T_HASH)) is None

    # a rerun with a healthy backend calls only what is not cached
    backend2 = FakeBackend()
    client2, _ = make_client(tmp_path, backend2)
    out = client2.run(reqs, T_HASH)
    assert out == [expected(i) for i in range(5)]
    assert "question 0" not in backend2.calls and "question 1" not in backend2.calls
    assert "question 2" in backend2.calls


def test_backend_failure_wastes_no_completed_calls(tmp_path: Path) -> None:
    backend = FakeBackend(fail_on="question 2", delays={3: 0.2, 4: 0.2})
    client, _ = make_client(tmp_path, backend, concurrency=1)
    with pytest.raises(RuntimeError):
        client.run(requests(5), T_HASH)
    reqs = requests(5)
    lost = [
        p
        for p in backend.completed
        if client.cache.get(client.key(reqs[int(p.split()[1])], T_HASH)) is None
    ]
    assert lost == []


class DriftingBackend(FakeBackend):
    """A batching server's behaviour: the same prompt can come back with different text."""

    def __init__(self) -> None:
        super().__init__()
        self.n = 0

    def chat(self, request: ChatRequest) -> Completion:
        with self._lock:
            self.n += 1
            n = self.n
        return Completion(text=f"draft {n}", prompt_tokens=2, completion_tokens=2,
                          latency_s=0.0, finish_reason="stop")  # fmt: skip


def test_same_prompt_twice_in_one_run_gets_the_cached_answer_both_times(tmp_path: Path) -> None:
    """Both copies must read what the cache keeps (the first stored), or a warm rerun, which
    replays the cache, would rewrite the file with different text."""
    client, _ = make_client(tmp_path, DriftingBackend(), concurrency=2)
    same = requests(1) * 2
    first = client.run(same, T_HASH)
    assert first[0] == first[1] == client.cache.get(client.key(same[0], T_HASH))
    replay, _ = make_client(tmp_path, DriftingBackend())
    assert replay.run(same, T_HASH) == first


def test_a_prompt_another_job_cached_meanwhile_is_replaced_by_that_answer(tmp_path: Path) -> None:
    client, _ = make_client(tmp_path, DriftingBackend())
    key = client.key(requests(1)[0], T_HASH)
    other = CallCache(tmp_path / "cache" / "calls.sqlite")  # another job, same cache file
    won = {"text": "the other job's answer", "prompt_tokens": 2, "completion_tokens": 2,
           "latency_s": 0.0, "finish_reason": "stop"}  # fmt: skip
    real_get = client.cache.get
    looked: list[str] = []

    def get_before_the_other_job(k: str):  # this job looks up before the other one stores
        looked.append(k)
        return None if len(looked) == 1 else real_get(k)

    client.cache.get = get_before_the_other_job
    assert other.put(key, won) == won
    assert client.run(requests(1), T_HASH) == [won]


# a job asking 8 questions, 4 in flight, each answered after 1.5 s; SIGTERM comes at 0.5 s
SIGTERMED_JOB = """
import sys, time
from pathlib import Path
sys.path.insert(0, sys.argv[2])
from tests.test_llm_client import FakeBackend, T_HASH, make_client, requests
backend = FakeBackend(delays={i: 1.5 for i in range(8)})
client, _ = make_client(Path(sys.argv[1]), backend, concurrency=4)
print("asking", flush=True)
client.run(requests(8), T_HASH)
print("not reached", flush=True)
"""


def test_sigterm_drains_the_calls_in_flight_into_the_cache(tmp_path: Path) -> None:
    """`srb resume` and schedulers stop a job with SIGTERM: the 4 answers already being computed
    are cached (a rerun does not ask them again), the 4 queued ones are never sent."""
    import signal
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    proc = subprocess.Popen([sys.executable, "-c", SIGTERMED_JOB, str(tmp_path), str(repo)],
                            stdout=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stdout is not None and proc.stdout.readline() == "asking\n"
    time.sleep(0.5)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 128 + signal.SIGTERM and "not reached" not in out
    cache = CallCache(tmp_path / "cache" / "calls.sqlite")
    assert len(cache) == 4
    backend = FakeBackend()
    client, _ = make_client(tmp_path, backend, concurrency=4)
    assert client.run(requests(8), T_HASH) == [expected(i) for i in range(8)]
    assert sorted(backend.calls) == [f"question {i}" for i in range(4, 8)]  # only the queued 4
