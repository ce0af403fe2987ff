"""Chat and embeddings for Theoria and Prism, both through the caching endpoint.

Every call goes to `Endpoint.base_url` (srb.llm.proxy), so it is cached: a re-ingest or a
rerun repeats the same requests and makes no model call. Answers are structured (a JSON schema
per call); one that does not parse is retried a bounded number of times with a note appended
(a new request, since the identical one would return the identical cached answer), then given
up and reported to the caller, which counts it, never as an empty success.
"""

from __future__ import annotations

import base64
import json
import logging
from typing import Any

import httpx
import numpy as np

from srb.systems.store import Endpoint

log = logging.getLogger(__name__)

RETRY_NOTE = (
    "Your previous answer (attempt {attempt}) was not valid JSON of the required shape. "
    "Answer again with JSON only."
)


class InvalidAnswer(RuntimeError):
    """The model's answer did not parse after every retry."""


class EndpointError(RuntimeError):
    """The caching endpoint (or the model server behind it) failed a request."""


class EndpointModels:
    """Chat (JSON answers) and embeddings through one caching endpoint."""

    def __init__(self, endpoint: Endpoint, timeout_s: float = 900.0):
        self.endpoint = endpoint
        self._http = httpx.Client(base_url=endpoint.base_url, timeout=timeout_s)

    def close(self) -> None:
        self._http.close()

    def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        try:
            response = self._http.post(path, json=body)
        except httpx.TransportError as exc:
            raise EndpointError(f"{self.endpoint.base_url}{path}: {exc}") from exc
        if response.status_code != 200:
            raise EndpointError(
                f"{self.endpoint.base_url}{path} answered {response.status_code}: "
                f"{response.text[:300]}"
            )
        return dict(response.json())

    def chat_text(self, prompt: str, max_tokens: int) -> str:
        body = {
            "model": self.endpoint.chat_model,
            "messages": [{"role": "user", "content": prompt}],
            "temperature": 0,
            "max_tokens": max_tokens,
        }
        answer = self._post("/chat/completions", body)
        return str(answer["choices"][0]["message"]["content"] or "")

    def chat_json(
        self,
        prompt: str,
        schema: dict[str, Any],
        name: str,
        max_tokens: int,
        retries: int,
        valid: Any = None,
    ) -> dict[str, Any]:
        """The answer to `prompt` as JSON matching `schema`; `valid(obj)` may reject more.
        Raises InvalidAnswer after 1 + `retries` unparseable answers."""
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
        last = ""
        for attempt in range(1, retries + 2):
            body = {
                "model": self.endpoint.chat_model,
                "messages": messages,
                "temperature": 0,
                "max_tokens": max_tokens,
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": name, "schema": schema, "strict": True},
                },
            }
            answer = self._post("/chat/completions", body)
            last = str(answer["choices"][0]["message"]["content"] or "")
            try:
                parsed = json.loads(last)
                if not isinstance(parsed, dict) or (valid is not None and not valid(parsed)):
                    raise ValueError("wrong shape")
                return parsed
            except ValueError:
                log.info("%s answer %d does not parse: %.120r", name, attempt, last)
                messages = [
                    *messages,
                    {"role": "assistant", "content": last},
                    {"role": "user", "content": RETRY_NOTE.format(attempt=attempt)},
                ]
        raise InvalidAnswer(f"{name}: no valid JSON after {retries + 1} attempts: {last[:200]!r}")

    def embed(self, texts: list[str], batch: int = 64) -> np.ndarray:
        """Unit-normalised float32 embeddings, one row per text."""
        rows: list[np.ndarray] = []
        for i in range(0, len(texts), batch):
            answer = self._post(
                "/embeddings",
                {
                    "model": self.endpoint.embedding_model,
                    "input": texts[i : i + batch],
                    "encoding_format": "base64",
                },
            )
            for d in sorted(answer["data"], key=lambda d: d["index"]):
                rows.append(np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4"))
        if not rows:
            return np.zeros((0, self.endpoint.embedding_dims), dtype=np.float32)
        vectors = np.vstack(rows).astype(np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms == 0, 1, norms)
