"""Graphiti (`graphiti-core` with embedded Kuzu, pinned in envs/graphiti.txt) as the paper ran it:
each paper is one `EpisodeType.text` episode, added with `Graphiti.add_episode` (its LLM
extraction of entities and facts, node and edge deduplication against the graph, node
summaries), stored in an embedded Kuzu database under the store directory and searched with
Graphiti's own `search_` and a `SearchConfig` whose per-channel `limit` is the budget knob.

Modalities (paper A.5): `native` searches edges, nodes and episodes (the raw episode body, i.e.
the whole paper, comes back); `kg_only` searches edges and nodes only (the episode channel off,
the `include_episodes=false` of the paper). Both use Graphiti's COMBINED_HYBRID_SEARCH_RRF
recipe (BM25 + cosine per channel, reciprocal-rank fusion: no model call at search time, only
the query's embedding) without its community channel, since no communities are built. The limit
applies per channel, so a knob of k returns up to 2k (kg_only) or 3k (native) items and the
budget overshoots: the workflow records that as `knob_limited`, as the paper reported.

Offline and rerun workarounds, each tested in tests/test_graphiti_system.py:
- telemetry off: `GRAPHITI_TELEMETRY_ENABLED=false` before graphiti_core is imported anywhere
  (graphiti_core/telemetry/telemetry.py reads it for every event; PostHog otherwise);
- `KuzuDriver` never sets `_database`, which `Graphiti.add_episode` reads as soon as a
  `group_id` is given (graphiti_core/graphiti.py `_resolve_request_scope`): set to the group id;
- `KuzuDriver.build_indices_and_constraints()` is a no-op (graphiti_core/driver/kuzu_driver.py),
  so the full-text indexes every BM25 channel queries (`QUERY_FTS_INDEX`) would not exist and
  search would fail: `prepare` creates them from `get_fulltext_indices(GraphProvider.KUZU)`;
- `extract_edges` asks for `max_tokens=16384` whatever the client says
  (graphiti_core/utils/maintenance/edge_operations.py) and `OpenAIGenericClient` defaults to
  16384: at least the ingest model's whole window, which vLLM refuses. Every request's
  max_tokens is capped at `MAX_TOKENS`;
- Graphiti sends a call whose answer is empty or not JSON up to 4 times, with 5-120 s random
  waits (graphiti_core/llm_client/client.py `_generate_response_with_retry`), but the retry is
  the identical request, which the call cache answers identically: the retry only sleeps. The
  client sends each request once; a failed paper is retried by the workflow;
- the default client (`OpenAIClient`) speaks the Responses API, which the endpoint does not
  serve: `OpenAIGenericClient(structured_output_mode="json_schema")` (chat completions);
- `LLMConfig`'s default temperature is 1: 0 here, so a model call is reproducible;
- the episode's `reference_time` is the fixed `REFERENCE_TIME` (it is in the extraction
  prompts), not the wall clock, so a rerun sends identical prompts;
- Graphiti puts the group's last 10 episodes into its extraction, deduplication and summary
  prompts (`retrieve_episodes(last_n=RELEVANT_SCHEMA_LIMIT)` in `add_episode`); with whole
  papers as episodes that is up to ten papers per prompt, beyond a local model's window. Each paper is extracted alone
  (`previous_episode_uuids=[]`); entities and facts are still deduplicated against the whole
  graph, as Graphiti does.
- Search handles open the Kuzu file read-only (several restore jobs may search one store).

Papers are ingested one after another (`concurrent_papers = False`): Graphiti deduplicates every
new node and edge against what the graph already holds, so two papers ingested at once would
see each other's half-written state depending on thread timing; their prompts, and hence the
call cache and the store, would differ from run to run. In order, a rerun on a warm call cache
sends the identical prompts (zero model calls) and writes the same graph. One Graphiti instance
and one Kuzu connection are driven by a private event loop per store.

Exported items (`items()`), ids stable across reruns (Graphiti's uuids are random): entity edges
(kind "edge", the fact string), entity nodes (kind "node", "name: summary") and episodes (kind
"episode", the paper's exact text, span = the whole paper); `paper_ids` are the papers whose
episodes produced (edges) or mention (nodes) the item.

`search_`'s own default recipe, COMBINED_HYBRID_SEARCH_CROSS_ENCODER, reranks every channel with
the cross-encoder: one chat call per candidate (episodes included, i.e. whole papers) asking for
logprobs under OpenAI-tokenizer `logit_bias` ids, meaningless for a local model and minutes per
query on CPU. The RRF recipe is used instead; `OpenAIRerankerClient` is still passed, pointed at
the endpoint (so nothing can reach OpenAI), and never called.

Left as is: Graphiti's uuids stay random. The prompts name candidates by position, never by
uuid, and candidates come back ordered by score, so reruns send the same prompts (the tests
check it across processes); exact score ties between different candidates could in principle
be ordered differently by Kuzu.
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import hashlib
import os
import threading
import warnings
from collections.abc import Coroutine
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from srb.data.schema import Paper
from srb.systems.store import Endpoint, Item, StoreHandle, StoreSystem

# before graphiti_core is first imported anywhere in the process (it reads this per event)
os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"

GROUP_ID = "corpus"  # one graph partition for the corpus
DB_FILE = "graph.kuzu"
SOURCE_DESCRIPTION = "paper"
REFERENCE_TIME = _dt.datetime(2026, 1, 1, tzinfo=_dt.UTC)  # every episode's valid_at
MAX_TOKENS = 4096  # cap on every chat request's max_tokens (see the module docstring)
REQUEST_TIMEOUT_S = 3600.0  # a long prompt on a CPU model takes minutes; not re-sent on timeout
API_KEY = "srb-local-endpoint"
#: graphiti_core.search.search_config.DEFAULT_SEARCH_LIMIT (asserted by the tests)
DEFAULT_SEARCH_LIMIT = 10
MODALITIES = ("native", "kg_only")

T = TypeVar("T")


def _environment() -> None:
    os.environ["GRAPHITI_TELEMETRY_ENABLED"] = "false"


def item_id(kind: str, text: str, paper_ids: tuple[str, ...]) -> str:
    """A stable id for an exported item (Graphiti's own ids are random uuids)."""
    key = "\0".join((kind, text, *paper_ids))
    return "graphiti-" + hashlib.sha256(key.encode()).hexdigest()[:16]


def node_text(name: str, summary: str | None) -> str:
    summary = (summary or "").strip()
    return f"{name}: {summary}" if summary else name


def search_config(modality: str, limit: int) -> Any:
    """Graphiti's COMBINED_HYBRID_SEARCH_RRF, `limit` per channel, no community channel;
    kg_only also without the episode channel."""
    from graphiti_core.search.search_config_recipes import COMBINED_HYBRID_SEARCH_RRF

    if modality not in MODALITIES:
        raise ValueError(f"graphiti has no modality {modality!r} ({', '.join(MODALITIES)})")
    if limit < 1:
        raise ValueError(f"graphiti: the search limit must be >= 1, not {limit}")
    update: dict[str, Any] = {"limit": int(limit), "community_config": None}
    if modality == "kg_only":
        update["episode_config"] = None
    # a deep copy: Graphiti.search() itself mutates its module-level recipes' limit
    return COMBINED_HYBRID_SEARCH_RRF.model_copy(deep=True).model_copy(update=update)


def fulltext_index_queries() -> list[str]:
    from graphiti_core.driver.driver import GraphProvider
    from graphiti_core.graph_queries import get_fulltext_indices

    return list(get_fulltext_indices(GraphProvider.KUZU))


def existing_fulltext_indexes(db: Any) -> set[tuple[str, str]]:
    """(table, index name) of the Kuzu database's full-text indexes."""
    import kuzu

    conn = kuzu.Connection(db)
    try:
        result = conn.execute("CALL SHOW_INDEXES() RETURN *")
        rows = list(result.rows_as_dict())  # type: ignore[union-attr]
    finally:
        conn.close()
    return {
        (r["table_name"], r["index_name"])
        for r in rows
        if str(r.get("index_type", "")).upper() == "FTS"
    }


def _llm_client(endpoint: Endpoint) -> Any:
    from graphiti_core.llm_client.config import LLMConfig
    from graphiti_core.llm_client.openai_generic_client import OpenAIGenericClient
    from openai import AsyncOpenAI

    class EndpointClient(OpenAIGenericClient):
        """OpenAIGenericClient for the caching endpoint: no request asks for more than
        MAX_TOKENS, and an unparseable answer is not re-sent (see the module docstring)."""

        async def _generate_response_with_retry(
            self,
            messages: Any,
            response_model: Any = None,
            max_tokens: int | None = None,
            *args: Any,
            **kwargs: Any,
        ) -> dict[str, Any]:
            cap = self.max_tokens
            max_tokens = cap if max_tokens is None else min(int(max_tokens), cap)
            return await self._generate_response(
                messages, response_model, max_tokens, *args, **kwargs
            )

    config = LLMConfig(
        api_key=API_KEY,
        model=endpoint.chat_model,
        small_model=endpoint.chat_model,
        base_url=endpoint.base_url,
        temperature=0,
        max_tokens=MAX_TOKENS,
    )
    client = AsyncOpenAI(
        api_key=API_KEY, base_url=endpoint.base_url, timeout=REQUEST_TIMEOUT_S, max_retries=0
    )
    return EndpointClient(
        config, client=client, max_tokens=MAX_TOKENS, structured_output_mode="json_schema"
    )


def _embedder(endpoint: Endpoint) -> Any:
    from graphiti_core.embedder.openai import OpenAIEmbedder, OpenAIEmbedderConfig

    return OpenAIEmbedder(
        OpenAIEmbedderConfig(
            api_key=API_KEY,
            base_url=endpoint.base_url,
            embedding_model=endpoint.embedding_model,
            embedding_dim=endpoint.embedding_dims,
        )
    )


def _cross_encoder(endpoint: Endpoint) -> Any:
    from graphiti_core.cross_encoder.openai_reranker_client import OpenAIRerankerClient
    from graphiti_core.llm_client.config import LLMConfig

    return OpenAIRerankerClient(
        LLMConfig(
            api_key=API_KEY,
            model=endpoint.chat_model,
            small_model=endpoint.chat_model,
            base_url=endpoint.base_url,
            temperature=0,
        )
    )


def _kuzu_driver(path: Path, read_only: bool) -> Any:
    import kuzu
    from graphiti_core.driver.kuzu_driver import KuzuDriver

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "Kuzu backend is deprecated"
        if not read_only:
            driver = KuzuDriver(db=str(path))
        else:
            # KuzuDriver opens its path read-write and writes its schema; open the (finished)
            # store read-only instead, on a driver built over a throwaway in-memory database
            driver = KuzuDriver(db=":memory:")
            driver.client.close()
            driver.db.close()
            driver.db = kuzu.Database(str(path), read_only=True)
            driver.client = kuzu.AsyncConnection(driver.db, max_concurrent_queries=1)
    # KuzuDriver never sets it; add_episode(group_id=...) reads it (see the module docstring)
    driver._database = GROUP_ID
    driver.default_group_id = GROUP_ID
    return driver


class GraphitiRuntime:
    """One Graphiti instance on one Kuzu database, with the event loop that drives it."""

    def __init__(self, path: Path, endpoint: Endpoint, read_only: bool = False):
        _environment()
        from graphiti_core import Graphiti

        self.path = path
        self.driver = _kuzu_driver(path, read_only)
        self.graphiti = Graphiti(
            graph_driver=self.driver,
            llm_client=_llm_client(endpoint),
            embedder=_embedder(endpoint),
            cross_encoder=_cross_encoder(endpoint),
        )
        self.loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._closed = False

    def run(self, coro: Coroutine[Any, Any, T]) -> T:
        with self._lock:
            if self._closed:
                coro.close()
                raise RuntimeError(f"graphiti: the store {self.path} is closed")
            return self.loop.run_until_complete(coro)

    def create_fulltext_indexes(self) -> None:
        """The Kuzu full-text indexes Graphiti's BM25 channels query (idempotent)."""
        import kuzu

        have = existing_fulltext_indexes(self.driver.db)
        conn = kuzu.Connection(self.driver.db)
        try:
            for query in fulltext_index_queries():
                table, name = [s.strip(" '") for s in query.split("(", 1)[1].split(",")[:2]]
                if (table, name) not in have:
                    conn.execute(query)
        finally:
            conn.close()

    async def _close_clients(self) -> None:
        g = self.graphiti
        for client in (g.llm_client, g.embedder, g.cross_encoder):
            http = getattr(client, "client", None)
            if http is not None and hasattr(http, "close"):
                await http.close()
        await g.close()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            try:
                self.loop.run_until_complete(self._close_clients())
                self.loop.run_until_complete(self.loop.shutdown_asyncgens())
            finally:
                self.loop.close()
                self.driver.client.close()
                self.driver.db.close()


EPISODES_QUERY = (
    "MATCH (e:Episodic) WHERE e.group_id = $g "
    "RETURN e.uuid AS uuid, e.name AS name, e.content AS content"
)
NODES_QUERY = (
    "MATCH (n:Entity) WHERE n.group_id = $g "
    "OPTIONAL MATCH (e:Episodic)-[:MENTIONS]->(n) "
    "RETURN n.uuid AS uuid, n.name AS name, n.summary AS summary, collect(e.name) AS papers"
)
#: an entity edge is stored as a RelatesToNode_ between two RELATES_TO edges (kuzu_driver.py)
EDGES_QUERY = (
    "MATCH (r:RelatesToNode_) WHERE r.group_id = $g "
    "RETURN r.uuid AS uuid, r.fact AS fact, r.episodes AS episodes"
)


def _rows(db: Any, query: str, **params: Any) -> list[dict[str, Any]]:
    import kuzu

    conn = kuzu.Connection(db)
    try:
        result = conn.execute(query, parameters=params)
        return list(result.rows_as_dict())  # type: ignore[union-attr]
    finally:
        conn.close()


def export_items(db: Any) -> dict[str, Item]:
    """Every edge, node and episode of the corpus group, keyed by its Graphiti uuid."""
    episodes = _rows(db, EPISODES_QUERY, g=GROUP_ID)
    paper_of = {e["uuid"]: e["name"] for e in episodes}
    nodes = _rows(db, NODES_QUERY, g=GROUP_ID)
    edges = _rows(db, EDGES_QUERY, g=GROUP_ID)
    found: dict[str, Item] = {}
    for e in edges:
        papers = tuple(sorted({paper_of[u] for u in e["episodes"] or [] if u in paper_of}))
        text = e["fact"] or ""
        found[e["uuid"]] = Item(item_id("edge", text, papers), text, papers, "edge")
    for n in nodes:
        papers = tuple(sorted({p for p in n["papers"] or [] if p}))
        text = node_text(n["name"] or "", n["summary"])
        found[n["uuid"]] = Item(item_id("node", text, papers), text, papers, "node")
    for e in episodes:
        text = e["content"] or ""
        papers = (e["name"],)
        found[e["uuid"]] = Item(
            item_id("episode", text, papers), text, papers, "episode", span=(0, len(text))
        )
    return found


class GraphitiHandle(StoreHandle):
    def __init__(self, runtime: GraphitiRuntime):
        self.runtime = runtime
        self._by_uuid: dict[str, Item] | None = None

    def _index(self) -> dict[str, Item]:
        if self._by_uuid is None:
            self._by_uuid = export_items(self.runtime.driver.db)
        return self._by_uuid

    def items(self) -> list[Item]:
        unique = {i.item_id: i for i in self._index().values()}
        return [unique[k] for k in sorted(unique)]

    def search(self, query: str, modality: str, knob: int) -> list[Item]:
        config = search_config(modality, knob)
        graphiti = self.runtime.graphiti
        results = self.runtime.run(graphiti.search_(query, config=config, group_ids=[GROUP_ID]))
        by_uuid = self._index()
        out: list[Item] = []
        seen: set[str] = set()
        channels = (
            (results.edges, results.edge_reranker_scores),
            (results.nodes, results.node_reranker_scores),
            (results.episodes, results.episode_reranker_scores),
        )
        for found, scores in channels:
            ranked = len(scores) == len(found)
            for rank, obj in enumerate(found):
                item = by_uuid.get(obj.uuid)
                if item is None or item.item_id in seen:
                    continue
                seen.add(item.item_id)
                score = float(scores[rank]) if ranked else 1.0 / (rank + 1)
                out.append(replace(item, score=score))
        return out

    def native_count(self) -> int:
        """Kuzu's own count of the group's edges, entity nodes and episodes."""
        db = self.runtime.driver.db
        return sum(
            _rows(db, f"MATCH (x:{label}) WHERE x.group_id = $g RETURN count(*) AS n", g=GROUP_ID)[
                0
            ]["n"]
            for label in ("RelatesToNode_", "Entity", "Episodic")
        )

    def close(self) -> None:
        self.runtime.close()


class GraphitiSystem(StoreSystem):
    name = "graphiti"
    description = (
        "Graphiti: each paper one text episode, LLM-extracted entity/fact graph in embedded "
        "Kuzu, hybrid RRF search over edges, nodes (and episodes, native)"
    )
    modalities = MODALITIES
    native_knob = DEFAULT_SEARCH_LIMIT  # SearchConfig.limit's default, per channel
    knob_name = "limit"
    requirements = "graphiti.txt"
    #: see the module docstring: papers go in one after another
    concurrent_papers = False

    def __init__(self) -> None:
        self._runtimes: dict[Path, GraphitiRuntime] = {}
        self._lock = threading.Lock()

    @staticmethod
    def db_path(store_dir: Path) -> Path:
        return Path(store_dir) / DB_FILE

    def _runtime(self, store_dir: Path, endpoint: Endpoint) -> GraphitiRuntime:
        with self._lock:
            if store_dir not in self._runtimes:
                Path(store_dir).mkdir(parents=True, exist_ok=True)
                runtime = GraphitiRuntime(self.db_path(store_dir), endpoint)
                runtime.create_fulltext_indexes()
                runtime.run(runtime.graphiti.build_indices_and_constraints())
                self._runtimes[store_dir] = runtime
            return self._runtimes[store_dir]

    def prepare(self, store_dir: Path, endpoint: Endpoint) -> None:
        self._runtime(store_dir, endpoint)

    def ingest_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> int:
        from graphiti_core.nodes import EpisodeType

        runtime = self._runtime(store_dir, endpoint)
        result = runtime.run(
            runtime.graphiti.add_episode(
                name=paper.id,
                episode_body=paper.text,
                source_description=SOURCE_DESCRIPTION,
                reference_time=REFERENCE_TIME,
                source=EpisodeType.text,
                group_id=GROUP_ID,
                previous_episode_uuids=[],
            )
        )
        return len(result.nodes) + len(result.edges) + 1  # + the episode itself

    def forget_paper(self, paper: Paper, store_dir: Path, endpoint: Endpoint) -> None:
        """Remove the paper's episode (and what only it mentions) if a failed attempt saved it;
        Graphiti saves an episode's nodes and edges at the end of add_episode, so a failure
        during extraction leaves nothing."""
        runtime = self._runtime(store_dir, endpoint)
        found = _rows(
            runtime.driver.db,
            "MATCH (e:Episodic) WHERE e.group_id = $g AND e.name = $n RETURN e.uuid AS uuid",
            g=GROUP_ID,
            n=paper.id,
        )
        for row in found:
            runtime.run(runtime.graphiti.remove_episode(row["uuid"]))

    def finish(self, store_dir: Path, endpoint: Endpoint) -> None:
        with self._lock:
            runtime = self._runtimes.pop(store_dir, None)
        if runtime is not None:
            runtime.close()

    def open(self, store_dir: Path, endpoint: Endpoint) -> StoreHandle:
        path = self.db_path(store_dir)
        if not path.is_file():
            raise FileNotFoundError(f"graphiti: no Kuzu database {path}")
        return GraphitiHandle(GraphitiRuntime(path, endpoint, read_only=True))


SYSTEM = GraphitiSystem()
