"""Human side-by-side votes: the import format, and blinded ballots to collect them.

Import format (one CSV row per vote): question_id, system_a, system_b, budget, vote, where a
system is "simple_rag/hybrid" (its cell at that budget) or "base" / "direct_read" (their one
cell) and vote is A, B or tie; an optional `rater` column lets several people vote on one pair
(otherwise a repeated pair is an error, not a double count). Bad rows fail naming file, row
and field.

Collecting votes: `python -m srb draw-pairs` writes a ballot (question, gold reference, answer 1,
answer 2, an empty vote column taking 1, 2 or tie) with the side order drawn at random and the systems
hidden, plus a key file; `python -m srb unblind-votes` joins the filled ballot with the key
into the import format.
"""

from __future__ import annotations

import csv
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from srb.atomic import atomic_write
from srb.data.canonical import iter_jsonl
from srb.data.schema import DataError
from srb.errors import ConfigError
from srb.scores import LLM_ONLY, Cell, resolve_system_budget

VOTE_COLUMNS = ("question_id", "system_a", "system_b", "budget", "vote")
BALLOT_COLUMNS = ("pair_id", "question", "reference", "answer_1", "answer_2", "vote")
KEY_COLUMNS = ("pair_id", "question_id", "system_a", "system_b", "budget", "answer_1_is")


@dataclass(frozen=True)
class Vote:
    question_id: str
    cell_a: Cell
    cell_b: Cell
    vote: str  # A | B | tie


def _rows(path: Path, required: Sequence[str]) -> list[dict[str, str]]:
    if not path.is_file():
        raise DataError(path, None, None, "file does not exist")
    with open(path, newline="", encoding="utf-8-sig") as fh:  # spreadsheets write a BOM
        reader = csv.DictReader(fh)
        missing = [c for c in required if c not in (reader.fieldnames or [])]
        if missing:
            raise DataError(path, None, missing[0], f"missing column(s) {', '.join(missing)}; "
                            f"expected {', '.join(required)}")  # fmt: skip
        return list(reader)


def read_votes(path: str | Path, grid: Sequence[Cell], question_ids: Sequence[str]) -> list[Vote]:
    """Validate and resolve a votes CSV against the synthesized grid and the question set."""
    path = Path(path)
    known = set(question_ids)
    votes = []
    first_seen: dict[tuple[str, str, frozenset[Cell]], int] = {}
    for i, row in enumerate(_rows(path, VOTE_COLUMNS), start=2):  # row 1 is the header
        qid = (row["question_id"] or "").strip()
        if qid not in known:
            raise DataError(path, f"row {i}", "question_id", f"unknown question id {qid!r}")
        cells = []
        for field in ("system_a", "system_b"):
            try:
                cells.append(resolve_system_budget(row[field] or "", row["budget"] or "", grid,
                                                   "cell"))  # fmt: skip
            except ConfigError as exc:
                raise DataError(path, f"row {i}", field, str(exc).removeprefix("cell: ")) from None
        if cells[0] == cells[1]:
            raise DataError(path, f"row {i}", "system_b", "both sides name the same cell")
        vote = (row["vote"] or "").strip()
        normal = {"a": "A", "b": "B", "tie": "tie"}.get(vote.lower())
        if normal is None:
            raise DataError(path, f"row {i}", "vote", f"{vote!r} is not A, B or tie")
        rater = (row.get("rater") or "").strip()
        pair = (rater, qid, frozenset(cells))
        if pair in first_seen:
            raise DataError(path, f"row {i}", "question_id",
                            f"a second vote on question {qid} for the same two answers (first at "
                            f"row {first_seen[pair]}); add a 'rater' column when several people "
                            "vote on one pair")  # fmt: skip
        first_seen[pair] = i
        votes.append(Vote(qid, cells[0], cells[1], normal))
    if not votes:
        raise DataError(path, None, None, "no votes in the file")
    return votes


def _system_name(cell: Cell) -> str:
    return cell[0] if cell[0] in LLM_ONLY else f"{cell[0]}/{cell[1]}"


def draw_pairs(
    answers: Mapping[Cell, str | Path],
    questions: Mapping[str, str],
    n: int,
    seed: int,
    ballot_out: str | Path,
    key_out: str | Path,
    references: Mapping[str, str] | None = None,
) -> int:
    """Draw n (question, cell pair) ballots from the given cells' answers, sides shuffled.

    Draws without replacement over all question x cell-pair combinations, so n is capped by
    what exists; returns how many were written. `references` (gold answers) give raters the
    rubric's reference beside the two answers; it names no system, so the ballot stays blind.
    """
    budgets = sorted({c[2] for c in answers if c[0] not in LLM_ONLY})
    if len(budgets) > 1:
        raise ValueError(
            f"draw-pairs: the cells span budgets {', '.join(budgets)}; a vote row names one "
            "budget for both sides, so draw one budget at a time"
        )
    texts = {
        cell: {r["question_id"]: r["answer"] for _, r in iter_jsonl(Path(p))}
        for cell, p in answers.items()
    }
    cells = sorted(texts)
    combos = [
        (q, a, b)
        for i, a in enumerate(cells)
        for b in cells[i + 1 :]
        for q in sorted(set(texts[a]) & set(texts[b]))
        if q in questions
    ]
    rng = random.Random(seed)
    chosen = rng.sample(combos, min(n, len(combos)))
    with atomic_write(ballot_out) as bfh, atomic_write(key_out) as kfh:
        ballot = csv.DictWriter(bfh, fieldnames=BALLOT_COLUMNS, lineterminator="\n")
        key = csv.DictWriter(kfh, fieldnames=KEY_COLUMNS, lineterminator="\n")
        ballot.writeheader()
        key.writeheader()
        for i, (q, a, b) in enumerate(chosen, start=1):
            first_is_a = rng.random() < 0.5
            first, second = (a, b) if first_is_a else (b, a)
            pid = f"P{i:04d}"
            ballot.writerow({"pair_id": pid, "question": questions[q], "vote": "",
                             "reference": (references or {}).get(q, ""),
                             "answer_1": texts[first][q], "answer_2": texts[second][q]})  # fmt: skip
            budget = next((c[2] for c in (a, b) if c[0] not in LLM_ONLY), a[2])
            key.writerow({"pair_id": pid, "question_id": q, "system_a": _system_name(a),
                          "system_b": _system_name(b), "budget": budget,
                          "answer_1_is": "A" if first_is_a else "B"})  # fmt: skip
    return len(chosen)


@dataclass(frozen=True)
class UnblindCounts:
    written: int
    unvoted: int  # ballot rows left blank
    missing: int  # key pairs absent from the ballot


def unblind(ballot: str | Path, key: str | Path, out: str | Path) -> UnblindCounts:
    """Filled ballot + key -> votes in the import format; blank and missing pairs are counted."""
    ballot, key = Path(ballot), Path(key)
    keys: dict[str, dict[str, str]] = {}
    for i, r in enumerate(_rows(key, KEY_COLUMNS), start=2):
        r["answer_1_is"] = (r["answer_1_is"] or "").strip()
        if r["answer_1_is"] not in ("A", "B"):
            raise DataError(key, f"row {i}", "answer_1_is", f"{r['answer_1_is']!r} is not A or B")
        keys[r["pair_id"]] = r
    rows, seen, unvoted = [], set(), 0
    for i, r in enumerate(_rows(ballot, ("pair_id", "vote")), start=2):  # raters may drop others
        pid = r["pair_id"]
        if pid not in keys:
            raise DataError(ballot, f"row {i}", "pair_id", f"{pid!r} is not in {key}")
        if pid in seen:
            raise DataError(ballot, f"row {i}", "pair_id", f"{pid!r} appears twice in the ballot")
        seen.add(pid)
        vote = (r["vote"] or "").strip().lower()
        if not vote:
            unvoted += 1
            continue
        if vote not in ("1", "2", "tie"):
            raise DataError(ballot, f"row {i}", "vote", f"{r['vote']!r} is not 1, 2 or tie")
        k = keys[pid]
        if vote == "tie":
            side = "tie"
        else:
            first = k["answer_1_is"]
            side = first if vote == "1" else {"A": "B", "B": "A"}[first]
        rows.append({"question_id": k["question_id"], "system_a": k["system_a"],
                     "system_b": k["system_b"], "budget": k["budget"], "vote": side})  # fmt: skip
    with atomic_write(out) as fh:
        writer = csv.DictWriter(fh, fieldnames=VOTE_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return UnblindCounts(len(rows), unvoted, len(set(keys) - seen))
