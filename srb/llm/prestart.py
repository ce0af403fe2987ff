"""Start a model's vLLM server before its first request, when that request is sure to come.

The ingest model's server otherwise starts on the first ingest's first request, after the
unit systems' dense indexes, and on 2 cores took 1.7 min to come up beside the ingest jobs
importing their libraries (stop 38's cold run: ingests from 2.8 min, server ready at 4.55).
Started as soon as the model is prepared it comes up while the indexes are built.

Only on a cold cache: when the SQLite call cache already holds answers of the model (a warm
rerun, `--forceall`), the ingests may replay every call and need no server at all, so none is
started ahead (a miss still starts one, as before). A directory cache (a cluster's shared
storage) is not scanned, and a cluster job's node is not the ingests' node: no start there.
"""

from __future__ import annotations

from typing import Any

from srb.llm.cache import CallCache
from srb.llm.session import open_client


def prestart_server(llm: dict[str, Any], model: str) -> dict[str, Any]:
    """Start (or join) `model`'s server when the cache holds none of its answers; what was
    decided and why, for the job's marker file."""
    client, _ = open_client(llm, model)
    try:
        if client.backend_kind != "vllm":
            return {
                "model": model,
                "started_ahead": False,
                "why": f"backend {client.backend_kind}: no local server",
            }
        if not isinstance(client.cache, CallCache):
            return {
                "model": model,
                "started_ahead": False,
                "why": "directory call cache (cluster): no server started ahead",
            }
        held = client.cache.answers_of(model)
        if held:
            return {
                "model": model,
                "started_ahead": False,
                "why": f"the call cache holds {held} answer(s) of {model}: its server starts on the first miss, if any",
            }
        started = client.start_server()
        return {
            "model": model,
            "started_ahead": True,
            "why": f"cold call cache: {model}'s server {'started' if started else 'already up, joined'} ahead of its clients",
        }
    finally:
        client.cache.close()
