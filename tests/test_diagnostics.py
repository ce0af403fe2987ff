"""LLM-free retrieval diagnostics, checked against numbers worked out by hand."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import pytest

from srb.data.canonical import load_canonical, write_canonical
from srb.data.schema import Corpus, EvidenceSpan, Paper, Question
from srb.diagnostics import (
    COLUMNS,
    cell_row,
    content_tokens,
    covered_chars,
    evidence_recall,
    evidence_token_coverage,
    merge_spans,
    retrieval_table,
    source_paper_recall,
)


def q(qid: str, papers: tuple[str, ...], evidence: tuple[tuple[str, int, int], ...] = ()):
    return Question(
        id=qid,
        question=f"{qid}?",
        gold_answer="",
        must_have=(),
        paper_ids=papers,
        evidence=tuple(EvidenceSpan(*e) for e in evidence),
    )


def rec(qid: str, spans: list[list[Any]], requested: int | None = None) -> dict[str, Any]:
    return {
        "question_id": qid,
        "unit_ids": [f"{s[0]}#{i}" for i, s in enumerate(spans)],
        "scores": [1.0 - i / 10 for i in range(len(spans))],
        "spans": spans,
        "requested_chars": requested,
        "achieved_chars": sum(e - s for _, s, e in spans),
        "top_k": None,
        "truncated": False,
        "context": "",
    }


# ---------------------------------------------------------------------- spans


def test_merge_spans_unions_per_paper() -> None:
    merged = merge_spans(
        [("p", 20, 30), ("p", 0, 10), ("q", 0, 5), ("p", 5, 15), ("p", 15, 18), ("q", 3, 4)]
    )
    assert merged == {"p": [(0, 18), (20, 30)], "q": [(0, 5)]}
    assert merge_spans([]) == {}
    assert merge_spans([("p", 0, 10), ("p", 10, 20)]) == {"p": [(0, 20)]}  # touching
    assert merge_spans([("p", 0, 10), ("p", 11, 20)]) == {"p": [(0, 10), (11, 20)]}


def test_covered_chars_by_hand() -> None:
    gold = [("p", 10, 30)]
    # [0,15) and [12,20) overlap: together they cover gold chars 10..20 = 10, not 5 + 8
    retrieved = [("p", 0, 15), ("p", 12, 20), ("q", 10, 30)]
    assert covered_chars(gold, retrieved) == (10, 20)
    # the same characters in another paper do not count
    assert covered_chars(gold, [("q", 0, 100)]) == (0, 20)
    # overlapping gold spans are merged too: total is 15, not 20
    assert covered_chars([("p", 0, 10), ("p", 5, 15)], [("p", 0, 100)]) == (15, 15)
    # two gold papers, partial cover in each
    gold2 = [("a", 0, 10), ("b", 100, 110)]
    assert covered_chars(gold2, [("a", 5, 50), ("b", 90, 102), ("b", 108, 200)]) == (9, 20)
    assert covered_chars(gold2, []) == (0, 20)


def test_evidence_recall() -> None:
    question = q("q1", ("p",), (("p", 10, 30), ("p", 50, 60)))
    assert evidence_recall(question, rec("q1", [["p", 0, 20], ["p", 15, 25]])) == pytest.approx(
        15 / 30
    )
    assert evidence_recall(question, rec("q1", [["p", 0, 100]])) == 1.0
    assert evidence_recall(question, rec("q1", [["x", 0, 100]])) == 0.0
    assert evidence_recall(question, rec("q1", [])) == 0.0
    assert evidence_recall(q("q2", ("p",)), rec("q2", [["p", 0, 100]])) is None


def test_source_paper_recall_multi_paper() -> None:
    question = q("q", ("a", "b", "c"))
    r = rec("q", [["a", 0, 5], ["c", 0, 5], ["c", 9, 12], ["d", 0, 5]])
    assert source_paper_recall(question, r) == pytest.approx(2 / 3)
    assert source_paper_recall(question, rec("q", [])) == 0.0
    assert source_paper_recall(q("q", ("a",)), rec("q", [["a", 1, 2]])) == 1.0


# ---------------------------------------------------------------------- table


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, list[tuple[str, str, str, Path]]]:
    corpus = Corpus(
        "tiny",
        (Paper("p1", "", "x" * 100), Paper("p2", "", "y" * 50)),
        (
            q("q1", ("p1",), (("p1", 10, 30),)),
            q("q2", ("p1", "p2"), (("p2", 0, 10),)),
            q("q3", ("p2",)),
        ),
    )
    cdir = tmp_path / "corpus"
    write_canonical(corpus, cdir)

    def cell(name: str, records: list[dict[str, Any]]) -> Path:
        f = tmp_path / "cells" / f"{name}.jsonl"
        f.parent.mkdir(exist_ok=True)
        f.write_text("".join(json.dumps(r) + "\n" for r in records))
        return f

    native = cell(
        "native",
        [
            rec("q1", [["p1", 0, 20]]),  # ev 10/20, source 1
            rec("q2", [["p2", 0, 10]]),  # ev 10/10, source 1/2
            rec("q3", []),  # no evidence, source 0, empty context
        ],
    )
    packed = cell(
        "packed",
        [
            rec("q1", [["p1", 0, 15], ["p1", 12, 25], ["p2", 0, 10]], 40),  # ev 15/20 -> 0.75
            rec("q2", [["p1", 0, 30], ["p2", 5, 15]], 40),  # ev 5/10, source 1
            rec("q3", [["p2", 0, 40]], 40),  # source 1
        ],
    )
    cells = [("simple_rag", "bm25", "native", native), ("simple_rag", "hybrid", "10K", packed)]
    return cdir, cells


def test_cell_row_by_hand(tiny) -> None:
    cdir, cells = tiny
    corpus = load_canonical(cdir)
    questions = {x.id: x for x in corpus.questions}
    texts = {p.id: p.text for p in corpus.papers}
    assert cell_row(questions, cells[0][3], texts) == {
        "n_questions": 3,
        "n_with_evidence": 2,
        "evidence_recall": 0.75,  # (0.5 + 1.0) / 2
        "evidence_token_coverage": 0.0,  # the records' context text is empty
        "source_paper_recall": 0.5,  # (1 + 0.5 + 0) / 3
        "mean_units": 0.67,  # 2 / 3
        "mean_requested_chars": None,
        "mean_achieved_chars": 10,  # (20 + 10 + 0) / 3
        "n_empty_context": 1,
    }
    assert cell_row(questions, cells[1][3], texts) == {
        "n_questions": 3,
        "n_with_evidence": 2,
        "evidence_recall": 0.625,  # (0.75 + 0.5) / 2
        "evidence_token_coverage": 0.0,
        "source_paper_recall": 1.0,
        "mean_units": 2.0,  # (3 + 2 + 1) / 3
        "mean_requested_chars": 40,
        "mean_achieved_chars": 39,  # (15 + 13 + 10 + 40 + 40) / 3 = 39.33
        "n_empty_context": 0,
    }


def test_cell_row_rejects_unknown_question(tiny, tmp_path: Path) -> None:
    cdir, _ = tiny
    f = tmp_path / "bad.jsonl"
    f.write_text(json.dumps(rec("q99", [])) + "\n")
    with pytest.raises(ValueError, match="q99"):
        cell_row({"q1": q("q1", ("p1",))}, f, {})


def test_retrieval_table_writes_csv_and_markdown(tiny, tmp_path: Path) -> None:
    cdir, cells = tiny
    csv_out, md_out = tmp_path / "out" / "table.csv", tmp_path / "out" / "table.md"
    rows = retrieval_table("tiny", cdir, cells, csv_out, md_out)
    assert [(r["system"], r["modality"], r["budget"]) for r in rows] == [
        ("simple_rag", "bm25", "native"),
        ("simple_rag", "hybrid", "10K"),
    ]
    with open(csv_out, newline="") as fh:
        table = list(csv.DictReader(fh))
    assert list(table[0]) == COLUMNS
    assert table[0] == {
        "corpus": "tiny",
        "system": "simple_rag",
        "modality": "bm25",
        "budget": "native",
        "n_questions": "3",
        "n_with_evidence": "2",
        "evidence_recall": "0.75",
        "evidence_token_coverage": "0.0",
        "source_paper_recall": "0.5",
        "mean_units": "0.67",
        "mean_requested_chars": "",
        "mean_achieved_chars": "10",
        "n_empty_context": "1",
        "budget_ratio": "",  # no verdict files given
        "budget_status": "",
        "doctor": "",  # no doctor reports given
    }
    assert table[1]["budget"] == "10K"
    assert table[1]["evidence_recall"] == "0.625"
    assert table[1]["source_paper_recall"] == "1.0"
    assert table[1]["mean_units"] == "2.0"
    assert table[1]["mean_requested_chars"] == "40"
    assert table[1]["mean_achieved_chars"] == "39"
    assert table[1]["n_empty_context"] == "0"

    md = md_out.read_text()
    assert md.startswith("# Retrieval diagnostics: tiny\n")
    lines = md.splitlines()
    header = "| " + " | ".join(COLUMNS[1:]) + " |"
    i = lines.index(header)
    assert lines[i + 1] == "|" + "---|" * (len(COLUMNS) - 1)
    row2 = (
        "| simple_rag | bm25 | native | 3 | 2 | 0.75 | 0.0 | 0.5 | 0.67 | – | 10 | 1 | – | – | – |"
    )
    assert lines[i + 2] == row2
    assert (
        lines[i + 3]
        == "| simple_rag | hybrid | 10K | 3 | 2 | 0.625 | 0.0 | 1.0 | 2.0 | 40 | 39 | 0 | – | – | – |"
    )
    assert len(lines) == i + 4
    # no temporary files left beside the outputs
    assert sorted(p.name for p in csv_out.parent.iterdir()) == ["table.csv", "table.md"]


def test_retrieval_table_all_without_evidence(tmp_path: Path) -> None:
    corpus = Corpus("n", (Paper("p", "", "text"),), (q("a", ("p",)),))
    write_canonical(corpus, tmp_path / "c")
    f = tmp_path / "cell.jsonl"
    f.write_text(json.dumps(rec("a", [["p", 0, 4]])) + "\n")
    rows = retrieval_table(
        "n",
        tmp_path / "c",
        [("paper_rag", "dense", "native", f)],
        tmp_path / "t.csv",
        tmp_path / "t.md",
    )
    assert rows[0]["evidence_recall"] is None
    assert rows[0]["n_with_evidence"] == 0
    assert rows[0]["source_paper_recall"] == 1.0
    assert "| paper_rag | dense | native | 1 | 0 | – | – | 1.0 |" in (tmp_path / "t.md").read_text()


# ---------------------------------------------------------------------- text-level coverage


def test_content_tokens_keep_numbers_whole_and_drop_function_words() -> None:
    assert content_tokens("The HR was 0.82 (95% CI, 0.70-0.96) in the treated group.") == {
        "hr", "0.82", "95", "ci", "0.70", "0.96", "treated", "group"
    }  # fmt: skip


def test_evidence_token_coverage_reads_rewritten_text() -> None:
    text = "Mortality fell from 12% to 8% with aspirin."
    paper_texts = {"p1": "Intro. " + text + " More."}
    question = q("q1", ("p1",), (("p1", 7, 7 + len(text)),))
    # gold content tokens: mortality fell 12 8 aspirin (5; "from" and "with" are function
    # words); the rewritten fact keeps 4 of them
    fact = {
        "context": "Aspirin lowered mortality from 12 to 8 percent.",
        "spans": [["p1", None, None]],
    }
    assert evidence_token_coverage(question, fact, paper_texts) == 0.8
    assert evidence_recall(question, fact) is None  # no character spans: n/a, never 0
    assert evidence_token_coverage(q("q2", ("p1",)), fact, paper_texts) is None


def test_a_doctor_that_failed_under_warn_is_marked_on_its_rows(tiny, tmp_path: Path) -> None:
    cdir, cells = tiny
    report = tmp_path / "doctor.json"
    report.write_text(json.dumps({"ok": False, "gate": "warn", "checks": [
        {"name": "probe_context", "ok": False}, {"name": "channels", "ok": None},
        {"name": "item_count", "ok": True}]}))  # fmt: skip
    rows = retrieval_table("tiny", cdir, cells, tmp_path / "t.csv", tmp_path / "t.md",
                           doctor_reports={"simple_rag": report})  # fmt: skip
    assert {r["doctor"] for r in rows} == {"FAILED: probe_context"}
    assert "FAILED: probe_context" in (tmp_path / "t.md").read_text()
