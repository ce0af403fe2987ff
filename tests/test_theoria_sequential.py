"""Theoria's sequential evaluation through two real HTTP services (a writable store fed by
/observe, the bulk store read-only), with a stand-in chat behind the caching endpoint."""

from __future__ import annotations

import json
from pathlib import Path

from srb.data.canonical import load_canonical
from srb.store import memory_slice
from srb.synthesize import ContextFitter
from srb.systems.theoria import TheoriaSystem
from srb.theoria.db import TheoriaDB
from srb.theoria.models import EndpointModels
from srb.theoria.options import TheoriaOptions
from srb.theoria.sequential import (
    Answerer,
    answer_sequentially,
    arrival_order,
    observe_sequentially,
    sequential_figure,
)
from srb.theoria.service import create_app
from tests.stand_in_chat import ingest_with_stand_in, stand_in_client, stand_in_endpoint
from tests.theoria_stand_in import TheoriaStandIn, serving

CORPUS = Path(__file__).resolve().parents[1] / "resources/corpora/evidence-inference-ccby"
THEORIA = {"link_min_cosine": 0.3, "concurrency": 2}


class StandInSynthesizer:
    """The synthesizer's backend: states a direction found in its context, or none."""

    def chat(self, request):
        from srb.llm.backends import Completion

        prompt = request.messages[0]["content"]
        said = "significantly decreased" if "reduc" in prompt else "no significant difference"
        return Completion(f"The outcome {said}.", len(prompt) // 4, 6, 0.0)


def test_papers_observed_in_batches_converge_to_bulk(tmp_path: Path) -> None:
    corpus = load_canonical(CORPUS)
    papers, questions = memory_slice(corpus, 3)
    backend = TheoriaStandIn()
    system = TheoriaSystem().configure({"theoria": THEORIA})
    ingest_with_stand_in(system, papers, tmp_path, tmp_path / "cache", "bulk", backend)
    opts = TheoriaOptions.from_config(THEORIA)
    TheoriaDB(tmp_path / "seq").close()
    with stand_in_endpoint(tmp_path, tmp_path / "cache", backend) as (endpoint, _):
        models = EndpointModels(endpoint)
        incremental_app = create_app(tmp_path / "seq", opts, models, read_only=False)
        bulk_app = create_app(tmp_path / "bulk/store", opts, models, read_only=True)
        with serving(incremental_app) as inc, serving(bulk_app) as bulk:
            observed = observe_sequentially(inc, bulk, papers, questions, 5, 1, seed=3)
    # the answers come later, from the recorded file, with the ingest model's endpoint gone
    observed = json.loads(json.dumps(observed))
    synth = stand_in_client(
        tmp_path, tmp_path / "cache/synth.sqlite", StandInSynthesizer(), "synth"
    )
    template = "Context: {context}\nQuestion: {question}"
    answerer = Answerer(synth, template, "t", ContextFitter(None, 4096, 64), 64)
    result = answer_sequentially(observed, questions, answerer)
    assert [len(b["found"]) for b in observed["batches"]] == [
        r["questions"] for r in result["rows"][:3]
    ]
    rows = result["rows"]
    order = [p.id for p in arrival_order(papers, 3)]
    assert result["order"] == order and sorted(order) == sorted(p.id for p in papers)
    assert [r["stage"] for r in rows] == ["batch 1", "batch 2", "batch 3", "bulk"]
    assert [r["papers_seen"] for r in rows] == [1, 2, 3, 3]
    for r, n in zip(rows[:3], (1, 2, 3), strict=True):  # answerable so far, by hand
        seen = set(order[:n])
        assert r["questions"] == sum(set(q.paper_ids) <= seen for q in questions)
    # the same extraction requests: everything observed equals what bulk ingest stored
    seq_db, bulk_db = TheoriaDB(tmp_path / "seq"), TheoriaDB(tmp_path / "bulk/store")
    assert sum(r["claims_added"] for r in rows[:3]) == bulk_db.counts()["evidence"]
    assert {e.id for e in seq_db.evidence()} == {e.id for e in bulk_db.evidence()}
    theories = seq_db.counts()["theories"]
    assert sum(rows[2][f"theories_{c}"] for c in ("low", "medium", "high")) == theories
    assert sum(r["seeded"] for r in rows[:3]) == theories  # every theory was seeded once
    assert 0.0 <= rows[2]["jaccard_to_bulk"] <= 1.0
    assert rows[3]["questions"] == rows[2]["questions"]
    details = [d for d in result["details"] if d["batch"] == "bulk"]
    assert len(details) == rows[3]["questions"]
    png = tmp_path / "seq.png"
    sequential_figure(result, "test", png)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(result)  # the details file is JSON
