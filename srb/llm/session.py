"""Build the cached client for a configured model (shared by synthesis and judge jobs)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from srb.llm.cache import open_call_cache
from srb.llm.client import LLMClient


def open_client(llm: dict[str, Any], model: str) -> tuple[LLMClient, str | None]:
    spec = llm["models"][model]
    source = spec["source"]
    if "path" in source:
        model_dir: str | None = source["path"]
    elif "served_name" in source:
        model_dir = None
    else:
        model_dir = str(Path(llm["models_dir"]) / model)
    backend = "openai" if "served_name" in source else llm["backend"]
    client = LLMClient(
        backend,
        model,
        spec,
        model_dir,
        open_call_cache(llm["cache"]),
        llm["servers_dir"],
        concurrency=llm["concurrency"],
        models_dir=llm["models_dir"],
    )
    return client, model_dir
