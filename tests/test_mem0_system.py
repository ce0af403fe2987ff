"""Mem0 through its real library (mem0ai, local Qdrant) and the caching endpoint.

The chat model behind the endpoint is a stand-in that answers Mem0's extraction prompt with the
chunk's sentences as facts (a real model is used by the integration test in
tests/test_store_workflow.py); embeddings are the real packaged MiniLM. What is tested is ours:
the adapter, the workarounds, export, search, warm re-ingest and the doctor's planted faults.
"""

from __future__ import annotations

import datetime as dt
import json
import re
import threading
from pathlib import Path

import pytest

from srb.data.canonical import iter_jsonl
from srb.data.schema import Corpus, Paper, Question
from srb.doctor import DoctorError
from srb.ingest import read_units
from srb.store import StoreRanker, memory_slice
from srb.store_doctor import StoreDoctor, run_store_doctor
from srb.systems.mem0 import (
    EXTRACTION_SCHEMA,
    REFERENCE_DATE,
    Mem0System,
    paper_chunks,
    pinned_prompt_date,
)
from tests.stand_in_chat import (
    StandInChat,
    chat_completion,
    ingest_with_stand_in,
    stand_in_endpoint,
)


class FactBackend(StandInChat):
    """Answers Mem0's extraction call with each sentence of the new message as one fact."""

    def reply(self, body: dict) -> dict:
        user = body["messages"][-1]["content"]
        new = user.split("## New Messages", 1)[1].split("\n## ", 1)[0]
        new = new.strip().removeprefix("user:").strip()
        sentences = [s for s in re.split(r"(?<=\.)\s+", new) if s]
        facts = [{"id": str(i), "text": s} for i, s in enumerate(sentences)]
        return chat_completion(json.dumps({"memory": facts}), len(user.split()), len(facts))


PAPERS = (
    Paper("pa", "", "Aspirin lowered thirty-day mortality in the treated group. "
                    "The trial enrolled four hundred adults with stable angina. "
                    "Blood pressure did not change between the two arms."),
    Paper("pb", "", "Statins reduced LDL cholesterol by a third after one year. "
                    "Muscle pain was reported by very few participants overall. "
                    "Adherence to the daily tablet stayed high throughout follow-up."),
)  # fmt: skip
QUESTIONS = (
    Question("q1", "Did aspirin lower mortality?", "", (), ("pa",)),
    Question("q2", "Did statins reduce LDL cholesterol?", "", (), ("pb",)),
)


def run_ingest(
    tmp: Path, cache: Path, name: str, options: dict | None = None, papers=PAPERS
) -> tuple[dict, FactBackend, Path]:
    backend = FactBackend()
    system = Mem0System().configure(options or {})
    record, out = ingest_with_stand_in(system, papers, tmp, cache, name, backend)
    return record, backend, out


@pytest.fixture(scope="module")
def ingested(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("mem0")
    cache = tmp / "cache"
    cold = run_ingest(tmp, cache, "cold")
    warm = run_ingest(tmp, cache, "warm")
    return tmp, cache, cold, warm


def test_the_prompt_date_is_pinned_so_a_rerun_on_another_day_hits_the_cache() -> None:
    from mem0.configs.prompts import generate_additive_extraction_prompt

    with pinned_prompt_date():
        pinned = generate_additive_extraction_prompt(new_messages="x")
    assert f"## Current Date\n{REFERENCE_DATE.isoformat()}" in pinned
    today = generate_additive_extraction_prompt(new_messages="x")
    assert dt.datetime.now(dt.UTC).date().isoformat() in today  # restored afterwards


def test_chunks_are_about_six_thousand_characters() -> None:
    paper = Paper("p", "", ("word " * 2600).strip())
    chunks = paper_chunks(paper)
    assert len(chunks) == 3 and all(len(c) <= 6000 for c in chunks)
    assert "".join(chunks).replace(" ", "") == paper.text.replace(" ", "")


def test_ingest_extracts_facts_through_the_endpoint_and_exports_them(ingested) -> None:
    _, _, (record, backend, out), _ = ingested
    assert len(backend.bodies) == 2  # one add() per ~6K chunk: one chunk per paper here
    # structured_output (default): Mem0's json_object call goes out with its bounded schema
    assert all(
        b["response_format"]["type"] == "json_schema"
        and b["response_format"]["json_schema"]["schema"] == EXTRACTION_SCHEMA
        for b in backend.bodies
    )
    assert record["papers_failed"] == 0 and record["papers_without_items"] == []
    assert record["items_stored"] == 6 and record["model_calls"]["model_calls"] == 2
    items = [r for _, r in iter_jsonl(out / "items.jsonl")]
    assert {r["paper_id"] for r in items} == {"pa", "pb"}
    assert all(r["start"] is None and r["kind"] == "fact" for r in items)
    assert any("Aspirin lowered" in r["text"] for r in items if r["paper_id"] == "pa")


def test_warm_reingest_makes_no_model_call_and_exports_identical_items(ingested) -> None:
    _, _, (cold, _, cold_out), (warm, backend, warm_out) = ingested
    assert backend.bodies == []
    assert warm["model_calls"]["model_calls"] == 0
    assert warm["model_calls"]["prompt_tokens"] == cold["model_calls"]["prompt_tokens"]
    assert (warm_out / "items.jsonl").read_bytes() == (cold_out / "items.jsonl").read_bytes()


def doctor(tmp: Path, cache: Path, store: Path, out: Path, bm25) -> dict:
    system = Mem0System()
    with stand_in_endpoint(tmp, cache, FactBackend()) as (endpoint, _):
        handle = system.open(store, endpoint)
        try:
            ranker = StoreRanker(system, handle, read_units(out / "items.jsonl"), bm25, 10)
            doc = StoreDoctor(ranker, list(QUESTIONS), ["native", "200"], 0.25, 0.0)
            n = sum(1 for _ in iter_jsonl(out / "items.jsonl"))
            return run_store_doctor("t", doc, json.loads((out / "ingest.json").read_text()), n,
                                    2, out / "doctor.json")  # fmt: skip
        finally:
            handle.close()


def lexical(query: str, depth: int):
    return []  # a BM25 channel that finds nothing (the empty-store probes)


def test_doctor_passes_the_real_store(ingested) -> None:
    tmp, cache, (_, _, out), _ = ingested
    units = read_units(out / "items.jsonl")
    first = sorted(units)[0]
    result = doctor(tmp, cache, out / "store", out, lambda q, d: [(first, 1.0)])
    assert result["ok"], result


def test_doctor_catches_a_store_path_on_an_empty_directory(ingested) -> None:
    """The paper's Mem0 incident: Qdrant pointed at an empty directory answers every search
    with nothing and raises nothing."""
    tmp, cache, (_, _, out), _ = ingested
    empty = tmp / "moved"
    (empty / "qdrant").mkdir(parents=True)
    with pytest.raises(DoctorError) as err:
        doctor(tmp, cache, empty, out, lexical)
    assert "check 1 (probe_context)" in str(err.value)
    assert "check 4 (item_count): item counts disagree" in str(err.value)


def test_mem0_slice_questions_are_those_of_the_sliced_papers() -> None:
    papers, questions = memory_slice(Corpus("c", PAPERS, QUESTIONS), 1)
    assert [p.id for p in papers] == ["pa"] and [q.id for q in questions] == ["q1"]


def test_without_structured_output_mem0_asks_json_mode_as_it_does(tmp_path) -> None:
    _, backend, _ = run_ingest(tmp_path, tmp_path / "cache", "plain",
                               {"structured_output": False}, PAPERS[:1])  # fmt: skip
    assert [b["response_format"] for b in backend.bodies] == [{"type": "json_object"}]


def test_concurrent_papers_all_see_the_pinned_date() -> None:
    """Two threads overlapping in and out of the pinned block: both build pinned prompts."""
    from mem0.configs.prompts import generate_additive_extraction_prompt

    inside = threading.Barrier(2)
    first_left = threading.Event()
    seen: dict[str, str] = {}

    def paper(name: str, leave_first: bool) -> None:
        with pinned_prompt_date():
            inside.wait()
            if leave_first:
                return first_left.set()
            first_left.wait()  # the other paper has left the block; this one is still in it
            seen[name] = generate_additive_extraction_prompt(new_messages="x")

    threads = [threading.Thread(target=paper, args=("a", True)),
               threading.Thread(target=paper, args=("b", False))]  # fmt: skip
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert f"## Current Date\n{REFERENCE_DATE.isoformat()}" in seen["b"]


def test_a_failed_retry_starts_from_a_clean_paper_scope(tmp_path) -> None:
    """forget_paper removes the paper's memories and messages from the real store."""
    from srb.systems.mem0 import USER_ID

    _, _, out = run_ingest(tmp_path, tmp_path / "cache", "once", None, PAPERS[:1])
    system = Mem0System()
    with stand_in_endpoint(tmp_path, tmp_path / "cache", FactBackend()) as (endpoint, _):
        store = tmp_path / "again"
        system.prepare(store, endpoint)
        system.ingest_paper(PAPERS[0], store, endpoint)
        memory = system._memory(store, endpoint)
        assert memory.get_all(filters={"user_id": USER_ID})["results"]
        system.forget_paper(PAPERS[0], store, endpoint)
        assert memory.get_all(filters={"user_id": USER_ID})["results"] == []
        assert memory.db.get_last_messages(f"run_id={PAPERS[0].id}&user_id={USER_ID}") == []
        system.finish(store, endpoint)


def test_without_inference_each_chunk_is_one_memory_and_no_model_is_called(tmp_path) -> None:
    """`memory.mem0.infer: false` (Mem0's own `add(infer=False)`): the store path with no
    extraction, what bench/scale.py times at 819 papers."""
    assert Mem0System().configure({}).infers()
    record, backend, out = run_ingest(
        tmp_path, tmp_path / "cache", "raw", {"mem0": {"infer": False}}
    )
    assert backend.bodies == []
    assert record["model_calls"]["chat_requests"] == 0 and record["papers_failed"] == 0
    items = [r for _, r in iter_jsonl(out / "items.jsonl")]
    by_paper = {r["paper_id"]: r["text"] for r in items}
    assert len(items) == record["items_stored"] == 2  # one ~6K chunk per paper here
    assert by_paper == {p.id: p.text for p in PAPERS}  # each paper is shorter than one chunk
