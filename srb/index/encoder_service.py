"""One encoder process for the memory systems' embeddings, at the model server's CPU priority.

Why: a store system's ingest is a chain (a model answer, then embeddings of what it extracted,
then the next answer), and the embeddings ran inside the ingest job, at the helper nice that
yields the cores to the ingest model's server (srb.priority). While that server decoded other
systems' answers, the chains stalled on their own embeddings: on 2 cores Cognee's
`add_data_points` (142 texts) took 4 min 10 s for its first paper and 7 s for its second, once
the server was idle, and each of the six ingest jobs spent ~50 s loading the encoder before its
first request. Here the encoder is loaded once, in its own session at nice 0
(`keeps_priority`), so an embedding burst (a few seconds of one core) is served at once.

Vectors are those the job would compute itself: the service holds the same
`srb.index.dense.Encoder` (each text alone on a CPU, float32), and the embedding cache stays in
the job, so cached vectors, cache keys and `encoded_texts` are unchanged.

Protocol: `GET /health` -> {"service": "srb-encoder", "spec", "dim"}; `POST /encode`
{"texts": [str, ...]} -> {"dim": d, "vectors": base64 of the float32 little-endian rows}.
"""

from __future__ import annotations

import argparse
import base64
import json
import logging
import sys
import threading
from collections.abc import Sequence
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from srb.json_http import JSONHandler

log = logging.getLogger(__name__)

SERVICE = "srb-encoder"
#: a burst under load (Cognee's 142 texts beside a busy model server) must not time out
ENCODE_TIMEOUT_S = 900.0


def _handler(encoder: Any, lock: threading.Lock) -> type[BaseHTTPRequestHandler]:
    class Handler(JSONHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            if self.path.rstrip("/") != "/health":
                self._send(404, {"error": f"no such path {self.path}"})
                return
            self._send(200, {"service": SERVICE, "spec": encoder.spec, "dim": encoder.dim})

        def do_POST(self) -> None:  # noqa: N802
            if self.path.rstrip("/") != "/encode":
                self._send(404, {"error": f"no such path {self.path}"})
                return
            try:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
                texts = body["texts"]
                if not isinstance(texts, list) or not all(isinstance(t, str) for t in texts):
                    raise TypeError("texts must be a list of strings")
            except (ValueError, KeyError, TypeError) as err:
                self._send(400, {"error": f"bad /encode request: {err}"})
                return
            try:
                with lock:  # one burst at a time: the encoder runs on one core
                    vectors = encoder.encode(texts)
            except Exception as err:  # the job gets the error; the service stays up
                log.exception("encoding %d text(s) failed", len(texts))
                self._send(500, {"error": f"encoding failed: {type(err).__name__}: {err}"})
                return
            rows = np.ascontiguousarray(vectors, dtype="<f4")
            self._send(
                200,
                {"dim": int(rows.shape[1]), "vectors": base64.b64encode(rows.tobytes()).decode()},
            )

    return Handler


def serve(spec: str, port: int) -> None:
    """Load the encoder, then answer on 127.0.0.1:`port` until terminated."""
    from srb.index.dense import Encoder

    encoder = Encoder(spec, threads=1)
    _ = encoder.model  # load before /health passes: the first burst is served at once
    server = ThreadingHTTPServer(("127.0.0.1", port), _handler(encoder, threading.Lock()))
    log.info("encoder service %s on 127.0.0.1:%d (dim %d)", spec, port, encoder.dim)
    server.serve_forever()


def service_settings(spec: str, fingerprint: str | None = None) -> dict[str, Any]:
    """What the service's vectors depend on (its registry key): the encoder's weights and how
    it encodes (`encoder_fingerprint` hashes both; pass it when the caller already has it, so
    the weights are not read twice)."""
    from srb.index.dense import resolve_encoder
    from srb.index.embed_cache import encoder_fingerprint

    return {
        "spec": spec,
        "encoder": fingerprint or encoder_fingerprint(resolve_encoder(spec)),
        "threads": 1,
    }


class EncoderService:
    """Client of the shared encoder service, started (or reused) on the first text to encode."""

    def __init__(
        self,
        spec: str,
        state_dir: str | Path,
        start_timeout_s: float = 300,
        fingerprint: str | None = None,
    ):
        self.spec = spec
        self.fingerprint = fingerprint  # the encoder's, when the caller has hashed it already
        self.state_dir = Path(state_dir)
        self.start_timeout_s = start_timeout_s
        self._url: str | None = None
        self._key = "encoder-*"  # the registry key, once acquired (its log is {key}.server.log)
        self._lock = threading.Lock()

    def _post(self, texts: Sequence[str]) -> Any:
        import httpx

        return httpx.post(
            f"{self.url()}/encode", json={"texts": list(texts)}, timeout=ENCODE_TIMEOUT_S
        )

    def url(self) -> str:
        from srb.services import acquire_service, http_health, service_key

        with self._lock:
            if self._url is None:
                self.state_dir.mkdir(parents=True, exist_ok=True)
                settings = service_settings(self.spec, self.fingerprint)
                self._key = service_key("encoder", settings)
                self._url, _ = acquire_service(
                    "encoder",
                    self._key,
                    lambda port: [
                        sys.executable,
                        "-m",
                        "srb.index.encoder_service",
                        "--spec",
                        self.spec,
                        "--port",
                        str(port),
                    ],
                    http_health(SERVICE),
                    self.state_dir,
                    env={"HF_HUB_OFFLINE": "1"},
                    start_timeout_s=self.start_timeout_s,
                    settings=settings,
                    label=f"encoder service {self.spec!r}",
                    keeps_priority=True,
                )
            return self._url

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        import httpx

        try:
            resp = self._post(texts)
        except (httpx.ConnectError, httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError):
            # the service was stopped or died since this job reached it (another invocation's
            # stop hook, OOM): acquire again, which starts a new one, and retry once
            with self._lock:
                self._url = None
            resp = self._post(texts)
        if resp.status_code != 200:
            raise RuntimeError(
                f"encoder service {self.spec!r} at {self.url()} answered {resp.status_code}: "
                f"{resp.text[:300]} (log: {self.state_dir / self._key}.server.log)"
            )
        body = resp.json()
        rows = np.frombuffer(base64.b64decode(body["vectors"]), dtype="<f4")
        return rows.reshape(len(texts), int(body["dim"])).astype(np.float32)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="encoder: 'minilm' or a model directory")
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    serve(args.spec, args.port)


if __name__ == "__main__":
    main()
