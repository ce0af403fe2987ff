"""Evidence Inference 2.0 conversion: the CC-BY release and the shipped default corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from srb.data.canonical import load_canonical
from srb.data.evidence_inference import LABELS, gold_answer, load_evidence_inference
from srb.data.schema import DataError, EvidenceSpan

REPO = Path(__file__).parents[1]
RELEASE = REPO / ".." / "shared" / "data" / "evidence-inference-ccby"
SHIPPED = REPO / "resources" / "corpora" / "evidence-inference-ccby"
NAME = "evidence-inference-ccby"


@pytest.fixture(scope="module")
def release():
    if not (RELEASE / "papers").is_dir():
        pytest.skip(f"Evidence Inference release not present at {RELEASE}")
    return load_evidence_inference(RELEASE, name=NAME)


@pytest.fixture(scope="module")
def raw_records() -> list[dict]:
    qfile = RELEASE / "questions.jsonl"
    if not qfile.is_file():
        pytest.skip(f"Evidence Inference release not present at {RELEASE}")
    return [json.loads(line) for line in qfile.read_text(encoding="utf-8").splitlines() if line]


def test_release_counts(release) -> None:
    assert len(release.papers) == 49
    assert len(release.questions) == 129
    assert len({p.id for p in release.papers}) == 49
    assert len({q.id for q in release.questions}) == 129
    assert all(p.id.startswith("PMC") and p.text.strip() for p in release.papers)
    assert all(p.licence for p in release.papers)  # every article carries its CC-BY statement


def test_release_evidence_spans_are_verbatim(release, raw_records) -> None:
    papers = release.paper_index()
    questions = {q.id: q for q in release.questions}
    assert set(questions) == {str(r["prompt_id"]) for r in raw_records}
    n_spans = 0
    for r in raw_records:
        question = questions[str(r["prompt_id"])]
        text = papers[r["pmcid"]].text
        assert question.paper_ids == (r["pmcid"],)
        for ev in r["evidence"]:
            assert text[ev["start"] : ev["end"]] == ev["text"]
            assert EvidenceSpan(r["pmcid"], ev["start"], ev["end"]) in question.evidence
            n_spans += 1
        # duplicate annotated spans are kept once
        assert len(question.evidence) == len({(e["start"], e["end"]) for e in r["evidence"]})
        assert question.evidence
        for span in question.evidence:
            assert span.paper_id == r["pmcid"]
            assert 0 <= span.start < span.end <= len(text)
    assert n_spans >= 129


def test_release_labels_and_answers(release, raw_records) -> None:
    by_id = {str(r["prompt_id"]): r for r in raw_records}
    for question in release.questions:
        r = by_id[question.id]
        assert question.gold_label in LABELS
        assert question.gold_label == r["majority_label"]
        assert question.must_have[0] == f"Reported difference: {question.gold_label}"
        assert question.question == r["question"]
        assert question.tier == "L1"
        assert question.types == ("factual", "comparative")
        assert question.gold_answer == gold_answer(
            r["intervention"], r["comparator"], r["outcome"], r["majority_label"]
        )
        assert question.meta["outcome"] == r["outcome"].strip()
    assert {q.gold_label for q in release.questions} == set(LABELS)


def test_gold_answer_wording() -> None:
    assert gold_answer(" aspirin ", "placebo ", " pain ", "significantly decreased") == (
        "aspirin significantly decreased pain compared with placebo."
    )
    assert gold_answer("A", "B", "sleep", "significantly increased") == (
        "A significantly increased sleep compared with B."
    )
    assert gold_answer("A", "B", "sleep", "no significant difference") == (
        "There was no significant difference in sleep between A and B."
    )


def test_shipped_corpus_equals_fresh_conversion(release) -> None:
    shipped = load_canonical(SHIPPED)
    assert shipped.name == NAME
    assert [p.id for p in shipped.papers] == [p.id for p in release.papers]
    for a, b in zip(shipped.papers, release.papers, strict=True):
        assert a.text == b.text, a.id
        assert (a.title, a.source, a.licence) == (b.title, b.source, b.licence), a.id
    assert [q.id for q in shipped.questions] == [q.id for q in release.questions]
    for a, b in zip(shipped.questions, release.questions, strict=True):
        assert a == b, a.id
        assert a.meta == b.meta, a.id
    m = shipped.manifest
    assert (m["n_papers"], m["n_questions"]) == (49, 129)
    assert m["n_characters"] == sum(len(p.text) for p in release.papers)


def test_shipped_corpus_loads_without_release() -> None:
    shipped = load_canonical(SHIPPED)
    assert len(shipped.papers) == 49 and len(shipped.questions) == 129
    assert all(q.gold_label in LABELS for q in shipped.questions)


# ---------------------------------------------------------------------- synthetic release


FAKE_TEXT = "TITLE: \nT\n\nBODY.RESULTS:\nX rose with Y.\n"
FAKE_START = FAKE_TEXT.index("X rose")  # 25
FAKE_END = FAKE_START + len("X rose with Y.")


def fake_release(tmp_path: Path, evidence_text: str, label: str = "significantly increased"):
    root = tmp_path / "ei"
    (root / "papers").mkdir(parents=True)
    (root / "papers" / "PMC1.txt").write_text(FAKE_TEXT)
    rec = {
        "prompt_id": "7",
        "pmcid": "PMC1",
        "question": "With respect to X, characterize ...",
        "outcome": "X",
        "intervention": "Y",
        "comparator": "Z",
        "labels": [label],
        "majority_label": label,
        "evidence": [
            {"text": evidence_text, "start": FAKE_START, "end": FAKE_END},
            {"text": evidence_text, "start": FAKE_START, "end": FAKE_END},  # duplicate
        ],
    }
    (root / "questions.jsonl").write_text(json.dumps(rec) + "\n")
    return root


def test_synthetic_release_converts(tmp_path: Path) -> None:
    c = load_evidence_inference(fake_release(tmp_path, "X rose with Y."), name="fake")
    assert c.name == "fake"
    (paper,) = c.papers
    assert (paper.id, paper.text) == ("PMC1", FAKE_TEXT)
    (question,) = c.questions
    assert question.id == "7"
    assert question.evidence == (EvidenceSpan("PMC1", 25, 39),)  # duplicate dropped
    assert question.must_have == ("Reported difference: significantly increased", "X rose with Y.")
    assert question.gold_answer == "Y significantly increased X compared with Z."


def test_synthetic_release_rejects_misplaced_evidence(tmp_path: Path) -> None:
    with pytest.raises(DataError, match=r"record 7, field 'evidence\[0\]'"):
        load_evidence_inference(fake_release(tmp_path, "something else!"))


def test_synthetic_release_rejects_unknown_label(tmp_path: Path) -> None:
    root = fake_release(tmp_path, "X rose with Y.", label="maybe")
    with pytest.raises(DataError, match="majority_label"):
        load_evidence_inference(root)
