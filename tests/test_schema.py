"""Canonical records: DataError locations, write/load round trip, and config checks."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from srb.config import ConfigError, check_config
from srb.data.canonical import MANIFEST, PAPERS, QUESTIONS, load_canonical, write_canonical
from srb.data.schema import Corpus, DataError, EvidenceSpan, Paper, Question

TEXT1 = "Aspirin reduced pain in 40% of patients. Placebo did nothing."
TEXT2 = "Statins did not change mortality."


def paper(**kw: Any) -> dict[str, Any]:
    return {"id": "p1", "title": "Aspirin", "text": TEXT1, **kw}


def question(**kw: Any) -> dict[str, Any]:
    rec = {
        "id": "q1",
        "question": "Did aspirin reduce pain?",
        "gold_answer": "Yes, in 40% of patients.",
        "must_have": ["40%"],
        "paper_ids": ["p1"],
        "tier": "L1",
        "types": ["factual"],
        "evidence": [{"paper_id": "p1", "start": 0, "end": 40}],
    }
    rec.update(kw)
    return rec


def write(
    tmp_path: Path, papers: list[Any] | str, questions: list[Any] | str
) -> tuple[Path, Path, Path]:
    d = tmp_path / "corpus"
    d.mkdir(exist_ok=True)
    pf, qf = d / PAPERS, d / QUESTIONS
    for f, recs in ((pf, papers), (qf, questions)):
        if isinstance(recs, str):
            f.write_text(recs, encoding="utf-8")
        else:
            f.write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return d, pf, qf


def load_error(tmp_path: Path, papers, questions) -> tuple[DataError, Path, Path]:
    d, pf, qf = write(tmp_path, papers, questions)
    with pytest.raises(DataError) as ei:
        load_canonical(d)
    return ei.value, pf, qf


def assert_located(err: DataError, file: Path, record: Any, field: str | None) -> None:
    msg = str(err)
    assert err.file == str(file)
    assert err.record == record
    assert err.field == field
    assert str(file) in msg
    assert f"record {record}" in msg
    if field is not None:
        assert f"field '{field}'" in msg


# ---------------------------------------------------------------------- a valid corpus


def test_valid_corpus_loads(tmp_path: Path) -> None:
    d, _, _ = write(tmp_path, [paper(), paper(id="p2", text=TEXT2)], [question()])
    c = load_canonical(d)
    assert c.name == "corpus"
    assert [p.id for p in c.papers] == ["p1", "p2"]
    q = c.questions[0]
    assert q.paper_ids == ("p1",)
    assert q.evidence == (EvidenceSpan("p1", 0, 40),)
    assert TEXT1[0:40] == "Aspirin reduced pain in 40% of patients."


# ---------------------------------------------------------------------- located errors


def test_invalid_json_line(tmp_path: Path) -> None:
    papers = json.dumps(paper()) + "\n\n" + '{"id": "p2", "text": \n'
    err, pf, _ = load_error(tmp_path, papers, [question()])
    assert_located(err, pf, "line 3", None)
    assert "invalid JSON" in str(err)


def test_invalid_json_in_questions(tmp_path: Path) -> None:
    err, _, qf = load_error(tmp_path, [paper()], json.dumps(question()) + "\nnot json\n")
    assert_located(err, qf, "line 2", None)


def test_a_line_that_is_not_utf8_is_named(tmp_path: Path) -> None:
    d, pf, _ = write(tmp_path, [paper()], [question()])
    with open(pf, "ab") as fh:  # a Latin-1 line: "Caf\xe9"
        fh.write(json.dumps({"id": "p2", "text": "Caf"}).encode()[:-2] + b'\xe9"}\n')
    with pytest.raises(DataError) as ei:
        load_canonical(d)
    assert_located(ei.value, pf, "line 2", None)
    # the 25 characters {"id": "p2", "text": "Caf come first
    assert "not UTF-8 (byte 0xe9 at column 26)" in str(ei.value)


def test_a_byte_order_mark_is_named(tmp_path: Path) -> None:
    papers = "\ufeff" + json.dumps(paper()) + "\n"
    err, pf, _ = load_error(tmp_path, papers, [question()])
    assert_located(err, pf, "line 1", None)
    assert "BOM" in str(err)


@pytest.mark.parametrize("where", ["paper", "question"])
def test_a_nul_character_is_refused(tmp_path: Path, where: str) -> None:
    if where == "paper":
        err, pf, _ = load_error(tmp_path, [paper(text=TEXT1 + "\x00tail")], [question()])
        assert_located(err, pf, "p1", "text")
        assert f"NUL character at offset {len(TEXT1)}" in str(err)
    else:
        err, _, qf = load_error(tmp_path, [paper()], [question(question="Why\x00?")])
        assert_located(err, qf, "q1", "question")
        assert "NUL character at offset 3" in str(err)


def test_missing_paper_id(tmp_path: Path) -> None:
    rec = paper()
    del rec["id"]
    err, pf, _ = load_error(tmp_path, [paper(id="p0"), rec], [question(paper_ids=["p0"])])
    assert_located(err, pf, 2, "id")
    assert "missing required field" in str(err)


def test_missing_question_id(tmp_path: Path) -> None:
    rec = question()
    del rec["id"]
    err, _, qf = load_error(tmp_path, [paper()], [question(id="q0"), question(id="q2"), rec])
    assert_located(err, qf, 3, "id")


def test_non_string_id(tmp_path: Path) -> None:
    err, pf, _ = load_error(tmp_path, [paper(id=17)], [question()])
    assert_located(err, pf, 17, "id")
    assert "expected str, got int" in str(err)


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_paper_text(tmp_path: Path, text: str) -> None:
    err, pf, _ = load_error(tmp_path, [paper(), paper(id="p2", text=text)], [question()])
    assert_located(err, pf, "p2", "text")
    assert "empty paper" in str(err)


def test_duplicate_paper_id(tmp_path: Path) -> None:
    err, pf, _ = load_error(tmp_path, [paper(), paper(text=TEXT2)], [question()])
    assert_located(err, pf, "p1", "id")
    assert "duplicate paper id" in str(err)


def test_duplicate_question_id(tmp_path: Path) -> None:
    err, _, qf = load_error(tmp_path, [paper()], [question(), question(id="q2"), question()])
    assert_located(err, qf, "q1", "id")
    assert "duplicate question id" in str(err)


def test_question_cites_unknown_paper(tmp_path: Path) -> None:
    err, _, qf = load_error(tmp_path, [paper()], [question(paper_ids=["p1", "p404"])])
    assert_located(err, qf, "q1", "paper_ids")
    assert "'p404'" in str(err)


def test_evidence_in_unknown_paper(tmp_path: Path) -> None:
    ev = [{"paper_id": "p1", "start": 0, "end": 5}, {"paper_id": "p9", "start": 0, "end": 5}]
    err, _, qf = load_error(tmp_path, [paper()], [question(evidence=ev)])
    assert_located(err, qf, "q1", "evidence[1].paper_id")


def test_evidence_end_outside_paper(tmp_path: Path) -> None:
    n = len(TEXT1)
    ev = [{"paper_id": "p1", "start": 0, "end": n}, {"paper_id": "p1", "start": 5, "end": n + 1}]
    err, _, qf = load_error(tmp_path, [paper()], [question(evidence=ev)])
    assert_located(err, qf, "q1", "evidence[1].end")
    assert f"offset {n + 1}" in str(err) and f"({n} characters)" in str(err)


@pytest.mark.parametrize(("start", "end"), [(10, 10), (10, 5), (-1, 5)])
def test_evidence_bad_span(tmp_path: Path, start: int, end: int) -> None:
    ev = [{"paper_id": "p1", "start": start, "end": end}]
    err, _, qf = load_error(tmp_path, [paper()], [question(evidence=ev)])
    assert_located(err, qf, "q1", "evidence[0]")
    assert f"bad span [{start}, {end})" in str(err)


def test_evidence_missing_key_and_wrong_type(tmp_path: Path) -> None:
    err, _, qf = load_error(
        tmp_path, [paper()], [question(evidence=[{"paper_id": "p1", "start": 0}])]
    )
    assert_located(err, qf, "q1", "evidence[0].end")
    err, _, qf = load_error(
        tmp_path, [paper()], [question(evidence=[{"paper_id": "p1", "start": "0", "end": 4}])]
    )
    assert_located(err, qf, "q1", "evidence[0].start")


def test_unknown_tier(tmp_path: Path) -> None:
    err, _, qf = load_error(tmp_path, [paper()], [question(), question(id="q2", tier="L4")])
    assert_located(err, qf, "q2", "tier")
    assert "'L4'" in str(err)


@pytest.mark.parametrize("label", ["Significantly increased", "increased", "no difference", ""])
def test_unknown_gold_label(tmp_path: Path, label: str) -> None:
    # anything but the three direction labels could never be matched by the label reader, so it
    # would score every answer to that question 0 without a word
    err, _, qf = load_error(tmp_path, [paper()], [question(), question(id="q2", gold_label=label)])
    assert_located(err, qf, "q2", "gold_label")
    assert repr(label) in str(err) and "no significant difference" in str(err)


def test_known_gold_labels_load(tmp_path: Path) -> None:
    labels = ["significantly increased", "significantly decreased", "no significant difference"]
    qs = [question(id=f"q{i}", gold_label=g) for i, g in enumerate([*labels, None])]
    d, _, _ = write(tmp_path, [paper()], qs)
    assert [q.gold_label for q in load_canonical(d).questions] == [*labels, None]


def test_unknown_type(tmp_path: Path) -> None:
    err, _, qf = load_error(tmp_path, [paper()], [question(types=["factual", "telepathic"])])
    assert_located(err, qf, "q1", "types")
    assert "telepathic" in str(err)


@pytest.mark.parametrize("value", ["p1", {"p1": 1}, [1, 2], ["p1", None]])
def test_non_list_paper_ids(tmp_path: Path, value: Any) -> None:
    err, _, qf = load_error(tmp_path, [paper()], [question(paper_ids=value)])
    assert_located(err, qf, "q1", "paper_ids")
    assert "expected a list of strings" in str(err)


def test_empty_paper_ids(tmp_path: Path) -> None:
    err, _, qf = load_error(tmp_path, [paper()], [question(paper_ids=[])])
    assert_located(err, qf, "q1", "paper_ids")


def test_missing_corpus_file(tmp_path: Path) -> None:
    d = tmp_path / "c"
    d.mkdir()
    (d / PAPERS).write_text(json.dumps(paper()) + "\n")
    with pytest.raises(DataError, match="missing corpus file") as ei:
        load_canonical(d)
    assert ei.value.file == str(d / QUESTIONS)
    with pytest.raises(DataError, match="does not exist"):
        load_canonical(tmp_path / "nowhere")


# ---------------------------------------------------------------------- round trip


def sample_corpus(name: str = "tiny") -> Corpus:
    papers = (
        Paper("p1", "Aspirin", TEXT1, source="PMC1", licence="CC-BY 4.0"),
        Paper("p2", "Statins", TEXT2 + "\nµ ± – unicode survives"),
    )
    questions = (
        Question(
            id="q1",
            question="Did aspirin reduce pain?",
            gold_answer="Yes.",
            must_have=("40%", "pain"),
            paper_ids=("p1",),
            tier="L1",
            types=("factual", "quantitative"),
            evidence=(EvidenceSpan("p1", 0, 40), EvidenceSpan("p1", 41, 61)),
            gold_label="significantly decreased",
            meta={"outcome": "pain", "labels": ["a", "b"]},
        ),
        Question(
            id="q2",
            question="Compare the two trials.",
            gold_answer="",
            must_have=(),
            paper_ids=("p1", "p2"),
            tier="L3",
            types=("cross-document", "comparative"),
        ),
    )
    return Corpus(name, papers, questions, manifest={"description": "hand-made"})


def test_write_then_load_round_trip(tmp_path: Path) -> None:
    c = sample_corpus()
    write_canonical(c, tmp_path / "out")
    assert sorted(f.name for f in (tmp_path / "out").iterdir()) == sorted(
        [PAPERS, QUESTIONS, MANIFEST]
    )
    back = load_canonical(tmp_path / "out")
    assert back == c
    assert back.name == "tiny"  # from the manifest, not the directory
    assert back.papers == c.papers
    assert back.questions == c.questions
    assert [q.meta for q in back.questions] == [q.meta for q in c.questions]
    m = back.manifest
    assert m["description"] == "hand-made"
    assert (m["n_papers"], m["n_questions"]) == (2, 2)
    assert m["n_characters"] == len(TEXT1) + len(c.papers[1].text)
    # writing again is byte-identical
    before = {f.name: f.read_bytes() for f in (tmp_path / "out").iterdir()}
    write_canonical(back, tmp_path / "out")
    assert {f.name: f.read_bytes() for f in (tmp_path / "out").iterdir()} == before


@pytest.mark.parametrize(
    "broken",
    [
        lambda c: Corpus(c.name, (*c.papers, c.papers[0]), c.questions),  # duplicate paper
        lambda c: Corpus(c.name, c.papers, (*c.questions, c.questions[0])),  # duplicate question
        lambda c: Corpus(c.name, c.papers[1:], c.questions),  # q1 cites a missing paper
        lambda c: Corpus(c.name, c.papers, ()),  # no questions
        lambda c: Corpus(
            c.name,
            c.papers,
            (Question("q9", "Q?", "", (), ("p2",), evidence=(EvidenceSpan("p2", 0, 10_000),)),),
        ),  # evidence outside the paper
    ],
)
def test_failed_write_leaves_no_files(tmp_path: Path, broken) -> None:
    out = tmp_path / "out"
    with pytest.raises(DataError):
        write_canonical(broken(sample_corpus()), out)
    assert not out.exists() or list(out.iterdir()) == []


def test_failed_write_keeps_previous_corpus(tmp_path: Path) -> None:
    out = tmp_path / "out"
    write_canonical(sample_corpus(), out)
    before = {f.name: f.read_bytes() for f in out.iterdir()}
    c = sample_corpus()
    with pytest.raises(DataError):
        write_canonical(Corpus("x", (*c.papers, c.papers[0]), c.questions), out)
    assert {f.name: f.read_bytes() for f in out.iterdir()} == before


@pytest.mark.parametrize(
    "broken",
    [
        Corpus("x", (Paper("p", "", "   "),), (Question("q", "Q?", "", (), ("p",)),)),
        Corpus("x", (Paper("p", "", "text"),), (Question("q", "Q?", "", (), ("p",), tier="L9"),)),
        Corpus(
            "x",
            (Paper("p", "", "text"),),
            (Question("q", "Q?", "", (), ("p",), evidence=(EvidenceSpan("p", 3, 1),)),),
        ),
    ],
    ids=["blank-text", "bad-tier", "reversed-span"],
)
def test_write_rejects_what_load_would_reject(tmp_path: Path, broken: Corpus) -> None:
    out = tmp_path / "out"
    with pytest.raises(DataError):
        write_canonical(broken, out)
    assert not out.exists() or list(out.iterdir()) == []


# ---------------------------------------------------------------------- config


def good_config() -> dict[str, Any]:
    return {
        "corpora": ["ei"],
        "corpus_sources": {"ei": {"loader": "canonical", "path": "resources/corpora/x"}},
        "systems": ["simple_rag", "section_rag", "paper_rag"],
        "budgets": ["native", "10K", "30K", 2500],
    }


def test_good_config_passes() -> None:
    check_config(good_config())


def test_shipped_config_passes() -> None:
    yaml = pytest.importorskip("yaml")
    path = Path(__file__).parents[1] / "config" / "config.yaml"
    check_config(yaml.safe_load(path.read_text()), source=str(path))


def test_unknown_system() -> None:
    cfg = good_config()
    cfg["systems"].append("mem0")
    with pytest.raises(ConfigError, match=r"^my.yaml: systems: unknown system 'mem0'") as ei:
        check_config(cfg, source="my.yaml")
    assert "simple_rag" in str(ei.value)


@pytest.mark.parametrize("budget", ["-10K", -5, "-5", 0, "10X", "", "lots"])
def test_bad_budget(budget: Any) -> None:
    cfg = good_config()
    cfg["budgets"].append(budget)
    with pytest.raises(ConfigError, match=r"^config: budgets: ") as ei:
        check_config(cfg)
    assert ei.value.__cause__ is None


def test_published_loader_needs_published_name() -> None:
    cfg = good_config()
    cfg["corpus_sources"]["pub"] = {"loader": "published", "path": "../shared/x"}
    with pytest.raises(
        ConfigError,
        match=r"^config: corpus_sources\.pub: the published loader needs 'published_name'",
    ):
        check_config(cfg)
    cfg["corpus_sources"]["pub"]["published_name"] = "public_ai_memory"
    check_config(cfg)


def test_corpus_without_source() -> None:
    cfg = good_config()
    cfg["corpora"].append("nope")
    with pytest.raises(ConfigError, match=r"^config: corpora: 'nope' has no entry"):
        check_config(cfg)


@pytest.mark.parametrize(
    ("spec", "needs"),
    [
        ({"loader": "canonical"}, "path"),
        ({}, "path"),  # canonical is the default loader
        ({"loader": "evidence_inference"}, "path"),
        ({"loader": "hf"}, "'path' or 'source'"),
    ],
)
def test_loader_needs_path(spec: dict[str, Any], needs: str) -> None:
    cfg = good_config()
    cfg["corpus_sources"]["c2"] = spec
    with pytest.raises(ConfigError, match=r"^config: corpus_sources\.c2: ") as ei:
        check_config(cfg)
    assert needs in str(ei.value)
