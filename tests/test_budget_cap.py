"""The calibrated cells' character cap: `budget_cap` and `cap_restored`."""

from __future__ import annotations

import pytest

from srb.retrieve import Restored, budget_cap, cap_restored, restore_top_k
from srb.units import Unit

# Two papers; units are exact slices of them, some not starting at offset 0.
PAPERS = {
    "X": "".join(chr(ord("a") + i % 26) for i in range(700)),
    "Y": "".join(chr(ord("A") + i % 26) for i in range(500)),
}
SPANS = {"x1": ("X", 50, 150), "y1": ("Y", 100, 300), "x2": ("X", 300, 600)}  # 100, 200, 300
UNITS = {uid: Unit(uid, pid, s, e, PAPERS[pid][s:e]) for uid, (pid, s, e) in SPANS.items()}
HITS = [("x1", 3.0), ("y1", 2.5), ("x2", 2.0)]


def full() -> Restored:
    """The three units in rank order: 100 + 200 + 300 = 600 characters, requested 500."""
    return restore_top_k("q1", HITS, UNITS, 3, 500)


def test_full_restoration_is_as_expected() -> None:
    r = full()
    assert r.achieved_chars == 600
    assert not r.truncated


@pytest.mark.parametrize("cap", [600, 601, 10_000])
def test_under_the_cap_is_returned_unchanged(cap: int) -> None:
    r = full()
    capped = cap_restored(r, cap)
    assert capped is r
    assert capped == r
    assert capped.achieved_chars == 600
    assert not capped.truncated


def test_over_the_cap_cuts_the_last_kept_unit_and_drops_the_rest() -> None:
    r = full()
    capped = cap_restored(r, 250)  # x1 whole (100), y1 cut to 150, x2 dropped
    assert capped.achieved_chars == 250
    assert capped.truncated is True
    assert capped.hits == [("x1", 3.0), ("y1", 2.5)]
    assert capped.texts == [UNITS["x1"].text, UNITS["y1"].text[:150]]
    assert len(capped.texts[1]) == 150
    assert (capped.question_id, capped.requested_chars, capped.top_k) == ("q1", 500, 3)
    # the input is left alone
    assert r.achieved_chars == 600
    assert len(r.hits) == 3
    assert not r.truncated


def test_cap_inside_the_first_unit_keeps_only_its_head() -> None:
    capped = cap_restored(full(), 40)
    assert capped.hits == [("x1", 3.0)]
    assert capped.texts == [UNITS["x1"].text[:40]]
    assert capped.achieved_chars == 40
    assert capped.truncated is True


def test_cap_on_a_unit_boundary_keeps_whole_units_and_marks_truncated() -> None:
    capped = cap_restored(full(), 300)  # 100 + 200: x2 lies wholly beyond the cap
    assert capped.hits == [("x1", 3.0), ("y1", 2.5)]
    assert capped.texts == [UNITS["x1"].text, UNITS["y1"].text]
    assert capped.achieved_chars == 300
    assert capped.truncated is True


def test_cap_in_the_last_unit() -> None:
    capped = cap_restored(full(), 599)
    assert [u for u, _ in capped.hits] == ["x1", "y1", "x2"]
    assert capped.texts[2] == UNITS["x2"].text[:299]
    assert capped.achieved_chars == 599
    assert capped.truncated is True


@pytest.mark.parametrize("cap", [1, 40, 100, 101, 250, 300, 450, 599])
def test_cut_restoration_record_spans_point_at_the_cut_text(cap: int) -> None:
    record = cap_restored(full(), cap).to_record(UNITS)
    assert record["achieved_chars"] == cap
    assert record["truncated"] is True
    assert record["requested_chars"] == 500
    assert record["top_k"] == 3
    assert len(record["spans"]) == len(record["unit_ids"]) == len(record["scores"])
    pieces = [PAPERS[pid][start:end] for pid, start, end in record["spans"]]
    assert sum(len(p) for p in pieces) == cap
    assert record["context"] == "\n\n".join(pieces)
    for uid, (pid, start, _) in zip(record["unit_ids"], record["spans"], strict=True):
        assert (pid, start) == (UNITS[uid].paper_id, UNITS[uid].start)


def test_cut_record_hand_checked() -> None:
    record = cap_restored(full(), 250).to_record(UNITS)
    assert record["unit_ids"] == ["x1", "y1"]
    assert record["scores"] == [3.0, 2.5]
    assert record["spans"] == [["X", 50, 150], ["Y", 100, 250]]
    assert record["context"] == PAPERS["X"][50:150] + "\n\n" + PAPERS["Y"][100:250]


def test_budget_cap() -> None:
    assert budget_cap(2000, 0.25) == 2500
    assert budget_cap(2000, 0) == 2000
    assert budget_cap(1000, 0.5) == 1500
    assert isinstance(budget_cap(2000, 0.25), int)


@pytest.mark.parametrize("tolerance", [-0.01, -1.0])
def test_budget_cap_rejects_negative_tolerance(tolerance: float) -> None:
    with pytest.raises(ValueError, match="tolerance"):
        budget_cap(2000, tolerance)


@pytest.mark.parametrize(("budget", "expected"), [(100, 115), (50_000, 57_500)])
def test_budget_cap_is_exact_for_decimal_tolerances(budget: int, expected: int) -> None:
    assert budget_cap(budget, 0.15) == expected
