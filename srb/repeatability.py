"""How far a store system's restored cells move when its store is rebuilt from the same model
answers (a warm re-ingest: every extraction replayed from the call cache).

Why: a store that writes the same items but ranks them differently after a rebuild changes what
the synthesizer reads, and hence the answers, with no model call having changed. Measured, not
assumed: Hindsight's streaming retain writes a paper's chunks in the order their extractions
complete and breaks ties among equal arm scores by row order and random ids, so its recall
order moves between rebuilds while its exported facts stay byte-identical.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class CellChange:
    """One cell (system, modality, budget) of a rebuild against the reference build."""

    cell: str
    questions: int
    same_context: int  # the restored context is the same string (what the synthesizer reads)
    same_set: int  # the same units, whatever their order
    mean_jaccard: float  # of the unit sets, over questions

    @property
    def identical(self) -> bool:
        return self.same_context == self.questions

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "identical": self.identical}


def read_cell(path: Path) -> dict[str, Mapping[str, Any]]:
    """A cell file's records by question id; a record without one names the file and line."""
    records: dict[str, Mapping[str, Any]] = {}
    with open(path, encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            record = json.loads(line)
            qid = record.get("question_id")
            if qid is None:
                raise ValueError(f"{path}: line {line_no}: no field 'question_id'")
            records[str(qid)] = record
    return records


def jaccard(a: Sequence[str], b: Sequence[str]) -> float:
    left, right = set(a), set(b)
    if not left and not right:
        return 1.0
    return len(left & right) / len(left | right)


def compare_cell(
    cell: str, reference: Mapping[str, Mapping[str, Any]], rebuilt: Mapping[str, Mapping[str, Any]]
) -> CellChange:
    """Compare a rebuilt cell with the reference, question by question."""
    if set(reference) != set(rebuilt):
        missing = sorted(set(reference) ^ set(rebuilt))[:5]
        raise ValueError(f"{cell}: the rebuilt cell answers other questions ({missing} ...)")
    same_context = same_set = 0
    jaccards = []
    for qid, ref in reference.items():
        new = rebuilt[qid]
        same_context += ref.get("context") == new.get("context")
        ref_units, new_units = ref.get("unit_ids") or [], new.get("unit_ids") or []
        same_set += set(ref_units) == set(new_units)
        jaccards.append(jaccard(ref_units, new_units))
    mean = sum(jaccards) / len(jaccards) if jaccards else 1.0
    return CellChange(cell, len(reference), same_context, same_set, round(mean, 4))


def compare_cells(reference_dir: Path, rebuilt_dir: Path) -> list[CellChange]:
    """Every `*.jsonl` cell under `reference_dir` against its namesake under `rebuilt_dir`."""
    changes = []
    for ref_path in sorted(reference_dir.rglob("*.jsonl")):
        rel = ref_path.relative_to(reference_dir)
        new_path = rebuilt_dir / rel
        if not new_path.is_file():
            raise FileNotFoundError(f"{new_path}: the rebuild did not restore this cell")
        changes.append(
            compare_cell(str(rel.with_suffix("")), read_cell(ref_path), read_cell(new_path))
        )
    return changes
