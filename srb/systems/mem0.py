"""Mem0 (`mem0ai`, pinned in envs/mem0.txt) as the paper ran it: ~6K-character chunks, each
added with `add(infer=True)` (its LLM extraction of atomic facts against the memories already
stored), a local Qdrant store, searched with `Memory.search(top_k=...)`.

Offline workarounds, each tested in tests/test_mem0_system.py:
- telemetry off (`MEM0_TELEMETRY=False`, which also stops a notices fetch);
- the extraction prompt embeds today's date, so the same paper would be a different model call
  (a cache miss) on another day: the date is pinned to `REFERENCE_DATE` while mem0 runs;
- with `memory.structured_output` (default on) the extraction call's `json_object` format is
  replaced by a JSON schema of Mem0's own answer shape with bounded lengths: small models
  otherwise run away until max_tokens and Mem0 logs the truncated JSON and drops the chunk's
  facts (the endpoint counts such answers either way: `invalid_json_responses`);
- Mem0's own BM25 needs fastembed (a hub download): off here, so its `dense` is what Mem0 does
  out of the box offline, and `hybrid` is srb's Pyserini BM25 over the exported facts fused with
  Mem0's ranking by RRF (the paper used fastembed; see README).

Every paper is its own Mem0 run scope (`run_id` = paper id, one `user_id` for the corpus): a
paper's chunks see only that paper's memories, so papers ingest concurrently and a rerun sends
the identical prompts (zero model calls on a warm cache).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from srb.data.schema import Paper
from srb.systems.store import Endpoint, Item, StoreHandle, StoreSystem
from srb.units import window_spans

# before mem0 is first imported anywhere in the process: its telemetry client reads this then
os.environ["MEM0_TELEMETRY"] = "False"

USER_ID = "corpus"
COLLECTION = "srb"
CHUNK_CHARS = 6000
REFERENCE_DATE = _dt.date(2026, 1, 1)  # the date Mem0's prompts see (not the wall clock)
_date_lock = threading.Lock()
_date_users = 0
_date_original: Any = None


class _PinnedDatetime(_dt.datetime):
    """`datetime` whose now() is REFERENCE_DATE at midnight UTC."""

    @classmethod
    def now(cls, tz: _dt.tzinfo | None = None) -> _dt.datetime:  # type: ignore[override]
        moment = _dt.datetime(REFERENCE_DATE.year, REFERENCE_DATE.month, REFERENCE_DATE.day)
        return moment.replace(tzinfo=tz) if tz else moment


@contextmanager
def pinned_prompt_date() -> Iterator[None]:
    """Mem0's prompt builders read `datetime.now()` from their module: pin it for the block.
    Counted, so concurrent papers (threads) keep it pinned until the last one leaves."""
    global _date_users, _date_original
    import mem0.configs.prompts as prompts

    with _date_lock:
        if _date_users == 0:
            _date_original = prompts.datetime
            prompts.datetime = _PinnedDatetime
        _date_users += 1
    try:
        yield
    finally:
        with _date_lock:
            _date_users -= 1
            if _date_users == 0:
                prompts.datetime = _date_original


class _Serialised:
    """A vector store whose public methods run one at a time: Qdrant's local mode has no
    locking of its own, and papers are added from several threads."""

    def __init__(self, store: Any):
        self._store = store
        self._lock = threading.RLock()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if name.startswith("_") or not callable(attr):
            return attr

        def locked(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                return attr(*args, **kwargs)

        return locked


def mem0_config(store_dir: Path, endpoint: Endpoint) -> dict[str, Any]:
    return {
        "llm": {
            "provider": "openai",
            "config": {
                "model": endpoint.chat_model,
                "openai_base_url": endpoint.base_url,
                "api_key": "srb-local-endpoint",
                "temperature": 0,
                "max_tokens": 2000,
            },
        },
        "embedder": {
            "provider": "openai",
            "config": {
                "model": endpoint.embedding_model,
                "openai_base_url": endpoint.base_url,
                "api_key": "srb-local-endpoint",
                "embedding_dims": endpoint.embedding_dims,
            },
        },
        "vector_store": {
            "provider": "qdrant",
            "config": {
                "path": str(store_dir / "qdrant"),
                "collection_name": COLLECTION,
                "embedding_model_dims": endpoint.embedding_dims,
                "on_disk": True,
            },
        },
        "history_db_path": str(store_dir / "history.db"),
    }


#: Mem0's extraction answer ({"memory": [{"id", "text", ...}]}) with bounds a small model cannot
#: run away from; optional fields Mem0 reads (attributed_to, linked_memory_ids) are left out.
EXTRACTION_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "memory": {
            "type": "array",
            "maxItems": 16,
            "items": {
                "type": "object",
                "properties": {
                    "id": {"type": "string", "maxLength": 4},
                    "text": {"type": "string", "minLength": 8, "maxLength": 400},
                },
                "required": ["id", "text"],
                "additionalProperties": False,
            },
        }
    },
    "required": ["memory"],
    "additionalProperties": False,
}


def structured_extraction(llm: Any) -> None:
    """Send Mem0's json_object calls with EXTRACTION_SCHEMA as a strict json_schema instead."""
    original = llm.generate_response

    def generate_response(messages: Any, response_format: Any = None, **kwargs: Any) -> Any:
        if response_format == {"type": "json_object"}:
            response_format = {
                "type": "json_schema",
                "json_schema": {"name": "memory", "schema": EXTRACTION_SCHEMA, "strict": True},
            }
        return original(messages, response_format=response_format, **kwargs)

    llm.generate_response = generate_response


def item_id(paper_id: str, text: str) -> str:
    """A stable id for a fact (Mem0's own ids are random uuids)."""
    return "mem0-" + hashlib.sha256(f"{paper_id}\0{text}".encode()).hexdigest()[:16]


def paper_chunks(paper: Paper) -> list[str]:
    return [paper.text[s:e] for s, e in window_spans(paper.text, CHUNK_CHARS, 0)]


def _environment() -> None:
    os.environ["MEM0_TELEMETRY"] = "False"


class Mem0Handle(StoreHandle):
    def __init__(self, memory: Any, private_copy: Path | None = None):
        self.memory = memory
        self.private_copy = private_copy

    def _item(self, payload: dict[str, Any], score: float) -> Item:
        text = payload.get("data") or payload.get("memory") or ""
        paper = payload.get("paper_id") or payload.get("run_id") or ""
        return Item(item_id(paper, text), text, (paper,) if paper else (), "fact", float(score))

    def items(self) -> list[Item]:
        records, _ = self.memory.vector_store.client.scroll(
            collection_name=COLLECTION, limit=1_000_000, with_payload=True, with_vectors=False
        )
        found = {}
        for rec in records:
            item = self._item(rec.payload or {}, 0.0)
            found[item.item_id] = item
        return [found[k] for k in sorted(found)]

    def native_count(self) -> int:
        store = self.memory.vector_store
        return int(store.client.count(collection_name=COLLECTION, exact=True).count)

    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        if modality not in ("dense", "hybrid"):
            raise ValueError(f"mem0 has no modality {modality!r} (dense, hybrid)")
        with pinned_prompt_date():
            found = self.memory.search(query, filters={"user_id": USER_ID}, top_k=knob)
        out = []
        for r in found.get("results", []):
            payload = {
                **(r.get("metadata") or {}),
                "data": r.get("memory"),
                "run_id": r.get("run_id"),
            }
            out.append(self._item(payload, r.get("score") or 0.0))
        return out

    def close(self) -> None:
        client = getattr(self.memory.vector_store, "client", None)
        if client is not None:
            client.close()
        if self.private_copy is not None:
            shutil.rmtree(self.private_copy, ignore_errors=True)


class Mem0System(StoreSystem):
    name = "mem0"
    description = "Mem0: LLM-extracted atomic facts from ~6K-char chunks, Qdrant, dense search"
    modalities = ("dense", "hybrid")
    native_knob = 20  # Memory.search's default top_k
    knob_name = "top_k"
    requirements = "mem0.txt"
    #: modalities whose ranking the workflow fuses with its own BM25 over the exported items
    bm25_fused = ("hybrid",)

    def __init__(self) -> None:
        self._memories: dict[Path, Any] = {}
        self._lock = threading.Lock()

    def _memory(self, store_dir: Path, endpoint: Endpoint) -> Any:
        with self._lock:
            if store_dir not in self._memories:
                _environment()
                from mem0 import Memory

                memory = Memory.from_config(mem0_config(store_dir, endpoint))
                memory.vector_store = _Serialised(memory.vector_store)
                if self.options.get("structured_output", True):
                    structured_extraction(memory.llm)
                self._memories[store_dir] = memory
            return self._memories[store_dir]

    def prepare(self, store_dir: Path, endpoint: Endpoint) -> None:
        self._memory(store_dir, endpoint)

    def infers(self) -> bool:
        """`memory.mem0.infer` (default true, as the paper ran it): Mem0's LLM extracts facts
        from each chunk. False stores each chunk as one memory with no model call (Mem0's own
        `infer=False`): the store path alone, which bench/scale.py times up to 819 papers, where
        extraction on 2 CPU cores would take days."""
        return bool((self.options.get("mem0") or {}).get("infer", True))

    def ingest_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> int:
        memory = self._memory(store_dir, endpoint)
        stored = 0
        infer = self.infers()
        for i, chunk in enumerate(paper_chunks(paper)):
            with pinned_prompt_date():
                result = memory.add(
                    chunk,
                    user_id=USER_ID,
                    run_id=paper.id,
                    metadata={"paper_id": paper.id, "chunk": i},
                    infer=infer,
                )
            stored += sum(1 for r in result.get("results", []) if r.get("event") == "ADD")
        return stored

    def forget_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> None:
        """Delete the paper's memories and its saved messages (its run scope)."""
        from mem0.memory.main import _build_session_scope

        memory = self._memory(store_dir, endpoint)
        memory.delete_all(user_id=USER_ID, run_id=paper.id)
        scope = _build_session_scope({"user_id": USER_ID, "run_id": paper.id})
        with memory.db._lock:
            memory.db.connection.execute("DELETE FROM messages WHERE session_scope = ?", (scope,))
            memory.db.connection.commit()

    def finish(self, store_dir: Path, endpoint: Endpoint) -> None:
        with self._lock:
            memory = self._memories.pop(store_dir, None)
        if memory is not None:
            Mem0Handle(memory).close()

    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        _environment()
        from mem0 import Memory

        if not (store_dir / "qdrant").is_dir():
            raise FileNotFoundError(f"mem0: no Qdrant store under {store_dir}")
        # Qdrant's local mode lets one client hold a path at a time: every reader (doctor, one
        # restore job per modality) searches its own copy, and the store itself is never written
        private = Path(tempfile.mkdtemp(prefix="srb-mem0-"))
        try:
            shutil.copytree(store_dir, private / "store")
            memory = Memory.from_config(mem0_config(private / "store", endpoint))
        except BaseException:
            shutil.rmtree(private, ignore_errors=True)
            raise
        return Mem0Handle(memory, private)


SYSTEM = Mem0System()
