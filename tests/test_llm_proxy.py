"""The caching OpenAI endpoint, driven by the real `openai` client library a memory library uses.

The chat backend behind it is a stand-in that records what reached it (the real vLLM path is
covered by the store-system integration test); embeddings use the real packaged MiniLM encoder.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import openai
import pytest

from srb.index.dense import Encoder
from srb.llm.backends import LLMCallError
from srb.llm.client import LLMClient
from srb.llm.proxy import Embedder, serve_endpoint
from tests.stand_in_chat import StandInChat, chat_completion, stand_in_client


class RecordingBackend(StandInChat):
    """Answers with the request's last user message reversed; fails bodies marked 'fail'."""

    def reply(self, body: dict) -> dict:
        text = body["messages"][-1]["content"]
        if text == "fail":
            raise LLMCallError("context too long", status=400)
        return chat_completion(text[::-1], 7, 3)


def client_for(tmp_path: Path, backend: RecordingBackend) -> LLMClient:
    return stand_in_client(tmp_path, tmp_path / "calls.sqlite", backend, "tiny-model", 2048)


def ask(base_url: str, text: str, **extra) -> openai.types.chat.ChatCompletion:
    api = openai.OpenAI(base_url=base_url, api_key="unused", max_retries=0)
    return api.chat.completions.create(
        model="whatever-the-library-says",
        messages=[{"role": "user", "content": text}],
        temperature=0,
        **extra,
    )


def test_chat_misses_reach_the_backend_once_and_replay_from_cache(tmp_path):
    backend = RecordingBackend()
    with serve_endpoint(client_for(tmp_path, backend), None) as endpoint:
        first = ask(endpoint.base_url, "hello")
        again = ask(endpoint.base_url, "hello")
        assert first.choices[0].message.content == "olleh"
        assert again.choices[0].message.content == "olleh"
        assert len(backend.bodies) == 1
        # the response format is part of the key: a JSON-mode request is a different call
        ask(endpoint.base_url, "hello", response_format={"type": "json_object"})
        assert len(backend.bodies) == 2
        assert backend.bodies[1]["response_format"] == {"type": "json_object"}
        stats = endpoint.stats.to_dict()
    assert stats["chat_requests"] == 3
    assert stats["chat_cache_hits"] == 1
    assert stats["model_calls"] == 2
    assert stats["prompt_tokens"] == 21  # usage counted for cached replies too
    # a new endpoint over the same cache (a warm re-ingest) makes no model call
    backend2 = RecordingBackend()
    with serve_endpoint(client_for(tmp_path, backend2), None) as endpoint:
        ask(endpoint.base_url, "hello")
        ask(endpoint.base_url, "hello", response_format={"type": "json_object"})
        assert endpoint.stats.model_calls == 0
    assert backend2.bodies == []


def test_backend_errors_reach_the_library_with_their_status_and_are_not_cached(tmp_path):
    backend = RecordingBackend()
    with serve_endpoint(client_for(tmp_path, backend), None) as endpoint:
        for _ in range(2):
            with pytest.raises(openai.BadRequestError, match="context too long"):
                ask(endpoint.base_url, "fail")
        assert endpoint.stats.failed_requests == 2
    assert len(backend.bodies) == 2


def test_streaming_is_refused_clearly(tmp_path):
    with serve_endpoint(client_for(tmp_path, RecordingBackend()), None) as endpoint:
        with pytest.raises(openai.BadRequestError, match="streaming is not supported"):
            ask(endpoint.base_url, "hi", stream=True)


def test_embeddings_are_the_packaged_encoders_vectors_in_both_encodings(tmp_path):
    encoder = Encoder("minilm", cache_path=tmp_path / "emb.sqlite")
    texts = ["BM25 is a lexical ranking function.", "Mem0 extracts atomic facts."]
    with serve_endpoint(
        client_for(tmp_path, RecordingBackend()), Embedder(encoder, "minilm")
    ) as ep:
        api = openai.OpenAI(base_url=ep.base_url, api_key="unused", max_retries=0)
        # the openai client asks for base64 by default and decodes it itself
        got = api.embeddings.create(model="minilm", input=texts)
        as_floats = api.embeddings.create(model="minilm", input=texts[0], encoding_format="float")
        with pytest.raises(openai.BadRequestError, match="384-d"):
            api.embeddings.create(model="minilm", input=texts[0], dimensions=1536)
        stats = ep.stats.to_dict()
    direct = Encoder("minilm").encode(texts)
    np.testing.assert_allclose(np.array([d.embedding for d in got.data]), direct, atol=1e-6)
    np.testing.assert_allclose(as_floats.data[0].embedding, direct[0], atol=1e-6)
    assert stats["embedded_texts"] == 3  # the refused request is a failure, not an embedding
    assert stats["failed_requests"] == 1
    assert stats["encoded_texts"] == 2  # the repeat came from the embedding cache


def test_truncated_and_unparseable_json_answers_are_counted() -> None:
    from srb.llm.proxy import response_defects

    def answer(text: str, finish: str = "stop") -> dict:
        return {"choices": [{"message": {"content": text}, "finish_reason": finish}]}

    wants_json = {"response_format": {"type": "json_object"}}
    assert response_defects(wants_json, answer('{"memory": []}')) == (False, False)
    assert response_defects(wants_json, answer('```json\n{"a": 1}\n```')) == (False, False)
    assert response_defects(wants_json, answer('{"memory": [{"te', "length")) == (True, True)
    assert response_defects({}, answer("plain text, cut", "length")) == (True, False)


def test_completion_length_cap_applies_before_the_key(tmp_path) -> None:
    from srb.llm.proxy import cap_completion_tokens

    assert cap_completion_tokens({"max_tokens": 16384}, 1024) == {"max_tokens": 1024}
    assert cap_completion_tokens({"max_tokens": 200}, 1024) == {"max_tokens": 200}
    assert cap_completion_tokens({"max_completion_tokens": 9000}, 512) == {
        "max_completion_tokens": 512
    }
    assert cap_completion_tokens({}, 256) == {"max_tokens": 256}
    assert cap_completion_tokens({"max_tokens": 16384}, None) == {"max_tokens": 16384}
    backend = RecordingBackend()
    with serve_endpoint(client_for(tmp_path, backend), None, max_completion_tokens=64) as ep:
        ask(ep.base_url, "hello", max_tokens=4096)
        ask(ep.base_url, "hello", max_tokens=2048)  # the same capped call: a cache hit
        assert ep.stats.model_calls == 1
    assert backend.bodies[0]["max_tokens"] == 64


def test_bounded_schemas_close_runaway_arrays_and_strings() -> None:
    from srb.llm.proxy import MAX_SCHEMA_ITEMS, MAX_SCHEMA_STRING, bounded_request

    schema = {
        "type": "object",
        "properties": {
            "entities": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "name": {"type": "string"},
                        "kind": {"type": "string", "enum": ["a", "b"]},
                        "indices": {"type": "array", "items": {"type": "integer"}, "maxItems": 5},
                        "note": {"anyOf": [{"type": "string"}, {"type": "null"}]},
                    },
                },
            }
        },
        "$defs": {"Tag": {"type": ["string", "null"]}},
    }
    body = {"messages": [], "response_format": {"type": "json_schema",
            "json_schema": {"name": "x", "schema": schema}}}  # fmt: skip
    out = bounded_request(body)["response_format"]["json_schema"]["schema"]
    entities = out["properties"]["entities"]
    assert entities["maxItems"] == MAX_SCHEMA_ITEMS
    item = entities["items"]["properties"]
    assert item["name"]["maxLength"] == MAX_SCHEMA_STRING
    assert "maxLength" not in item["kind"]  # an enum is bounded already
    assert item["indices"]["maxItems"] == 5  # an explicit bound is kept
    assert item["note"]["anyOf"][0]["maxLength"] == MAX_SCHEMA_STRING
    assert out["$defs"]["Tag"]["maxLength"] == MAX_SCHEMA_STRING
    assert "maxItems" not in schema["properties"]["entities"]  # the caller's schema untouched
    plain = {"messages": [], "response_format": {"type": "json_object"}}
    assert bounded_request(plain) is plain


class GreedyRunaway(StandInChat):
    """Greedy (temperature 0) answers are cut mid-JSON; sampled ones parse; `always` fails."""

    def __init__(self, always: bool = False) -> None:
        super().__init__()
        self.always = always

    def reply(self, body: dict) -> dict:
        if body["messages"][-1]["content"] == "fine":
            return chat_completion("ok", 7, 1)
        if self.always or not body.get("temperature"):
            response = chat_completion('{"facts": ["a", "b', 7, 2048)
            response["choices"][0]["finish_reason"] = "length"
            return response
        return chat_completion(f'{{"facts": ["seed {body["seed"]}"]}}', 7, 9)


JSON_MODE = {"response_format": {"type": "json_object"}}


def test_a_retried_defective_answer_is_resampled_reproducibly(tmp_path):
    backend = GreedyRunaway()
    with serve_endpoint(client_for(tmp_path, backend), None) as endpoint:
        answers = [ask(endpoint.base_url, "extract", **JSON_MODE).choices[0].message.content
                   for _ in range(3)]  # fmt: skip
        stats = endpoint.stats.to_dict()
    assert answers == ['{"facts": ["a", "b', '{"facts": ["seed 1"]}', '{"facts": ["seed 1"]}']
    # the library's retry reached the model re-sampled; the third ask came from the cache
    assert [(b["temperature"], b.get("seed")) for b in backend.bodies] == [(0, None), (0.7, 1)]
    assert stats["resampled_requests"] == 2 and stats["truncated_responses"] == 1
    # a rerun whose library retries the same way replays both attempts without a model call
    again = GreedyRunaway()
    with serve_endpoint(client_for(tmp_path, again), None) as endpoint:
        replay = [ask(endpoint.base_url, "extract", **JSON_MODE).choices[0].message.content
                  for _ in range(2)]  # fmt: skip
    assert replay == answers[:2] and again.bodies == []


def test_resampling_is_bounded_and_a_good_answer_is_never_resampled(tmp_path):
    backend = GreedyRunaway(always=True)
    with serve_endpoint(client_for(tmp_path, backend), None) as endpoint:
        for _ in range(6):
            ask(endpoint.base_url, "extract", **JSON_MODE)
        ask(endpoint.base_url, "fine")
        ask(endpoint.base_url, "fine")
    seeds = [b.get("seed") for b in backend.bodies if b["messages"][-1]["content"] == "extract"]
    assert seeds == [None, 1, 2, 3]  # MAX_RESAMPLES re-samples, then the last one replays
    fine = [b for b in backend.bodies if b["messages"][-1]["content"] == "fine"]
    assert len(fine) == 1 and fine[0]["temperature"] == 0


class SlowBackend(RecordingBackend):
    def reply(self, body: dict) -> dict:
        import time

        time.sleep(1.5)
        return super().reply(body)


def test_a_library_that_times_out_is_not_an_endpoint_failure_and_its_retry_is_cached(tmp_path):
    """Cognee's litellm gave up on a 10-minute answer under load; the endpoint's write then
    broke, which was counted as its own failure and failed the whole ingest."""
    import time

    backend = SlowBackend()
    with serve_endpoint(client_for(tmp_path, backend), None) as endpoint:
        api = openai.OpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0,
                            timeout=0.3)  # fmt: skip
        with pytest.raises(openai.APITimeoutError):
            api.chat.completions.create(model="m", messages=[{"role": "user", "content": "abc"}])
        deadline = time.monotonic() + 10
        while endpoint.stats.chat_requests == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        time.sleep(0.3)
        patient = openai.OpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0)
        retry = patient.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "abc"}]
        )
        stats = endpoint.stats.to_dict()
    assert retry.choices[0].message.content == "cba"
    assert len(backend.bodies) == 1 and stats["chat_cache_hits"] == 1  # the retry: cached
    assert stats["internal_errors"] == 0
    assert stats["client_disconnects"] <= 1  # counted when the socket noticed the peer left
