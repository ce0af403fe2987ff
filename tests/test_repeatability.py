import json
from pathlib import Path

import pytest

from srb.repeatability import compare_cell, compare_cells, jaccard, read_cell


def record(qid: str, units: list[str]) -> dict:
    return {"question_id": qid, "unit_ids": units, "context": "\n\n".join(units)}


def write_cell(path: Path, records: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))


def test_jaccard_of_unit_sets():
    assert jaccard(["a", "b"], ["b", "a"]) == 1.0
    assert jaccard(["a", "b"], ["b", "c"]) == pytest.approx(1 / 3)
    assert jaccard([], []) == 1.0


def test_reordered_units_change_the_context_but_not_the_set():
    reference = {"q1": record("q1", ["a", "b"]), "q2": record("q2", ["c", "d"])}
    rebuilt = {"q1": record("q1", ["b", "a"]), "q2": record("q2", ["c", "e"])}
    change = compare_cell("hindsight/recall/1K", reference, rebuilt)
    assert (change.questions, change.same_context, change.same_set) == (2, 0, 1)
    assert change.mean_jaccard == pytest.approx((1.0 + 1 / 3) / 2, abs=1e-4)
    assert not change.identical


def test_an_unchanged_cell_is_identical():
    reference = {"q1": record("q1", ["a", "b"])}
    change = compare_cell("mem0/dense/native", reference, dict(reference))
    assert change.identical
    assert change.to_dict()["identical"] is True


def test_a_rebuild_answering_other_questions_is_an_error():
    with pytest.raises(ValueError, match="other questions"):
        compare_cell("x", {"q1": record("q1", [])}, {"q2": record("q2", [])})


def test_cells_are_compared_by_their_path_and_a_missing_one_is_named(tmp_path):
    write_cell(tmp_path / "ref/recall/1K.jsonl", [record("q1", ["a", "b"])])
    write_cell(tmp_path / "ref/recall/native.jsonl", [record("q1", ["a"])])
    write_cell(tmp_path / "new/recall/1K.jsonl", [record("q1", ["a", "b"])])
    with pytest.raises(FileNotFoundError, match="native.jsonl"):
        compare_cells(tmp_path / "ref", tmp_path / "new")
    write_cell(tmp_path / "new/recall/native.jsonl", [record("q1", ["z"])])
    changes = compare_cells(tmp_path / "ref", tmp_path / "new")
    assert [(c.cell, c.identical) for c in changes] == [
        ("recall/1K", True),
        ("recall/native", False),
    ]


def test_a_record_without_question_id_names_file_and_line(tmp_path):
    path = tmp_path / "cell.jsonl"
    path.write_text(json.dumps(record("q1", [])) + "\n" + json.dumps({"unit_ids": []}) + "\n")
    with pytest.raises(ValueError, match=r"cell.jsonl: line 2: no field 'question_id'"):
        read_cell(path)
