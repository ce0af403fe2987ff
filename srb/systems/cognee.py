"""Cognee (`cognee`, pinned with its whole environment in envs/cognee.txt) as the paper ran it:
each full paper through its Extract-Cognify-Load pipeline (chunks, an LLM-extracted typed
knowledge graph, chunk summaries), in its own files (SQLite, LanceDB, its Kuzu fork).

Cognee is a library whose pins conflict with the project's, so it runs from its own venv: each
job starts srb/systems/cognee_worker.py under the venv's Python and sends it JSON-lines
requests. Two modalities, as the paper used them:
- `chunks`: its CHUNKS search, `top_k` the budget knob, calibrated from mean characters per
  chunk on the native run (its chunks are coarse, so budgets move in whole chunks);
- `graph_completion`: the context its GRAPH_COMPLETION retriever builds (the triplets found for
  the question, every node once, then the connections), answered with Cognee's own answer
  prompt (config/prompts/cognee.md, internal synthesis, native cells only).

Offline workarounds, each tested in tests/test_cognee_system.py (`worker_environment`):
- Cognee counts chunk tokens with the embedding model's tokenizer, fetched from a hub: the
  tokenizer files of the configured encoder are laid out as a Hugging Face cache
  (`tokenizer_cache`) and the hub is off (`HF_HUB_OFFLINE`); `EMBEDDING_MODEL` names that repo;
- chat and embeddings on the caching endpoint (`LLM_PROVIDER=custom` with litellm's
  `hosted_vllm/` route, `EMBEDDING_PROVIDER=openai_compatible`); litellm's model-cost map is
  read locally; telemetry off; its 30 s LLM connection test is skipped (the endpoint starts
  the model server on its first miss, which takes longer);
- with `memory.structured_output` (default on) the model is declared to litellm as one that
  takes a response schema, so Cognee sends its Pydantic schema (bounded by the endpoint, enforced
  by vLLM's grammar) instead of asking for any JSON object with the schema in the prompt: a
  0.5B model answered that with the schema itself, and the paper's cognify failed;
- one store for all papers (`ENABLE_BACKEND_ACCESS_CONTROL=false`): Cognee would otherwise
  keep a database per dataset and user.

A search may write to the store (Cognee updates access timestamps), so every job that searches
runs the worker on a private copy of the finished store: the store stays as ingest left it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from srb.data.schema import Paper
from srb.systems.store import Endpoint, Item, StoreHandle, StoreSystem

log = logging.getLogger(__name__)

WORKER = Path(__file__).with_name("cognee_worker.py")
#: the packaged encoder's Hugging Face repo (its tokenizer is what Cognee would fetch)
TOKENIZER_REPOS = {"minilm": "sentence-transformers/all-MiniLM-L6-v2"}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt",
                   "special_tokens_map.json", "config.json")  # fmt: skip
SNAPSHOT = "0" * 40  # the synthesized cache's one revision
STORE_MARK = "srb-papers.json"  # written by the worker: Cognee data id -> paper id
NATIVE_TOP_K = 15  # cognee.search's default top_k
MAX_ITEMS = 6  # memory.cognee.max_items: items per array of its answer schemas
MAX_FIELD_CHARS = 120  # memory.cognee.max_field_chars: characters per string field


class CogneeError(RuntimeError):
    """Cognee raised in the worker; the message carries its error and the worker's log."""


def tokenizer_repo(encoder: str) -> str:
    """The repo id Cognee is told the embedding model is (it loads that repo's tokenizer)."""
    if encoder in TOKENIZER_REPOS:
        return TOKENIZER_REPOS[encoder]
    name = "".join(c if c.isalnum() or c in "-_." else "-" for c in Path(encoder).name)
    return f"srb-local/{name or 'encoder'}"


def tokenizer_cache(encoder: str, dest: Path) -> Path:
    """A Hugging Face hub cache under `dest` holding the encoder's tokenizer files as the repo
    `tokenizer_repo(encoder)`, so Cognee's offline tokenizer lookup finds them."""
    from srb.index.dense import resolve_encoder

    source = Path(resolve_encoder(encoder))
    repo = dest / "hub" / ("models--" + tokenizer_repo(encoder).replace("/", "--"))
    snapshot = repo / "snapshots" / SNAPSHOT
    snapshot.mkdir(parents=True, exist_ok=True)
    (repo / "refs").mkdir(exist_ok=True)
    (repo / "refs" / "main").write_text(SNAPSHOT)
    if not (source / "tokenizer.json").is_file():
        raise FileNotFoundError(
            f"cognee: encoder {encoder!r} ({source}) has no tokenizer.json; Cognee counts chunk "
            "tokens with the embedding model's tokenizer"
        )
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            shutil.copyfile(source / name, snapshot / name)
    return dest


def worker_environment(
    store: Path, hf_home: Path, endpoint: Endpoint, options: Mapping[str, Any] | None = None
) -> dict[str, str]:
    """Everything Cognee reads from the environment: where its files live, the endpoint, and
    the offline settings (see the module docstring). Cognee refuses relative directories."""
    store, hf_home = Path(store).resolve(), Path(hf_home).resolve()
    env = {
        "SRB_COGNEE_STORE": str(store),
        "SYSTEM_ROOT_DIRECTORY": str(store / "system"),
        "DATA_ROOT_DIRECTORY": str(store / "data"),
        "CACHE_ROOT_DIRECTORY": str(store / "cache"),
        "COGNEE_LOGS_DIR": str(store / "logs"),
        "ENABLE_BACKEND_ACCESS_CONTROL": "false",
        "LLM_PROVIDER": "custom",
        "LLM_MODEL": f"hosted_vllm/{endpoint.chat_model}",
        "LLM_ENDPOINT": endpoint.base_url,
        "LLM_API_KEY": "srb-local-endpoint",
        "COGNEE_SKIP_CONNECTION_TEST": "true",
        "EMBEDDING_PROVIDER": "openai_compatible",
        "EMBEDDING_MODEL": tokenizer_repo(endpoint.embedding_model),
        "EMBEDDING_ENDPOINT": endpoint.base_url,
        "EMBEDDING_API_KEY": "srb-local-endpoint",
        "EMBEDDING_DIMENSIONS": str(endpoint.embedding_dims),
        "HF_HOME": str(hf_home),
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "TELEMETRY_DISABLED": "1",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    }
    if (options or {}).get("structured_output", True):
        # litellm does not know the local model supports response schemas, so Cognee would
        # ask for any JSON object with the schema in the prompt (a 0.5B model then answers
        # with the schema itself); declared, Cognee sends the schema the endpoint bounds
        env["SRB_COGNEE_SCHEMA_MODEL"] = env["LLM_MODEL"]
    return env


def item_id(kind: str, paper_ids: tuple[str, ...], text: str) -> str:
    """A stable id (Cognee's document ids are random uuids)."""
    key = f"{kind}\0{','.join(paper_ids)}\0{text}"
    return f"cognee-{kind}-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def paper_attribution(graph: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Node id -> the papers it came from, through Cognee's own structure: a document is its
    paper; a chunk `is_part_of` a document; a summary is `made_from` a chunk; an entity is in
    the papers whose chunks `contain` it; an entity type in its entities' papers. A node no
    path reaches (none in practice) is knowledge of the whole store: every paper."""
    papers = graph["papers"]
    out: dict[str, set[str]] = defaultdict(set)
    for node in graph["nodes"]:
        if node["id"] in papers:
            out[node["id"]].add(papers[node["id"]])
    neighbours: dict[str, set[str]] = defaultdict(set)
    for e in graph["edges"]:
        neighbours[e["source"]].add(e["target"])
        neighbours[e["target"]].add(e["source"])
    # breadth-first from the documents: each node takes its nearest attributed neighbours' papers
    frontier = set(out)
    while frontier:
        found: dict[str, set[str]] = defaultdict(set)
        for nid in frontier:
            for other in neighbours[nid]:
                if other not in out:
                    found[other] |= out[nid]
        for nid, ps in found.items():
            out[nid] = ps
        frontier = set(found)
    everyone = set(papers.values())
    return {n["id"]: tuple(sorted(out.get(n["id"]) or everyone)) for n in graph["nodes"]}


def edge_papers(attribution: Mapping[str, tuple[str, ...]], nodes: list[str]) -> tuple[str, ...]:
    """An edge's papers: those both ends share, else either end's."""
    sets = [set(attribution.get(n, ())) for n in nodes]
    shared = set.intersection(*sets) if sets else set()
    return tuple(sorted(shared or set().union(*sets)))


def export_items(graph: Mapping[str, Any]) -> list[Item]:
    """Every item a search can return: chunks (modality chunks), rendered nodes and connection
    lines (modality graph_completion), each with its papers; sorted by id."""
    attribution = paper_attribution(graph)
    found: dict[str, Item] = {}
    for node in graph["nodes"]:
        papers = attribution[node["id"]]
        if node.get("chunk"):
            item = Item(item_id("chunk", papers, node["chunk"]), node["chunk"], papers, "chunk")
            found[item.item_id] = item
        item = Item(item_id("node", papers, node["text"]), node["text"], papers, "node")
        found[item.item_id] = item
    for edge in graph["edges"]:
        papers = edge_papers(attribution, [edge["source"], edge["target"]])
        item = Item(item_id("edge", papers, edge["text"]), edge["text"], papers, "edge")
        found[item.item_id] = item
    return [found[k] for k in sorted(found)]


def search_items(
    found: list[dict[str, Any]], kind: str, attribution: Mapping[str, tuple[str, ...]]
) -> list[Item]:
    """The worker's ranked search results as items (ids as in `export_items`)."""
    out = []
    for rank, rec in enumerate(found):
        if kind == "chunk":
            papers, item_kind = attribution.get(rec["nodes"][0], ()), "chunk"
        elif len(rec["nodes"]) == 1:
            papers, item_kind = attribution.get(rec["nodes"][0], ()), "node"
        else:
            papers, item_kind = edge_papers(attribution, rec["nodes"]), "edge"
        text = rec["text"] or ""
        score = float(rec.get("score", len(found) - rank))
        out.append(Item(item_id(item_kind, papers, text), text, papers, item_kind, score))
    return out


class CogneeWorker:
    """cognee_worker.py under the venv's Python, on one store directory, for one job."""

    def __init__(
        self,
        venv: Path,
        store: Path,
        endpoint: Endpoint,
        log_dir: Path,
        options: Mapping[str, Any] | None = None,
    ):
        from srb.priority import die_with_parent

        self.store = store = Path(store).resolve()
        self._tmp = tempfile.TemporaryDirectory(prefix="srb-cognee-hf-")
        hf_home = tokenizer_cache(endpoint.embedding_model, Path(self._tmp.name))
        log_dir.mkdir(parents=True, exist_ok=True)
        self.log_file = log_dir / f"cognee-worker-{os.getpid()}-{id(self):x}.log"
        env = {**os.environ, **worker_environment(store, hf_home, endpoint, options)}
        self._log = open(self.log_file, "ab")
        self.proc = subprocess.Popen(
            [str(venv / "bin" / "python"), str(WORKER)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            env=env,
            cwd=str(store),
            # a session of its own (die_with_parent), whose autogroup keeps nice 0, not the
            # helper nice: Cognee ingests its papers one after another, so its own CPU work is
            # the ingest phase's critical path. At the helper nice, beside the busy ingest
            # model's server, the worker took 5.2 min to import Cognee and 9 min to send its
            # first request, and Cognee's ingest ended the phase at 17.6 min (stop 38)
            preexec_fn=lambda: die_with_parent(signal.SIGTERM),
        )
        self._lock = threading.Lock()
        try:
            self.setup = self.call("setup")
        except BaseException:
            self.stop()
            raise
        log.info("cognee %s worker up on %s (max chunk tokens %s; log %s)",
                 self.setup["version"], store, self.setup["max_chunk_tokens"], self.log_file)  # fmt: skip

    def _log_tail(self, lines: int = 15) -> str:
        try:
            text = self.log_file.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def call(self, op: str, **args: Any) -> Any:
        """One request; Cognee's exception is raised as CogneeError, a dead worker named."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        with self._lock:
            try:
                self.proc.stdin.write((json.dumps({"op": op, "args": args}) + "\n").encode())
                self.proc.stdin.flush()
                line = self.proc.stdout.readline()
            except BrokenPipeError:
                line = b""
        if not line:
            code = self.proc.wait(timeout=30)
            raise CogneeError(
                f"cognee worker exited with {code} during {op}; its log {self.log_file}:\n"
                f"{self._log_tail()}"
            )
        answer = json.loads(line)
        if not answer["ok"]:
            tb = answer.get("traceback", "").strip().splitlines()[-6:]
            raise CogneeError(
                f"cognee {op}: {answer['error']} (log {self.log_file})\n" + "\n".join(tb)
            )
        return answer["result"]

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=60)
            except (OSError, subprocess.TimeoutExpired):
                self.proc.kill()
                self.proc.wait(timeout=10)
        self._log.close()
        self._tmp.cleanup()


class CogneeHandle(StoreHandle):
    def __init__(self, worker: CogneeWorker, private: tempfile.TemporaryDirectory[str]):
        self.worker, self._private = worker, private
        self._graph: dict[str, Any] | None = None
        self._attribution: dict[str, tuple[str, ...]] | None = None

    def graph(self) -> dict[str, Any]:
        if self._graph is None:
            self._graph = self.worker.call("graph")
        return self._graph

    def attribution(self) -> dict[str, tuple[str, ...]]:
        """Node -> papers, once per opened store (every search of a cell needs it)."""
        if self._attribution is None:
            self._attribution = paper_attribution(self.graph())
        return self._attribution

    def items(self) -> list[Item]:
        return export_items(self.graph())

    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        attribution = self.attribution()
        if modality == "chunks":
            return search_items(self.worker.call("chunks", query=query, top_k=int(knob)),
                                "chunk", attribution)  # fmt: skip
        if modality == "graph_completion":
            return search_items(self.worker.call("triplets", query=query, top_k=int(knob)),
                                "graph", attribution)  # fmt: skip
        raise ValueError(f"cognee has no modality {modality!r} (chunks, graph_completion)")

    def close(self) -> None:
        self.worker.stop()
        self._private.cleanup()


class CogneeSystem(StoreSystem):
    name = "cognee"
    description = "Cognee: Extract-Cognify-Load knowledge graph per paper; chunks and graph search"
    modalities = ("chunks", "graph_completion")
    internal_modalities = ("graph_completion",)
    native_knob = NATIVE_TOP_K
    knob_name = "top_k"
    requirements = "cognee.txt"
    own_environment = True
    #: one worker adds and cognifies papers one at a time (one dataset, one set of files)
    concurrent_papers = False

    def schema_bounds(self) -> bool | tuple[int, int]:
        """Tighter bounds than the endpoint's defaults (12 items, 400 chars): a chunk's graph
        (nodes with id, name, type and description; edges) filled to those bounds runs past
        the answer cap, and one runaway answer holds a paper's cognify for minutes (measured:
        3 of a paper's 13 requests generating alone at ~5 tokens/s for 10 minutes)."""
        if not self.options.get("structured_output", True):
            return False
        own = self.options.get("cognee") or {}
        return (
            int(own.get("max_items") or MAX_ITEMS),
            int(own.get("max_field_chars") or MAX_FIELD_CHARS),
        )

    def __init__(self) -> None:
        self._workers: dict[Path, CogneeWorker] = {}
        self._lock = threading.Lock()

    def _worker(self, store_dir: Path) -> CogneeWorker:
        with self._lock:
            if store_dir not in self._workers:
                raise RuntimeError(f"cognee: no worker for {store_dir}; prepare() first")
            return self._workers[store_dir]

    def prepare(self, store_dir: Path, endpoint: Endpoint) -> None:
        worker = CogneeWorker(
            self.venv(), Path(store_dir), endpoint, self.process_log_dir("workers"), self.options
        )
        with self._lock:
            self._workers[store_dir] = worker

    def ingest_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> int:
        worker = self._worker(store_dir)
        worker.call("ingest", paper_id=paper.id, text=paper.text)
        graph = worker.call("graph")
        return sum(1 for i in export_items(graph) if paper.id in i.paper_ids)

    def forget_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> None:
        self._worker(store_dir).call("forget", paper_id=paper.id)

    def live_items(self, store_dir: Path, endpoint: Endpoint) -> list[Item]:
        """The graph's items from the ingest's own worker: `open` starts another worker on a
        copy of the store."""
        return export_items(self._worker(store_dir).call("graph"))

    def finish(self, store_dir: Path, endpoint: Endpoint) -> None:
        with self._lock:
            worker = self._workers.pop(store_dir, None)
        if worker is not None:
            worker.stop()

    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        store_dir = Path(store_dir)
        if not (store_dir / STORE_MARK).is_file():
            raise FileNotFoundError(f"cognee: no Cognee store under {store_dir} ({STORE_MARK})")
        private = tempfile.TemporaryDirectory(prefix="srb-cognee-store-")
        copy = Path(private.name) / "store"
        shutil.copytree(store_dir, copy, symlinks=True)
        try:
            worker = CogneeWorker(
                self.venv(), copy, endpoint, self.process_log_dir("workers"), self.options
            )
        except BaseException:
            private.cleanup()
            raise
        return CogneeHandle(worker, private)


SYSTEM = CogneeSystem()
