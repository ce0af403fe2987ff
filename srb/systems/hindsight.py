"""Hindsight (`hindsight-api`, pinned with its whole environment in envs/hindsight.txt) as the
paper ran it: one retained item per paper, facts extracted by its LLM pipeline into PostgreSQL
(pgvector, pg_trgm), recalled with `recall(max_tokens=...)`, the system's budget knob.

Hindsight is a server. Every job that touches the store runs its own: a private PostgreSQL on a
copy of the store's cluster (srb.pg) and `hindsight-api` from the system's own venv on a free
127.0.0.1 port, both stopped when the job ends. srb talks to it over its REST API (the routes
`hindsight-client` wraps), so the project's environment needs neither.

Offline settings, each tested in tests/test_hindsight_system.py (`server_environment`):
- chat and embeddings both on the caching endpoint (`openai` providers with its base URL): the
  default local embedder and cross-encoder reranker are hub downloads; recall reranks by RRF;
- observations (background LLM consolidation) off unless `memory.hindsight.observations`;
- with `memory.structured_output` (default on) retain asks for its strict JSON schema
  (`LLM_STRICT_SCHEMA_RETAIN`) instead of the schema in the prompt with json_object mode, and
  the endpoint bounds that schema (`schema_bounds`): a small model then cannot run away;
- `RETAIN_MAX_COMPLETION_TOKENS` 4096 (its default 64000 is refused by a small model's server;
  it must exceed the 3000-char retain chunk or the server will not start); the endpoint cuts
  answers at `memory.max_completion_tokens` as for every system;
- every item carries the fixed `REFERENCE_TIME` as its timestamp, so a rerun sends the same
  prompts (zero model calls on a warm cache), whatever day it runs.

Budget: Hindsight counts `max_tokens` with its own tokenizer; a calibrated cell asks for
B / CHARS_PER_TOKEN tokens and the workflow's verdict reports what came back (the paper saw
recall return ~19K characters whatever was asked: `knob_inert` names that).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from srb.data.schema import Paper
from srb.systems.store import Endpoint, Item, StoreHandle, StoreSystem

log = logging.getLogger(__name__)

BANK = "srb"
#: runs hindsight-api with its chunks' extractions handed over in chunk order
ORDERED_LAUNCHER = Path(__file__).with_name("hindsight_ordered.py")
EXTENSIONS = ("vector", "pg_trgm", "btree_gist")
REFERENCE_TIME = "2026-01-01T00:00:00+00:00"  # every retained item's timestamp
CHARS_PER_TOKEN = 4.0  # English prose under cl100k-style tokenizers (Hindsight's counter)
RETAIN_MAX_COMPLETION_TOKENS = 4096  # what Hindsight asks for; its default 64000 is refused
START_CPU_S = 180.0  # CPU seconds its start may use (srb.start_clock says why not wall time)
REQUEST_TIMEOUT_S = 3600.0  # a paper's retain is one synchronous request (many LLM calls)
PAGE = 500
LLM_CONCURRENCY = 8  # memory.hindsight.llm_concurrency's default
MAX_FACTS = 6  # memory.hindsight.max_facts: items per array of its extraction answer
MAX_FIELD_CHARS = 200  # memory.hindsight.max_field_chars: characters per free-text field


#: Row ids that follow insertion order: every uuid column whose default is PostgreSQL's random
#: `gen_random_uuid()` gets md5(table || counter) from a sequence of its own, so the same writes
#: in the same order give the same ids (recall breaks score ties by fact id, `settle`).
ORDERED_IDS_SQL = """
DO $$
DECLARE r record; seq text;
BEGIN
  FOR r IN SELECT table_schema, table_name, column_name FROM information_schema.columns
           WHERE column_default LIKE '%gen_random_uuid()%' LOOP
    seq := format('%I.%I', r.table_schema,
                  left('srb_ids_' || r.table_name || '_' || r.column_name, 63));
    EXECUTE format('CREATE SEQUENCE %s', seq);
    EXECUTE format('ALTER TABLE %I.%I ALTER COLUMN %I SET DEFAULT md5(%L || nextval(%L))::uuid',
                   r.table_schema, r.table_name, r.column_name, r.table_name || ':', seq);
  END LOOP;
END $$;
"""


def server_environment(
    db_url: str, endpoint: Endpoint, options: Mapping[str, Any]
) -> dict[str, str]:
    """The `HINDSIGHT_API_*` settings that keep the server offline and on the endpoint."""
    own = dict(options.get("hindsight") or {})
    concurrency = int(own.get("llm_concurrency") or LLM_CONCURRENCY)
    env = {
        "HINDSIGHT_API_DATABASE_URL": db_url,
        "HINDSIGHT_API_LLM_PROVIDER": "openai",
        "HINDSIGHT_API_LLM_BASE_URL": endpoint.base_url,
        "HINDSIGHT_API_LLM_API_KEY": "srb-local-endpoint",
        "HINDSIGHT_API_LLM_MODEL": endpoint.chat_model,
        "HINDSIGHT_API_LLM_MAX_CONCURRENT": str(max(1, concurrency)),
        # a CPU model (and the endpoint starting its server) answers in minutes, not seconds:
        # its 120 s default times out and re-sends the same request
        "HINDSIGHT_API_LLM_TIMEOUT": str(int(REQUEST_TIMEOUT_S)),
        "HINDSIGHT_API_SKIP_LLM_VERIFICATION": "true",
        "HINDSIGHT_API_EMBEDDINGS_PROVIDER": "openai",
        "HINDSIGHT_API_EMBEDDINGS_OPENAI_BASE_URL": endpoint.base_url,
        "HINDSIGHT_API_EMBEDDINGS_OPENAI_API_KEY": "srb-local-endpoint",
        "HINDSIGHT_API_EMBEDDINGS_OPENAI_MODEL": endpoint.embedding_model,
        "HINDSIGHT_API_RERANKER_PROVIDER": "rrf",
        "HINDSIGHT_API_ENABLE_OBSERVATIONS": str(bool(own.get("observations", False))).lower(),
        "HINDSIGHT_API_WORKER_ID": "srb",
        "HINDSIGHT_API_OTEL_TRACES_ENABLED": "false",
        # must exceed the retain chunk size (3000 chars) or the server refuses to start; the
        # endpoint still cuts every answer at memory.max_completion_tokens
        "HINDSIGHT_API_RETAIN_MAX_COMPLETION_TOKENS": str(RETAIN_MAX_COMPLETION_TOKENS),
        "HF_HUB_OFFLINE": "1",
        # recall orders tied facts by iterating a set of their ids: one string hashing for all
        "PYTHONHASHSEED": "0",
    }
    if options.get("structured_output", True):
        # its default sends the schema in the prompt with json_object; strict json_schema lets
        # the endpoint bound the answer (schema_bounds) and the grammar enforce it
        env["HINDSIGHT_API_LLM_STRICT_SCHEMA_RETAIN"] = "true"
    return env


def item_id(paper_id: str, text: str) -> str:
    """A stable id for a fact (Hindsight's own ids are random uuids)."""
    return "hindsight-" + hashlib.sha256(f"{paper_id}\0{text}".encode()).hexdigest()[:16]


def _check(resp: httpx.Response, what: str) -> Any:
    if resp.status_code >= 400:
        raise RuntimeError(f"hindsight {what}: HTTP {resp.status_code}: {resp.text[:500]}")
    return resp.json() if resp.content else None


class HindsightServer:
    """`hindsight-api` in the system's venv on a private PostgreSQL, for one job."""

    def __init__(
        self,
        venv: Path,
        endpoint: Endpoint,
        options: Mapping[str, Any],
        store_dir: Path | None,
        log_dir: Path,
    ):
        from srb.pg import bin_dir, private_postgres

        self._pg_cm = private_postgres(bin_dir(venv), store_dir, EXTENSIONS)
        self.pg = self._pg_cm.__enter__()
        self.log_file = log_dir / f"hindsight-server-{os.getpid()}-{id(self):x}.log"
        self.proc: subprocess.Popen[bytes] | None = None
        try:
            self._start(venv, endpoint, options)
        except BaseException:
            self.stop()
            raise

    def _start(self, venv: Path, endpoint: Endpoint, options: Mapping[str, Any]) -> None:
        from srb.priority import die_with_parent, match_caller_priority
        from srb.services import free_port
        from srb.start_clock import StartClock

        port = free_port()
        env = {**os.environ, **server_environment(self.pg.url, endpoint, options)}
        self.log_file.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_file, "ab") as out:
            self.proc = subprocess.Popen(
                [
                    str(venv / "bin" / "python"),
                    str(ORDERED_LAUNCHER),
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=env,
                preexec_fn=lambda: die_with_parent(signal.SIGTERM),
            )
        match_caller_priority(self.proc.pid, what="hindsight-api")
        self.url = f"http://127.0.0.1:{port}"
        clock = StartClock(self.proc.pid, START_CPU_S)  # it starts slowly at a helper nice
        while not clock.expired():
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"hindsight-api exited with {self.proc.returncode} while starting; "
                    f"its log {self.log_file}:\n{self._log_tail()}"
                )
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    log.info("hindsight-api up at %s (log %s)", self.url, self.log_file)
                    self.client = httpx.Client(base_url=self.url, timeout=REQUEST_TIMEOUT_S)
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise RuntimeError(
            f"hindsight-api did not answer {self.url}/health: {clock.describe()}; "
            f"its log {self.log_file}:\n{self._log_tail()}"
        )

    def _log_tail(self, lines: int = 20) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def call(self, method: str, path: str, what: str, **kwargs: Any) -> Any:
        """One REST call; a connection failure is reported as a dead server when it is one."""
        try:
            resp = self.client.request(method, path, **kwargs)
        except httpx.HTTPError:
            self.require_alive(what)
            raise
        return self.check(resp, what)

    def check(self, resp: httpx.Response, what: str) -> Any:
        """The response's JSON; a failed request whose cause is a dead PostgreSQL or a dead
        API server is reported as that, naming its data directory or log."""
        if resp.status_code >= 400:
            self.require_alive(what)
        return _check(resp, what)

    def require_alive(self, what: str) -> None:
        from srb.pg import PostgresError

        if not self.pg.running():
            raise PostgresError(
                f"hindsight {what}: PostgreSQL died (data directory {self.pg.cluster}); its log "
                f"{self.pg.log_file}:\n{self.pg._log_tail()}"
            )
        if self.proc is not None and self.proc.poll() is not None:
            raise RuntimeError(
                f"hindsight {what}: hindsight-api exited with {self.proc.returncode}; its log "
                f"{self.log_file}:\n{self._log_tail()}"
            )

    def bank_path(self, suffix: str = "") -> str:
        return f"/v1/default/banks/{BANK}{suffix}"

    def save(self, store_dir: Path) -> None:
        """Stop the API server (its writes are in), then save the stopped cluster to the store."""
        self._stop_api()
        self.pg.save(store_dir)

    def stop(self) -> None:
        """Stop the API server, then PostgreSQL (no orphans, whatever failed before)."""
        self._stop_api()
        self._pg_cm.__exit__(None, None, None)

    def _stop_api(self) -> None:
        client = getattr(self, "client", None)
        if client is not None:
            client.close()
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
                self.proc.wait(timeout=20)
            except (OSError, subprocess.TimeoutExpired):
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _paper_of(record: Mapping[str, Any]) -> str:
    return str(record.get("document_id") or (record.get("metadata") or {}).get("paper_id") or "")


class HindsightHandle(StoreHandle):
    def __init__(self, server: HindsightServer):
        self.server = server

    def _list(self, document_id: str | None = None) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        while True:
            params: dict[str, Any] = {"limit": PAGE, "offset": len(out)}
            if document_id:
                params["document_id"] = document_id
            page = self.server.call(
                "GET", self.server.bank_path("/memories/list"), "list memories", params=params
            )
            got = page.get("items") or []
            out.extend(got)
            if len(got) < PAGE:
                return out

    def items(self) -> list[Item]:
        found = {}
        for rec in self._list():
            paper, text = _paper_of(rec), rec.get("text") or ""
            item = Item(
                item_id(paper, text),
                text,
                (paper,) if paper else (),
                rec.get("fact_type") or rec.get("type") or "fact",
            )
            found[item.item_id] = item
        return [found[k] for k in sorted(found)]

    def native_count(self) -> int:
        """Hindsight's memory units, counting exact repeats once (`duplicate_count`): a chunk it
        splits and asks again can extract the same fact twice (measured: 24 units, 21 distinct)."""
        return len({(_paper_of(r), r.get("text") or "") for r in self._list()})

    def duplicate_count(self) -> int:
        return len(self._list()) - self.native_count()

    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        if modality != "recall":
            raise ValueError(f"hindsight has no modality {modality!r} (recall)")
        # recall's temporal scoring is relative to the query's time: the items' own, not today
        body = {"query": query, "max_tokens": int(knob), "budget": "mid",
                "query_timestamp": REFERENCE_TIME}  # fmt: skip
        found = self.server.call(
            "POST", self.server.bank_path("/memories/recall"), "recall", json=body
        )
        out = []
        results = found.get("results") or []
        for rank, rec in enumerate(results):
            paper, text = _paper_of(rec), rec.get("text") or ""
            out.append(
                Item(item_id(paper, text), text, (paper,) if paper else (), rec.get("type") or "fact",
                     float(len(results) - rank))
            )  # fmt: skip
        return out

    def close(self) -> None:
        self.server.stop()  # its PostgreSQL ran on a private copy, deleted with it


def _retain(server: HindsightServer, paper: Paper) -> None:
    """One paper as one retained item, synchronously (its facts are stored on return)."""
    item = {
        "content": paper.text,
        "document_id": paper.id,
        "timestamp": REFERENCE_TIME,
        "context": paper.title or paper.id,
        "metadata": {"paper_id": paper.id},
    }
    server.call(
        "POST", server.bank_path("/memories"), f"retain {paper.id}",
        json={"items": [item], "async": False},
    )  # fmt: skip


class HindsightSystem(StoreSystem):
    name = "hindsight"
    description = "Hindsight: LLM-extracted facts per paper in PostgreSQL, recall(max_tokens)"
    modalities = ("recall",)
    native_knob = 4096  # RecallRequest's default max_tokens
    knob_name = "max_tokens"
    requirements = "hindsight.txt"
    own_environment = True

    def __init__(self) -> None:
        self._servers: dict[Path, HindsightServer] = {}
        self._lock = threading.Lock()

    def check_environment(self, record: Mapping[str, Any]) -> None:
        """PostgreSQL starts from the venv's binaries and has every extension Hindsight needs."""
        from srb.pg import bin_dir, private_postgres

        with private_postgres(bin_dir(record["venv"]), None, EXTENSIONS):
            pass

    def completion_cap(self) -> int | None:
        """`memory.hindsight.max_completion_tokens` when set, below the global cap: its
        extraction answers a 3000-char chunk in a few hundred tokens, and one that runs to the
        cap is split by Hindsight itself and asked again, so a runaway costs only the cap."""
        caps = [self.options.get("max_completion_tokens"),
                (self.options.get("hindsight") or {}).get("max_completion_tokens")]  # fmt: skip
        given = [int(c) for c in caps if c]
        return min(given) if given else None

    def schema_bounds(self) -> bool | tuple[int, int]:
        """Tighter bounds than the endpoint's defaults (12 items, 400 chars): each of a fact's
        five free-text fields may otherwise fill 400 characters, 12 facts run past the answer
        cap, and Hindsight splits the chunk and asks again, recursively (measured: 14 splits
        and 20K generated tokens for two 13K-character papers before they were bounded)."""
        if not self.options.get("structured_output", True):
            return False
        own = self.options.get("hindsight") or {}
        return (
            int(own.get("max_facts") or MAX_FACTS),
            int(own.get("max_field_chars") or MAX_FIELD_CHARS),
        )

    def ranking_lengths(self, raw: Sequence[Any]) -> list[int]:
        """max_tokens counts tokens, not facts: recall fills it up to its last whole fact, so a
        question whose facts fill under 3/4 of the knob's characters had no more to give
        (ran short); one that fills more did not, however few facts that took."""
        return [
            c.top_k if c.achieved_chars >= 0.75 * c.top_k * CHARS_PER_TOKEN else len(c.hits)
            for c in raw
        ]

    def calibrated_knob(self, budget_chars: int, native_mean_item_chars: float) -> int:
        """max_tokens for a character budget: B / CHARS_PER_TOKEN (the knob counts tokens)."""
        return max(1, math.ceil(budget_chars / CHARS_PER_TOKEN))

    def _server(self, store_dir: Path) -> HindsightServer:
        with self._lock:
            if store_dir not in self._servers:
                raise RuntimeError(f"hindsight: no server for {store_dir}; prepare() first")
            return self._servers[store_dir]

    def prepare(self, store_dir: Path, endpoint: Endpoint) -> None:
        server = HindsightServer(
            self.venv(), endpoint, self.options, None, self.process_log_dir("servers")
        )
        try:
            server.call("PUT", server.bank_path(), "create bank", json={"name": BANK})
        except BaseException:
            server.stop()
            raise
        with self._lock:
            self._servers[store_dir] = server

    def ingest_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> int:
        server = self._server(store_dir)
        _retain(server, paper)
        return len(HindsightHandle(server)._list(paper.id))

    def settle(self, store_dir: Path, endpoint: Endpoint, papers: Sequence[Paper]) -> None:
        """The store again from its model answers, one paper after another in the given order.

        Why: a retain resolves its facts' entities and links against what is already stored,
        so papers retained concurrently (as `ingest_paper` is called) give a store that
        depends on which finished first; rebuilt from the same answers, it recalled different
        facts for 15 of 20 questions (bench/store_repeatability.py). Here the bank is emptied
        and each paper retained again: every model and embedding call is now a call-cache hit
        (seconds), the chunks of a paper are handed over in chunk order (hindsight_ordered.py)
        and new rows get ids in insertion order (ORDERED_IDS_SQL)."""
        server = self._server(store_dir)
        server.call("DELETE", server.bank_path(), "delete bank (to retain in order)")
        # rows without an ORDER BY come back in the order they lie in the table: no dead
        # space left by the deleted bank, and none reclaimed by autovacuum at a moment of its own
        server.pg.query("ALTER SYSTEM SET autovacuum = off")
        server.pg.query("SELECT pg_reload_conf()")
        server.pg.query("VACUUM FULL")
        server.pg.query(ORDERED_IDS_SQL)
        server.call("PUT", server.bank_path(), "create bank", json={"name": BANK})
        for paper in papers:
            _retain(server, paper)
        log.info("hindsight: %d paper(s) retained again, in order", len(papers))

    def forget_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> None:
        server = self._server(store_dir)
        resp = server.client.delete(server.bank_path(f"/documents/{paper.id}"))
        if resp.status_code != 404:
            server.check(resp, f"delete document {paper.id}")

    def live_items(self, store_dir: Path, endpoint: Endpoint) -> list[Item]:
        """The retained memories, listed by the ingest's own server before it stops: `open`
        would start PostgreSQL and the API again (~4 min of wall beside a busy model server
        on 2 cores)."""
        return HindsightHandle(self._server(store_dir)).items()

    def finish(self, store_dir: Path, endpoint: Endpoint) -> None:
        with self._lock:
            server = self._servers.pop(store_dir, None)
        if server is None:
            return
        try:
            server.save(store_dir)
        finally:
            server.stop()

    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        from srb.pg import CLUSTER_DIR

        if not (store_dir / CLUSTER_DIR).is_dir():
            raise FileNotFoundError(f"hindsight: no PostgreSQL cluster under {store_dir}")
        server = HindsightServer(
            self.venv(), endpoint, self.options, store_dir, self.process_log_dir("servers")
        )
        return HindsightHandle(server)


SYSTEM = HindsightSystem()
