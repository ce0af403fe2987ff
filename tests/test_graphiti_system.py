"""Graphiti through its real library (graphiti-core, embedded Kuzu) and the caching endpoint.

The chat model behind the endpoint is a stand-in that answers each of Graphiti's prompts with
schema-valid JSON derived from the request (entities = the capitalised words of the episode,
facts = the sentences naming two of them, no duplicates, summaries = the first sentence naming
the entity); embeddings are the real packaged MiniLM. What is tested is ours: the adapter, the
workarounds, export, search per modality, warm re-ingest and the doctor's planted fault.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from srb.data.canonical import iter_jsonl
from srb.data.schema import Paper, Question
from srb.doctor import DoctorError
from srb.ingest import read_units
from srb.store import StoreRanker
from srb.store_doctor import StoreDoctor, run_store_doctor
from srb.systems.graphiti import (
    DB_FILE,
    GROUP_ID,
    MAX_TOKENS,
    REFERENCE_TIME,
    GraphitiRuntime,
    GraphitiSystem,
    existing_fulltext_indexes,
    fulltext_index_queries,
)
from srb.systems.store import Endpoint
from tests.stand_in_chat import (
    StandInChat,
    chat_completion,
    ingest_with_stand_in,
    stand_in_endpoint,
)

REPO = Path(__file__).resolve().parents[1]


def _between(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0].strip()


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=\.)\s+", text.strip()) if s]


def _capitalised(text: str) -> list[str]:
    return list(dict.fromkeys(re.findall(r"\b[A-Z][A-Za-z]+\b", text)))


def _mentions(name: str, sentence: str) -> bool:
    return re.search(rf"\b{re.escape(name)}\b", sentence) is not None


class GraphBackend(StandInChat):
    """Answers Graphiti's prompts, chosen by the response schema each request names."""

    def __init__(self, broken: bool = False) -> None:
        super().__init__()
        self.broken = broken  # answer everything with text that is not JSON

    def answer(self, schema: str, user: str) -> dict:
        if schema == "ExtractedEntities":
            names = _capitalised(_between(user, "<TEXT>", "</TEXT>"))
            return {"extracted_entities": [{"name": n, "entity_type_id": 0} for n in names]}
        if schema == "ExtractedEdges":
            text = _between(user, "<CURRENT_MESSAGE>", "</CURRENT_MESSAGE>")
            names = [n["name"] for n in json.loads(_between(user, "<ENTITIES>", "</ENTITIES>"))]
            edges = []
            for s in _sentences(text):
                inside = [n for n in names if _mentions(n, s)]
                if len(inside) >= 2:
                    edges.append({"source_entity_name": inside[0], "target_entity_name": inside[1],
                                  "relation_type": "RELATES_TO", "fact": s})  # fmt: skip
            return {"edges": edges}
        if schema == "NodeResolutions":
            found = json.loads(_between(user, "<ENTITIES>", "</ENTITIES>"))
            return {"entity_resolutions": [{"id": e["id"], "name": e["name"],
                                            "duplicate_candidate_id": -1} for e in found]}  # fmt: skip
        if schema == "EdgeDuplicate":
            return {"duplicate_facts": [], "contradicted_facts": []}
        if schema == "EdgeTimestamps":
            return {"valid_at": None, "invalid_at": None}
        if schema == "SummarizedEntities":
            lines = _between(user, "<MESSAGES>", "</MESSAGES>").splitlines()
            text = " ".join(t for t in map(json.loads, lines) if isinstance(t, str))
            entities = json.loads(_between(user, "<ENTITIES>", "</ENTITIES>"))
            summaries = []
            for e in entities:
                first = next((s for s in _sentences(text) if _mentions(e["name"], s)), e["name"])
                summaries.append({"name": e["name"], "summary": first})
            return {"summaries": summaries}
        raise ValueError(f"the stand-in has no answer for the schema {schema!r}")

    def reply(self, body: dict) -> dict:
        user = body["messages"][-1]["content"]
        schema = body["response_format"]["json_schema"]["name"]
        content = "no JSON here" if self.broken else json.dumps(self.answer(schema, user))
        return chat_completion(content, len(user.split()), len(content) // 4)


PAPERS = (
    Paper("pa", "", "Aspirin lowered thirty-day mortality in the Boston trial. "
                    "The trial enrolled four hundred adults with stable angina. "
                    "Blood pressure did not change between the two arms."),
    Paper("pb", "", "Statins reduced LDL cholesterol by a third after one year. "
                    "Unlike Aspirin in Boston, the tablet was taken daily. "
                    "Muscle pain was reported by very few participants overall."),
)  # fmt: skip
QUESTIONS = (
    Question("q1", "Did aspirin lower mortality?", "", (), ("pa",)),
    Question("q2", "Did statins reduce LDL cholesterol?", "", (), ("pb",)),
)


def run_ingest(
    tmp: Path, cache: Path, name: str, papers=PAPERS, backend: GraphBackend | None = None
) -> tuple[dict, GraphBackend, Path]:
    backend = backend or GraphBackend()
    record, out = ingest_with_stand_in(GraphitiSystem(), papers, tmp, cache, name, backend)
    return record, backend, out


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("graphiti")
    cache = tmp / "cache"
    cold = run_ingest(tmp, cache, "cold")
    warm = run_ingest(tmp, cache, "warm")
    return tmp, cache, cold, warm


@pytest.fixture(scope="module")
def searched(ingested):
    """An opened store on a live endpoint (search embeds the query through it)."""
    tmp, cache, (_, _, out), _ = ingested
    backend = GraphBackend()
    with stand_in_endpoint(tmp, cache, backend) as (endpoint, _):
        system = GraphitiSystem()
        handle = system.open(out / "store", endpoint)
        try:
            yield system, handle, endpoint, backend, out
        finally:
            handle.close()


def exported(out: Path) -> list[dict]:
    return [r for _, r in iter_jsonl(out / "items.jsonl")]


# ------------------------------------------------------------------------ the adapter's shape


def test_the_system_is_registered_with_graphitis_own_default_limit() -> None:
    from graphiti_core.search.search_config import DEFAULT_SEARCH_LIMIT, SearchConfig

    from srb.systems import get_store_system

    system = get_store_system("graphiti")
    assert isinstance(system, GraphitiSystem)
    assert system.modalities == ("native", "kg_only") and system.knob_name == "limit"
    assert system.native_knob == DEFAULT_SEARCH_LIMIT == SearchConfig().limit
    assert not hasattr(system, "bm25_fused") and system.concurrent_papers is False
    system.check_installed()  # envs/graphiti.txt matches the environment


def test_importing_the_module_turns_telemetry_off_before_graphiti_is_imported() -> None:
    """In a fresh interpreter without pytest (graphiti silences telemetry under pytest)."""
    code = (
        "import sys\n"
        "import srb.systems.graphiti\n"
        "assert 'graphiti_core' not in sys.modules, 'graphiti imported at module import'\n"
        "from graphiti_core.telemetry.telemetry import is_telemetry_enabled\n"
        "assert 'pytest' not in sys.modules\n"
        "off = is_telemetry_enabled()\n"
        "import os; os.environ['GRAPHITI_TELEMETRY_ENABLED'] = 'true'\n"
        "print(off, is_telemetry_enabled())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "GRAPHITI_TELEMETRY_ENABLED"}
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True"]  # off by our env var; on without it


# --------------------------------------------------------------------------------- ingest


def test_ingest_builds_a_graph_of_both_papers(ingested) -> None:
    _, _, (record, _, out), _ = ingested
    assert record["papers_failed"] == 0 and record["papers_without_items"] == []
    items = exported(out)
    kinds = Counter(r["kind"] for r in items)
    assert kinds["episode"] == 2 and kinds["node"] >= 4 and kinds["edge"] >= 2
    assert record["items_stored"] == len(items) and record["items_by_kind"] == dict(
        sorted(kinds.items())
    )
    episodes = {r["paper_id"]: r for r in items if r["kind"] == "episode"}
    for paper in PAPERS:  # the episode body is the paper's exact text, spanning all of it
        ep = episodes[paper.id]
        assert ep["text"] == paper.text and (ep["start"], ep["end"]) == (0, len(paper.text))
        assert ep["paper_ids"] == [paper.id]
    edges = {r["text"]: r["paper_ids"] for r in items if r["kind"] == "edge"}
    assert edges["Aspirin lowered thirty-day mortality in the Boston trial."] == ["pa"]
    assert edges["Unlike Aspirin in Boston, the tablet was taken daily."] == ["pb"]
    nodes = {r["text"].split(":")[0]: r for r in items if r["kind"] == "node"}
    # one Aspirin node for the corpus, deduplicated across papers and mentioned by both
    assert [r["text"] for r in items if r["text"].startswith("Aspirin:")] == [
        nodes["Aspirin"]["text"]
    ]
    assert nodes["Aspirin"]["paper_ids"] == ["pa", "pb"] and nodes["Statins"]["paper_ids"] == ["pb"]
    assert nodes["Statins"]["text"].startswith("Statins: Statins reduced LDL cholesterol")
    assert [r["id"] for r in items] == sorted(r["id"] for r in items)
    assert len({r["id"] for r in items}) == len(items)


def test_every_model_call_is_replayable_and_fits_the_window(ingested) -> None:
    _, _, (record, backend, _), _ = ingested
    bodies = backend.bodies
    prompts = Counter(b["response_format"]["json_schema"]["name"] for b in bodies)
    # pa: entities, facts, 1 fact date, summaries; pb: the same with 2 fact dates, plus the
    # deduplication of its Aspirin-Boston fact against pa's
    assert prompts == {"ExtractedEntities": 2, "ExtractedEdges": 2, "EdgeTimestamps": 3,
                       "EdgeDuplicate": 1, "SummarizedEntities": 2}  # fmt: skip
    assert record["model_calls"]["model_calls"] == len(bodies) == 10
    assert all(b["response_format"]["type"] == "json_schema" for b in bodies)
    assert all(b["model"] == "stand-in" and b["temperature"] == 0 for b in bodies)
    # extract_edges asks for 16384 tokens itself: capped like every other request
    assert all(b["max_tokens"] <= MAX_TOKENS for b in bodies)
    edge_prompts = [b["messages"][-1]["content"] for b in bodies
                    if b["response_format"]["json_schema"]["name"] == "ExtractedEdges"]  # fmt: skip
    assert edge_prompts and all(str(REFERENCE_TIME) in p for p in edge_prompts)
    # each paper is extracted alone: no prompt about pb carries pa's text as a previous episode
    pb_bodies = [b for b in bodies if "Statins reduced" in json.dumps(b)]
    pb_schemas = {b["response_format"]["json_schema"]["name"] for b in pb_bodies}
    assert {"ExtractedEntities", "ExtractedEdges", "SummarizedEntities"} <= pb_schemas
    assert not any(json.dumps(PAPERS[0].text)[1:-1] in json.dumps(b) for b in pb_bodies)


def test_warm_reingest_makes_no_model_call_and_exports_identical_items(ingested) -> None:
    _, _, (cold, _, cold_out), (warm, backend, warm_out) = ingested
    assert backend.bodies == []
    assert warm["model_calls"]["model_calls"] == 0
    assert warm["model_calls"]["chat_requests"] == cold["model_calls"]["chat_requests"]
    assert warm["model_calls"]["prompt_tokens"] == cold["model_calls"]["prompt_tokens"]
    assert (warm_out / "items.jsonl").read_bytes() == (cold_out / "items.jsonl").read_bytes()


def test_an_unparseable_answer_is_sent_once_and_fails_the_paper(tmp_path) -> None:
    """Graphiti would resend it 3 more times after 5-120 s waits; the cache would answer the
    same each time."""
    backend = GraphBackend(broken=True)
    started = time.perf_counter()
    # the one paper failed, so nothing was extracted at all: the ingest fails naming both
    with pytest.raises(RuntimeError, match=r"1 invalid JSON answer.*JSONDecodeError"):
        run_ingest(tmp_path, tmp_path / "cache", "broken", PAPERS[:1], backend)
    assert time.perf_counter() - started < 30
    assert len(backend.bodies) == 1


# ----------------------------------------------------------------------------- workarounds


def test_prepare_creates_the_fulltext_indexes_graphiti_skips_on_kuzu(ingested) -> None:
    import kuzu
    from graphiti_core.driver.kuzu_driver import KuzuDriver

    _, _, (_, _, out), _ = ingested
    wanted = {tuple(s.strip(" '") for s in q.split("(", 1)[1].split(",")[:2])
              for q in fulltext_index_queries()}  # fmt: skip
    assert len(wanted) == 4
    db = kuzu.Database(str(out / "store" / DB_FILE), read_only=True)
    try:
        assert existing_fulltext_indexes(db) == wanted
    finally:
        db.close()
    with pytest.warns(DeprecationWarning):
        bare = KuzuDriver(db=":memory:")
    import asyncio

    asyncio.run(bare.build_indices_and_constraints())
    assert existing_fulltext_indexes(bare.db) == set()  # what Graphiti alone leaves


def test_the_driver_database_is_the_group_id(tmp_path) -> None:
    from graphiti_core import Graphiti
    from graphiti_core.driver.kuzu_driver import KuzuDriver

    endpoint = Endpoint("http://127.0.0.1:9/v1", "stand-in", "minilm", 384)  # never called
    runtime = GraphitiRuntime(tmp_path / DB_FILE, endpoint)
    try:
        assert runtime.driver._database == GROUP_ID
        _, driver, _ = runtime.graphiti._resolve_request_scope(GROUP_ID)
        assert driver is runtime.driver
        with pytest.warns(DeprecationWarning):
            bare = KuzuDriver(db=":memory:")
        plain = Graphiti(graph_driver=bare, llm_client=runtime.graphiti.llm_client,
                         embedder=runtime.graphiti.embedder,
                         cross_encoder=runtime.graphiti.cross_encoder)  # fmt: skip
        with pytest.raises(AttributeError, match="_database"):
            plain._resolve_request_scope(GROUP_ID)  # what add_episode(group_id=...) meets
    finally:
        runtime.close()


# ---------------------------------------------------------------------------------- search


def test_native_returns_episodes_and_kg_only_never_does(searched) -> None:
    _, handle, _, backend, out = searched
    known = {r["id"]: r for r in exported(out)}
    for q in QUESTIONS:
        native = handle.search(q.question, "native", 10)
        kg = handle.search(q.question, "kg_only", 10)
        assert any(i.kind == "episode" for i in native)
        assert kg and all(i.kind in ("edge", "node") for i in kg)
        for found in (native, kg):
            assert all(i.item_id in known and known[i.item_id]["text"] == i.text for i in found)
            order = {"edge": 0, "node": 1, "episode": 2}
            assert [order[i.kind] for i in found] == sorted(order[i.kind] for i in found)
            for kind in order:
                scores = [i.score for i in found if i.kind == kind]
                assert scores == sorted(scores, reverse=True) and all(s > 0 for s in scores)
    top = handle.search("Did aspirin lower mortality?", "native", 10)
    assert [i.paper_ids for i in top if i.kind == "episode"][0] == ("pa",)
    assert backend.bodies == []  # RRF search: embeddings only, no chat call


def test_the_limit_applies_per_channel(searched) -> None:
    _, handle, _, _, _ = searched
    query = "Did Aspirin lower mortality in Boston, unlike statins?"
    for modality in ("native", "kg_only"):
        one, five = handle.search(query, modality, 1), handle.search(query, modality, 5)
        assert len(one) < len(five)
        assert max(Counter(i.kind for i in one).values()) == 1  # at most 1 per channel
        assert len(one) >= 2  # ...but one from each channel: the budget overshoots
        assert handle.search(query, modality, 5) == five  # deterministic
    with pytest.raises(ValueError, match="modality"):
        handle.search(query, "dense", 5)
    assert handle.search("what's (the) \"effect\" of aspirin's dose?", "native", 5)


def test_a_second_process_can_search_the_store_while_it_is_open(searched) -> None:
    _, handle, endpoint, _, out = searched
    code = (
        "import sys; from pathlib import Path\n"
        "from srb.systems.graphiti import GraphitiSystem\n"
        "from srb.systems.store import Endpoint\n"
        "h = GraphitiSystem().open(Path(sys.argv[1]), Endpoint(*sys.argv[2:4], 'minilm', 384))\n"
        "print(len(h.items())); h.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(out / "store"), endpoint.base_url,
                           "stand-in"], cwd=REPO, capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.split()[-1]) == len(handle.items()) == len(exported(out))


# ---------------------------------------------------------------------------------- doctor


def doctor(tmp: Path, cache: Path, store: Path, out: Path) -> dict:
    system = GraphitiSystem()
    with stand_in_endpoint(tmp, cache, GraphBackend()) as (endpoint, _):
        handle = system.open(store, endpoint)
        try:
            ranker = StoreRanker(system, handle, read_units(out / "items.jsonl"))
            doc = StoreDoctor(ranker, list(QUESTIONS), ["native", "200"], 0.25, 0.0)
            n = sum(1 for _ in iter_jsonl(out / "items.jsonl"))
            return run_store_doctor("t", doc, json.loads((out / "ingest.json").read_text()), n,
                                    2, out / "doctor.json")  # fmt: skip
        finally:
            handle.close()


def test_doctor_passes_the_real_store(ingested) -> None:
    tmp, cache, (_, _, out), _ = ingested
    result = doctor(tmp, cache, out / "store", out)
    assert result["ok"], result
    checks = {c["name"]: c for c in result["checks"]}
    assert checks["channels"]["ok"] is None  # Graphiti fuses its own channels


def test_doctor_catches_a_store_that_holds_an_empty_graph(ingested) -> None:
    """Kuzu opens (and creates) any path: pointed at an empty graph, Graphiti searches it,
    finds nothing and raises nothing."""
    tmp, cache, (_, _, out), _ = ingested
    empty = tmp / "moved"
    system = GraphitiSystem()
    endpoint = Endpoint("http://127.0.0.1:9/v1", "stand-in", "minilm", 384)  # never called
    system.prepare(empty, endpoint)
    system.finish(empty, endpoint)
    assert (empty / DB_FILE).is_file()
    with pytest.raises(DoctorError) as err:
        doctor(tmp, cache, empty, out)
    assert "check 1 (probe_context)" in str(err.value)
    assert "check 4 (item_count): item counts disagree" in str(err.value)


def test_open_refuses_a_directory_without_the_graph(tmp_path) -> None:
    endpoint = Endpoint("http://127.0.0.1:9/v1", "stand-in", "minilm", 384)
    with pytest.raises(FileNotFoundError, match=DB_FILE):
        GraphitiSystem().open(tmp_path, endpoint)
    assert not (tmp_path / DB_FILE).exists()  # and did not create one
