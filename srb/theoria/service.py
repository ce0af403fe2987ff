"""Theoria as a local HTTP service (FastAPI + uvicorn on 127.0.0.1).

- GET  /theories : the theory table, at or above a confidence, grouped by community (the
  cold-start map of what the corpus believes);
- POST /retrieve : the evaluated endpoint (srb.theoria.retrieve);
- POST /observe  : a new paper or finding into a live store (srb.theoria.build.observe);
- GET  /health   : liveness, for the launcher (srb.services).

Bad requests (unknown fields, k < 1, an empty or oversized finding) are 422 with a message and
change nothing; a store served for the workflow's grid is read-only (/observe answers 409), so
the grid's outputs cannot drift under it. Run: `python -m srb.theoria.service --settings F`.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from pathlib import Path
from typing import Any, Literal

from fastapi import FastAPI, HTTPException, Query
from pydantic import BaseModel, ConfigDict, Field, field_validator

from srb.data.schema import Paper
from srb.theoria.build import observe
from srb.theoria.db import TheoriaDB
from srb.theoria.models import EndpointError, EndpointModels, InvalidAnswer
from srb.theoria.options import TheoriaOptions
from srb.theoria.retrieve import retrieve
from srb.theoria.theories import theories_by_community, theory_counts

log = logging.getLogger(__name__)

SERVICE_NAME = "theoria"
MAX_QUERY_CHARS = 8000
MAX_K = 1000


class RetrieveRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    k: int = Field(ge=1, le=MAX_K)
    expand: bool | None = None
    #: "hybrid" fuses the dense ranking with the store's BM25 sparse vectors (RRF)
    modality: Literal["dense", "hybrid"] = "dense"

    @field_validator("query")
    @classmethod
    def not_blank(cls, v: str) -> str:
        if not v.strip():
            raise ValueError("query is blank")
        return v


class RetrievedItem(BaseModel):
    item_id: str
    text: str
    paper_ids: list[str]
    kind: str
    score: float
    provenance: list[int] | None  # the characters of paper_ids[0] a claim quotes


class RetrieveResponse(BaseModel):
    items: list[RetrievedItem]


def observe_request(max_chars: int) -> type[BaseModel]:
    class ObserveRequest(BaseModel):
        model_config = ConfigDict(extra="forbid")
        paper_id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9_.:\-]+$")
        text: str = Field(min_length=1, max_length=max_chars)
        batch: int = Field(default=0, ge=0, le=1_000_000)

        @field_validator("text")
        @classmethod
        def not_blank(cls, v: str) -> str:
            if not v.strip():
                raise ValueError("finding text is blank")
            return v

    return ObserveRequest


def create_app(
    store_dir: str | Path, opts: TheoriaOptions, models: EndpointModels, read_only: bool
) -> FastAPI:
    db = TheoriaDB(store_dir, readonly=read_only)
    writer = threading.Lock()
    app = FastAPI(title="Theoria", version="1.0", description=__doc__)
    observe_body = observe_request(opts.max_finding_chars)

    @app.get("/health")
    def health() -> dict[str, Any]:
        return {"status": "ok", "service": SERVICE_NAME, "read_only": read_only}

    @app.get("/theories")
    def theories(
        confidence: Literal["low", "medium", "high"] | None = Query(
            default=None, description="the lowest confidence returned"
        ),
    ) -> dict[str, Any]:
        grouped = theories_by_community(db, confidence)
        return {
            "counts": theory_counts(db),
            "communities": [
                {"community_id": cid, "theories": items} for cid, items in sorted(grouped.items())
            ],
        }

    @app.post("/retrieve", response_model=RetrieveResponse)
    def retrieve_items(body: RetrieveRequest) -> dict[str, Any]:
        vector = models.embed([body.query])[0]
        lexical = None
        if body.modality == "hybrid":
            depth = max(body.k, opts.hybrid_depth)
            lexical = db.sparse_index().rank(body.query, depth)
        found = retrieve(db, vector, body.k, opts, route=True, expand=body.expand, lexical=lexical)
        return {
            "items": [
                {
                    "item_id": r.item_id,
                    "text": r.text,
                    "paper_ids": list(r.paper_ids),
                    "kind": r.kind,
                    "score": r.score,
                    "provenance": list(r.span) if r.span else None,
                }
                for r in found
            ]
        }

    def observe_finding(body: Any) -> dict[str, Any]:
        if read_only:
            raise HTTPException(409, "this store is served read-only (a workflow output)")
        with writer:
            try:
                return observe(db, models, opts, Paper(body.paper_id, "", body.text), body.batch)
            except InvalidAnswer as exc:
                raise HTTPException(502, f"the model's answers did not parse: {exc}") from exc
            except EndpointError as exc:  # the store keeps its last committed state
                raise HTTPException(502, f"the model endpoint failed: {exc}") from exc

    # the body model is built from the options (max_finding_chars): set it as the annotation
    # FastAPI reads (this module's annotations are strings, which it could not resolve here)
    observe_finding.__annotations__["body"] = observe_body
    app.post("/observe")(observe_finding)
    app.state.db = db
    return app


def main(argv: list[str] | None = None) -> None:
    """Serve one store; settings (JSON): store, read_only, options, llm, memory, dense."""
    parser = argparse.ArgumentParser(prog="srb.theoria.service")
    parser.add_argument("--settings", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args(argv)
    import uvicorn

    from srb.llm.runaway import MAX_WHITESPACE_RUN
    from srb.store import memory_endpoint

    settings = json.loads(Path(args.settings).read_text())
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    memory = settings["memory"]
    opts = TheoriaOptions.from_config(memory.get("theoria"))
    with memory_endpoint(
        settings["llm"],
        memory["llm"],
        settings["dense"],
        memory.get("max_completion_tokens"),
        memory.get("structured_output", True),
        memory.get("max_whitespace_run", MAX_WHITESPACE_RUN),
    ) as (endpoint, _):
        models = EndpointModels(endpoint)
        app = create_app(settings["store"], opts, models, bool(settings.get("read_only", True)))
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
