"""The doctor in the real workflow: it passes on a healthy store and stops the run, naming
corpus, system, check and numbers, on each of the paper's three silent failures planted here:
a store pointing at an empty index, a hybrid whose BM25 channel is disabled, and a unit count
that does not match the ingest log. No ranking is produced while the doctor fails."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_workflow import snakemake, write_config, write_tiny_corpus

pytestmark = pytest.mark.integration

SYSTEM = "simple_rag"


def _target(root: Path) -> list[str]:
    return [f"results/tiny/retrieval/{SYSTEM}/hybrid/2K.jsonl"]


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    root = tmp_path_factory.mktemp("doctor")
    corpus = write_tiny_corpus(root)
    config = write_config(root, corpus, systems=[SYSTEM])
    proc = snakemake(root, config, *_target(root))
    assert proc.returncode == 0, proc.stderr[-4000:]
    return root, corpus, config


def _failed(root: Path, proc) -> dict:
    assert proc.returncode != 0, "the doctor should have stopped the run"
    report = root / f"results/tiny/doctor/{SYSTEM}.failed.json"
    assert report.is_file(), proc.stderr[-3000:]
    assert not (root / f"results/tiny/doctor/{SYSTEM}.json").exists()
    assert not (root / f"results/tiny/rankings/{SYSTEM}/hybrid.jsonl").exists()
    return json.loads(report.read_text())


def _check(report: dict, name: str) -> dict:
    return next(c for c in report["checks"] if c["name"] == name)


def _reset(root: Path) -> None:
    """Remove the doctor report and rankings so the next run starts from the doctor."""
    for p in [root / f"results/tiny/doctor/{SYSTEM}.json", *root.glob("results/tiny/rankings/*/*")]:
        p.unlink(missing_ok=True)


def test_healthy_store_passes_all_six_checks(healthy):
    root, _, _ = healthy
    report = json.loads((root / f"results/tiny/doctor/{SYSTEM}.json").read_text())
    assert report["ok"] is True
    assert [c["number"] for c in report["checks"]] == [1, 2, 3, 4, 5, 6]
    assert all(c["ok"] for c in report["checks"]), report
    units = sum(1 for _ in (root / f"results/tiny/units/{SYSTEM}.jsonl").open())
    seen = _check(report, "unit_count")["seen"]
    assert seen == {"ingest_log_units": units, "units_file": units,
                    "bm25_index_units": units, "dense_index_units": units}  # fmt: skip
    assert _check(report, "document_count")["seen"] == {
        "manifest_papers": 4,
        "papers_with_units": 4,
    }
    fed = _check(report, "channels")["seen"]["hybrid_units_from"]
    assert fed["bm25"] > 0 and fed["dense"] > 0


def test_empty_index_is_caught(healthy):
    import faiss

    root, _, config = healthy
    index = root / f"results/tiny/index/{SYSTEM}/dense/index.faiss"
    original = index.read_bytes()
    dim = json.loads((index.parent / "meta.json").read_text())["dim"]
    _reset(root)
    try:
        faiss.write_index(faiss.IndexFlatIP(dim), str(index))  # the store now holds nothing
        proc = snakemake(root, config, "--forcerun", "doctor", *_target(root))
        report = _failed(root, proc)
    finally:
        index.write_bytes(original)
    assert "corpus tiny, system simple_rag" in proc.stderr
    assert "check 1 (probe_context)" in proc.stderr and "dense:Q-salt" in proc.stderr
    assert "check 4 (unit_count)" in proc.stderr and "dense_index_units 0" in proc.stderr
    assert _check(report, "probe_context")["ok"] is False
    assert _check(report, "unit_count")["seen"]["dense_index_units"] == 0
    assert _check(report, "channels")["seen"]["dense_hits"] == 0


def test_disabled_bm25_channel_is_caught(healthy):
    root, corpus, _ = healthy
    _reset(root)
    config = write_config(root, corpus, systems=[SYSTEM],
                          retrieval={"depth": 20, "rrf_k": 60, "hybrid_channels": ["dense"]})  # fmt: skip
    try:
        proc = snakemake(root, config, *_target(root))
        report = _failed(root, proc)
    finally:
        write_config(root, corpus, systems=[SYSTEM])
    assert "check 3 (channels)" in proc.stderr
    assert "hybrid has the bm25 channel disabled" in proc.stderr
    channels = _check(report, "channels")
    assert channels["ok"] is False
    assert channels["seen"]["hybrid_channels"] == ["dense"]
    assert channels["seen"]["hybrid_units_from"]["bm25"] == 0
    assert [c["name"] for c in report["checks"] if c["ok"] is False] == ["channels"]


def test_unit_count_mismatch_with_ingest_log_is_caught(healthy):
    root, _, config = healthy
    log = root / f"results/tiny/units/{SYSTEM}.ingest.json"
    original = log.read_text()
    ingest = json.loads(original)
    _reset(root)
    try:
        log.write_text(json.dumps({**ingest, "n_units": ingest["n_units"] + 7}))
        proc = snakemake(root, config, *_target(root))
        report = _failed(root, proc)
    finally:
        log.write_text(original)
    expected = ingest["n_units"] + 7
    assert "check 4 (unit_count)" in proc.stderr
    assert f"ingest log says {expected} units" in proc.stderr
    assert f"units_file {ingest['n_units']}" in proc.stderr
    seen = _check(report, "unit_count")["seen"]
    assert seen["ingest_log_units"] == expected
    assert seen["bm25_index_units"] == seen["dense_index_units"] == ingest["n_units"]
    assert [c["name"] for c in report["checks"] if c["ok"] is False] == ["unit_count"]


def test_a_rerun_doctor_does_not_hide_missing_cells(healthy):
    """A changed doctor setting plus a missing cell: the run must rebuild the cell, not stop
    after the doctor with exit 0 (what ancient() did in Snakemake 9.27)."""
    root, corpus, _ = healthy
    config = write_config(root, corpus, systems=[SYSTEM], doctor={"probes": 2})
    cell = root / _target(root)[0]
    cell.unlink()
    proc = snakemake(root, config, *_target(root))
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert cell.is_file(), "exit 0 but the requested cell is missing"
    report = json.loads((root / f"results/tiny/doctor/{SYSTEM}.json").read_text())
    assert len(report["probes"]) == 2
