"""The Hugging Face loader on local datasets (save_to_disk and a jsonl directory), offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

datasets = pytest.importorskip("datasets")

from srb.data.hf import load_hf  # noqa: E402
from srb.data.schema import DataError, EvidenceSpan  # noqa: E402

PAPERS = [
    {"doc_id": 101, "heading": "Aspirin trial", "body": "Aspirin reduced pain in 40% of patients."},
    {"doc_id": 102, "heading": "Statin trial", "body": "Statins did not change mortality."},
]
QUESTIONS = [
    {
        "qid": 1,
        "query": "Did aspirin reduce pain?",
        "answer": "Yes, in 40% of patients.",
        "facts": "reduced pain in 40%",  # a string column for a list field
        "docs": [101],
        "level": 2,
        "kind": ["Factual", "quantitative"],
        "spans": [{"paper_id": 101, "start": 8, "end": 20}],
        "label": "significantly decreased",
    },
    {
        "qid": 2,
        "query": "Did statins change mortality?",
        "answer": None,
        "facts": "no change",
        "docs": [102, 101],
        "level": None,
        "kind": ["Negative "],
        "spans": [],
        "label": None,
    },
]
Q_COLUMNS = {
    "id": "qid",
    "question": "query",
    "gold_answer": "answer",
    "must_have": "facts",
    "paper_ids": "docs",
    "tier": "level",
    "types": "kind",
    "evidence": "spans",
    "gold_label": "label",
}
P_COLUMNS = {"id": "doc_id", "title": "heading", "text": "body"}


@pytest.fixture(autouse=True)
def _offline_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the datasets cache inside tmp_path and make any Hub access fail at once."""
    import huggingface_hub.constants

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", tmp_path / "hf-cache")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    root = tmp_path / "saved"
    datasets.Dataset.from_list(PAPERS).save_to_disk(str(root / "papers"))
    datasets.DatasetDict(
        {
            "test": datasets.Dataset.from_list(QUESTIONS),
            "train": datasets.Dataset.from_list(QUESTIONS[:1]),
        }
    ).save_to_disk(str(root / "questions"))
    return root


@pytest.fixture
def jsonl_dir(tmp_path: Path) -> Path:
    root = tmp_path / "jsonl"
    root.mkdir()
    with open(root / "papers.jsonl", "w", encoding="utf-8") as fh:
        for p in PAPERS:
            fh.write(
                json.dumps({"id": p["doc_id"], "text": p["body"], "title": p["heading"]}) + "\n"
            )
    qdir = root / "questions"
    qdir.mkdir()
    for split, rows in (("train", QUESTIONS[:1]), ("test", QUESTIONS)):
        with open(qdir / f"{split}.jsonl", "w", encoding="utf-8") as fh:
            for q in rows:
                fh.write(json.dumps(q) + "\n")
    return root


def test_save_to_disk(saved: Path) -> None:
    corpus = load_hf(
        str(saved / "papers"),
        {"columns": P_COLUMNS},
        {"source": str(saved / "questions"), "split": "test", "columns": Q_COLUMNS},
        name="toy",
    )
    assert corpus.name == "toy"
    assert [p.id for p in corpus.papers] == ["101", "102"]  # ints cast to strings
    assert corpus.papers[0].title == "Aspirin trial"
    assert corpus.papers[0].text == PAPERS[0]["body"]
    assert corpus.papers[0].source == f"hf:{saved / 'papers'}[train]"

    q1, q2 = corpus.questions
    assert q1.id == "1"
    assert q1.question == "Did aspirin reduce pain?"
    assert q1.gold_answer == "Yes, in 40% of patients."
    assert q1.must_have == ("reduced pain in 40%",)  # single string became a 1-item list
    assert q1.paper_ids == ("101",)
    assert q1.tier == "L2"
    assert q1.types == ("factual", "quantitative")
    assert q1.evidence == (EvidenceSpan("101", 8, 20),)
    assert corpus.papers[0].text[8:20] == "reduced pain"
    assert q1.gold_label == "significantly decreased"
    assert q1.meta["hf_source"] == f"hf:{saved / 'questions'}[test]"

    assert q2.gold_answer == ""
    assert q2.paper_ids == ("102", "101")
    assert q2.tier == "L1"  # missing tier defaults to L1
    assert q2.types == ("negative",)
    assert q2.evidence == ()
    assert q2.gold_label is None


def test_jsonl_directory_picks_split_files(jsonl_dir: Path) -> None:
    papers = {"data_files": "papers.jsonl", "columns": {}}  # columns already canonical
    train = load_hf(
        str(jsonl_dir),
        papers,
        {"source": str(jsonl_dir / "questions"), "columns": Q_COLUMNS},
        name="toy",
    )
    assert [p.id for p in train.papers] == ["101", "102"]
    assert train.papers[1].title == "Statin trial"
    assert [q.id for q in train.questions] == ["1"]

    test = load_hf(
        str(jsonl_dir),
        papers,
        {"source": str(jsonl_dir / "questions"), "split": "test", "columns": Q_COLUMNS},
        name="toy",
    )
    assert [q.id for q in test.questions] == ["1", "2"]
    assert test.questions[0].evidence == (EvidenceSpan("101", 8, 20),)


def test_single_jsonl_file(jsonl_dir: Path) -> None:
    corpus = load_hf(
        str(jsonl_dir / "papers.jsonl"),
        {},
        {"source": str(jsonl_dir / "questions" / "test.jsonl"), "columns": Q_COLUMNS},
        name="toy",
    )
    assert len(corpus.questions) == 2


def test_unknown_column_lists_available(saved: Path) -> None:
    with pytest.raises(DataError) as err:
        load_hf(
            str(saved / "papers"), {"columns": {"id": "doc_id", "text": "content"}}, {}, name="x"
        )
    assert err.value.field == "columns.text"
    assert "'content'" in str(err.value)
    assert "available columns: doc_id, heading, body" in str(err.value)


def test_unknown_canonical_field(saved: Path) -> None:
    with pytest.raises(DataError, match="not a canonical field") as err:
        load_hf(str(saved / "papers"), {"columns": {"body": "body"}}, {}, name="x")
    assert err.value.field == "columns.body"


def test_missing_required_field_is_named(saved: Path) -> None:
    columns = {k: v for k, v in Q_COLUMNS.items() if k != "question"}
    with pytest.raises(DataError) as err:
        load_hf(
            str(saved / "papers"),
            {"columns": P_COLUMNS},
            {"source": str(saved / "questions"), "split": "test", "columns": columns},
            name="x",
        )
    assert err.value.field == "question"
    assert err.value.record == "1"
    assert err.value.file == f"hf:{saved / 'questions'}[test]"
    assert "missing required field" in str(err.value)


def test_missing_paper_text_is_named(saved: Path) -> None:
    with pytest.raises(DataError) as err:
        load_hf(str(saved / "papers"), {"columns": {"id": "doc_id"}}, {}, name="x")
    assert (err.value.field, err.value.record) == ("text", "101")


def test_unknown_split_lists_splits(saved: Path) -> None:
    with pytest.raises(DataError, match="available splits: test, train") as err:
        load_hf(
            str(saved / "papers"),
            {"columns": P_COLUMNS},
            {"source": str(saved / "questions"), "split": "validation", "columns": Q_COLUMNS},
            name="x",
        )
    assert err.value.field == "split"


def test_question_citing_unknown_paper(saved: Path, tmp_path: Path) -> None:
    bad = [dict(QUESTIONS[0], docs=[999])]
    datasets.Dataset.from_list(bad).save_to_disk(str(tmp_path / "badq"))
    with pytest.raises(DataError, match="cites unknown paper '999'"):
        load_hf(
            str(saved / "papers"),
            {"columns": P_COLUMNS},
            {"source": str(tmp_path / "badq"), "columns": Q_COLUMNS},
            name="x",
        )


def test_uncached_hub_id_is_a_clear_error(saved: Path) -> None:
    with pytest.raises(DataError, match="not in the local cache") as err:
        load_hf("no-such-owner-srb/no-such-dataset", {}, {}, name="x")
    assert err.value.file == "no-such-owner-srb/no-such-dataset"


def test_missing_local_path(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="local dataset path does not exist"):
        load_hf(str(tmp_path / "nowhere"), {}, {}, name="x")


def test_sequence_of_struct_evidence(saved: Path, tmp_path: Path) -> None:
    """`Sequence({...})` features decode to a dict of lists; spans must still come through."""
    span = datasets.Sequence(
        {
            "paper_id": datasets.Value("int64"),
            "start": datasets.Value("int64"),
            "end": datasets.Value("int64"),
        }
    )
    features = datasets.Features(
        {
            "qid": datasets.Value("string"),
            "query": datasets.Value("string"),
            "docs": datasets.Sequence(datasets.Value("int64")),
            "spans": span,
        }
    )
    rows = {
        "qid": ["q1"],
        "query": ["Did statins change mortality?"],
        "docs": [[102]],
        "spans": [{"paper_id": [102, 102], "start": [0, 8], "end": [7, 12]}],
    }
    datasets.Dataset.from_dict(rows, features=features).save_to_disk(str(tmp_path / "seqq"))
    corpus = load_hf(
        str(saved / "papers"),
        {"columns": P_COLUMNS},
        {
            "source": str(tmp_path / "seqq"),
            "columns": {"id": "qid", "question": "query", "paper_ids": "docs", "evidence": "spans"},
        },
        name="x",
    )
    assert corpus.questions[0].evidence == (
        EvidenceSpan("102", 0, 7),
        EvidenceSpan("102", 8, 12),
    )
    assert corpus.paper_index()["102"].text[0:7] == "Statins"
