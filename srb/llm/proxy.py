"""An OpenAI-compatible endpoint on 127.0.0.1 through which memory libraries make every model call.

Mem0, Graphiti and any other OpenAI-speaking library get this endpoint's URL as their base URL.
`/v1/chat/completions` answers from the call cache (key = the whole request body: messages,
response_format/schema, tools, sampling; see `LLMClient.request_key`) and forwards a miss to the
configured backend, starting the local vLLM server only then. `/v1/embeddings` encodes with the
configured sentence-transformers encoder through the embedding cache. A warm re-ingest therefore
makes zero model calls and, given a deterministic library, writes the same store. A library's
retry of an answer that was cut or does not parse is sent re-sampled (`RetryVariants`), so it
can succeed; a small model's whitespace runaway is cut as it streams (srb.llm.runaway).

Each request's usage is counted (cached or not), so an ingest log reports the ingest's token
cost identically on a cold and a warm run; `model_calls` counts what actually reached a model.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import numpy as np

from srb.json_http import JSONHandler
from srb.llm.backends import LLMCallError
from srb.llm.client import LLMClient

log = logging.getLogger(__name__)


@dataclass
class EndpointStats:
    chat_requests: int = 0
    chat_cache_hits: int = 0
    model_calls: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    failed_requests: int = 0  # the model server refused or failed a request (told to the library)
    internal_errors: int = 0  # the endpoint itself failed (server start, encoder, cache)
    client_disconnects: int = 0  # the library timed out and left before its answer was sent
    truncated_responses: int = 0  # finish_reason "length": the model hit max_tokens
    cut_runaways: int = 0  # answers cut at a whitespace runaway (srb.llm.runaway)
    resampled_requests: int = 0  # a library's retry of a defective answer, sent re-sampled
    invalid_json_responses: int = 0  # JSON was asked for (response_format) and is not parseable
    embedding_requests: int = 0
    embedded_texts: int = 0
    encoded_texts: int = 0  # embedding cache misses actually run through the encoder

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


class Embedder:
    """The `/v1/embeddings` side: a srb.index.dense.Encoder (with its cache), one call at a time."""

    def __init__(self, encoder: Any, served_name: str):
        self.encoder = encoder
        self.served_name = served_name
        self._lock = threading.Lock()

    def embed(self, texts: list[str]) -> tuple[np.ndarray, int]:
        with self._lock:
            before = self.encoder.encoded
            vectors = self.encoder.encode(texts)
            return vectors, self.encoder.encoded - before


class CachingEndpoint:
    """The HTTP server; use `serve_endpoint` to run one for the duration of a block."""

    def __init__(
        self,
        chat: LLMClient,
        embedder: Embedder | None,
        host: str = "127.0.0.1",
        max_completion_tokens: int | None = None,
        bound_schemas: bool | tuple[int, int] = False,
        max_whitespace_run: int | None = None,
    ):
        self.chat = chat
        self.embedder = embedder
        self.max_completion_tokens = max_completion_tokens
        self.bound_schemas = bound_schemas
        self.max_whitespace_run = max_whitespace_run
        self.stats = EndpointStats()
        self._retries = RetryVariants()
        self._stats_lock = threading.Lock()
        self._server = ThreadingHTTPServer((host, 0), self._handler())
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        log.info("caching OpenAI endpoint for %s at %s", self.chat.model_name, self.base_url)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _count(self, **increments: int) -> None:
        with self._stats_lock:
            for name, value in increments.items():
                setattr(self.stats, name, getattr(self.stats, name) + value)

    # -- request handling -------------------------------------------------------------------

    def models(self) -> dict[str, Any]:
        names = [self.chat.model_name] + ([self.embedder.served_name] if self.embedder else [])
        return {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}

    def chat_completion(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if body.get("stream"):
            return 400, _error("streaming is not supported by the caching endpoint")
        if int(body.get("n") or 1) != 1:
            return 400, _error("n > 1 is not supported by the caching endpoint")
        body = cap_completion_tokens(body, self.max_completion_tokens)
        if self.bound_schemas:
            body = bounded_request(body, *schema_bounds(self.bound_schemas))
        asked = self.chat.request_key(body)
        attempt = self._retries.attempt(asked)
        body = resampled(body, attempt)
        try:
            response, cached = self.chat.forward(body, self.max_whitespace_run)
        except LLMCallError as exc:
            self._count(chat_requests=1, failed_requests=1)
            log.warning("chat request failed: %s", exc)
            return (exc.status or 502), _error(str(exc))
        usage = response.get("usage") or {}
        truncated, invalid = response_defects(body, response)
        if invalid:
            log.warning("a JSON response does not parse (truncated: %s)", truncated)
        if truncated or invalid:
            self._retries.defective(asked, attempt)
        self._count(
            resampled_requests=int(attempt > 0),
            cut_runaways=int("srb_cut" in response),
            truncated_responses=int(truncated),
            invalid_json_responses=int(invalid),
            chat_requests=1,
            chat_cache_hits=int(cached),
            model_calls=int(not cached),
            prompt_tokens=int(usage.get("prompt_tokens") or 0),
            completion_tokens=int(usage.get("completion_tokens") or 0),
        )
        return 200, response

    def embeddings(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        if self.embedder is None:
            return 404, _error("this endpoint serves no embedding model")
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
            return 400, _error(
                "input must be a string or a list of strings (token ids are not accepted)"
            )
        vectors, encoded = self.embedder.embed(texts)
        dims = body.get("dimensions")
        if dims is not None and int(dims) != vectors.shape[1]:
            self._count(failed_requests=1)
            return 400, _error(
                f"dimensions={dims} requested, but {self.embedder.served_name} returns "
                f"{vectors.shape[1]}-d vectors; configure the library for {vectors.shape[1]}"
            )
        as_base64 = body.get("encoding_format") == "base64"
        data = [
            {
                "object": "embedding",
                "index": i,
                "embedding": base64.b64encode(v.astype("<f4").tobytes()).decode()
                if as_base64
                else [float(x) for x in v],
            }
            for i, v in enumerate(vectors)
        ]
        self._count(embedding_requests=1, embedded_texts=len(texts), encoded_texts=encoded)
        tokens = sum(len(t.split()) for t in texts)
        return 200, {
            "object": "list",
            "data": data,
            "model": self.embedder.served_name,
            "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
        }

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        endpoint = self

        class Handler(JSONHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, endpoint.models())
                else:
                    self._send(404, _error(f"no route {self.path}"))

            def do_POST(self) -> None:  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                try:
                    body = json.loads(self.rfile.read(length) or b"{}")
                except json.JSONDecodeError as exc:
                    self._send(400, _error(f"request body is not JSON: {exc}"))
                    return
                path = self.path.rstrip("/")
                try:
                    if path.endswith("/chat/completions"):
                        answer = endpoint.chat_completion(body)
                    elif path.endswith("/embeddings"):
                        answer = endpoint.embeddings(body)
                    else:
                        answer = 404, _error(f"no route {self.path}")
                except Exception as exc:  # a 500 to the library; counted: ingest then fails
                    log.exception("endpoint error on %s", self.path)
                    endpoint._count(internal_errors=1)
                    answer = 500, _error(f"{type(exc).__name__}: {exc}")
                try:
                    self._send(*answer)
                except (BrokenPipeError, ConnectionResetError):
                    # the library stopped waiting (its own timeout) before the answer came:
                    # not the endpoint's failure; the answer is cached for its retry
                    log.warning("the client of %s left before its answer was sent", self.path)
                    endpoint._count(client_disconnects=1)

        return Handler


def cap_completion_tokens(body: dict[str, Any], cap: int | None) -> dict[str, Any]:
    """The request with its answer length capped (before keying: the cap is part of the call).
    Libraries ask for up to 16K tokens; a small model that runs away then holds a CPU for many
    minutes, so runs on small hardware set a cap (`memory.max_completion_tokens`)."""
    if cap is None:
        return body
    out = dict(body)
    for field in ("max_tokens", "max_completion_tokens"):
        if field in out and out[field] is not None:
            out[field] = min(int(out[field]), cap)
    if out.get("max_tokens") is None and out.get("max_completion_tokens") is None:
        out["max_tokens"] = cap
    return out


#: Bounds added to a JSON schema's unbounded arrays and strings (see `bound_schema`).
MAX_SCHEMA_ITEMS = 12
MAX_SCHEMA_STRING = 400


def schema_bounds(bounds: bool | tuple[int, int]) -> tuple[int, int]:
    """(max items per array, max characters per string): the defaults, or a system's own."""
    if isinstance(bounds, tuple):
        return bounds
    return MAX_SCHEMA_ITEMS, MAX_SCHEMA_STRING


def bound_schema(
    node: Any, max_items: int = MAX_SCHEMA_ITEMS, max_chars: int = MAX_SCHEMA_STRING
) -> Any:
    """A copy of a JSON schema whose arrays and free strings have a maximum size. A small model
    under structured output can run away inside an unbounded array (Graphiti's
    `episode_indices` grew to 0..832 until max_tokens) and the library then drops the
    truncated JSON; bounded, the grammar makes it close the array."""
    if isinstance(node, list):
        return [bound_schema(v, max_items, max_chars) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: bound_schema(v, max_items, max_chars) for k, v in node.items()}
    kinds = out.get("type")
    kinds = kinds if isinstance(kinds, list) else [kinds]
    if "array" in kinds and "maxItems" not in out:
        out["maxItems"] = max_items
    if "string" in kinds and not {"maxLength", "enum", "const", "format", "pattern"} & set(out):
        out["maxLength"] = max_chars
    return out


def bounded_request(
    body: dict[str, Any], max_items: int = MAX_SCHEMA_ITEMS, max_chars: int = MAX_SCHEMA_STRING
) -> dict[str, Any]:
    """The request with its `response_format` JSON schema bounded (before keying)."""
    fmt = body.get("response_format") or {}
    if fmt.get("type") != "json_schema" or "schema" not in (fmt.get("json_schema") or {}):
        return body
    spec = dict(fmt["json_schema"])
    spec["schema"] = bound_schema(spec["schema"], max_items, max_chars)
    return {**body, "response_format": {**fmt, "json_schema": spec}}


def response_defects(body: dict[str, Any], response: dict[str, Any]) -> tuple[bool, bool]:
    """(cut at max_tokens, JSON asked for but unparseable): libraries such as Mem0 log such an
    extraction and drop it, so the endpoint counts them for the ingest log."""
    choices = response.get("choices") or [{}]
    truncated = choices[0].get("finish_reason") == "length"
    fmt = (body.get("response_format") or {}).get("type")
    if fmt not in ("json_object", "json_schema"):
        return truncated, False
    text = ((choices[0].get("message") or {}).get("content") or "").strip()
    text = text.removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return truncated, True
    return truncated, False


#: re-samples of a request whose answer was cut or unparseable, and their temperature
MAX_RESAMPLES = 3
RESAMPLE_TEMPERATURE = 0.7


class RetryVariants:
    """Which attempt a library's request is. A library retries a cut or unparseable answer by
    sending the same request again (Cognee's tenacity, with back-off); from the call cache, or
    from a greedy model, it would get the same answer every time and fail the paper. So the
    n-th repeat of a request whose answer was defective, within one endpoint (one job), is
    sent re-sampled (`resampled`), up to MAX_RESAMPLES. Attempts are part of the request, so
    of its cache key: a rerun, whose library retries in the same order, replays them all."""

    def __init__(self) -> None:
        self._next: dict[str, int] = {}
        self._lock = threading.Lock()

    def attempt(self, key: str) -> int:
        with self._lock:
            return self._next.get(key, 0)

    def defective(self, key: str, attempt: int) -> None:
        with self._lock:
            self._next[key] = max(self._next.get(key, 0), min(attempt + 1, MAX_RESAMPLES))


def resampled(body: dict[str, Any], attempt: int) -> dict[str, Any]:
    """Attempt 0 is the request as asked; a later one samples at RESAMPLE_TEMPERATURE (or the
    library's own, if higher) with seed = attempt, so it differs and is reproducible."""
    if attempt == 0:
        return body
    temperature = max(float(body.get("temperature") or 0.0), RESAMPLE_TEMPERATURE)
    return {**body, "temperature": temperature, "seed": attempt}


def _error(message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": "srb_endpoint_error"}}


@contextmanager
def serve_endpoint(
    chat: LLMClient,
    embedder: Embedder | None,
    max_completion_tokens: int | None = None,
    bound_schemas: bool | tuple[int, int] = False,
    max_whitespace_run: int | None = None,
) -> Iterator[CachingEndpoint]:
    """Run a caching endpoint for the block; it is shut down however the block ends."""
    endpoint = CachingEndpoint(
        chat,
        embedder,
        max_completion_tokens=max_completion_tokens,
        bound_schemas=bound_schemas,
        max_whitespace_run=max_whitespace_run,
    )
    endpoint.start()
    try:
        yield endpoint
    finally:
        endpoint.stop()
