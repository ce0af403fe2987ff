"""A stand-in model for Theoria's prompts: it answers each kind of request (extraction, link
decision, summary, theory, answer) with well-formed content derived from the prompt itself, so
the tests exercise the real pipeline, store and service without a language model."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx
import uvicorn

from srb.services import free_port
from tests.stand_in_chat import StandInChat, chat_completion

_SENTENCE = re.compile(r"[^.!?\n]{40,300}[.!?]")


class TheoriaStandIn(StandInChat):
    """Claims = sentences of the chunk holding a digit (numbers) or not (other aspects)."""

    def __init__(self, invalid_extraction: bool = False) -> None:
        super().__init__()
        self.invalid_extraction = invalid_extraction

    def reply(self, body: dict[str, Any]) -> dict[str, Any]:
        prompt = body["messages"][0]["content"]
        schema = (body.get("response_format") or {}).get("json_schema", {}).get("name")
        if schema == "claims":
            if self.invalid_extraction:
                return chat_completion('{"claims": [', 100, 5)
            aspect = re.search(r"Aspect: (\w+)", prompt).group(1)
            text = prompt.split("Text:\n", 1)[1].split("\n\n---\n", 1)[0]
            sentences = [s.strip() for s in _SENTENCE.findall(text)]
            want_digit = aspect == "numbers"
            chosen = [s for s in sentences if bool(re.search(r"\d", s)) == want_digit]
            picks = chosen[: 2 if aspect in ("numbers", "mechanisms") else 1]
            claims = [{"claim": s, "quote": s[:120]} for s in picks]
            return chat_completion(json.dumps({"claims": claims}), 500, 80)
        if schema == "links":
            n = len(re.findall(r"^\d+\. ", prompt.split("Earlier claims:", 1)[1], re.M))
            rels = [
                {"number": i, "relation": "supports" if i == 1 else "none"} for i in range(1, n + 1)
            ]
            return chat_completion(json.dumps({"relations": rels}), 200, 20)
        if prompt.startswith("Summarise"):
            first = prompt.split("\n- ", 2)[1].split("\n")[0]
            return chat_completion("In summary: " + first, 200, 30)
        if prompt.startswith("A study reports"):
            finding = prompt.split("\n")[1]
            return chat_completion("Generally, " + finding[:150], 100, 20)
        return chat_completion("The evidence shows no significant difference.", 300, 12)


@contextmanager
def serving(app: Any) -> Iterator[str]:
    """`app` served by uvicorn on 127.0.0.1 in a thread (real HTTP); yields its base URL."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            if httpx.get(url + "/health").status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.1)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)
