"""Cut a small model's whitespace runaway as it streams, instead of paying for it to the cap.

Under structured output a 0.5B model often closes its JSON, or stops inside a string, and then
emits only blanks (spaces, newlines, tabs) until max_tokens: measured on a cold default run,
8 of 10 answers cut at the cap were such runs of 663-23,117 whitespace characters, about a
third of all generated tokens of the ingest phase. Valid answers of the same run held no
whitespace run over 22 characters. So a memory library's request to a vLLM server is streamed
and, once its answer holds `max_run` consecutive whitespace characters, the stream is closed
(vLLM aborts a request whose client went away) and the answer is what came before the run:
- JSON asked for and the text parses: the answer was complete, finish_reason "stop";
- JSON asked for and the run began between two values (the 0.5B model closed a fact, then
  blanked instead of writing `]}`): the open arrays and objects are closed, the answer keeps
  every value it wrote, finish_reason "stop", and `srb_cut.closed_with` says what was added
  (measured: all 9 of Hindsight's cut answers of a cold run ended so);
- otherwise finish_reason "length", as if it had hit max_tokens (the library treats it so).
The response records the cut (`srb_cut`), and is cached like any other, so a rerun replays it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

#: consecutive whitespace characters that end an answer (valid answers measured held <= 22)
MAX_WHITESPACE_RUN = 256


class StreamError(RuntimeError):
    """The server failed a request inside its stream, or the stream ended without an answer."""


def wants_json(body: dict[str, Any]) -> bool:
    return (body.get("response_format") or {}).get("type") in ("json_object", "json_schema")


def parses_as_json(text: str) -> bool:
    text = text.strip().removeprefix("```json").removeprefix("```").removesuffix("```").strip()
    try:
        json.loads(text)
    except json.JSONDecodeError:
        return False
    return True


def closing(text: str) -> str | None:
    """The brackets that close `text`'s open arrays and objects, innermost first; None inside a
    string, on a mismatched bracket, or when nothing is open (`closed_json` checks that the
    result parses: text cut after a key does not)."""
    stack: list[str] = []
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            stack.append("]" if ch == "[" else "}")
        elif ch in "]}":
            if not stack or stack.pop() != ch:
                return None
    if in_string or not stack:
        return None
    return "".join(reversed(stack))


def closed_json(text: str) -> tuple[str, str] | None:
    """(text with its open brackets closed, what was added) when that parses, else None."""
    kept = text.rstrip().removesuffix(",").rstrip()
    added = closing(kept)
    if added is None:
        return None
    candidate = kept + added
    return (candidate, added) if parses_as_json(candidate) else None


def guardable(body: dict[str, Any]) -> bool:
    """Whether a request can be streamed and reassembled here: one plain text answer (no tool
    or function calls, no logprobs, n = 1)."""
    return not (
        body.get("tools")
        or body.get("functions")
        or body.get("logprobs")
        or int(body.get("n") or 1) != 1
        or body.get("stream")
    )


def streamed_body(body: dict[str, Any]) -> dict[str, Any]:
    """The request as a stream whose every chunk carries the usage so far (vLLM's
    `continuous_usage_stats`), so a cut answer still reports its tokens."""
    return {
        **body,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }


class WhitespaceRun:
    """The length of the whitespace run at the end of the text fed so far."""

    def __init__(self) -> None:
        self.run = 0

    def feed(self, text: str) -> None:
        stripped = text.rstrip()
        if stripped:
            self.run = len(text) - len(stripped)
        else:
            self.run += len(text)


def read_stream(
    lines: Iterable[str], body: dict[str, Any], max_run: int = MAX_WHITESPACE_RUN
) -> dict[str, Any]:
    """A chat-completion response from a chat-completions event stream (`data: {...}` lines),
    read until the stream ends or the answer's trailing whitespace reaches `max_run`; the
    caller closes the stream afterwards, which aborts the request at the server."""
    parts: list[str] = []
    tail = WhitespaceRun()
    usage: dict[str, Any] = {}
    finish: str | None = None
    head: dict[str, Any] = {}
    cut = False
    for line in lines:
        line = line.strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
        except ValueError as exc:
            raise StreamError(f"the model server sent an event that is not JSON: {exc}") from exc
        if not isinstance(chunk, dict):
            raise StreamError(
                f"the model server sent an event that is a JSON {type(chunk).__name__}"
            )
        if "error" in chunk:
            raise StreamError(f"the model server failed the streamed request: {chunk['error']}")
        head = head or {k: chunk.get(k) for k in ("id", "created", "model")}
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices") or []:
            text = (choice.get("delta") or {}).get("content") or ""
            if text:
                parts.append(text)
                tail.feed(text)
            finish = choice.get("finish_reason") or finish
        if tail.run >= max_run:
            cut = True
            break
    text = "".join(parts)
    response: dict[str, Any] = {
        **head,
        "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}}],
        "usage": usage,
    }
    if cut:
        kept = text[: len(text) - tail.run]
        complete = wants_json(body) and parses_as_json(kept)
        closed = closed_json(kept) if wants_json(body) and not complete else None
        response["srb_cut"] = {
            "reason": f"whitespace runaway: {tail.run} consecutive whitespace characters",
            "max_whitespace_run": max_run,
            "kept_chars": len(kept),
            "complete_json": complete,
        }
        if closed is not None:
            kept, response["srb_cut"]["closed_with"] = closed
        response["choices"][0]["message"]["content"] = kept
        finish = "stop" if complete or closed is not None else "length"
    if finish is None:
        raise StreamError("the model server's stream ended without a finish reason")
    response["choices"][0]["finish_reason"] = finish
    return response
