"""A stand-in chat model behind the real caching endpoint, shared by the store-system tests.

`backend` is any object with `post_chat(body) -> dict` (what the endpoint forwards a cache miss
to); embeddings are the real packaged MiniLM through the embedding cache.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from srb.data.schema import Paper
from srb.index.dense import Encoder
from srb.llm.cache import CallCache
from srb.llm.client import LLMClient
from srb.llm.proxy import CachingEndpoint, Embedder, serve_endpoint
from srb.store import ingest_store
from srb.systems.store import Endpoint
from tests.test_llm_client import make_model_dir


def chat_completion(content: str, prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    """An OpenAI chat-completion response holding `content`."""
    return {
        "id": "chatcmpl-stand-in",
        "object": "chat.completion",
        "created": 0,
        "model": "stand-in",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


def stand_in_client(
    tmp: Path, cache_file: Path, backend: Any, name: str = "stand-in", max_model_len: int = 32768
) -> LLMClient:
    """The workflow's cached client, with `backend` as the model behind it."""
    return LLMClient("vllm", name, {"max_model_len": max_model_len}, str(make_model_dir(tmp)),
                     CallCache(cache_file), tmp / "servers", backend_factory=lambda: backend)  # fmt: skip


@contextmanager
def stand_in_endpoint(
    tmp: Path, cache: Path, backend: Any
) -> Iterator[tuple[Endpoint, CachingEndpoint]]:
    """The caching endpoint (chat: `backend`, embeddings: MiniLM), caches under `cache`."""
    encoder = Encoder("minilm", cache_path=cache / "emb.sqlite")
    client = stand_in_client(tmp, cache / "calls.sqlite", backend)
    with serve_endpoint(client, Embedder(encoder, "minilm")) as server:
        yield Endpoint(server.base_url, "stand-in", "minilm", 384), server


class StandInChat:
    """Records every body it is sent (thread-safe); subclasses answer it in `reply`."""

    name = "stand-in"

    def __init__(self) -> None:
        self.bodies: list[dict[str, Any]] = []
        self._lock = threading.Lock()

    def post_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            self.bodies.append(body)
        return self.reply(body)

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError


def ingest_with_stand_in(
    system: Any, papers: Sequence[Paper], tmp: Path, cache: Path, name: str, backend: Any
) -> tuple[dict[str, Any], Path]:
    """ingest_store through the caching endpoint; outputs under tmp/name."""
    out = tmp / name
    with stand_in_endpoint(tmp, cache, backend) as (endpoint, server):
        record = ingest_store(system, list(papers), out / "store", out / "items.jsonl",
                              out / "ingest.json", endpoint, server.stats.to_dict, retries=0,
                              concurrency=2)  # fmt: skip
    return record, out
