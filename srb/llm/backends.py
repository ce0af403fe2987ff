"""Chat backends behind one interface: an OpenAI-compatible endpoint (a local vLLM server or any
hosted one) and in-process transformers. Each call has a timeout; transient failures are retried
a bounded number of times with exponential backoff, then raised with the model named."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import httpx

from srb.llm.runaway import StreamError, read_stream, streamed_body

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ChatRequest:
    messages: list[dict[str, str]]
    max_tokens: int = 256
    temperature: float = 0.0
    seed: int = 0
    json_schema: dict[str, Any] | None = None

    def sampling(self) -> dict[str, Any]:
        return {"max_tokens": self.max_tokens, "temperature": self.temperature, "seed": self.seed}


@dataclass
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    latency_s: float
    finish_reason: str = "stop"
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "latency_s": round(self.latency_s, 3),
            "finish_reason": self.finish_reason,
        }


class LLMCallError(RuntimeError):
    """A call that failed for good; `status` is the server's HTTP status when it answered."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class MalformedResponse(RuntimeError):
    """An answer with HTTP 200 that is not a chat completion (a body that is not JSON, cut
    short, or without a message): transient like a 5xx, so retried, and never returned (so
    never cached)."""


def checked_completion(data: Any) -> dict[str, Any]:
    """`data` if it is a chat completion with a first choice holding a message, else
    MalformedResponse naming what is missing."""
    if not isinstance(data, dict):
        raise MalformedResponse(f"response is a JSON {type(data).__name__}, not an object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise MalformedResponse(f"response has no choices (choices: {choices!r})"[:200])
    message = choices[0].get("message") if isinstance(choices[0], dict) else None
    if not isinstance(message, dict):
        raise MalformedResponse("response's first choice has no message")
    return data


def parsed_body(resp: httpx.Response) -> dict[str, Any]:
    try:
        data = resp.json()
    except ValueError as exc:  # json.JSONDecodeError, UnicodeDecodeError
        head = resp.text[:80].replace("\n", " ")
        raise MalformedResponse(f"response body is not JSON ({exc}): {head!r}") from exc
    return checked_completion(data)


class Backend(Protocol):
    name: str

    def chat(self, request: ChatRequest) -> Completion: ...


class OpenAICompatBackend:
    """Chat completions over HTTP. The API key is read from an environment variable at call
    time and never stored on the object, logged, or written anywhere."""

    name = "openai"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str | None = None,
        timeout_s: float = 300.0,
        retries: int = 3,
        backoff_s: float = 2.0,
    ):
        """`retries`: attempts per call; a call then takes at most about
        retries x timeout_s + backoff_s x (2^(retries-1) - 1) before it fails for good."""
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api_key_env = api_key_env
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._client = httpx.Client(timeout=timeout_s)

    def _headers(self) -> dict[str, str]:
        if not self.api_key_env:
            return {}
        key = os.environ.get(self.api_key_env)
        if not key:
            raise LLMCallError(f"environment variable {self.api_key_env} (API key) is not set")
        return {"Authorization": f"Bearer {key}"}

    def chat(self, request: ChatRequest) -> Completion:
        body: dict[str, Any] = {
            "model": self.model,
            "messages": request.messages,
            **request.sampling(),
        }
        if request.json_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": "response", "schema": request.json_schema, "strict": True},
            }
        started = time.perf_counter()
        data = self.post_chat(body)
        choice = data["choices"][0]
        usage = data.get("usage") or {}
        return Completion(
            text=choice["message"].get("content") or "",
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            latency_s=time.perf_counter() - started,
            finish_reason=choice.get("finish_reason") or "stop",
        )

    def post_chat(self, body: dict[str, Any]) -> dict[str, Any]:
        """POST one chat-completions body as given (the served model name set here) and return
        the JSON response; 5xx, 429 and transport errors are retried, a 4xx raises at once."""
        body = {**body, "model": self.model}

        def send() -> dict[str, Any]:
            resp = self._client.post(
                f"{self.base_url}/chat/completions", json=body, headers=self._headers()
            )
            self._check_status(resp, resp.text)
            return parsed_body(resp)

        return self._retrying(send)

    def post_chat_guarded(self, body: dict[str, Any], max_whitespace_run: int) -> dict[str, Any]:
        """`post_chat`, streamed, with a whitespace runaway cut short (srb.llm.runaway): the
        answer is reassembled into one response; a server that cannot stream is an error."""
        stream_body = streamed_body({**body, "model": self.model})

        def send() -> dict[str, Any]:
            url = f"{self.base_url}/chat/completions"
            with self._client.stream("POST", url, json=stream_body,
                                     headers=self._headers()) as resp:  # fmt: skip
                if resp.status_code >= 400:
                    self._check_status(resp, resp.read().decode(errors="replace"))
                # leaving the block closes the connection: vLLM aborts a cut request
                try:
                    return checked_completion(
                        read_stream(resp.iter_lines(), body, max_whitespace_run)
                    )
                except StreamError as exc:  # a stream cut or failed: retried like a 5xx
                    raise MalformedResponse(str(exc)) from exc

        return self._retrying(send)

    def _check_status(self, resp: httpx.Response, text: str) -> None:
        if resp.status_code >= 500 or resp.status_code == 429:
            raise httpx.HTTPStatusError(
                f"HTTP {resp.status_code}", request=resp.request, response=resp
            )
        if resp.status_code >= 400:
            raise LLMCallError(
                f"{self.model} at {self.base_url}: HTTP {resp.status_code}: {text[:500]}",
                status=resp.status_code,
            )

    def _retrying(self, send: Callable[[], dict[str, Any]]) -> dict[str, Any]:
        """`send()` with 5xx, 429 and transport errors retried after an exponential back-off."""
        last: Exception | None = None
        for attempt in range(1, self.retries + 1):
            try:
                return send()
            except (httpx.TransportError, httpx.HTTPStatusError, MalformedResponse) as exc:
                last = exc
                if attempt < self.retries:
                    wait = self.backoff_s * 2 ** (attempt - 1)
                    log.warning(
                        "%s: call failed (%s); retry %d/%d in %.0f s",
                        self.model,
                        exc,
                        attempt,
                        self.retries - 1,
                        wait,
                    )
                    time.sleep(wait)
        raise LLMCallError(
            f"{self.model} at {self.base_url}: {self.retries} attempts failed; last error: {last}"
        )


class TransformersBackend:
    """In-process generation where vLLM is not installed (CPU here, CUDA on a GPU host).
    Greedy decoding at temperature 0; JSON schemas are requested in the prompt only."""

    name = "transformers"

    def __init__(self, model_dir: str, device: str | None = None, threads: int | None = None):
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        if threads:
            torch.set_num_threads(threads)
        self.device = device or ("cuda" if torch.cuda.is_available() else "cpu")
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        dtype = torch.bfloat16 if self.device != "cpu" else torch.float32
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(self.device)
        self.model.eval()
        self._lock = threading.Lock()  # one generate at a time per model

    def chat(self, request: ChatRequest) -> Completion:
        import torch

        started = time.perf_counter()
        ids = self.tokenizer.apply_chat_template(
            request.messages, add_generation_prompt=True, return_tensors="pt", return_dict=True
        )
        input_ids = ids["input_ids"].to(self.device)
        attention = ids["attention_mask"].to(self.device)
        with self._lock, torch.no_grad():
            torch.manual_seed(request.seed)
            out = self.model.generate(
                input_ids,
                attention_mask=attention,
                max_new_tokens=request.max_tokens,
                do_sample=request.temperature > 0,
                temperature=request.temperature if request.temperature > 0 else None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
            )
        new = out[0, input_ids.shape[1] :]
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        finish = "length" if len(new) >= request.max_tokens else "stop"
        return Completion(
            text, int(input_ids.shape[1]), int(len(new)), time.perf_counter() - started, finish
        )
