"""OpenAICompatBackend against a real local HTTP server: payload, retries, errors, API key."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from srb.llm.backends import ChatRequest, LLMCallError, OpenAICompatBackend

SECRET = "sk-test-9f8e7d6c5b4a"


class FakeServer:
    """Answers POST /v1/chat/completions with the next scripted status (200 once exhausted);
    a scripted `bytes` is sent as the body of an HTTP 200."""

    def __init__(self) -> None:
        self.script: list[int | bytes] = []
        self.received: list[dict] = []
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.received.append(
                        {"path": self.path, "headers": dict(self.headers), "body": body}
                    )
                    status = server.script.pop(0) if server.script else 200
                if isinstance(status, bytes):  # a malformed body sent with HTTP 200
                    status, data = 200, status
                elif status == 200:
                    payload = {
                        "choices": [
                            {
                                "message": {"role": "assistant", "content": "It was lower."},
                                "finish_reason": "length",
                            }
                        ],
                        "usage": {"prompt_tokens": 17, "completion_tokens": 5},
                    }
                    data = json.dumps(payload).encode()
                else:
                    data = json.dumps({"error": f"scripted {status}"}).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(
            target=self.httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def attempts(self) -> int:
        return len(self.received)


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeServer]:
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(var, raising=False)
    s = FakeServer()
    s.thread.start()
    yield s
    s.httpd.shutdown()
    s.httpd.server_close()


def backend(url: str, **kw) -> OpenAICompatBackend:
    return OpenAICompatBackend(url, "judge-model", timeout_s=10, backoff_s=0.01, **kw)


REQ = ChatRequest([{"role": "user", "content": "Was it lower?"}], max_tokens=20, seed=3)


def test_returns_text_and_usage(server: FakeServer) -> None:
    out = backend(server.url + "/").chat(REQ)  # trailing slash is stripped
    assert out.text == "It was lower."
    assert (out.prompt_tokens, out.completion_tokens) == (17, 5)
    assert out.finish_reason == "length"
    assert out.latency_s > 0
    assert server.attempts == 1
    sent = server.received[0]
    assert sent["path"] == "/v1/chat/completions"
    assert sent["body"] == {
        "model": "judge-model",
        "messages": [{"role": "user", "content": "Was it lower?"}],
        "max_tokens": 20,
        "temperature": 0.0,
        "seed": 3,
    }
    assert "response_format" not in sent["body"]
    assert "authorization" not in {k.lower() for k in sent["headers"]}


def test_sends_json_schema_response_format(server: FakeServer) -> None:
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}
    req = ChatRequest(REQ.messages, max_tokens=8, json_schema=schema)
    backend(server.url).chat(req)
    assert server.received[0]["body"]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "response", "schema": schema, "strict": True},
    }


def test_retries_on_500_then_succeeds(server: FakeServer) -> None:
    server.script = [500, 503]
    out = backend(server.url, retries=3).chat(REQ)
    assert out.text == "It was lower."
    assert server.attempts == 3


def test_retries_on_429(server: FakeServer) -> None:
    server.script = [429]
    assert backend(server.url, retries=2).chat(REQ).text == "It was lower."
    assert server.attempts == 2


def test_gives_up_after_retries_naming_model_and_url(server: FakeServer) -> None:
    server.script = [500] * 10
    with pytest.raises(LLMCallError) as err:
        backend(server.url, retries=3).chat(REQ)
    assert server.attempts == 3
    message = str(err.value)
    assert "judge-model" in message
    assert server.url in message
    assert "3 attempts failed" in message and "500" in message


def test_400_is_not_retried(server: FakeServer) -> None:
    server.script = [400]
    with pytest.raises(LLMCallError, match="HTTP 400") as err:
        backend(server.url, retries=5).chat(REQ)
    assert server.attempts == 1
    assert "judge-model" in str(err.value) and server.url in str(err.value)
    assert "scripted 400" in str(err.value)  # the server's explanation is kept


GOOD = json.dumps(
    {"choices": [{"message": {"role": "assistant", "content": "It was lower."}}], "usage": {}}
).encode()
MALFORMED = {  # body of an HTTP 200 -> what the final error must say
    "cut mid-JSON": (GOOD[: len(GOOD) // 2], "body is not JSON"),
    "not JSON": (b"<html><body>502 Bad Gateway</body></html>", "body is not JSON"),
    "no choices": (b'{"id": "x", "choices": [], "usage": {}}', "has no choices"),
    "choice without message": (b'{"choices": [{"index": 0}]}', "first choice has no message"),
    "JSON list": (b"[1, 2]", "is a JSON list"),
}


@pytest.mark.parametrize(("body", "_"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_200_is_retried(server: FakeServer, body: bytes, _: str) -> None:
    server.script = [body]
    out = backend(server.url, retries=2).chat(REQ)
    assert out.text == "It was lower." and server.attempts == 2


@pytest.mark.parametrize(("body", "defect"), MALFORMED.values(), ids=MALFORMED.keys())
def test_a_lasting_malformed_200_fails_naming_the_defect_and_is_never_returned(
    server: FakeServer, body: bytes, defect: str
) -> None:
    server.script = [body] * 3
    with pytest.raises(LLMCallError, match="3 attempts failed") as err:
        backend(server.url, retries=3).post_chat({"messages": REQ.messages})
    assert server.attempts == 3
    assert defect in str(err.value) and server.url in str(err.value)


def test_connection_refused_is_retried_then_raised(server: FakeServer) -> None:
    url = server.url
    server.httpd.shutdown()
    server.httpd.server_close()  # nothing listens on the port now
    with pytest.raises(LLMCallError, match="2 attempts failed") as err:
        backend(url, retries=2).chat(REQ)
    assert url in str(err.value)


def test_api_key_from_env_sent_as_bearer(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SRB_TEST_API_KEY", SECRET)
    b = backend(server.url, api_key_env="SRB_TEST_API_KEY")
    b.chat(REQ)
    headers = {k.lower(): v for k, v in server.received[0]["headers"].items()}
    assert headers["authorization"] == f"Bearer {SECRET}"
    # the key is read at call time and kept nowhere on the object
    assert SECRET not in repr(b)
    assert SECRET not in repr(vars(b))
    assert SECRET not in str(vars(b))
    assert SECRET not in repr(dict(b._client.headers))
    assert b.api_key_env == "SRB_TEST_API_KEY"


def test_missing_api_key_env_is_an_error(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("SRB_TEST_API_KEY", raising=False)
    with pytest.raises(LLMCallError, match="SRB_TEST_API_KEY"):
        backend(server.url, api_key_env="SRB_TEST_API_KEY").chat(REQ)
    assert server.attempts == 0  # nothing was sent without the key


def test_key_rotation_is_picked_up_at_call_time(
    server: FakeServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SRB_TEST_API_KEY", "first-key")
    b = backend(server.url, api_key_env="SRB_TEST_API_KEY")
    b.chat(REQ)
    monkeypatch.setenv("SRB_TEST_API_KEY", "second-key")
    b.chat(REQ)
    assert [r["headers"].get("Authorization") for r in server.received] == [
        "Bearer first-key",
        "Bearer second-key",
    ]


# Pyserini's BM25 searcher and an `openai` backend in one process (a job that retrieves and
# then synthesizes through a hosted model): Pyserini needs *some* OPENAI_API_KEY to import,
# and that placeholder must never reach the backend as if it were the user's key.
PYSERINI_THEN_OPENAI = """
import json, os, sys
from srb.java import prepare_jvm
from srb.llm.backends import ChatRequest, LLMCallError, OpenAICompatBackend
prepare_jvm()
after_prepare = os.environ.get("OPENAI_API_KEY")
from pyserini.search.lucene import LuceneSearcher  # imports pyserini.encode._openai
import pyserini.encode._openai as pyserini_openai
after_import = os.environ.get("OPENAI_API_KEY")
try:
    OpenAICompatBackend(sys.argv[1], "gpt-x", api_key_env="OPENAI_API_KEY", retries=1).chat(
        ChatRequest([{"role": "user", "content": "hi"}]))
    sent = "sent"
except LLMCallError as exc:
    sent = str(exc)
print(json.dumps({"after_prepare": after_prepare, "after_import": after_import, "sent": sent,
                  "pyserini_client": pyserini_openai.client is not None}))
"""


@pytest.mark.parametrize("preset", [None, SECRET], ids=["unset", "user-key"])
def test_pyserini_placeholder_key_never_reaches_an_openai_backend(
    server: FakeServer, preset: str | None
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    if preset:
        env["OPENAI_API_KEY"] = preset
    out = subprocess.run(
        [sys.executable, "-c", PYSERINI_THEN_OPENAI, server.url],
        cwd=Path(__file__).resolve().parents[1],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    assert seen["pyserini_client"] is True  # Pyserini imported fine
    assert seen["after_prepare"] == preset and seen["after_import"] == preset
    if preset is None:
        assert "OPENAI_API_KEY" in seen["sent"] and "not set" in seen["sent"]
        assert server.attempts == 0  # nothing went out with a placeholder key
    else:
        assert seen["sent"] == "sent"
        auth = server.received[0]["headers"].get("Authorization")
        assert auth == f"Bearer {SECRET}"  # the user's own key, untouched
