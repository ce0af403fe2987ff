"""Reciprocal rank fusion, budget labels and budgeted context restoration."""

from __future__ import annotations

import itertools

import pytest

from srb.retrieve import (
    Restored,
    calibrated_top_k,
    mean_unit_chars,
    parse_budget,
    restore_packed,
    restore_top_k,
    rrf,
    sort_hits,
    strictly_decreasing,
)
from srb.units import Unit


def run(*ids: str) -> list[tuple[str, float]]:
    """A ranked run; the scores are irrelevant to RRF, so make them arbitrary."""
    return [(d, 100.0 - 7 * i) for i, d in enumerate(ids)]


def assert_strictly_decreasing(hits) -> None:
    scores = [s for _, s in hits]
    assert all(a > b for a, b in zip(scores, scores[1:], strict=False)), scores


# ---------------------------------------------------------------------- RRF


def test_rrf_matches_hand_computed_scores() -> None:
    dense = run("a", "b", "c")
    bm25 = run("c", "a", "d")
    fused = rrf([dense, bm25], k=60)
    expected = {
        "a": 1 / 61 + 1 / 62,
        "c": 1 / 63 + 1 / 61,
        "b": 1 / 62,
        "d": 1 / 63,
    }
    assert [d for d, _ in fused] == ["a", "c", "b", "d"]
    for doc, score in fused:
        assert score == pytest.approx(expected[doc], rel=1e-12)
    assert_strictly_decreasing(fused)


def test_rrf_other_k() -> None:
    fused = dict(rrf([run("x", "y"), run("y")], k=10))
    assert fused["y"] == pytest.approx(1 / 12 + 1 / 11)
    assert fused["x"] == pytest.approx(1 / 11)


def test_rrf_ties_are_strictly_decreasing_and_broken_by_id() -> None:
    fused = rrf([run("y", "x"), run("x", "y")], k=60)
    # both score 1/61 + 1/62 and reach rank 1: the id breaks the tie
    assert [d for d, _ in fused] == ["x", "y"]
    assert fused[0][1] == pytest.approx(1 / 61 + 1 / 62, rel=1e-12)
    assert fused[1][1] < fused[0][1]
    assert fused[0][1] - fused[1][1] < 1e-12


def test_rrf_tie_break_best_rank_then_id_independent_of_input_order() -> None:
    # k=1: z_m = 1/2 (rank 1); f2 = 1/2 (rank 1); a_n = 1/4 + 1/4 = 1/2 (best rank 3);
    # f1 = f3 = 1/3 (rank 2)
    a = run("z_m", "f1", "a_n")
    b = run("f2", "f3", "a_n")
    expected = ["f2", "z_m", "a_n", "f1", "f3"]
    for runs in ([a, b], [b, a]):
        fused = rrf(runs, k=1)
        assert [d for d, _ in fused] == expected
        assert fused[0][1] == pytest.approx(0.5)
        assert fused[2][1] == pytest.approx(0.5)
        assert fused[3][1] == pytest.approx(1 / 3)
        assert_strictly_decreasing(fused)
    assert rrf([a, b], k=1) == rrf([b, a], k=1)


def test_rrf_three_runs_order_independent_of_run_order() -> None:
    # X ranks (1, 2, 7), Y ranks (2, 7, 1): equal sums, both best rank 1 -> X before Y by id
    r1 = run("X", "Y", "a3", "a4", "a5", "a6", "a7")
    r2 = run("b1", "X", "b3", "b4", "b5", "b6", "Y")
    r3 = run("Y", "c2", "c3", "c4", "c5", "c6", "X")
    orders = {tuple(d for d, _ in rrf(list(p))[:2]) for p in itertools.permutations([r1, r2, r3])}
    assert orders == {("X", "Y")}


def test_rrf_depth_cuts_the_fused_list() -> None:
    runs = [run("a", "b", "c", "d"), run("d", "e", "a")]
    full = rrf(runs)
    assert len(full) == 5
    assert rrf(runs, depth=2) == full[:2]
    assert rrf(runs, depth=0) == []
    assert rrf(runs, depth=50) == full


def test_rrf_empty() -> None:
    assert rrf([]) == []
    assert rrf([[], []]) == []


def test_strictly_decreasing_and_sort_hits() -> None:
    hits = strictly_decreasing([("a", 1.0), ("b", 1.0), ("c", 1.0), ("d", 0.5)])
    assert [d for d, _ in hits] == ["a", "b", "c", "d"]
    assert hits[0][1] == 1.0 and hits[3][1] == 0.5
    assert_strictly_decreasing(hits)
    assert 1.0 - hits[2][1] < 1e-12
    shuffled = [("c", 0.3), ("b", 0.9), ("a", 0.3), ("d", 0.9)]
    out = sort_hits(shuffled)
    assert [d for d, _ in out] == ["b", "d", "a", "c"]
    assert sort_hits(list(reversed(shuffled))) == out
    assert_strictly_decreasing(out)


# ---------------------------------------------------------------------- budgets


@pytest.mark.parametrize(
    ("label", "value"),
    [
        ("native", None),
        (" native ", None),
        ("10K", 10_000),
        ("10k", 10_000),
        ("2500", 2500),
        ("1M", 1_000_000),
        ("50K", 50_000),
        (7, 7),
        (30_000, 30_000),
    ],
)
def test_parse_budget(label, value) -> None:
    assert parse_budget(label) == value


@pytest.mark.parametrize(
    "label", [-5, 0, "-5", "-10K", "0", "0K", "10X", "", "  ", "K", "1.5K", "10 K", "Native", True]
)
def test_parse_budget_rejects(label) -> None:
    with pytest.raises(ValueError):
        parse_budget(label)


# ---------------------------------------------------------------------- restoration


def make_units() -> dict[str, Unit]:
    text = "".join(chr(ord("a") + i) * 100 for i in range(4))  # 400 chars, 4 blocks
    out = {}
    for i in range(4):
        s = 100 * i
        out[f"p#{i}"] = Unit(f"p#{i}", "p", s, s + 100, text[s : s + 100])
    out["q#0"] = Unit("q#0", "q", 10, 70, "z" * 60)
    return out


UNITS = make_units()
HITS = [("p#2", 0.9), ("q#0", 0.8), ("p#0", 0.7), ("p#3", 0.6), ("p#1", 0.5)]


def test_restore_packed_fills_budget_exactly_and_truncates_last() -> None:
    r = restore_packed("Q1", HITS, UNITS, 250)
    assert r.achieved_chars == 250
    assert r.requested_chars == 250
    assert r.top_k is None
    assert r.truncated is True
    assert [d for d, _ in r.hits] == ["p#2", "q#0", "p#0"]
    assert [len(t) for t in r.texts] == [100, 60, 90]
    assert r.texts[2] == UNITS["p#0"].text[:90]
    rec = r.to_record(UNITS)
    assert rec["achieved_chars"] == 250
    assert rec["requested_chars"] == 250
    assert rec["truncated"] is True
    assert rec["unit_ids"] == ["p#2", "q#0", "p#0"]
    assert rec["scores"] == [0.9, 0.8, 0.7]
    assert rec["spans"] == [["p", 200, 300], ["q", 10, 70], ["p", 0, 90]]
    for (_, s, e), t in zip(rec["spans"], r.texts, strict=True):
        assert e - s == len(t)
    assert rec["context"] == "\n\n".join(r.texts)
    assert rec["question_id"] == "Q1"


def test_restore_packed_first_unit_truncated() -> None:
    r = restore_packed("Q", HITS, UNITS, 40)
    assert r.texts == ["c" * 40]
    assert r.truncated and r.achieved_chars == 40
    assert r.to_record(UNITS)["spans"] == [["p", 200, 240]]


def test_restore_packed_exact_fit_is_not_truncated() -> None:
    r = restore_packed("Q", HITS, UNITS, 160)
    assert [d for d, _ in r.hits] == ["p#2", "q#0"]
    assert r.achieved_chars == 160
    assert r.truncated is False


def test_restore_packed_budget_larger_than_everything() -> None:
    r = restore_packed("Q", HITS, UNITS, 10_000)
    assert [d for d, _ in r.hits] == [d for d, _ in HITS]
    assert r.achieved_chars == 460
    assert r.truncated is False
    assert r.to_record(UNITS)["requested_chars"] == 10_000


def test_restore_top_k() -> None:
    r = restore_top_k("Q", HITS, UNITS, 2, None)
    assert [d for d, _ in r.hits] == ["p#2", "q#0"]
    assert r.texts == [UNITS["p#2"].text, UNITS["q#0"].text]
    assert r.achieved_chars == 160 and r.top_k == 2 and r.requested_chars is None
    assert not r.truncated
    rec = r.to_record(UNITS, separator="|")
    assert rec["spans"] == [["p", 200, 300], ["q", 10, 70]]
    assert rec["context"] == "c" * 100 + "|" + "z" * 60
    assert rec["top_k"] == 2
    r = restore_top_k("Q", HITS, UNITS, 99, 10_000)
    assert len(r.hits) == 5 and r.achieved_chars == 460 and r.requested_chars == 10_000


def test_calibrated_top_k() -> None:
    assert calibrated_top_k(10_000, 1000.0) == 10
    assert calibrated_top_k(10_000, 3000.0) == 3  # 3.33
    assert calibrated_top_k(10_000, 1500.0) == 7  # 6.67
    assert calibrated_top_k(50_000, 6000.0) == 8  # 8.33
    assert calibrated_top_k(10_000, 40_000.0) == 1  # never below one unit
    for bad in (0.0, -1.0):
        with pytest.raises(ValueError, match="native"):
            calibrated_top_k(10_000, bad)


def test_mean_unit_chars_from_native_records() -> None:
    recs = [
        restore_top_k("Q1", HITS, UNITS, 2, None).to_record(UNITS),  # 100 + 60
        restore_top_k("Q2", HITS[2:], UNITS, 3, None).to_record(UNITS),  # 3 x 100
    ]
    assert mean_unit_chars(recs) == pytest.approx(460 / 5)
    assert calibrated_top_k(10_000, mean_unit_chars(recs)) == round(10_000 / 92)


def test_mean_unit_chars_when_native_restored_nothing() -> None:
    empty = Restored("Q", [], [], None, 5, False).to_record(UNITS)
    assert empty["achieved_chars"] == 0 and empty["unit_ids"] == []
    assert mean_unit_chars([]) == 0.0
    assert mean_unit_chars([empty, empty]) == 0.0
    with pytest.raises(ValueError, match="native run restored no characters"):
        calibrated_top_k(10_000, mean_unit_chars([empty]))
