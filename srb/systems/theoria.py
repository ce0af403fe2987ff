"""Theoria, the paper's own memory (srb/theoria): evidence, communities and theories in one
SQLite store, searched through its service's POST /retrieve with top_k as the budget knob.

Ingest: each paper's five extraction passes per ~6K section-aware chunk run in `ingest_paper`
(papers concurrently; the store orders evidence canonically, so concurrency changes nothing);
`finish` builds the links, RAPTOR summaries, communities and theories over the whole slice.
Search: the grid's jobs share one read-only service per store (srb.services: started on first
use, health-checked, stopped with the workflow's servers); `hybrid` is srb's Pyserini BM25
over the exported items fused by RRF k=60, as for Mem0 (no re-ingest).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
from pathlib import Path
from typing import Any

import httpx

from srb.data.schema import Paper
from srb.systems.store import Endpoint, Item, StoreHandle, StoreSystem
from srb.theoria import build
from srb.theoria.db import DB_FILE, TheoriaDB
from srb.theoria.models import EndpointModels
from srb.theoria.options import TheoriaOptions

SERVICE_MEMORY_KEYS = ("llm", "theoria", "max_completion_tokens", "structured_output")


def export_items(db: TheoriaDB) -> list[Item]:
    """Every claim (kind = its aspect) and summary, in the store's canonical order."""
    items = [
        Item(
            e.id,
            e.text,
            (e.paper_id,),
            e.aspect,
            0.0,
            None,  # a claim is rewritten text: its quote's characters are its provenance
            (e.start, e.end) if e.start is not None and e.end is not None else None,
        )
        for e in db.evidence()
    ]
    items += [Item(s.id, s.text, s.paper_ids, "summary") for s in db.summaries()]
    return items


class TheoriaHandle(StoreHandle):
    def __init__(self, system: TheoriaSystem, store_dir: Path, endpoint: Endpoint):
        self.system = system
        self.store_dir = store_dir
        self.endpoint = endpoint
        self.db = TheoriaDB(store_dir, readonly=True)
        self._url: str | None = None
        self._http: httpx.Client | None = None

    def items(self) -> list[Item]:
        return export_items(self.db)

    def native_count(self) -> int:
        counts = self.db.counts()
        return counts["evidence"] + counts["raptor"]

    def _client(self) -> httpx.Client:
        if self._http is None:
            self._url = self.system.service_url(self.store_dir)
            self._http = httpx.Client(base_url=self._url, timeout=600)
        return self._http

    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        if modality not in self.system.modalities:
            raise ValueError(f"{self.system.name} has no modality {modality!r}")
        response = self._client().post("/retrieve", json={"query": query, "k": knob})
        if response.status_code != 200:
            raise RuntimeError(
                f"theoria service at {self._url} answered {response.status_code}: "
                f"{response.text[:300]}"
            )
        return [
            Item(
                r["item_id"],
                r["text"],
                tuple(r["paper_ids"]),
                r["kind"],
                float(r["score"]),
                None,
                tuple(r["provenance"]) if r["provenance"] else None,
            )
            for r in response.json()["items"]
        ]

    def close(self) -> None:
        if self._http is not None:
            self._http.close()
        self.db.close()


class TheoriaSystem(StoreSystem):
    name = "theoria"
    description = (
        "Theoria: 5-pass typed claims + RAPTOR + links, Leiden communities and theories; "
        "community-routed /retrieve"
    )
    modalities = ("dense", "hybrid")
    native_knob = 25  # the paper's native Theoria: ~28.9K chars at ~1,151 chars per item
    knob_name = "top_k"
    requirements = "theoria.txt"
    bm25_fused = ("hybrid",)
    layers = build.THEORIA_LAYERS

    def __init__(self) -> None:
        self._dbs: dict[Path, TheoriaDB] = {}
        self._lock = threading.Lock()

    @property
    def opts(self) -> TheoriaOptions:
        return TheoriaOptions.from_config(self.options.get("theoria"))

    def _db(self, store_dir: Path) -> TheoriaDB:
        with self._lock:
            if store_dir not in self._dbs:
                self._dbs[store_dir] = TheoriaDB(store_dir)
            return self._dbs[store_dir]

    def prepare(self, store_dir: Path, endpoint: Endpoint) -> None:
        self._db(store_dir)

    def ingest_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> int:
        models = EndpointModels(endpoint)
        try:
            extraction = build.add_paper(self._db(store_dir), models, self.opts, paper)
        finally:
            models.close()
        if extraction.passes and len(extraction.failed_passes) == extraction.passes:
            raise RuntimeError(f"every extraction pass of {paper.id} failed")
        return len(extraction.claims)

    def forget_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> None:
        build.forget_paper(self._db(store_dir), paper.id)

    def finish(self, store_dir: Path, endpoint: Endpoint) -> None:
        with self._lock:
            db = self._dbs.pop(store_dir, None)
        if db is None:
            return
        models = EndpointModels(endpoint)
        try:
            report = build.finish(db, models, self.opts, self.layers)
            with db.transaction() as conn:
                db.set_meta(conn, "finish_report", report)
        finally:
            models.close()
            db.close()

    def ingest_report(self, store_dir: Path) -> dict[str, Any]:
        db = TheoriaDB(store_dir, readonly=True)
        try:
            failed = [
                f"{pid}: {line}"
                for pid, text in db.query("SELECT paper_id, failed_passes FROM papers")
                for line in text.splitlines()
                if line
            ]
            passes = int(db.query("SELECT COALESCE(SUM(passes), 0) FROM papers")[0][0])
            return {
                "extraction_passes": passes,
                "failed_passes": len(failed),
                "failed_pass_errors": failed[:50],
                "layers": db.get_meta("finish_report", {}),
            }
        finally:
            db.close()

    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        if not (store_dir / DB_FILE).is_file():
            raise FileNotFoundError(f"{self.name}: no store under {store_dir}")
        return TheoriaHandle(self, store_dir, endpoint)

    def service_url(self, store_dir: Path, read_only: bool = True) -> str:
        """The base URL of the service for `store_dir` (started if needed): shared and
        read-only for the grid's jobs; writable for the sequential evaluation's own store.
        A service started by a job at the model server's priority (the sequential observer,
        `srb.priority.join_server_priority`) keeps it: at the helper nice beside the busy ingest
        model, the observer's first service took 46 s to start (stop 39), on the ingest phase's
        critical path; one started by a job of the workflow's session yields like it."""
        from srb.priority import caller_nice
        from srb.services import acquire_service, http_health

        settings_file, key = self.service_settings(store_dir, read_only)
        url, _ = acquire_service(
            "theoria",
            key,
            lambda port: [
                sys.executable,
                "-m",
                "srb.theoria.service",
                "--settings",
                str(settings_file),
                "--port",
                str(port),
            ],
            http_health("theoria"),
            settings_file.parent,
            start_timeout_s=300,
            keeps_priority=caller_nice() <= 0,
        )
        return url

    def service_settings(self, store_dir: Path, read_only: bool) -> tuple[Path, str]:
        """The service's settings file (in the servers directory) and its registry key, which
        changes with the settings and the store's content (a re-ingested store gets a new one)."""
        if "llm" not in self.services:
            raise RuntimeError(
                f"{self.name}: no service settings (llm, dense); srb.store.opened_store sets them"
            )
        settings = {
            **self.services,
            "store": str(store_dir.resolve()),
            "read_only": read_only,
            # only what the service's answers depend on: jobs configured with other `memory`
            # keys (the doctor's gate, say) share one service
            "memory": {k: self.options.get(k) for k in SERVICE_MEMORY_KEYS},
        }
        fingerprint = _store_fingerprint(store_dir) if read_only else "writable"
        key = (
            "theoria-"
            + hashlib.sha256(
                json.dumps([settings, fingerprint], sort_keys=True).encode()
            ).hexdigest()[:16]
        )
        state = Path(settings["llm"]["servers_dir"])
        state.mkdir(parents=True, exist_ok=True)
        settings_file = state / f"{key}.settings"  # not *.json: the registries are
        settings_file.write_text(json.dumps(settings, indent=1))
        return settings_file, key


def _store_fingerprint(store_dir: Path) -> list[Any]:
    stat = (store_dir / DB_FILE).stat()
    return [stat.st_size, stat.st_mtime_ns]


SYSTEM = TheoriaSystem()
