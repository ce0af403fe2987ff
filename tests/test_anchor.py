"""The retrieval-correctness anchor: Lucene BM25 must reproduce Pyserini 2CR on SciFact."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from srb.anchor import evaluate, grade, remove_self_hits

REPO = Path(__file__).resolve().parents[1]
SCIFACT = REPO.parent / "shared" / "data" / "scifact"


def test_grade_tolerance():
    assert grade(0.67894, 0.6789, 0.0005) == "OK"
    assert grade(0.6795, 0.6789, 0.0005) == "FAIL"
    assert grade(0.5, None, 0.0005) == "NEW"


def test_evaluate_counts_unanswered_queries_as_zero():
    qrels = {"q1": {"d1": 1}, "q2": {"d2": 1}}
    run = {"q1": [("d1", 2.0), ("d3", 1.0)]}
    metrics = evaluate(run, qrels)
    assert metrics["nDCG@10"] == pytest.approx(0.5)
    assert metrics["R@100"] == pytest.approx(0.5)


def test_remove_self_hits():
    assert remove_self_hits({"7": [("7", 3.0), ("8", 2.0)]}) == {"7": [("8", 2.0)]}


@pytest.mark.integration
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="../shared/data/scifact not present")
def test_scifact_bm25_reproduces_published_ndcg(tmp_path):
    out = tmp_path / "scifact"
    proc = subprocess.run(
        [sys.executable, "-m", "srb", "anchor", "--data", str(SCIFACT), "--only", "bm25-flat",
         "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    print(proc.stdout)
    rows = [line.split("\t") for line in out.with_suffix(".tsv").read_text().splitlines()[1:]]
    measured = {r[1]: (float(r[2]), r[4]) for r in rows}
    assert abs(measured["nDCG@10"][0] - 0.6789) <= 0.0005 and measured["nDCG@10"][1] == "OK"
    assert abs(measured["R@100"][0] - 0.9253) <= 0.0005 and measured["R@100"][1] == "OK"
    assert "bm25-flat        nDCG@10    0.6789   0.6789  OK" in proc.stdout


@pytest.mark.integration
@pytest.mark.skipif(not SCIFACT.is_dir(), reason="../shared/data/scifact not present")
def test_throughput_bench_runs_on_tiny_input():
    proc = subprocess.run(
        [sys.executable, "bench/retrieval_throughput.py", "--max-docs", "150", "--max-queries", "20",
         "--repeats", "1"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.splitlines()
    assert any(line.startswith("SciFact: 150 docs, 20 queries") for line in lines)
    assert any(line.startswith("bm25 (Pyserini/Lucene)") and "x bm25s" in line for line in lines)
    assert any(line.startswith("hybrid (RRF k=60)") for line in lines)
