"""Theoria and Prism: the algorithms on hand-made inputs with known answers, then the real
pipeline (extraction, store, layers) with a stand-in chat behind the real caching endpoint and
the packaged MiniLM for embeddings."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from srb.data.canonical import load_canonical
from srb.data.schema import Paper
from srb.errors import ConfigError
from srb.store import memory_slice
from srb.systems.prism import PrismSystem
from srb.systems.theoria import TheoriaSystem
from srb.theoria.communities import knn_edges, leiden
from srb.theoria.db import TheoriaDB, to_blob
from srb.theoria.extract import locate
from srb.theoria.options import TheoriaOptions
from srb.theoria.raptor import ward_clusters
from srb.theoria.retrieve import LEVEL_FLOOR, level_weight
from srb.theoria.theories import confidence, update_theories
from tests.stand_in_chat import ingest_with_stand_in
from tests.theoria_stand_in import TheoriaStandIn

CORPUS = Path(__file__).resolve().parents[1] / "resources/corpora/evidence-inference-ccby"


# ------------------------------------------------------------------ options and helpers


def test_unknown_option_is_named() -> None:
    with pytest.raises(ConfigError, match="chunk_size"):
        TheoriaOptions.from_config({"chunk_size": 10})
    with pytest.raises(ConfigError, match="match_cosine"):
        TheoriaOptions.from_config({"match_cosine": 0.9, "dedup_cosine": 0.8})
    assert TheoriaOptions.from_config({"knn_k": 4}).knn_k == 4


def test_quotes_are_located_exactly_or_not_at_all() -> None:
    text = "Intro.  The drug lowered\nblood   pressure by 5 mmHg. End."
    assert locate("Intro.", text, 100) is None  # too short to trust
    start, end = locate("The drug lowered blood pressure by 5 mmHg.", text, 100)
    assert text[start - 100 : end - 100] == "The drug lowered\nblood   pressure by 5 mmHg."
    assert locate("the DRUG lowered", text, 0) == (8, 24)
    assert locate("The drug raised blood pressure", text, 0) is None  # a paraphrase


def test_level_weight_rewards_a_peaked_level() -> None:
    assert level_weight(np.array([0.7]), 0.05) == 1.0
    assert level_weight(np.array([0.5, 0.5, 0.5]), 0.05) == LEVEL_FLOOR  # uniform: no signal
    # one clear winner: softmax([1, 0] / 0.05) puts e^-20 on the loser, entropy ~ 4e-8
    assert level_weight(np.array([1.0, 0.0]), 0.05) > 0.999


def test_confidence_thresholds() -> None:
    opts = TheoriaOptions()  # medium at 3 supports, high at 6, one level down per 2 contradictions
    assert confidence(1, 0, opts) == "low"
    assert confidence(3, 0, opts) == "medium"
    assert confidence(6, 0, opts) == "high"
    assert confidence(6, 2, opts) == "medium"
    assert confidence(1, 4, opts) == "low"


def _blobs(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    a = rng.normal(0, 0.05, (5, 8)) + np.eye(8)[0]
    b = rng.normal(0, 0.05, (5, 8)) + np.eye(8)[1]
    v = np.vstack([a, b])
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_ward_separates_two_blobs() -> None:
    labels = ward_clusters(_blobs(0), 2)
    assert len(set(labels[:5])) == 1 and len(set(labels[5:])) == 1
    assert labels[0] != labels[5]


def test_leiden_finds_two_cliques() -> None:
    edges = knn_edges(_blobs(1), k=4, min_cosine=0.5)
    assert all((a < 5) == (b < 5) for a, b in edges)  # no edge between the blobs at 0.5
    edges[(0, 5)] = 0.5  # one bridge
    membership = leiden(10, edges, resolution=1.0, seed=42)
    assert len(set(membership[:5])) == 1 and len(set(membership[5:])) == 1
    assert membership[0] != membership[5]


# ------------------------------------------------------------------ theories


class _Statements:
    """Stand-in for the statement call only (the theory logic is what is tested)."""

    def chat_text(self, prompt: str, max_tokens: int) -> str:
        return "THEORY: " + prompt.split("\n")[1]


def _db_with(tmp: Path, vectors: dict[str, np.ndarray]) -> TheoriaDB:
    db = TheoriaDB(tmp / "store")
    with db.transaction() as conn:
        for n, (iid, v) in enumerate(vectors.items()):
            conn.execute(
                "INSERT INTO evidence VALUES (?, 'p', 'numbers', 0, ?, NULL, NULL, 0, ?, ?)",
                (iid, f"claim {iid}", n, to_blob(v / np.linalg.norm(v))),
            )
    return db


def test_theories_seed_match_contradict_and_promote(tmp_path: Path) -> None:
    e = np.eye(4, dtype=np.float32)
    vectors = {
        "a": e[0],
        "b": e[0] + 0.1 * e[1],  # cosine 0.995 to a: supports a's theory
        "c": e[2],  # cosine 0 to a: seeds its own theory
        "d": e[0] + 0.2 * e[1],  # close to a, but contradicts a (a typed link)
        "f": e[0] + 0.05 * e[2],
    }
    db = _db_with(tmp_path, vectors)
    with db.transaction() as conn:
        conn.execute("INSERT INTO links VALUES ('d', 'a', 'contradicts', 0.9)")
    opts = TheoriaOptions(medium_support=3, high_support=6, demote_contradictions=1)
    counts = update_theories(db, _Statements(), opts, ["a", "b", "c", "f", "d"], batch=1)
    assert counts["seeded"] == 2 and counts["contradicted"] == 1 and counts["supported"] == 2
    rows = {
        r[0]: r[1:]
        for r in db.query("SELECT statement, support, contradict, confidence FROM theories")
    }
    assert rows["THEORY: claim a"] == (3, 1, "low")  # a, b, f support; d contradicts: demoted
    assert rows["THEORY: claim c"] == (1, 0, "low")
    events = db.query("SELECT event, before_, after_ FROM theory_events ORDER BY rowid")
    assert ("promoted", "low", "medium") in events and ("demoted", "medium", "low") in events


# ------------------------------------------------------------------ the pipeline


@pytest.fixture(scope="module")
def papers():
    corpus = load_canonical(CORPUS)
    chosen, _ = memory_slice(corpus, 3)
    return chosen


def _ingest(system, papers, tmp: Path, name: str, backend=None, cache: Path | None = None):
    system.configure({"theoria": {"link_min_cosine": 0.3, "concurrency": 2}})
    backend = backend or TheoriaStandIn()
    return (
        *ingest_with_stand_in(system, papers, tmp, cache or tmp / "cache", name, backend),
        backend,
    )


def test_ingest_builds_every_layer_and_accounts(papers, tmp_path: Path) -> None:
    record, out, backend = _ingest(TheoriaSystem(), papers, tmp_path, "theoria")
    report = record["system_report"]
    chunks = sum(p["chunks"] for p in _paper_rows(out))
    assert report["extraction_passes"] == 5 * chunks and report["failed_passes"] == 0
    counts = report["layers"]["counts"]
    assert counts["papers"] == 3 and counts["evidence"] > 0 and counts["raptor"] > 0
    assert counts["fine_communities"] >= 1 and counts["theories"] >= 1
    assert counts["links"] > 0  # the stand-in says "supports" for every first candidate
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    assert len(items) == record["items_stored"] == counts["evidence"] + counts["raptor"]
    # every claim and summary has its BM25 sparse vector in the same SQLite file
    assert counts["bm25_vectors"] == len(items)
    assert report["layers"]["bm25"]["docs"] == len(items) and report["layers"]["bm25"]["terms"] > 0
    by_id = {p.id: p for p in papers}
    assert all(i["start"] is None for i in items)  # claims are rewritten text, not spans
    spans = [i for i in items if i.get("provenance")]
    assert spans  # the stand-in quotes verbatim: its claims are located in the paper
    for i in spans:  # the stand-in's claim is the sentence it quotes the start of
        start, end = i["provenance"]
        quoted = by_id[i["paper_id"]].text[start:end]
        assert i["text"].startswith(" ".join(quoted.split()))
    calls = record["model_calls"]
    assert calls["model_calls"] == len(backend.bodies) and calls["failed_requests"] == 0


def _paper_rows(out: Path) -> list[dict]:
    conn = sqlite3.connect(out / "store/theoria.sqlite")
    rows = conn.execute("SELECT paper_id, chunks FROM papers").fetchall()
    conn.close()
    return [{"paper_id": p, "chunks": c} for p, c in rows]


def test_warm_reingest_is_free_and_identical_and_concurrency_changes_nothing(
    papers, tmp_path: Path
) -> None:
    cold, out1, _ = _ingest(TheoriaSystem(), papers, tmp_path, "a")
    warm_backend = TheoriaStandIn()
    warm, out2, _ = _ingest(TheoriaSystem(), papers, tmp_path, "b", warm_backend)
    assert warm["model_calls"]["model_calls"] == 0 and not warm_backend.bodies
    assert (out1 / "items.jsonl").read_bytes() == (out2 / "items.jsonl").read_bytes()
    # papers one at a time (a fresh cache) give the same store as papers concurrently
    system = TheoriaSystem()
    system.concurrent_papers = False
    seq, out3, _ = _ingest(system, papers, tmp_path, "c", cache=tmp_path / "cache2")
    assert (out1 / "items.jsonl").read_bytes() == (out3 / "items.jsonl").read_bytes()
    assert seq["system_report"]["layers"]["counts"] == cold["system_report"]["layers"]["counts"]


def test_unparseable_extraction_is_retried_then_counted_as_failed(papers, tmp_path: Path) -> None:
    backend = TheoriaStandIn(invalid_extraction=True)
    # every pass retried twice (3 attempts), then the paper failed: named, not silently empty;
    # with no other paper the store holds nothing, which fails the ingest
    with pytest.raises(
        RuntimeError, match=r"nothing extracted .*every extraction pass of \S+ failed"
    ):
        _ingest(TheoriaSystem(), papers[:1], tmp_path, "bad", backend)
    retries = [b for b in backend.bodies if len(b["messages"]) == 3]
    assert retries and "not valid JSON" in retries[0]["messages"][2]["content"]


def test_prism_reuses_theorias_extraction_and_has_no_communities(papers, tmp_path: Path) -> None:
    _ingest(TheoriaSystem(), papers, tmp_path, "theoria")
    record, out, backend = _ingest(PrismSystem(), papers, tmp_path, "prism")
    counts = record["system_report"]["layers"]["counts"]
    assert counts["fine_communities"] == 0 and counts["theories"] == 0 and counts["raptor"] > 0
    assert record["model_calls"]["model_calls"] == 0  # every request was Theoria's: cached


def test_prism_search_is_the_collapsed_tree(papers, tmp_path: Path) -> None:
    from tests.stand_in_chat import stand_in_endpoint

    _, out, _ = _ingest(PrismSystem(), papers, tmp_path, "prism")
    system = PrismSystem().configure({"theoria": {"link_min_cosine": 0.3}})
    with stand_in_endpoint(tmp_path, tmp_path / "cache", TheoriaStandIn()) as (endpoint, _):
        handle = system.open(out / "store", endpoint)
        try:
            found = handle.search("pterostilbene safety in adults", "native", 5)
            exported = {i.item_id for i in handle.items()}
        finally:
            handle.close()
    ranked = [i for i in found if not i.kind.startswith("linked:")]
    assert len(ranked) == 5 and {i.item_id for i in found} <= exported
    assert [i.score for i in ranked] == sorted((i.score for i in ranked), reverse=True)
    assert any("terostilbene" in i.text for i in ranked[:2])


def test_forget_paper_leaves_nothing(papers, tmp_path: Path) -> None:
    from srb.theoria.build import forget_paper

    _, out, _ = _ingest(TheoriaSystem(), papers, tmp_path, "t")
    db = TheoriaDB(out / "store")
    victim = papers[0].id
    forget_paper(db, victim)
    assert not db.query("SELECT 1 FROM evidence WHERE paper_id = ?", (victim,))
    assert not db.query("SELECT 1 FROM papers WHERE paper_id = ?", (victim,))
    left = {r[0] for r in db.query("SELECT id FROM evidence")}
    linked = {x for r in db.query("SELECT src, dst FROM links") for x in r}
    assert linked <= left
    db.close()


def test_a_paper_without_text_is_an_error_not_an_empty_success(tmp_path: Path) -> None:
    """Alone, it leaves a store with nothing extracted from any paper, which fails the whole
    ingest naming the paper (srb.store.ingest_store)."""
    with pytest.raises(RuntimeError, match=r"theoria: nothing extracted .*empty: no items"):
        _ingest(TheoriaSystem(), [Paper("empty", "", "   ")], tmp_path, "e")


def test_observing_a_paper_again_counts_its_claims_once(papers, tmp_path: Path) -> None:
    """A resumed /observe (the same paper again, e.g. after a crash) leaves the theories as
    one observation does: its old claims' seeds and support are taken back first."""
    from srb.theoria.build import observe
    from srb.theoria.models import EndpointModels
    from tests.stand_in_chat import stand_in_endpoint

    opts = TheoriaOptions.from_config({"link_min_cosine": 0.3, "concurrency": 2})
    db = TheoriaDB(tmp_path / "store")
    rows = "SELECT id, statement, support, contradict FROM theories ORDER BY id"
    with stand_in_endpoint(tmp_path, tmp_path / "cache", TheoriaStandIn()) as (endpoint, _):
        models = EndpointModels(endpoint)
        observe(db, models, opts, papers[0], 1)
        observe(db, models, opts, papers[1], 2)
        once = (db.query(rows), db.counts())
        observe(db, models, opts, papers[1], 2)
        twice = (db.query(rows), db.counts())
        models.close()
    assert once[1]["theories"] > 0 and once == twice
    db.close()


@pytest.mark.parametrize("nice", [0, 10])
def test_a_service_takes_the_priority_of_the_job_that_starts_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nice: int
) -> None:
    """The sequential observer runs at the model server's priority (nice 0) and its service,
    on the ingest phase's critical path, keeps it; a job of the helper-niced workflow session
    (a doctor, a restore) starts one that yields to the model server. acquire_service is
    replaced here: what is checked is the priority asked for (tests/test_services.py checks
    that acquire_service gives it)."""
    import srb.priority
    import srb.services

    asked: dict[str, object] = {}

    def fake_acquire(*args, **kwargs):
        asked.update(kwargs)
        return "http://127.0.0.1:1", True

    monkeypatch.setattr(srb.priority, "caller_nice", lambda: nice)
    monkeypatch.setattr(srb.services, "acquire_service", fake_acquire)
    system = TheoriaSystem()
    system.services = {"llm": {"servers_dir": str(tmp_path / "servers")}}
    (tmp_path / "store").mkdir()
    assert system.service_url(tmp_path / "store", read_only=False) == "http://127.0.0.1:1"
    assert asked["keeps_priority"] is (nice == 0)
