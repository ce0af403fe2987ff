"""The direction-label rule against answers labelled by a careful reader (issue 8, item 1).

tests/fixtures/label_answers.jsonl holds 98 real answers of the default run (SmolLM2-135M on
evidence-inference-ccby, 20 questions): 7 per cell, drawn with random.Random(f"8:{cell}") from
each of the 14 cells (base, direct_read, simple_rag x bm25/dense/hybrid x native/1K/2K/5K).
Each was labelled by reading it, before any rule was run on it: the direction the answer states
for the question's outcome (intervention vs comparator), or null when it states none, hedges
without committing, asserts conflicting directions, or speaks of another outcome or comparison;
`note` says why. The rule sees only the answer, so the few answers about another outcome stay
disagreements by design; the README reports the confusion matrix.

Two rule changes were made after looking at its misses on that fixture, so a held-out set was
labelled the same way, before any rule ran on it, and never tuned on:
tests/fixtures/label_answers_heldout.jsonl (28 answers, 2 per cell, random.Random(9)).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from srb.data import schema
from srb.judge import label_from_answer

FIXTURE = Path(__file__).resolve().parent / "fixtures" / "label_answers.jsonl"
HELDOUT = FIXTURE.with_name("label_answers_heldout.jsonl")
MIN_AGREEMENT = 0.90


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    with FIXTURE.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def test_fixture_is_well_formed(rows: list[dict]) -> None:
    assert len(rows) >= 60
    keys = {"question_id", "cell", "question", "answer", "reader_label", "note"}
    for r in rows:
        assert set(r) == keys, r.get("question_id")
        assert r["reader_label"] in (*schema.GOLD_LABELS, None), r["reader_label"]
        assert r["note"].strip()
    cells = Counter(r["cell"].split("/")[0] for r in rows)
    assert cells["base"] and cells["direct_read"] and cells["simple_rag"], cells
    assert len({(r["cell"], r["question_id"]) for r in rows}) == len(rows)


def test_rule_agrees_with_reader(rows: list[dict]) -> None:
    confusion = Counter((r["reader_label"], label_from_answer(r["answer"])) for r in rows)
    agreement = sum(n for (reader, rule), n in confusion.items() if reader == rule) / len(rows)
    misses = sorted(
        (f"{reader} -> {rule}: {n}" for (reader, rule), n in confusion.items() if reader != rule)
    )
    assert agreement >= MIN_AGREEMENT, f"agreement {agreement:.3f}; reader -> rule: {misses}"


def test_rule_agrees_with_reader_on_held_out_answers() -> None:
    with HELDOUT.open(encoding="utf-8") as f:
        held = [json.loads(line) for line in f if line.strip()]
    assert len(held) == 28
    assert all(r["reader_label"] in (*schema.GOLD_LABELS, None) for r in held)
    agree = sum(label_from_answer(r["answer"]) == r["reader_label"] for r in held)
    assert agree / len(held) >= MIN_AGREEMENT, f"{agree} of {len(held)}"
