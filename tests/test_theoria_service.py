"""Theoria's service over real HTTP (uvicorn on 127.0.0.1) and its OpenAPI schema fuzzed with
schemathesis: all three endpoints answer, bad requests are 422 and change nothing, a read-only
store refuses /observe, and no generated input gets a 500."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, settings

from srb.data.canonical import load_canonical
from srb.store import memory_slice
from srb.systems.theoria import TheoriaSystem
from srb.theoria.db import TheoriaDB
from srb.theoria.models import EndpointModels
from srb.theoria.options import TheoriaOptions
from srb.theoria.service import create_app
from tests.stand_in_chat import ingest_with_stand_in, stand_in_endpoint
from tests.theoria_stand_in import TheoriaStandIn, serving

CORPUS = Path(__file__).resolve().parents[1] / "resources/corpora/evidence-inference-ccby"
OPTS = TheoriaOptions(link_min_cosine=0.3, concurrency=2, max_finding_chars=20_000)


@pytest.fixture(scope="module")
def corpus_papers():
    papers, _ = memory_slice(load_canonical(CORPUS), 3)
    return papers


@pytest.fixture(scope="module")
def served(tmp_path_factory, corpus_papers):
    """A store of two papers, served writable over HTTP; the third paper is left to observe."""
    tmp = tmp_path_factory.mktemp("service")
    system = TheoriaSystem().configure({"theoria": {"link_min_cosine": 0.3, "concurrency": 2}})
    backend = TheoriaStandIn()
    ingest_with_stand_in(system, corpus_papers[:2], tmp, tmp / "cache", "t", backend)
    with stand_in_endpoint(tmp, tmp / "cache", backend) as (endpoint, proxy):
        models = EndpointModels(endpoint)
        app = create_app(tmp / "t/store", OPTS, models, read_only=False)
        with serving(app) as url:
            yield url, app, tmp / "t/store", proxy
        models.close()


def _counts(store: Path) -> dict[str, int]:
    db = TheoriaDB(store, readonly=True)
    try:
        return db.counts()
    finally:
        db.close()


def test_three_endpoints_over_http(served, corpus_papers) -> None:
    url, _, store, _ = served
    theories = httpx.get(url + "/theories").json()
    assert sum(theories["counts"].values()) == _counts(store)["theories"] > 0
    groups = theories["communities"]
    assert all(g["theories"] for g in groups)
    assert len({g["community_id"] for g in groups}) == len(groups)
    high = httpx.get(url + "/theories", params={"confidence": "high"}).json()
    assert all(t["confidence"] == "high" for g in high["communities"] for t in g["theories"])

    found = httpx.post(url + "/retrieve", json={"query": "pterostilbene safety", "k": 4}).json()
    ranked = [i for i in found["items"] if not i["kind"].startswith("linked:")]
    assert len(ranked) == 4 and len({i["item_id"] for i in found["items"]}) == len(found["items"])

    before = _counts(store)
    third = corpus_papers[2]
    report = httpx.post(
        url + "/observe",
        json={"paper_id": third.id, "text": third.text, "batch": 1},
        timeout=120,
    )
    assert report.status_code == 200, report.text
    report = report.json()
    after = _counts(store)
    assert report["paper_id"] == third.id and report["claims"] > 0
    assert after["papers"] == before["papers"] + 1
    assert after["evidence"] == before["evidence"] + report["claims"]
    assert sum(report["theories"].values()) == after["theories"]


def test_hybrid_retrieve_fuses_the_stored_bm25_vectors(served) -> None:
    """A stored claim asked for by its own words is first in both channels: RRF gives it
    1/(60+1) twice, and the dense-only answer scores it by cosine instead."""
    url, _, store, _ = served
    db = TheoriaDB(store, readonly=True)
    try:
        claim = max(db.evidence(), key=lambda e: len(set(e.text.lower().split())))
    finally:
        db.close()
    body = {"query": claim.text, "k": 3, "modality": "hybrid"}
    hybrid = httpx.post(url + "/retrieve", json=body, timeout=120)
    assert hybrid.status_code == 200, hybrid.text
    top = hybrid.json()["items"][0]
    assert top["item_id"] == claim.id
    assert top["score"] == pytest.approx(2 / 61, rel=1e-12)
    dense = httpx.post(url + "/retrieve", json={**body, "modality": "dense"}).json()["items"][0]
    assert dense["item_id"] == claim.id and dense["score"] < 1.0 + 1e-6


@pytest.mark.parametrize(
    "path, body",
    [
        ("/retrieve", {"query": "x", "k": 0}),
        ("/retrieve", {"query": "x", "k": 3, "depth": 9}),
        ("/retrieve", {"query": "   ", "k": 3}),
        ("/retrieve", {"query": "x", "k": 3, "modality": "bm25"}),
        ("/observe", {"paper_id": "p", "text": ""}),
        ("/observe", {"paper_id": "p", "text": "   "}),
        ("/observe", {"paper_id": "p", "text": "x" * 20_001}),
        ("/observe", {"paper_id": "p", "text": "a finding", "extra": 1}),
    ],
)
def test_bad_requests_are_422_and_change_nothing(served, path, body) -> None:
    url, _, store, _ = served
    before = _counts(store)
    response = httpx.post(url + path, json=body)
    assert response.status_code == 422, response.text
    assert response.json()["detail"]  # the message says what is wrong
    assert _counts(store) == before


def test_a_read_only_store_refuses_observe(served, tmp_path) -> None:
    from fastapi.testclient import TestClient

    _, _, store, _ = served
    app = create_app(store, OPTS, models=None, read_only=True)  # type: ignore[arg-type]
    with TestClient(app) as client:
        response = client.post("/observe", json={"paper_id": "p", "text": "a finding"})
        assert response.status_code == 409 and "read-only" in response.json()["detail"]


def test_no_generated_input_gets_a_server_error(served) -> None:
    """Every operation of the OpenAPI schema, fuzzed (valid and invalid inputs): never a 5xx.
    (schemathesis' pytest plugin does not load under this pytest; its strategies are used
    directly with hypothesis.)"""
    from hypothesis import given

    _, app, _, _ = served
    schema = schemathesis.openapi.from_asgi("/openapi.json", app)
    operations = [r.ok() for r in schema.get_all_operations()]
    assert {o.label for o in operations} >= {
        "GET /theories",
        "POST /retrieve",
        "POST /observe",
    }
    seen: dict[str, set[int]] = {}

    def fuzzer(operation):  # one hypothesis test per operation
        @given(case=operation.as_strategy())
        @settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
        def fuzz(case) -> None:
            response = case.call()
            seen.setdefault(operation.label, set()).add(response.status_code)
            assert response.status_code < 500, (case.path, case.body, response.text[:300])

        return fuzz

    for operation in operations:
        fuzzer(operation)()
    assert all(seen.get(o.label) for o in operations)  # every operation was exercised
