"""Ingest cost per corpus x store system, from the ingest logs: the paper says costs differ by
orders of magnitude between systems, so every run shows them beside the scores.

Tokens and calls are counted from every response the library received (cached or not), so the
table is the same on a cold and a warm run; `model_calls_made` is what this run actually sent to
a model, and `wall_s` is this run's time (a warm run's is the replay time).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from srb.tables import write_table

COLUMNS = [
    "corpus",
    "system",
    "llm",
    "papers",
    "papers_failed",
    "papers_without_items",
    "items",
    "llm_requests",
    "prompt_tokens",
    "completion_tokens",
    "failed_requests",
    "invalid_json_responses",
    "truncated_responses",
    "model_calls_made",
    "embedded_texts",
    "wall_s",
    "requests_per_paper",
    "tokens_per_paper",
    "wall_s_per_paper",
    "failed_passes",
]


def cost_row(corpus: str, ingest: dict[str, Any]) -> dict[str, Any]:
    calls = ingest["model_calls"]
    return {
        "corpus": corpus,
        "system": ingest["system"],
        "llm": ingest.get("llm"),
        "papers": ingest["papers"],
        "papers_failed": ingest["papers_failed"],
        "papers_without_items": len(ingest["papers_without_items"]),
        "items": ingest["items_stored"],
        "llm_requests": calls["chat_requests"],
        "prompt_tokens": calls["prompt_tokens"],
        "completion_tokens": calls["completion_tokens"],
        "failed_requests": calls.get("failed_requests", 0),
        "invalid_json_responses": calls.get("invalid_json_responses", 0),
        "truncated_responses": calls.get("truncated_responses", 0),
        "model_calls_made": calls["model_calls"],
        "embedded_texts": calls["embedded_texts"],
        "wall_s": ingest["wall_s"],
        "requests_per_paper": _per(calls["chat_requests"], ingest["papers"]),
        "tokens_per_paper": _per(
            calls["prompt_tokens"] + calls["completion_tokens"], ingest["papers"]
        ),
        "wall_s_per_paper": _per(ingest["wall_s"], ingest["papers"]),
        # a system's own count of extraction answers it gave up on (Theoria/Prism), else n/a
        "failed_passes": (ingest.get("system_report") or {}).get("failed_passes"),
    }


def _per(total: float, papers: int) -> float | None:
    return round(total / papers, 1) if papers else None


def ingest_cost_table(
    corpus: str, logs: Sequence[str | Path], csv_out: str | Path, md_out: str | Path
) -> list[dict[str, Any]]:
    rows = [cost_row(corpus, json.loads(Path(f).read_text())) for f in logs]
    write_table(
        rows,
        COLUMNS,
        csv_out,
        md_out,
        f"Ingest cost: {corpus}",
        "Per store system: papers ingested, failed and without items; items stored; the LLM "
        "requests and tokens of its ingest (counted from every response, cached or not, so the "
        "same on a warm rerun); `failed_requests` = requests the model server refused or failed; "
        "`invalid_json_responses` = extractions whose JSON does not "
        "parse (libraries log and drop them: their facts are lost), `truncated_responses` = "
        "answers cut at max_tokens; `model_calls_made` = requests this run sent to a model; wall "
        "time of this run; per paper: requests, prompt + completion tokens and wall time divided "
        "by the papers; `failed_passes` = extraction passes a system gave up on after retries "
        "(Theoria/Prism; empty for systems that do not count them).",
    )
    return rows
