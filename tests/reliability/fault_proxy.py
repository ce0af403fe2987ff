"""A fault-injecting HTTP proxy in front of a real OpenAI-compatible model server.

It forwards `POST /v1/chat/completions` and `GET /v1/models` to the upstream server and, on
the chat requests a fault's window covers, breaks the exchange the way servers and networks
do: answers slower than the client's timeout, 5xx bursts, bodies cut mid-JSON, bodies that are
not JSON, an empty choice list, answers whose JSON content is cut or is prose, and a server
that dies (its listener closed, so every later connection is refused until `heal`).

A tape keeps every upstream answer by request body, so runs that ask the same question get
the same real answer: CPU vLLM's batching makes repeated answers differ, and a fault must be
judged by what it does to the workflow, not by the model's noise. The proxy counts what each
request body got, so a test can tell answers delivered before a fault from calls repeated after.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

KINDS = (
    "slow",  # wait `delay_s`, then answer 504 without asking upstream
    "status",  # answer `status` (5xx) without asking upstream
    "cut_body",  # upstream's answer, its body cut in half
    "non_json_body",  # an HTML error page with HTTP 200
    "empty_choices",  # a completion with `choices: []`
    "cut_content",  # upstream's answer with its message content cut in half
    "non_json_content",  # upstream's answer with its content replaced by prose
    "die",  # drop the connection and close the listener: later connections are refused
)


@dataclass(frozen=True)
class Fault:
    """`kind` on the chat requests numbered first .. first+count-1 (None: every one from
    `first`); with `json_only`, only requests that ask for JSON (response_format) are numbered."""

    kind: str
    first: int = 0
    count: int | None = None
    json_only: bool = False
    status: int = 503
    delay_s: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown fault kind {self.kind!r}; known: {', '.join(KINDS)}")

    def covers(self, index: int) -> bool:
        return index >= self.first and (self.count is None or index < self.first + self.count)


def body_key(body: dict[str, Any]) -> str:
    """The request minus the model name (which the client sets to the served name)."""
    rest = {k: v for k, v in body.items() if k != "model"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True).encode()).hexdigest()[:16]


@dataclass
class ProxyStats:
    received: Counter = field(default_factory=Counter)  # body key -> chat requests received
    delivered: Counter = field(default_factory=Counter)  # body key -> valid answers sent
    faulted: Counter = field(default_factory=Counter)  # fault kind -> requests it hit
    upstream_calls: int = 0  # answers asked of the real server (tape misses)


class FaultProxy:
    def __init__(
        self,
        upstream: str,
        faults: list[Fault] | None = None,
        port: int = 0,
        tape: dict[str, bytes] | None = None,
        upstream_timeout_s: float = 600.0,
    ):
        self.upstream = upstream.rstrip("/")
        self.faults = list(faults or [])
        self.tape: dict[str, bytes] = tape if tape is not None else {}
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._counts = {"all": 0, "json": 0}
        self._http = httpx.Client(timeout=upstream_timeout_s)
        self._server: ThreadingHTTPServer | None = None
        self._port = port

    # ---------------------------------------------------------------- lifecycle

    @property
    def port(self) -> int:
        return self._port

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._port}/v1"

    def start(self) -> FaultProxy:
        handler = _handler(self)
        server = ThreadingHTTPServer(("127.0.0.1", self._port), handler)
        server.daemon_threads = True
        self._port = server.server_address[1]
        self._server = server
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05},
                         daemon=True).start()  # fmt: skip
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    def heal(self, faults: list[Fault] | None = None) -> FaultProxy:
        """Listen again on the same port with new faults (none: a healthy server)."""
        self.stop()
        self.faults = list(faults or [])
        with self._lock:
            self._counts = {"all": 0, "json": 0}
        return self.start()

    def _die(self) -> None:
        """Close the listener before the dying request's connection drops, so no later
        connection is accepted (called from a handler thread, not the serving one)."""
        self.stop()

    # ---------------------------------------------------------------- requests

    def fault_for(self, body: dict[str, Any]) -> Fault | None:
        wants_json = "response_format" in body
        with self._lock:
            index = self._counts["all"]
            json_index = self._counts["json"]
            self._counts["all"] += 1
            if wants_json:
                self._counts["json"] += 1
        for fault in self.faults:
            if fault.json_only and not wants_json:
                continue
            if fault.covers(json_index if fault.json_only else index):
                return fault
        return None

    def answer(self, body: dict[str, Any]) -> bytes:
        """The upstream's answer to `body`, from the tape when it was asked before."""
        key = body_key(body)
        with self._lock:
            taped = self.tape.get(key)
        if taped is not None:
            return taped
        resp = self._http.post(f"{self.upstream}/chat/completions", json=body)
        resp.raise_for_status()
        with self._lock:
            self.stats.upstream_calls += 1
            self.tape.setdefault(key, resp.content)
            return self.tape[key]


def _mangled(kind: str, raw: bytes) -> bytes:
    if kind == "cut_body":
        return raw[: len(raw) // 2]
    if kind == "non_json_body":
        return b"<html><body><h1>502 Bad Gateway</h1></body></html>"
    data = json.loads(raw)
    if kind == "empty_choices":
        data["choices"] = []
    else:
        message = data["choices"][0]["message"]
        content = message.get("content") or ""
        message["content"] = (
            content[: len(content) // 2] if kind == "cut_content" else "I would rate it highly."
        )
    return json.dumps(data).encode()


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:
            pass

        def _send(self, status: int, data: bytes) -> None:
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (its timeout): nothing was delivered

        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            resp = proxy._http.get(f"{proxy.upstream}{self.path.removeprefix('/v1')}")
            self._send(resp.status_code, resp.content)

        def do_POST(self) -> None:  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            key = body_key(body)
            with proxy._lock:
                proxy.stats.received[key] += 1
            fault = proxy.fault_for(body)
            kind = fault.kind if fault else None
            if kind is not None:
                with proxy._lock:
                    proxy.stats.faulted[kind] += 1
            if kind == "die":
                proxy._die()
                self.close_connection = True
                self.connection.close()
                return
            if kind == "slow":
                time.sleep(fault.delay_s)
                self._send(504, b'{"error": "upstream timed out"}')
                return
            if kind == "status":
                self._send(fault.status, json.dumps({"error": f"injected {fault.status}"}).encode())
                return
            try:
                raw = proxy.answer(body)
            except httpx.HTTPError as exc:
                self._send(502, json.dumps({"error": f"upstream: {exc}"}).encode())
                return
            if kind in ("cut_body", "non_json_body", "empty_choices"):
                self._send(200, _mangled(kind, raw))  # the client must refuse it
                return
            self._send(200, _mangled(kind, raw) if kind else raw)  # content faults: taken
            with proxy._lock:
                proxy.stats.delivered[key] += 1

    return Handler
