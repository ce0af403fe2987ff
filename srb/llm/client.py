"""The one client every LLM-using job goes through: cache first, backend only on a miss.

The backend (and so any server) is created lazily at the first miss, so a job on a warm cache
makes zero model calls and starts nothing. Misses run concurrently (vLLM batches them); each
answer is cached the moment it arrives, so a killed job loses only calls still in flight.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tqdm import tqdm

from srb.llm.backends import (
    Backend,
    ChatRequest,
    LLMCallError,
    OpenAICompatBackend,
    TransformersBackend,
)
from srb.llm.cache import CallCache, CallFiles, call_key
from srb.llm.models import model_identity, vllm_options
from srb.llm.runaway import guardable
from srb.signals import sigterm_raises

log = logging.getLogger(__name__)


@dataclass
class CallStats:
    cache_hits: int = 0
    model_calls: int = 0
    server_started: bool = False
    server_used: bool = False


class LLMClient:
    def __init__(
        self,
        backend: str,
        model_name: str,
        spec: dict[str, Any],
        model_dir: str | None,
        cache: CallCache | CallFiles,
        state_dir: str | Path,
        concurrency: int = 8,
        backend_factory: Callable[[], Backend] | None = None,
        models_dir: str | Path | None = None,
    ):
        self.backend_kind = backend
        self.model_name = model_name
        self.spec = spec
        self.model_dir = model_dir
        self.cache = cache
        self.state_dir = Path(state_dir)
        self.concurrency = max(1, concurrency)
        self.identity = model_identity(model_name, spec, backend, model_dir, models_dir)
        self._factory = backend_factory
        self._backend: Backend | None = None
        self._backend_lock = threading.Lock()  # proxy threads may all miss at once
        self.stats = CallStats()

    def key(self, request: ChatRequest, template_hash: str) -> str:
        return call_key(
            backend=self.backend_kind,
            template=template_hash,
            messages=request.messages,
            sampling=request.sampling(),
            schema=request.json_schema,
            **self.identity,
        )

    def request_key(self, body: dict[str, Any]) -> str:
        """Key of a raw OpenAI chat request (a memory library's): the whole body (messages,
        response_format and its schema, tools, sampling) except the model name, which the model
        identity replaces."""
        request = {k: v for k, v in body.items() if k != "model"}
        return call_key(backend=self.backend_kind, request=request, **self.identity)

    def forward(
        self, body: dict[str, Any], max_whitespace_run: int | None = None
    ) -> tuple[dict[str, Any], bool]:
        """(response, from cache) for a raw chat-completions body: the cache first, the backend
        (started on this first miss) otherwise. Only OpenAI-speaking backends can forward.

        `max_whitespace_run`: on a vLLM backend the answer is streamed and a whitespace
        runaway cut there (srb.llm.runaway); the cut is part of the call, so of its key."""
        guarded = max_whitespace_run is not None and self.backend_kind == "vllm" and guardable(body)
        keyed = {**body, "srb_max_whitespace_run": max_whitespace_run} if guarded else body
        key = self.request_key(keyed)
        cached = self.cache.get(key)
        if cached is not None:
            self.stats.cache_hits += 1
            return cached, True
        backend = self._get_backend()
        post = getattr(backend, "post_chat", None)
        if post is None:
            raise ValueError(
                f"backend {self.backend_kind!r} cannot serve a memory library's raw OpenAI "
                "requests; use backend vllm or openai"
            )
        streamed = getattr(backend, "post_chat_guarded", None)
        if guarded and streamed is not None:
            response = streamed(body, max_whitespace_run)
        else:
            response = post(body)
        self.stats.model_calls += 1
        return self.cache.put(key, response, kind="request", model=self.model_name), False

    def start_server(self) -> bool:
        """Bring up this model's local vLLM server now, before any request needs it (see
        rules/models.smk, start_ingest_server); False for a backend without one."""
        if self.backend_kind != "vllm":
            return False
        self._get_backend()
        return self.stats.server_started

    def _get_backend(self) -> Backend:
        with self._backend_lock:
            if self._backend is None:
                self._backend = self._factory() if self._factory else self._make_backend()
            return self._backend

    def _call_limits(self) -> dict[str, float]:
        """Per-call bounds from the model's config: a server that hangs, errs or answers
        garbage costs at most about retries x timeout_s (+ back-off) per call, never a hang."""
        return {
            "timeout_s": float(self.spec.get("timeout_s", 600)),
            "retries": int(self.spec.get("retries", 3)),
            "backoff_s": float(self.spec.get("backoff_s", 2.0)),
        }

    def _make_backend(self) -> Backend:
        source = self.spec.get("source", {})
        if self.backend_kind == "vllm":
            from srb.llm.server import acquire_server

            url, started = acquire_server(
                self.model_name,
                str(self.model_dir),
                vllm_options(self.model_name, self.spec),
                self.state_dir,
            )
            self.stats.server_started = started
            self.stats.server_used = True
            return OpenAICompatBackend(url, self.model_name, **self._call_limits())
        if self.backend_kind == "openai":
            return OpenAICompatBackend(
                source["base_url"],
                source["served_name"],
                api_key_env=source.get("api_key_env"),
                **self._call_limits(),
            )
        if self.backend_kind == "transformers":
            return TransformersBackend(str(self.model_dir))
        raise ValueError(f"unknown LLM backend {self.backend_kind!r} (vllm, openai, transformers)")

    def run(
        self, requests: Sequence[ChatRequest], template_hash: str, desc: str = "LLM calls"
    ) -> list[dict[str, Any]]:
        """Completions (as dicts) in request order; cached ones are replayed byte for byte."""
        keys = [self.key(r, template_hash) for r in requests]
        results: list[dict[str, Any] | None] = [self.cache.get(k) for k in keys]
        misses = [i for i, r in enumerate(results) if r is None]
        self.stats.cache_hits += len(requests) - len(misses)
        if misses:
            backend = self._get_backend()

            def ask(i: int) -> dict[str, Any]:
                # cached in the thread the answer arrives on, so a job stopped now keeps it;
                # the cache's copy may be another caller's answer to the same prompt
                completion = backend.chat(requests[i]).to_dict()
                return self.cache.put(keys[i], completion, model=self.model_name)

            pool = ThreadPoolExecutor(self.concurrency)
            futures = {pool.submit(ask, i): i for i in misses}
            failure: BaseException | None = None
            # SIGTERM (`srb resume` or a scheduler stopping this job) raises here, and the pool's
            # shutdown then lets the calls in flight finish into the cache before the job exits
            with sigterm_raises():
                try:
                    for future in tqdm(
                        as_completed(futures), total=len(futures), desc=desc, mininterval=5
                    ):
                        i = futures[future]
                        if future.cancelled():
                            continue
                        exc = future.exception()
                        if exc is not None:
                            if failure is None:  # stop queued calls; keep those already running
                                failure = exc
                                for f in futures:
                                    f.cancel()
                            continue
                        results[i] = future.result()
                        self.stats.model_calls += 1
                finally:
                    pool.shutdown(wait=True, cancel_futures=True)
            if failure is not None:
                answered = sum(results[i] is not None for i in misses)
                raise LLMCallError(
                    f"{failure} ({answered} of this job's {len(misses)} model calls were "
                    "answered and cached; a rerun asks only the others)",
                    status=getattr(failure, "status", None),
                ) from failure
        log.info(
            "%s: %d cache hits, %d model calls, server used: %s, started by this job: %s",
            desc,
            self.stats.cache_hits,
            self.stats.model_calls,
            "yes" if self.stats.server_used else "no",
            "yes" if self.stats.server_started else "no",
        )
        return [r for r in results if r is not None]
