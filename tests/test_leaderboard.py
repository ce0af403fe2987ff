"""Leaderboards from judgment and cell files: valid-only means, invalid counts, budget columns."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from srb.data.canonical import write_canonical
from srb.data.schema import Corpus, Paper, Question
from srb.leaderboard import (
    budget_sweep_figure,
    build_leaderboard,
    columns,
    write_leaderboard,
)

TIERS = {"q1": "L1", "q2": "L1", "q3": "L2", "q4": "L3"}


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    papers = (Paper(id="p1", title="P1", text="Some paper text. " * 20),)
    questions = tuple(
        Question(
            id=qid,
            question=f"Question {qid}?",
            gold_answer="It significantly decreased.",
            must_have=(),
            paper_ids=("p1",),
            tier=tier,
            gold_label="significantly decreased",
        )
        for qid, tier in TIERS.items()
    )
    out = tmp_path / "corpus"
    write_canonical(Corpus(name="tiny", papers=papers, questions=questions), out)
    return out


def J(qid: str, composite: float | None, label_correct: bool | None = None) -> dict:
    return {
        "question_id": qid,
        "judge": "rubric",
        "valid": composite is not None,
        "scores": None,
        "composite": composite,
        "attempts": 1,
        "error": None if composite is not None else "attempt 3: garbage",
        "stated_label": None,
        "label_correct": label_correct,
    }


def write_cell(
    root: Path, name: str, judgments: list[dict], chars: dict[str, int]
) -> tuple[Path, Path]:
    jfile, cfile = root / f"{name}.judgments.jsonl", root / f"{name}.cell.jsonl"
    jfile.write_text("".join(json.dumps(r) + "\n" for r in judgments))
    cfile.write_text(
        "".join(
            json.dumps({"question_id": q, "achieved_chars": c, "spans": [], "context": ""}) + "\n"
            for q, c in chars.items()
        )
    )
    return jfile, cfile


def uniform(score: float) -> list[dict]:
    return [J(q, score, True) for q in TIERS]


def flat(n: int) -> dict[str, int]:
    return dict.fromkeys(TIERS, n)


@pytest.fixture
def cells(tmp_path: Path) -> list[tuple]:
    root = tmp_path / "cells"
    root.mkdir()
    spec = [
        # system, modality, budget, judgments, achieved chars per question
        (
            "base",
            "none",
            "native",
            [J("q1", 2.0, False), J("q2", 4.0, False), J("q3", 1.0), J("q4", 1.0)],
            flat(0),
        ),
        ("direct_read", "none", "6K", uniform(3.5), flat(6000)),
        ("paper_rag", "bm25", "native", uniform(4.5), flat(9000)),
        (
            "simple_rag",
            "hybrid",
            "native",
            # q3 is invalid: excluded from the means (not a zero), counted in n_invalid
            [J("q1", 8.0, True), J("q2", 6.0, False), J("q3", None, True), J("q4", 3.0)],
            {"q1": 1000, "q2": 2000, "q3": 3000, "q4": 4000},
        ),
        # budgets given out of order; "10K" sorts before "2K" as a string
        ("simple_rag", "hybrid", "10K", uniform(5.0), flat(9990)),
        ("simple_rag", "hybrid", "500", [*uniform(2.0)[:3], J("q4", None, False)], flat(480)),
        ("simple_rag", "hybrid", "2K", uniform(4.25), flat(1995)),
    ]
    out = []
    for i, (system, modality, budget, judgments, chars) in enumerate(spec):
        j, c = write_cell(root, f"{i}-{system}-{budget}", judgments, chars)
        out.append((system, modality, budget, j, c))
    return out


def test_build_leaderboard(corpus_dir: Path, cells: list[tuple]) -> None:
    rows = build_leaderboard(corpus_dir, cells)
    assert [r["system"] for r in rows] == ["simple_rag", "paper_rag", "base", "direct_read"]
    by = {r["system"]: r for r in rows}
    rag = by["simple_rag"]
    assert rag["native_avg"] == 5.67  # mean(8, 6, 3); invalid q3 excluded, not scored 0
    assert rag["native_L1"] == 7.0
    assert rag["native_L2"] is None  # its only question was invalid
    assert rag["native_L3"] == 3.0
    assert rag["native_chars"] == 2500
    assert rag["native_label_acc"] == 0.667  # True, False, True (label is LLM-free)
    assert rag["n_questions"] == 4
    assert rag["n_invalid"] == 2  # one native, one at 500
    assert (rag["500_score"], rag["500_chars"], rag["500_label_acc"]) == (2.0, 480, 0.75)
    assert (rag["2K_score"], rag["2K_chars"], rag["2K_label_acc"]) == (4.25, 1995, 1.0)
    assert (rag["10K_score"], rag["10K_chars"]) == (5.0, 9990)
    assert rag["_budgets"] == ["500", "2K", "6K", "10K"]

    base = by["base"]
    assert (base["native_avg"], base["native_L1"], base["native_L2"], base["native_L3"]) == (
        2.0,
        3.0,
        1.0,
        1.0,
    )
    assert base["native_chars"] == 0
    assert base["native_label_acc"] == 0.0
    assert base["n_invalid"] == 0

    dr = by["direct_read"]
    assert "native_avg" not in dr
    assert (dr["6K_score"], dr["6K_chars"], dr["6K_label_acc"]) == (3.5, 6000, 1.0)
    assert by["paper_rag"]["modality"] == "bm25" and by["paper_rag"]["native_avg"] == 4.5


def test_columns_order() -> None:
    assert columns(["1K", "2K"]) == [
        "system",
        "modality",
        "native_avg",
        "native_L1",
        "native_L2",
        "native_L3",
        "native_chars",
        "native_label_acc",
        "1K_score",
        "1K_chars",
        "1K_label_acc",
        "2K_score",
        "2K_chars",
        "2K_label_acc",
        "n_questions",
        "n_invalid",
    ]


def test_write_leaderboard(corpus_dir: Path, cells: list[tuple], tmp_path: Path) -> None:
    rows = build_leaderboard(corpus_dir, cells)
    csv_out, md_out = tmp_path / "out" / "lb.csv", tmp_path / "out" / "lb.md"
    write_leaderboard(rows, "tiny: synthesizer s, judge rubric", csv_out, md_out)

    with open(csv_out, newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == columns(["500", "2K", "6K", "10K"])
        table = list(reader)
    assert [r["system"] for r in table] == ["simple_rag", "paper_rag", "base", "direct_read"]
    rag = table[0]
    assert rag["native_avg"] == "5.67" and rag["native_L2"] == "" and rag["native_L1"] == "7.0"
    assert rag["2K_score"] == "4.25" and rag["500_chars"] == "480"
    assert rag["n_invalid"] == "2" and rag["n_questions"] == "4"
    assert table[3]["native_avg"] == "" and table[3]["6K_score"] == "3.5"
    assert "_budgets" not in csv_out.read_text()

    md = md_out.read_text()
    assert md.startswith("# tiny: synthesizer s, judge rubric\n\n")
    assert "over valid judgments" in md
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| system |"))
    assert lines[header] == "| " + " | ".join(columns(["500", "2K", "6K", "10K"])) + " |"
    assert lines[header + 2].startswith(
        "| simple_rag | hybrid | 5.67 | 7.0 | – | 3.0 | 2500 | 0.667 | 2.0 | 480 | 0.75 | "
        "4.25 | 1995 | 1.0 | – | – | – | 5.0 | 9990 | 1.0 | 4 | 2 |"
    )
    assert lines[header + 5].startswith("| direct_read | none | – |")


def test_budget_sweep_figure_png_is_deterministic(
    corpus_dir: Path, cells: list[tuple], tmp_path: Path
) -> None:
    rows = build_leaderboard(corpus_dir, cells)
    a, b = tmp_path / "a.png", tmp_path / "fig" / "b.png"
    budget_sweep_figure(rows, "tiny sweep", a)
    budget_sweep_figure(rows, "tiny sweep", b)
    data = a.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000
    assert data == b.read_bytes()
    # 7 x 4.5 inches at 120 dpi
    assert int.from_bytes(data[16:20], "big") == 840
    assert int.from_bytes(data[20:24], "big") == 540
