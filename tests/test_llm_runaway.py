"""Whitespace runaways cut while they stream (srb.llm.runaway), end to end over real HTTP.

The event streams are written out by hand in the OpenAI chat-completions chunk format vLLM
sends; the HTTP test serves them from a real local server through the real httpx client, so
that closing the stream early is observed by the server, as vLLM observes it to abort.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import openai
import pytest

from srb.llm.backends import LLMCallError, OpenAICompatBackend
from srb.llm.proxy import serve_endpoint
from srb.llm.runaway import StreamError, guardable, read_stream, streamed_body
from tests.stand_in_chat import StandInChat, chat_completion, stand_in_client

JSON_BODY = {"messages": [], "response_format": {"type": "json_object"}}


def sse(pieces: list[str], finish: str = "length", usage_final: bool = True) -> list[str]:
    """Event-stream lines: one chunk per piece (usage so far in each), then the finish."""
    lines = []
    for i, piece in enumerate(pieces):
        chunk = {"id": "c1", "created": 1, "model": "m",
                 "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}],
                 "usage": {"prompt_tokens": 50, "completion_tokens": i + 1,
                           "total_tokens": 51 + i}}  # fmt: skip
        lines += [f"data: {json.dumps(chunk)}", ""]
    last = {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    lines += [f"data: {json.dumps(last)}", ""]
    if usage_final:
        final = {"id": "c1", "choices": [], "usage": {"prompt_tokens": 50,
                 "completion_tokens": len(pieces), "total_tokens": 50 + len(pieces)}}  # fmt: skip
        lines += [f"data: {json.dumps(final)}", ""]
    return [*lines, "data: [DONE]", ""]


def counted(lines: list[str]) -> tuple[Iterator[str], list[int]]:
    read = [0]

    def gen() -> Iterator[str]:
        for line in lines:
            read[0] += 1
            yield line

    return gen(), read


def test_a_complete_json_answer_then_blanks_is_cut_and_kept_whole() -> None:
    pieces = ['{"facts": ', '["a", "b"]', "}", " \n\n", *([" " * 20] * 40)]
    lines, read = counted(sse(pieces))
    response = read_stream(lines, JSON_BODY, max_run=64)
    choice = response["choices"][0]
    assert choice["message"]["content"] == '{"facts": ["a", "b"]}'
    assert choice["finish_reason"] == "stop"  # the JSON was complete: nothing lost
    assert response["srb_cut"]["complete_json"] is True
    assert response["srb_cut"]["kept_chars"] == len('{"facts": ["a", "b"]}')
    # the run reached 64 at the 4th blank piece (3 + 20 * 4 = 83): the rest was never read
    assert read[0] == 2 * 8 - 1  # 8 chunks of 2 lines, the last blank line unread
    assert response["usage"]["completion_tokens"] == 8  # the usage streamed so far


def test_a_runaway_inside_a_string_is_cut_and_reported_as_truncated() -> None:
    pieces = ['{"summary": "calcium in urine, considering', *(["  \t\n "] * 100)]
    response = read_stream(iter(sse(pieces)), JSON_BODY, max_run=256)
    choice = response["choices"][0]
    assert choice["finish_reason"] == "length"
    assert choice["message"]["content"] == '{"summary": "calcium in urine, considering'
    assert response["srb_cut"]["complete_json"] is False
    assert "whitespace runaway" in response["srb_cut"]["reason"]


def test_a_cut_between_two_values_closes_the_open_brackets_and_says_so() -> None:
    # Hindsight's cut answers: a fact closed, then blanks instead of the array's and root's end
    head = '{"facts": [\n  {"text": "Aspirin [1] lowered {mortality}", "ids": [1]}\n  , '
    pieces = [head, '{"text": "BP \\"fell\\"", "ids": [2, 3]}', *(["\n  "] * 100)]
    response = read_stream(iter(sse(pieces)), JSON_BODY, max_run=64)
    content = response["choices"][0]["message"]["content"]
    assert json.loads(content) == {"facts": [
        {"text": "Aspirin [1] lowered {mortality}", "ids": [1]},
        {"text": 'BP "fell"', "ids": [2, 3]}]}  # fmt: skip
    assert response["choices"][0]["finish_reason"] == "stop"
    assert response["srb_cut"]["closed_with"] == "]}"
    assert response["srb_cut"]["complete_json"] is False  # as the model wrote it, it was not


@pytest.mark.parametrize(
    ("written", "closed"),
    [('{"facts": ["a",', '{"facts": ["a"]}'),  # a trailing comma is dropped
     ('{"facts": [', '{"facts": []}'),
     ('{"facts": ["a"], "n": 2', '{"facts": ["a"], "n": 2}')],
)  # fmt: skip
def test_closing_keeps_every_value_written(written: str, closed: str) -> None:
    response = read_stream(iter(sse([written, *([" "] * 70)])), JSON_BODY, max_run=64)
    assert response["choices"][0]["message"]["content"] == closed


@pytest.mark.parametrize("written", ['{"facts": ["a", "b', '{"facts": ["a"], "n":', '{"a": 1]'])
def test_a_cut_inside_a_string_after_a_key_or_on_a_bad_bracket_stays_truncated(written) -> None:
    response = read_stream(iter(sse([written, *([" "] * 70)])), JSON_BODY, max_run=64)
    assert response["choices"][0]["finish_reason"] == "length"
    assert response["choices"][0]["message"]["content"] == written
    assert "closed_with" not in response["srb_cut"]


def test_a_plain_answer_is_never_closed() -> None:
    response = read_stream(iter(sse(["[1, 2", *([" "] * 70)])), {"messages": []}, max_run=64)
    assert response["choices"][0]["message"]["content"] == "[1, 2"
    assert response["choices"][0]["finish_reason"] == "length"


def test_an_answer_that_ends_by_itself_is_reassembled_unchanged() -> None:
    text = '{\n  "a": 1,\n' + " " * 22 + '"b": [1, 2]\n}'
    pieces = [text[i : i + 5] for i in range(0, len(text), 5)]
    response = read_stream(iter(sse(pieces, finish="stop")), JSON_BODY, max_run=32)
    assert response["choices"][0] == {"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant", "content": text}}  # fmt: skip
    assert response["usage"] == {"prompt_tokens": 50, "completion_tokens": len(pieces),
                                 "total_tokens": 50 + len(pieces)}  # fmt: skip
    assert "srb_cut" not in response
    assert response["object"] == "chat.completion" and response["id"] == "c1"


def test_blanks_in_a_plain_answer_are_cut_too_as_truncated() -> None:
    response = read_stream(iter(sse(["The answer", *([" "] * 40)])), {"messages": []}, 32)
    assert response["choices"][0]["message"]["content"] == "The answer"
    assert response["choices"][0]["finish_reason"] == "length"


def test_a_server_error_inside_the_stream_is_raised() -> None:
    lines = ['data: {"error": {"message": "engine dead"}}', "data: [DONE]"]
    with pytest.raises(StreamError, match="engine dead"):
        read_stream(iter(lines), JSON_BODY)
    with pytest.raises(StreamError, match="without a finish reason"):
        read_stream(iter(["data: [DONE]"]), JSON_BODY)


def test_only_plain_single_answers_are_streamed() -> None:
    assert guardable(JSON_BODY)
    assert not guardable({**JSON_BODY, "tools": [{"type": "function"}]})
    assert not guardable({**JSON_BODY, "n": 2})
    assert not guardable({**JSON_BODY, "logprobs": True})
    body = streamed_body(JSON_BODY)
    assert body["stream"] is True and body["stream_options"]["continuous_usage_stats"] is True
    assert "stream" not in JSON_BODY  # the caller's body is left as it was


class StreamingServer:
    """A local HTTP server that streams `lines` slowly and records how many it wrote before
    the client went away, and every request body."""

    def __init__(self, lines: list[str], status: int = 200):
        self.lines, self.status = lines, status
        self.written: list[int] = []
        self.bodies: list[dict] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                n = int(self.headers.get("Content-Length") or 0)
                server.bodies.append(json.loads(self.rfile.read(n)))
                self.send_response(server.status)
                self.send_header("Content-Type", "text/event-stream")
                self.end_headers()
                written = 0
                try:
                    for line in server.lines:
                        self.wfile.write((line + "\n").encode())
                        self.wfile.flush()
                        written += 1
                        time.sleep(0.005)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                server.written.append(written)

        self.http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.http.serve_forever, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        return f"http://127.0.0.1:{self.http.server_address[1]}/v1"

    def __exit__(self, *exc) -> None:
        self.http.shutdown()
        self.http.server_close()


def test_the_backend_closes_the_stream_at_the_cut_and_the_server_sees_it() -> None:
    lines = sse(['{"a": 1}', *([" " * 50] * 2000)])
    server = StreamingServer(lines)
    with server as url:
        backend = OpenAICompatBackend(url, "served-name", retries=1)
        response = backend.post_chat_guarded(JSON_BODY, 256)
        deadline = time.monotonic() + 10
        while not server.written and time.monotonic() < deadline:
            time.sleep(0.05)
    assert response["choices"][0]["message"]["content"] == '{"a": 1}'
    assert response["choices"][0]["finish_reason"] == "stop"
    assert server.bodies[0]["model"] == "served-name" and server.bodies[0]["stream"] is True
    # the cut came at the 6th chunk (12 lines); socket buffers let some more through, never
    # the whole 4,000-line stream: the server saw the client go away
    assert server.written and server.written[0] < len(lines) // 2


def test_a_refused_streamed_request_raises_with_the_status() -> None:
    with StreamingServer(["bad request"], status=400) as url:
        with pytest.raises(LLMCallError, match="HTTP 400") as info:
            OpenAICompatBackend(url, "m", retries=1).post_chat_guarded(JSON_BODY, 256)
    assert info.value.status == 400


class StreamingStandIn(StandInChat):
    """A backend that can stream: answers every request with a JSON object then blanks."""

    def __init__(self) -> None:
        super().__init__()
        self.guarded: list[int] = []

    def reply(self, body: dict) -> dict:
        return chat_completion('{"ok": true}' + " " * 3000, 10, 1500)

    def post_chat_guarded(self, body: dict, max_whitespace_run: int) -> dict:
        self.guarded.append(max_whitespace_run)
        self.bodies.append(body)
        return read_stream(iter(sse(['{"ok": true}', *([" " * 30] * 100)])), body,
                           max_whitespace_run)  # fmt: skip


def test_the_endpoint_cuts_caches_and_counts_a_runaway(tmp_path: Path) -> None:
    backend = StreamingStandIn()
    client = stand_in_client(tmp_path, tmp_path / "calls.sqlite", backend)
    api_args = {"model": "x", "messages": [{"role": "user", "content": "extract"}],
                "response_format": {"type": "json_object"}}  # fmt: skip
    with serve_endpoint(client, None, max_whitespace_run=128) as endpoint:
        api = openai.OpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0)
        first = api.chat.completions.create(**api_args)
        again = api.chat.completions.create(**api_args)
        stats = endpoint.stats.to_dict()
    assert first.choices[0].message.content == '{"ok": true}'
    assert first.choices[0].finish_reason == "stop"
    assert again.choices[0].message.content == '{"ok": true}'
    assert backend.guarded == [128]  # one model call; the replay came from the cache
    assert stats["cut_runaways"] == 2 and stats["truncated_responses"] == 0
    # without the cut it is another call, answered in full: the cut is part of the key
    with serve_endpoint(client, None) as endpoint:
        api = openai.OpenAI(base_url=endpoint.base_url, api_key="unused", max_retries=0)
        plain = api.chat.completions.create(**api_args)
    assert plain.choices[0].message.content.endswith(" " * 3000)
    assert backend.guarded == [128] and len(backend.bodies) == 2
