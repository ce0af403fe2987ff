"""The analysis layer over judged cells: score tables, contrasts, calibration, human votes,
router headroom, qualitative tables, figures and the analysis config checks.

srb.stats is tested in test_stats.py; here every expected value comes from hand arithmetic,
numpy or scipy.stats on small fixtures, never from the code under test.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from scipy.stats import binomtest, linregress, pearsonr, spearmanr
from test_leaderboard import J

from srb.__main__ import main
from srb.analysis import (
    BOOTSTRAP_COLUMNS,
    agreement_rows,
    bootstrap_rows,
    calibration_rows,
    check_analysis_config,
    parse_contrasts,
    router_rows,
)
from srb.data.schema import DataError, Question
from srb.errors import ConfigError
from srb.figures import agreement_figure, judge_scatter, tier_bars
from srb.qualitative import choose_questions, excerpt, write_qualitative
from srb.scores import ScoreTable, parse_cell
from srb.tables import write_table
from srb.votes import (
    BALLOT_COLUMNS,
    KEY_COLUMNS,
    VOTE_COLUMNS,
    UnblindCounts,
    Vote,
    draw_pairs,
    read_votes,
    unblind,
)

SRH_2K = ("simple_rag", "hybrid", "2K")
SRH_10K = ("simple_rag", "hybrid", "10K")
PRB_2K = ("paper_rag", "bm25", "2K")
BASE = ("base", "none", "native")
DIRECT = ("direct_read", "none", "6K")
GRID = [SRH_2K, SRH_10K, PRB_2K, BASE, DIRECT]
QIDS = ["q1", "q2", "q3", "q4", "q5", "q6"]
PNG = b"\x89PNG\r\n\x1a\n"


def write_jsonl(path: Path, records: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return path


def write_csv(path: Path, header: list[str], rows: list[list[str]]) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(header)
        writer.writerows(rows)
    return path


def read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with open(path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        return list(reader.fieldnames or []), list(reader)


def table_from(judge: str, scores: dict[tuple, dict[str, float | None]], tmp: Path) -> ScoreTable:
    """Write each cell's judgments to a file and load them the way the workflow does."""
    cells = []
    for i, (cell, by_q) in enumerate(scores.items()):
        path = write_jsonl(tmp / judge / f"{i}.jsonl", [J(q, s) for q, s in by_q.items()])
        cells.append((cell, path))
    return ScoreTable.load(judge, cells)


# --- score tables -------------------------------------------------------------------------------


def test_load_keeps_invalid_as_none_and_from_grid_follows_grid_order(tmp_path: Path) -> None:
    a = write_jsonl(tmp_path / "a.jsonl", [J("q1", 6.5), J("q2", None), J("q3", 0.0)])
    b = write_jsonl(tmp_path / "b.jsonl", [J("q1", 3), J("q2", 4.25)])
    table = ScoreTable.load("rubric", [(SRH_2K, a), (BASE, b)])
    assert table.judge == "rubric"
    assert table.scores == {
        SRH_2K: {"q1": 6.5, "q2": None, "q3": 0.0},
        BASE: {"q1": 3.0, "q2": 4.25},
    }
    assert isinstance(table.scores[BASE]["q1"], float)
    assert table.valid(SRH_2K) == {"q1": 6.5, "q3": 0.0}  # a 0.0 score is valid, not dropped
    assert table.valid(PRB_2K) == {}

    # snakemake passes the grid as lists; files come in grid order
    grid = [list(SRH_2K), list(BASE)]
    from_grid = ScoreTable.from_grid("rubric", grid, [str(a), str(b)])
    assert from_grid.scores == table.scores
    swapped = ScoreTable.from_grid("rubric", grid, [str(b), str(a)])
    assert swapped.scores[SRH_2K] == {"q1": 3.0, "q2": 4.25}
    with pytest.raises(ValueError, match="1 judgment files for 2 grid cells"):
        ScoreTable.from_grid("rubric", grid, [str(a)])


def test_paired_keeps_questions_both_scored_and_counts_the_rest() -> None:
    table = ScoreTable(
        {
            # the judge failed on q2 here and q5 is missing from this cell
            SRH_2K: {"q1": 7.0, "q2": None, "q3": 5.0, "q4": 2.0},
            # and failed on q4 here
            BASE: {"q1": 4.0, "q2": 3.0, "q3": 5.5, "q4": None, "q5": 1.0},
        },
        "rubric",
    )
    qs, xa, xb, excluded = table.paired(SRH_2K, BASE)
    assert qs == ["q1", "q3"]
    assert (xa, xb) == ([7.0, 5.0], [4.0, 5.5])
    assert excluded == 3  # q2, q4, q5 out of the 5 questions either cell lists
    qs, xa, xb, excluded = table.paired(SRH_2K, PRB_2K)  # a cell with no judgments at all
    assert (qs, xa, xb, excluded) == ([], [], [], 4)


# --- cells and contrasts ------------------------------------------------------------------------


def test_parse_cell_labels() -> None:
    assert parse_cell("simple_rag/hybrid/2K", GRID, "here") == SRH_2K
    assert parse_cell(" base ", GRID, "here") == BASE
    assert parse_cell("direct_read", GRID, "here") == DIRECT
    with pytest.raises(ConfigError) as exc:
        parse_cell("simple_rag/hybrid/3K", GRID, "somewhere")
    msg = str(exc.value)
    assert msg.startswith("somewhere: 'simple_rag/hybrid/3K' is not a synthesized cell")
    for label in ("base", "direct_read", "paper_rag/bm25/2K", "simple_rag/hybrid/10K"):
        assert label in msg


def test_parse_contrasts_labels_and_errors() -> None:
    specs = [
        {"a": "simple_rag/hybrid/2K", "b": "base"},
        {"a": "direct_read", "b": "simple_rag/hybrid/10K", "label": "read vs rag"},
    ]
    assert parse_contrasts(specs, GRID) == [
        ("simple_rag/hybrid/2K - base", SRH_2K, BASE),
        ("read vs rag", DIRECT, SRH_10K),
    ]
    bad_a = [*specs, {"a": "simple_rag/dense/2K", "b": "base"}]
    with pytest.raises(ConfigError) as exc:
        parse_contrasts(bad_a, GRID)
    msg = str(exc.value)
    assert msg.startswith("config analysis.contrasts[2].a: 'simple_rag/dense/2K'")
    assert "known cells: base, direct_read, paper_rag/bm25/2K, simple_rag/hybrid/10K, " in msg
    with pytest.raises(ConfigError, match=r"config analysis\.contrasts\[0\]\.b: 'bse'"):
        parse_contrasts([{"a": "base", "b": "bse"}], GRID)


# --- paired bootstrap ---------------------------------------------------------------------------


def test_bootstrap_rows_delta_n_exclusions_and_marks(tmp_path: Path) -> None:
    table = table_from(
        "rubric",
        {
            SRH_2K: {"q1": 7.0, "q2": 8.0, "q3": None, "q4": 6.0, "q5": 9.0},  # q6 missing
            BASE: {"q1": 5.0, "q2": 5.0, "q3": 4.0, "q4": 5.0, "q5": None, "q6": 3.0},
            # identical scores: every paired difference is zero
            SRH_10K: {"q1": 4.0, "q2": 6.5, "q3": 2.0},
            PRB_2K: {"q1": 4.0, "q2": 6.5, "q3": 2.0},
            DIRECT: {"q1": None, "q2": None},
        },
        tmp_path,
    )
    contrasts = [
        ("rag vs base", SRH_2K, BASE),
        ("same", SRH_10K, PRB_2K),
        ("nothing", DIRECT, BASE),
    ]
    # three paired questions: min_n=3 lets this small fixture earn a mark (see the next test)
    rows = bootstrap_rows(table, contrasts, resamples=2000, seed=3, confidence=0.95, min_n=3)
    assert [r["contrast"] for r in rows] == ["rag vs base", "same", "nothing"]

    pos = rows[0]
    # q1, q2, q4 are valid in both: differences 2, 3, 1
    diffs = [7.0 - 5.0, 8.0 - 5.0, 6.0 - 5.0]
    assert pos["a"] == "simple_rag/hybrid/2K" and pos["b"] == "base"
    assert pos["delta"] == pytest.approx(sum(diffs) / 3)
    assert pos["n"] == 3
    assert pos["n_excluded"] == 3  # q3 (invalid in a), q5 (invalid in b), q6 (missing in a)
    # every resampled mean lies between the smallest and the largest difference
    assert min(diffs) <= pos["ci_low"] <= pos["ci_high"] <= max(diffs)
    assert pos["excludes_zero"] is True and pos["mark"] == "*"
    assert pos["ci"] == f"[{pos['ci_low']:+.2f}, {pos['ci_high']:+.2f}]"

    zero = rows[1]
    assert (zero["delta"], zero["ci_low"], zero["ci_high"]) == (0.0, 0.0, 0.0)
    assert (zero["n"], zero["n_excluded"]) == (3, 0)
    assert zero["excludes_zero"] is False and zero["mark"] == ""
    assert zero["ci"] == "[+0.00, +0.00]"

    none = rows[2]
    assert none["ci"].startswith("not applicable")
    assert (none["n"], none["n_excluded"], none["mark"]) == (0, 6, "")
    for key in ("delta", "ci_low", "ci_high", "excludes_zero"):
        assert none.get(key) is None  # absent, not a zero that reads as a result

    csv_out, md_out = tmp_path / "out" / "b.csv", tmp_path / "out" / "b.md"
    write_table(rows, BOOTSTRAP_COLUMNS, csv_out, md_out, "Table 7", "a note")
    header, written = read_csv(csv_out)
    assert header == BOOTSTRAP_COLUMNS
    assert written[2]["delta"] == "" and written[2]["n"] == "0"
    assert written[0]["mark"] == "*"
    md = md_out.read_text()
    assert md.startswith("# Table 7\n\na note\n\n| contrast | a | b | delta |")
    assert "| nothing | direct_read | base | – |" in md


def test_bootstrap_rows_withhold_the_mark_below_min_n(tmp_path: Path) -> None:
    qs = [f"q{i}" for i in range(1, 11)]
    # a beats b by 1 to 3 points on each of ten questions: every resampled mean lies in [1, 3]
    a_scores = {q: 5.0 + i % 3 for i, q in enumerate(qs)}
    b_scores = dict.fromkeys(qs, 4.0)
    table = table_from("rubric", {SRH_2K: a_scores, BASE: b_scores}, tmp_path / "ten")
    diffs = [a_scores[q] - 4.0 for q in qs]
    # the default min_n is 10: ten questions are enough
    (row,) = bootstrap_rows(table, [("ten", SRH_2K, BASE)], 500, 1, 0.95)
    assert row["n"] == 10
    assert min(diffs) <= row["ci_low"] <= row["ci_high"] <= max(diffs)
    assert row["excludes_zero"] is True and row["mark"] == "*"

    # nine questions (q10 invalid in a): the CI still excludes 0, but no mark
    nine = {**a_scores, "q10": None}
    table = table_from("rubric", {SRH_2K: nine, BASE: b_scores}, tmp_path / "nine")
    (row,) = bootstrap_rows(table, [("nine", SRH_2K, BASE)], 500, 1, 0.95)
    assert (row["n"], row["n_excluded"]) == (9, 1)
    assert row["delta"] == pytest.approx(sum(diffs[:9]) / 9, abs=5e-4)
    assert row["ci_low"] >= 1.0
    assert row["excludes_zero"] is True
    assert row["mark"] == "n < 10: no mark"
    # min_n is the threshold: 9 passes at min_n=9, and fails at 10 as above
    (row,) = bootstrap_rows(table, [("nine", SRH_2K, BASE)], 500, 1, 0.95, min_n=9)
    assert row["mark"] == "*"

    # a CI that covers 0 on a small sample says so too: the mark column never reads ""
    flat = table_from(
        "rubric",
        {SRH_10K: {"q1": 4.0, "q2": 6.5}, PRB_2K: {"q1": 4.0, "q2": 6.5}},
        tmp_path / "flat",
    )
    (row,) = bootstrap_rows(flat, [("flat", SRH_10K, PRB_2K)], 500, 1, 0.95, min_n=5)
    assert row["excludes_zero"] is False and row["mark"] == "n < 5: no mark"

    csv_out, md_out = tmp_path / "out" / "b.csv", tmp_path / "out" / "b.md"
    write_table([row], BOOTSTRAP_COLUMNS, csv_out, md_out, "Table 7", "a note")
    _, written = read_csv(csv_out)
    assert written[0]["mark"] == "n < 5: no mark"
    assert "| n < 5: no mark |" in md_out.read_text()


# --- judge calibration --------------------------------------------------------------------------

TIERS = {"q1": "L1", "q2": "L1", "q3": "L2", "q4": "L3"}
X_SCORES = {
    SRH_2K: {"q1": 8.0, "q2": None, "q3": 6.0, "q4": 4.0},
    PRB_2K: {"q1": 5.0, "q2": 7.0, "q3": 3.0, "q4": 2.0},
    BASE: {"q1": None, "q2": 2.0, "q3": 1.0, "q4": 3.0},
}
Y_SCORES = {
    SRH_2K: {"q1": 7.5, "q2": 6.0, "q3": 6.5, "q4": 3.0},
    PRB_2K: {"q1": 5.0, "q2": None, "q3": 5.0, "q4": 2.5},
    BASE: {"q1": None, "q2": 2.5, "q3": 0.0},  # q4 was never scored by Y
}
# (x, y, cell, question) for the cells both judges scored validly
BOTH = [
    (8.0, 7.5, SRH_2K, "q1"),
    (6.0, 6.5, SRH_2K, "q3"),
    (4.0, 3.0, SRH_2K, "q4"),
    (5.0, 5.0, PRB_2K, "q1"),
    (3.0, 5.0, PRB_2K, "q3"),
    (2.0, 2.5, PRB_2K, "q4"),
    (2.0, 2.5, BASE, "q2"),
    (1.0, 0.0, BASE, "q3"),
]


def test_calibration_one_judge_is_not_applicable() -> None:
    rows = calibration_rows([ScoreTable(X_SCORES, "rubric")], TIERS)
    assert len(rows) == 1
    assert rows[0]["judge_x"] == "rubric" and rows[0]["judge_y"] == ""
    assert rows[0]["status"].startswith("not applicable")
    assert "pearson_r" not in rows[0]


def test_calibration_two_judges_against_scipy(tmp_path: Path) -> None:
    x, y = table_from("rubric", X_SCORES, tmp_path), table_from("qwen", Y_SCORES, tmp_path)
    (row,) = calibration_rows([x, y], TIERS, within=1.0)
    xs = np.array([b[0] for b in BOTH])
    ys = np.array([b[1] for b in BOTH])
    fit = linregress(xs, ys)
    assert (row["judge_x"], row["judge_y"], row["status"]) == ("rubric", "qwen", "ok")
    assert row["n_pairs"] == 8
    assert row["n_excluded_x_invalid"] == 2  # srh q2, base q1
    assert row["n_excluded_y_invalid"] == 3  # prb q2, base q1, base q4 (not scored)
    assert row["pearson_r"] == pytest.approx(pearsonr(xs, ys).statistic, abs=5e-4)
    assert row["slope"] == pytest.approx(fit.slope, abs=5e-4)
    assert row["intercept"] == pytest.approx(fit.intercept, abs=5e-4)
    # |y - x| = .5, .5, 1, 0, 2, .5, .5, 1: all but one within a point
    assert row["within_1_share"] == pytest.approx(7 / 8, abs=5e-4)
    assert row["mean_diff"] == pytest.approx(1.0 / 8, abs=5e-4)
    # system means (x; y): srh (6; 17/3), prb (10/3; 12.5/3), base (1.5; 1.25)
    rho = spearmanr([6.0, 10 / 3, 1.5], [17 / 3, 12.5 / 3, 1.25]).statistic
    assert row["system_rank_spearman"] == pytest.approx(rho, abs=5e-4)
    assert row["n_systems"] == 3
    # L1: -0.5, 0, +0.5; L2: +0.5, +2, -1; L3: -1, +0.5
    assert row["tier_mean_diff"] == "L1 +0.00; L2 +0.50; L3 -0.25"


def test_calibration_pairs_only_cells_both_judges_score(tmp_path: Path) -> None:
    """A judge scoped to fewer cells (llm.judge_scope) leaves the others out of the pairs:
    they are not counted as its invalid scores."""
    x = table_from("rubric", X_SCORES, tmp_path)
    y_native = table_from("qwen", {BASE: Y_SCORES[BASE]}, tmp_path / "y")  # BASE only
    (row,) = calibration_rows([x, y_native], TIERS, within=1.0)
    # base: x (None, 2, 1, 3), y (None, 2.5, 0, unscored): pairs q2, q3
    assert row["n_pairs"] == 2
    assert row["n_excluded_x_invalid"] == 1  # base q1
    assert row["n_excluded_y_invalid"] == 2  # base q1, q4
    assert row["mean_diff"] == pytest.approx((0.5 - 1.0) / 2, abs=5e-4)


def test_a_contrast_on_a_cell_the_judge_does_not_score_is_not_applicable(tmp_path: Path) -> None:
    table = table_from("qwen", {BASE: {"q1": 5.0, "q2": 4.0}}, tmp_path)
    rows = bootstrap_rows(
        table, [("scoped", SRH_2K, BASE), ("both", BASE, BASE)], 200, 0, 0.95, judged={BASE}
    )
    assert rows[0]["ci"] == (
        "not applicable: judge qwen does not score simple_rag/hybrid/2K "
        "(llm.judge_scope, llm.judge_systems)"
    )
    assert (rows[0]["n"], rows[0]["mark"]) == (0, "")
    assert "delta" not in rows[0]
    assert rows[1]["n"] == 2 and rows[1]["delta"] == 0.0


def test_calibration_three_judges_gives_three_pairs() -> None:
    broken = {cell: dict.fromkeys(qs, None) for cell, qs in X_SCORES.items()}
    tables = [
        ScoreTable(X_SCORES, "rubric"),
        ScoreTable(Y_SCORES, "qwen"),
        ScoreTable(broken, "broken"),
    ]
    rows = calibration_rows(tables, TIERS)
    assert [(r["judge_x"], r["judge_y"]) for r in rows] == [
        ("rubric", "qwen"),
        ("rubric", "broken"),
        ("qwen", "broken"),
    ]
    assert rows[0]["status"] == "ok" and rows[0]["n_pairs"] == 8
    for row in rows[1:]:
        assert row["status"].startswith("not applicable") and row["n_pairs"] == 0
        assert row.get("pearson_r") is None
    # rubric lists 12 cells x questions, 2 of them invalid; "broken" failed on all of them
    assert (rows[1]["n_excluded_x_invalid"], rows[1]["n_excluded_y_invalid"]) == (2, 12)
    # qwen lists 11, 2 of them invalid
    assert (rows[2]["n_excluded_x_invalid"], rows[2]["n_excluded_y_invalid"]) == (2, 11)


# --- human-vote agreement -----------------------------------------------------------------------

AGREE_TABLE = {
    SRH_2K: {"q1": 8.0, "q2": 5.5, "q3": 3.0, "q4": 6.0, "q5": 5.0, "q6": None},
    BASE: {"q1": 5.0, "q2": 5.0, "q3": 4.5, "q4": 6.0, "q5": 6.0, "q6": 4.0},
    PRB_2K: {"q1": 4.0},
}
AGREE_VOTES = [
    Vote("q1", SRH_2K, BASE, "A"),  # gap +3: judge A (agrees at tau 0 and .5)
    Vote("q2", SRH_2K, BASE, "tie"),  # gap +.5: judge A at tau 0, tie at tau .5
    Vote("q3", SRH_2K, BASE, "B"),  # gap -1.5: judge B (agrees)
    Vote("q4", SRH_2K, BASE, "tie"),  # gap 0: tie (agrees)
    Vote("q5", BASE, SRH_2K, "B"),  # gap +1: judge A (disagrees)
    Vote("q6", SRH_2K, BASE, "A"),  # the judge's q6 answer for SRH_2K was invalid
    Vote("q2", PRB_2K, SRH_2K, "A"),  # PRB_2K was never scored on q2
]


def wilson(k: int, n: int) -> tuple[float, float]:
    ci = binomtest(k, n).proportion_ci(confidence_level=0.95, method="wilson")
    return ci.low, ci.high


def test_agreement_without_votes_is_not_applicable() -> None:
    rows = agreement_rows(ScoreTable(AGREE_TABLE, "rubric"), None, [0, 1, 2], [0])
    assert len(rows) == 1 and rows[0]["view"].startswith("not applicable")


def test_agreement_rows_by_gap_and_tau(tmp_path: Path) -> None:
    table = table_from("rubric", AGREE_TABLE, tmp_path)
    rows = agreement_rows(table, AGREE_VOTES, [0, 1, 2], [0, 0.5])
    assert rows[0]["view"].startswith("excluded: 2 votes")
    assert rows[0]["n"] == 2
    by_gap = [r for r in rows if r["view"] == "by |gap| (tau 0)"]
    overall = [r for r in rows if r["view"] == "overall"]
    assert len(rows) == 1 + 3 + 2
    # [0, 1): gaps .5 (disagree), 0 (agree); [1, 2): -1.5 (agree), +1 (disagree); >= 2: +3
    expected_gap = [("[0, 1)", 2, 1), ("[1, 2)", 2, 1), (">= 2", 1, 1)]
    for row, (bucket, n, agree) in zip(by_gap, expected_gap, strict=True):
        assert (row["bucket"], row["n"], row["agree"], row["tau"]) == (bucket, n, agree, 0)
        assert row["rate"] == pytest.approx(agree / n, abs=5e-4)
        low, high = wilson(agree, n)
        assert row["ci_low"] == pytest.approx(low, abs=5e-4)
        assert row["ci_high"] == pytest.approx(high, abs=5e-4)
    # tau 0: q1, q3, q4 agree; tau .5: q2 becomes a tie too
    for row, (tau, agree) in zip(overall, [(0, 3), (0.5, 4)], strict=True):
        assert (row["bucket"], row["tau"], row["n"], row["agree"]) == ("all", tau, 5, agree)
        assert row["rate"] == pytest.approx(agree / 5, abs=5e-4)
        low, high = wilson(agree, 5)
        assert row["ci_low"] == pytest.approx(low, abs=5e-4)
        assert row["ci_high"] == pytest.approx(high, abs=5e-4)


def test_agreement_all_votes_excluded() -> None:
    rows = agreement_rows(ScoreTable(AGREE_TABLE, "rubric"), AGREE_VOTES[5:], [0, 1], [0])
    assert [r["view"][:12] for r in rows] == ["excluded: 2 ", "not applicab"]


# --- router headroom ----------------------------------------------------------------------------


def test_router_rows(tmp_path: Path) -> None:
    tiers = {"q1": "L1", "q2": "L1", "q5": "L1", "q6": "L1", "q3": "L2", "q4": "L2"}
    table = table_from(
        "rubric",
        {
            # q6 is invalid for simple_rag, so it leaves the comparison (else paper_rag's 10
            # would count)
            PRB_2K: {"q1": 8, "q2": 6, "q3": 2, "q4": 4, "q5": 3, "q6": 10},
            SRH_2K: {"q1": 4, "q2": 2, "q3": 7, "q4": 9, "q5": 5, "q6": None},
            ("paper_rag", "bm25", "native"): {"q1": 5},
            BASE: {"q1": 9},  # not a router candidate
            ("simple_rag", "hybrid", "native"): {"q1": 1},
            # both candidates at 10K, but no question valid in both
            SRH_10K: {"q1": 5, "q2": None},
            ("paper_rag", "bm25", "10K"): {"q1": None, "q2": 5},
            ("simple_rag", "bm25", "2K"): {"q1": 9},  # not a candidate either
        },
        tmp_path,
    )
    candidates = ["paper_rag/bm25", "simple_rag/hybrid"]
    rows = router_rows(table, candidates, ["2K", "native", "10K", "1K"], tiers)
    assert [r["budget"] for r in rows] == ["2K", "native", "10K", "1K"]
    r2k = rows[0]
    assert r2k["status"] == "ok"
    assert (r2k["n_questions"], r2k["n_systems"]) == (5, 2)
    assert r2k["n_excluded"] == 1  # q6: scored by both, valid only for paper_rag
    # means over q1-q5: paper_rag (8+6+2+4+3)/5 = 4.6, simple_rag (4+2+7+9+5)/5 = 5.4
    assert r2k["best_single"] == "simple_rag/hybrid"
    assert r2k["best_single_score"] == pytest.approx(5.4)
    # per-question best: 8, 6, 7, 9, 5
    assert r2k["oracle_score"] == pytest.approx(35 / 5)
    assert r2k["oracle_gap"] == pytest.approx(7.0 - 5.4)
    # leave one out within the tier: L1 (q1, q2, q5) -> paper_rag each time (others' means
    # 4.5 v 3.5, 5.5 v 4.5, 7 v 3), L2 (q3, q4) -> simple_rag (9 v 4, 7 v 2): 8+6+3+7+9 = 33
    assert r2k["router_score"] == pytest.approx(33 / 5)
    assert r2k["router_gap"] == pytest.approx(6.6 - 5.4)
    assert r2k["router_choices"] == "paper_rag/bm25 3; simple_rag/hybrid 2"
    # best single system without the question (totals q1-q5: paper_rag 23, simple_rag 27):
    # q1 15 v 23 -> simple_rag (4); q2 17 v 25 -> simple_rag (2); q3 21 v 20 -> paper_rag (2);
    # q4 19 v 18 -> paper_rag (4); q5 20 v 22 -> simple_rag (5): 17 / 5
    assert r2k["loqo_single_score"] == pytest.approx(17 / 5)
    assert r2k["router_gap_loqo"] == pytest.approx(33 / 5 - 17 / 5)

    native = rows[1]
    assert native["n_systems"] == 2 and native["status"] == "ok"  # native has both
    # one question: router and held-out single both take the first system by name (5)
    assert (native["n_questions"], native["n_excluded"]) == (1, 0)
    assert native["router_score"] == pytest.approx(5.0)
    assert native["loqo_single_score"] == pytest.approx(5.0)
    assert native["router_gap_loqo"] == 0.0
    assert rows[2]["n_systems"] == 2
    assert rows[2]["status"].startswith("not applicable: no question scored validly")
    assert rows[2]["n_excluded"] == 2  # q1 and q2 each valid for one system only
    assert "loqo_single_score" not in rows[2]
    assert rows[3]["n_systems"] == 0
    assert rows[3]["status"].startswith("not applicable: fewer than two")
    assert rows[3]["n_excluded"] == 0

    only_one = router_rows(table, ["paper_rag/bm25"], ["2K"], tiers)
    assert only_one[0]["n_systems"] == 1
    assert only_one[0]["status"].startswith("not applicable: fewer than two")
    assert "oracle_score" not in only_one[0]


# --- votes files --------------------------------------------------------------------------------


def test_read_votes_resolves_cells(tmp_path: Path) -> None:
    path = write_csv(
        tmp_path / "votes.csv",
        list(VOTE_COLUMNS),
        [
            ["q1", "simple_rag/hybrid", "base", "2K", "a"],
            ["q2", "base", "simple_rag/hybrid", "10K", "B"],
            ["q3", "direct_read", "base", "10K", "TIE"],  # LLM-only: the budget is ignored
            [" q4 ", " paper_rag/bm25 ", "simple_rag/hybrid", " 2K ", " Tie "],
        ],
    )
    assert read_votes(path, GRID, QIDS) == [
        Vote("q1", SRH_2K, BASE, "A"),
        Vote("q2", BASE, SRH_10K, "B"),
        Vote("q3", DIRECT, BASE, "tie"),
        Vote("q4", PRB_2K, SRH_2K, "tie"),
    ]


GOOD_ROW = ["q1", "simple_rag/hybrid", "base", "2K", "A"]
OTHER_ROW = ["q2", "simple_rag/hybrid", "base", "2K", "B"]  # a different question: no repeat


@pytest.mark.parametrize(
    ("bad", "field", "text"),
    [
        (["q9", "simple_rag/hybrid", "base", "2K", "A"], "question_id", "unknown question id 'q9'"),
        (["q1", "simple_rag/dense", "base", "2K", "A"], "system_a", "not a synthesized cell"),
        (["q1", "base", "bogus", "2K", "A"], "system_b", "known cells: base, direct_read"),
        (["q1", "simple_rag/hybrid", "base", "3K", "A"], "system_a", "simple_rag/hybrid/3K"),
        (["q1", "simple_rag/hybrid", "base", "2K", "maybe"], "vote", "'maybe' is not A, B or tie"),
        (["q1", "simple_rag/hybrid", "base", "2K", ""], "vote", "is not A, B or tie"),
        (["q1", "base", "base", "10K", "A"], "system_b", "same cell"),
        (["q1", "simple_rag/hybrid", "simple_rag/hybrid", "2K", "A"], "system_b", "same cell"),
    ],
)
def test_read_votes_bad_rows(tmp_path: Path, bad: list[str], field: str, text: str) -> None:
    path = write_csv(tmp_path / "votes.csv", list(VOTE_COLUMNS), [GOOD_ROW, OTHER_ROW, bad])
    with pytest.raises(DataError) as exc:
        read_votes(path, GRID, QIDS)
    msg = str(exc.value)
    assert (exc.value.record, exc.value.field) == ("row 4", field)
    assert str(path) in msg and "row 4" in msg and f"field '{field}'" in msg
    assert text in msg


@pytest.mark.parametrize(
    "again",
    [
        GOOD_ROW,  # the very same row
        ["q1", "simple_rag/hybrid", "base", "2K", "B"],  # a changed mind
        ["q1", "base", "simple_rag/hybrid", "2K", "tie"],  # the sides swapped
        [" q1 ", "simple_rag/hybrid", "base", " 2K ", "a"],  # spacing and case
    ],
)
def test_read_votes_rejects_a_second_vote_on_a_pair(tmp_path: Path, again: list[str]) -> None:
    path = write_csv(tmp_path / "votes.csv", list(VOTE_COLUMNS), [GOOD_ROW, OTHER_ROW, again])
    with pytest.raises(DataError) as exc:
        read_votes(path, GRID, QIDS)
    msg = str(exc.value)
    assert (exc.value.record, exc.value.field) == ("row 4", "question_id")
    assert str(path) in msg and "row 4" in msg and "field 'question_id'" in msg
    assert "second vote" in msg and "first at row 2" in msg and "'rater' column" in msg


def test_read_votes_keeps_distinct_pairs(tmp_path: Path) -> None:
    # same question, but another budget or another opponent: a different pair each time
    rows = [
        GOOD_ROW,
        ["q1", "simple_rag/hybrid", "base", "10K", "B"],
        ["q1", "paper_rag/bm25", "base", "2K", "tie"],
        ["q1", "simple_rag/hybrid", "paper_rag/bm25", "2K", "A"],
    ]
    path = write_csv(tmp_path / "votes.csv", list(VOTE_COLUMNS), rows)
    assert read_votes(path, GRID, QIDS) == [
        Vote("q1", SRH_2K, BASE, "A"),
        Vote("q1", SRH_10K, BASE, "B"),
        Vote("q1", PRB_2K, BASE, "tie"),
        Vote("q1", SRH_2K, PRB_2K, "A"),
    ]
    # base and direct_read ignore the budget: 2K and 10K name the same pair of cells
    llm_only = [["q3", "base", "direct_read", "2K", "A"], ["q3", "direct_read", "base", "10K", "A"]]
    path = write_csv(tmp_path / "llm.csv", list(VOTE_COLUMNS), llm_only)
    with pytest.raises(DataError) as exc:
        read_votes(path, GRID, QIDS)
    assert (exc.value.record, exc.value.field) == ("row 3", "question_id")


def test_read_votes_rater_column_allows_several_raters(tmp_path: Path) -> None:
    header = [*VOTE_COLUMNS, "rater"]
    rows = [
        [*GOOD_ROW, "ann"],
        ["q1", "base", "simple_rag/hybrid", "2K", "A", "bob"],  # bob's vote on ann's pair
        [*OTHER_ROW, "ann"],
    ]
    path = write_csv(tmp_path / "votes.csv", header, rows)
    assert read_votes(path, GRID, QIDS) == [
        Vote("q1", SRH_2K, BASE, "A"),
        Vote("q1", BASE, SRH_2K, "A"),
        Vote("q2", SRH_2K, BASE, "B"),
    ]
    # one rater voting twice on a pair is still an error, whatever the side order
    twice = write_csv(tmp_path / "twice.csv", header, [*rows, [*GOOD_ROW[:4], "tie", " bob "]])
    with pytest.raises(DataError) as exc:
        read_votes(twice, GRID, QIDS)
    assert (exc.value.record, exc.value.field) == ("row 5", "question_id")
    assert "first at row 3" in str(exc.value)
    # a blank rater is one (anonymous) rater
    blank = write_csv(tmp_path / "blank.csv", header, [[*GOOD_ROW, ""], [*GOOD_ROW, ""]])
    with pytest.raises(DataError, match="second vote"):
        read_votes(blank, GRID, QIDS)


def test_read_votes_accepts_a_byte_order_mark(tmp_path: Path) -> None:
    # spreadsheets save "UTF-8 CSV" with a BOM; it must not stick to the first column's name
    path = tmp_path / "votes.csv"
    lines = [",".join(VOTE_COLUMNS), ",".join(GOOD_ROW), ",".join(OTHER_ROW)]
    path.write_bytes(b"\xef\xbb\xbf" + "\n".join(lines).encode("utf-8") + b"\n")
    assert read_votes(path, GRID, QIDS) == [
        Vote("q1", SRH_2K, BASE, "A"),
        Vote("q2", SRH_2K, BASE, "B"),
    ]


def test_read_votes_bad_files(tmp_path: Path) -> None:
    missing_col = write_csv(
        tmp_path / "cols.csv",
        ["question_id", "system_a", "system_b", "vote"],
        [GOOD_ROW[:3] + ["A"]],
    )
    with pytest.raises(DataError) as exc:
        read_votes(missing_col, GRID, QIDS)
    assert exc.value.field == "budget"
    assert str(missing_col) in str(exc.value) and "missing column(s) budget" in str(exc.value)

    empty = write_csv(tmp_path / "empty.csv", list(VOTE_COLUMNS), [])
    with pytest.raises(DataError) as exc:
        read_votes(empty, GRID, QIDS)
    assert str(empty) in str(exc.value) and "no votes" in str(exc.value)

    nothing = tmp_path / "nothing.csv"
    nothing.write_text("")
    with pytest.raises(DataError) as exc:
        read_votes(nothing, GRID, QIDS)
    assert str(nothing) in str(exc.value) and "missing column" in str(exc.value)

    absent = tmp_path / "absent.csv"
    with pytest.raises(DataError) as exc:
        read_votes(absent, GRID, QIDS)
    assert str(absent) in str(exc.value) and "does not exist" in str(exc.value)


# --- blinded ballots ----------------------------------------------------------------------------

DRAW_CELLS = [SRH_2K, PRB_2K, BASE]
QUESTIONS = {q: f"Question {q}: did the treatment work?" for q in QIDS[:5]}
# gold answers (one for a question outside the set, never drawn); they name no system
REFERENCES = {q: f"Gold {q}: mortality fell by a third." for q in [*QIDS, "q99"]}


def write_answers(root: Path) -> tuple[dict[tuple, Path], dict[str, tuple]]:
    """Answer files for DRAW_CELLS; returns them and answer text -> cell (texts are unique
    and name no system)."""
    files, owner = {}, {}
    for i, cell in enumerate(DRAW_CELLS):
        records = []
        for q in QUESTIONS:
            text = f"Reply {i * 10 + int(q[1:])}: it decreased."
            owner[text] = cell
            records.append({"question_id": q, "answer": text})
        # a question outside the question set is never drawn
        records.append({"question_id": "q99", "answer": f"Stray {i}"})
        files[cell] = write_jsonl(root / f"{i}.jsonl", records)
    return files, owner


def fill_ballot(ballot: Path, votes: list[str]) -> list[dict[str, str]]:
    _, rows = read_csv(ballot)
    for row, vote in zip(rows, votes, strict=False):
        row["vote"] = vote
    with open(ballot, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=BALLOT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    return rows


def label_system(cell: tuple) -> str:
    return cell[0] if cell[0] in ("base", "direct_read") else f"{cell[0]}/{cell[1]}"


def test_draw_pairs_is_blind_seeded_and_unblinds(tmp_path: Path) -> None:
    files, owner = write_answers(tmp_path / "answers")
    ballot, key = tmp_path / "ballot.csv", tmp_path / "ballot.key.csv"
    assert draw_pairs(files, QUESTIONS, 10, 7, ballot, key, references=REFERENCES) == 10

    header, rows = read_csv(ballot)
    assert header == list(BALLOT_COLUMNS)
    assert header == ["pair_id", "question", "reference", "answer_1", "answer_2", "vote"]
    text = ballot.read_text()
    for name in ("simple_rag", "paper_rag", "hybrid", "bm25", "base", "2K", "q99", "Stray"):
        assert name not in text
    assert all(r["vote"] == "" for r in rows)
    assert len({r["pair_id"] for r in rows}) == 10
    key_header, keys = read_csv(key)
    assert key_header == list(KEY_COLUMNS)
    assert [k["pair_id"] for k in keys] == [r["pair_id"] for r in rows]
    drawn = set()
    for r, k in zip(rows, keys, strict=True):
        first, second = owner[r["answer_1"]], owner[r["answer_2"]]
        assert first != second
        assert r["question"] == QUESTIONS[k["question_id"]]
        assert r["reference"] == REFERENCES[k["question_id"]]
        assert r["answer_1"].endswith(": it decreased.")
        named_a = first if k["answer_1_is"] == "A" else second
        named_b = second if k["answer_1_is"] == "A" else first
        assert (k["system_a"], k["system_b"]) == (label_system(named_a), label_system(named_b))
        assert k["budget"] == "2K"  # the retrieval cell's budget (base has none of its own)
        drawn.add((k["question_id"], frozenset((first, second))))
    assert len(drawn) == 10  # without replacement
    assert {k["answer_1_is"] for k in keys} == {"A", "B"}  # side order varies

    again, again_key = tmp_path / "again.csv", tmp_path / "again.key.csv"
    draw_pairs(files, QUESTIONS, 10, 7, again, again_key, references=REFERENCES)
    assert again.read_bytes() == ballot.read_bytes()
    assert again_key.read_bytes() == key.read_bytes()
    # without references the reference column is blank, and the draw itself is unchanged
    plain, plain_key = tmp_path / "plain.csv", tmp_path / "plain.key.csv"
    draw_pairs(files, QUESTIONS, 10, 7, plain, plain_key)
    assert plain_key.read_bytes() == key.read_bytes()
    _, plain_rows = read_csv(plain)
    assert all(r["reference"] == "" for r in plain_rows)
    assert [{**r, "reference": ""} for r in rows] == plain_rows
    other, other_key = tmp_path / "other.csv", tmp_path / "other.key.csv"
    draw_pairs(files, QUESTIONS, 10, 8, other, other_key, references=REFERENCES)
    assert other.read_bytes() != ballot.read_bytes()
    # n is capped by what exists: 3 cell pairs x 5 questions
    assert draw_pairs(files, QUESTIONS, 100, 7, other, other_key) == 15

    marks = ["1", "2", "tie", "", "2", " TIE ", "1", "  ", "1", "2"]
    filled = fill_ballot(ballot, marks)
    out = tmp_path / "votes.csv"
    counts = unblind(ballot, key, out)
    assert counts == UnblindCounts(written=8, unvoted=2, missing=0)  # two blanks skipped
    header, votes = read_csv(out)
    assert header == list(VOTE_COLUMNS)
    expected = []
    for r, k, mark in zip(filled, keys, marks, strict=True):
        if not mark.strip():
            continue
        chosen = {"1": owner[r["answer_1"]], "2": owner[r["answer_2"]]}.get(mark.strip())
        if chosen is None:
            side = "tie"
        else:
            side = "A" if label_system(chosen) == k["system_a"] else "B"
        expected.append(
            {"question_id": k["question_id"], "system_a": k["system_a"],
             "system_b": k["system_b"], "budget": "2K", "vote": side}
        )  # fmt: skip
    assert votes == expected
    assert {v["vote"] for v in votes} == {"A", "B", "tie"}

    voted = [(r, k, m.strip()) for r, k, m in zip(filled, keys, marks, strict=True) if m.strip()]
    resolved = read_votes(out, GRID, QIDS)
    for v, (r, k, mark) in zip(resolved, voted, strict=True):
        first, second = owner[r["answer_1"]], owner[r["answer_2"]]
        assert {v.cell_a, v.cell_b} == {first, second} and v.question_id == k["question_id"]
        winner = {"1": first, "2": second}.get(mark)
        if winner is None:
            assert v.vote == "tie"
        else:
            assert v.vote == ("A" if v.cell_a == winner else "B")


def test_unblind_bad_ballots(tmp_path: Path) -> None:
    files, _ = write_answers(tmp_path / "answers")
    ballot, key = tmp_path / "ballot.csv", tmp_path / "ballot.key.csv"
    draw_pairs(files, QUESTIONS, 4, 1, ballot, key)
    out = tmp_path / "votes.csv"

    fill_ballot(ballot, ["1", "tie", "3", "2"])
    with pytest.raises(DataError) as exc:
        unblind(ballot, key, out)
    assert (exc.value.record, exc.value.field) == ("row 4", "vote")
    assert str(ballot) in str(exc.value) and "'3' is not 1, 2 or tie" in str(exc.value)
    assert not out.exists()

    rows = fill_ballot(ballot, ["1", "2", "tie", "1"])
    rows[1]["pair_id"] = "P9999"
    with open(ballot, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=BALLOT_COLUMNS, lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)
    with pytest.raises(DataError) as exc:
        unblind(ballot, key, out)
    assert (exc.value.record, exc.value.field) == ("row 3", "pair_id")

    with pytest.raises(DataError, match="does not exist"):
        unblind(ballot, tmp_path / "no.key.csv", out)


def write_rows(path: Path, header: Any, rows: list[dict[str, str]], bom: bool = False) -> None:
    with open(path, "w", newline="", encoding="utf-8-sig" if bom else "utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(header), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def test_unblind_rejects_a_pair_listed_twice(tmp_path: Path) -> None:
    files, _ = write_answers(tmp_path / "answers")
    ballot, key, out = tmp_path / "ballot.csv", tmp_path / "ballot.key.csv", tmp_path / "v.csv"
    draw_pairs(files, QUESTIONS, 3, 1, ballot, key)
    rows = fill_ballot(ballot, ["1", "2", "tie"])
    # the first pair pasted again at the end, voted the other way: not a second vote
    write_rows(ballot, BALLOT_COLUMNS, [*rows, {**rows[0], "vote": "2"}])
    with pytest.raises(DataError) as exc:
        unblind(ballot, key, out)
    msg = str(exc.value)
    assert (exc.value.record, exc.value.field) == ("row 5", "pair_id")
    assert str(ballot) in msg and "field 'pair_id'" in msg
    assert f"{rows[0]['pair_id']!r} appears twice" in msg
    assert not out.exists()


@pytest.mark.parametrize("side", ["a", "1", "", "C"])
def test_unblind_rejects_a_bad_key(tmp_path: Path, side: str) -> None:
    files, _ = write_answers(tmp_path / "answers")
    ballot, key, out = tmp_path / "ballot.csv", tmp_path / "ballot.key.csv", tmp_path / "v.csv"
    draw_pairs(files, QUESTIONS, 3, 1, ballot, key)
    fill_ballot(ballot, ["1", "2", "tie"])
    _, keys = read_csv(key)
    keys[1]["answer_1_is"] = side
    write_rows(key, KEY_COLUMNS, keys)
    with pytest.raises(DataError) as exc:
        unblind(ballot, key, out)
    msg = str(exc.value)
    assert (exc.value.record, exc.value.field) == ("row 3", "answer_1_is")
    assert str(key) in msg and "row 3" in msg and "field 'answer_1_is'" in msg
    assert f"{side!r} is not A or B" in msg
    assert not out.exists()


def test_unblind_counts_blank_and_missing_pairs(tmp_path: Path) -> None:
    files, owner = write_answers(tmp_path / "answers")
    ballot, key, out = tmp_path / "ballot.csv", tmp_path / "ballot.key.csv", tmp_path / "v.csv"
    assert draw_pairs(files, QUESTIONS, 6, 4, ballot, key) == 6
    rows = fill_ballot(ballot, ["1", "", "tie", "2", " ", "1"])
    _, keys = read_csv(key)
    # a rater deleted the 4th and 6th pairs (one voted, one not yet seen) and saved with a BOM
    kept = [r for i, r in enumerate(rows) if i not in (3, 5)]
    write_rows(ballot, BALLOT_COLUMNS, kept, bom=True)
    assert unblind(ballot, key, out) == UnblindCounts(written=2, unvoted=2, missing=2)
    _, votes = read_csv(out)
    # written: pair 1 (answer 1 wins) and pair 3 (tie)
    assert [v["question_id"] for v in votes] == [keys[0]["question_id"], keys[2]["question_id"]]
    assert votes[1]["vote"] == "tie"
    winner = owner[rows[0]["answer_1"]]
    assert votes[0]["vote"] == ("A" if label_system(winner) == keys[0]["system_a"] else "B")
    # a ballot with nothing voted still writes the header, and counts every row as blank
    write_rows(ballot, BALLOT_COLUMNS, [{**r, "vote": ""} for r in rows])
    assert unblind(ballot, key, out) == UnblindCounts(written=0, unvoted=6, missing=0)
    assert read_csv(out) == (list(VOTE_COLUMNS), [])


def test_draw_pairs_across_budgets_keeps_the_cells(tmp_path: Path) -> None:
    native = ("paper_rag", "bm25", "native")
    grid = [*GRID, native, ("simple_rag", "hybrid", "native")]
    files = {
        native: write_jsonl(tmp_path / "a.jsonl", [{"question_id": "q1", "answer": "one"}]),
        SRH_2K: write_jsonl(tmp_path / "b.jsonl", [{"question_id": "q1", "answer": "two"}]),
    }
    ballot, key, out = tmp_path / "b.csv", tmp_path / "b.key.csv", tmp_path / "v.csv"
    try:
        draw_pairs(files, {"q1": "Did it work?"}, 1, 0, ballot, key)
    except (ValueError, DataError):
        return  # refusing a pair the import format cannot express is a fix too
    fill_ballot(ballot, ["1"])
    unblind(ballot, key, out)
    (vote,) = read_votes(out, grid, QIDS)
    assert {vote.cell_a, vote.cell_b} == {native, SRH_2K}


def test_cli_draw_pairs_and_unblind(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    root = tmp_path / "answers"
    layout = {
        "simple_rag/hybrid/2K": root / "simple_rag" / "hybrid" / "2K.jsonl",
        "base": root / "base" / "none" / "native.jsonl",
        "direct_read": root / "direct_read" / "none" / "6K.jsonl",
    }
    owner: dict[str, tuple] = {}
    for label, cell in zip(layout, [SRH_2K, BASE, DIRECT], strict=True):
        records = [{"question_id": q, "answer": f"{q} answer {len(owner)}"} for q in QIDS[:3]]
        owner.update({r["answer"]: cell for r in records})
        write_jsonl(layout[label], records)
    qfile = write_jsonl(
        tmp_path / "questions.jsonl",
        [
            {"id": q, "question": f"Q {q}?", "gold_answer": f"gold {q}", "paper_ids": ["p1"]}
            for q in QIDS
        ],
    )
    ballot = tmp_path / "ballots" / "ballot.csv"
    argv = ["draw-pairs", "--answers", str(root), "--questions", str(qfile), "--cells",
            *layout, "--n", "5", "--seed", "2", "--out", str(ballot)]  # fmt: skip
    assert main(argv) == 0
    key = tmp_path / "ballots" / "ballot.key.csv"
    assert "5 blinded pairs" in capsys.readouterr().out
    assert key.is_file()
    filled = fill_ballot(ballot, ["1", "2", "tie", "1", "2"])
    out = tmp_path / "votes.csv"
    assert main(["unblind-votes", str(ballot), str(key), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "5 votes" in printed
    assert "0 pairs left blank, 0 key pairs missing from the ballot" in printed
    votes = read_votes(out, GRID, QIDS)
    assert len(votes) == 5
    # the ballot carries each question's gold answer from the questions file
    _, keys = read_csv(key)
    assert [r["reference"] for r in filled] == [f"gold {k['question_id']}" for k in keys]
    for v, r in zip(votes, filled, strict=True):
        first, second = owner[r["answer_1"]], owner[r["answer_2"]]
        assert {v.cell_a, v.cell_b} == {first, second}
        winner = {"1": first, "2": second}.get(r["vote"])
        if winner is None:
            assert v.vote == "tie"
        else:
            assert v.vote == ("A" if v.cell_a == winner else "B")

    # two left blank, and one key pair dropped from the ballot
    write_rows(ballot, BALLOT_COLUMNS, fill_ballot(ballot, ["1", "", "", "2", "tie"])[:4])
    assert main(["unblind-votes", str(ballot), str(key), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"2 votes -> {out}")
    assert "2 pairs left blank, 1 key pairs missing from the ballot" in printed

    assert main([*argv[:6], "base", "base", "--out", str(tmp_path / "x.csv")]) == 2
    assert "at least two distinct cells" in capsys.readouterr().err


# --- qualitative tables -------------------------------------------------------------------------

LONG = "The drug | reduced\n  mortality   by a larger margin in the treated group."


def qual_fixture(root: Path) -> dict[tuple, tuple[Path, Path, Path]]:
    srh_native = ("simple_rag", "hybrid", "native")
    spec: list[tuple[tuple, dict[str, str], list[dict], dict[str, int]]] = [
        (SRH_10K, {"q1": "Ten K.", "q2": "Ten K q2."}, [J("q1", 7.0, True)], {"q1": 9990}),
        (BASE, {"q1": "Base says | maybe."}, [J("q1", 1.0, False)], {"q1": 0}),
        (
            srh_native,
            {"q1": LONG, "q2": "No effect."},
            [J("q1", 6.5, True), J("q2", None)],
            {"q1": 9000, "q2": 8000},
        ),
        (("simple_rag", "hybrid", "500"), {"q1": "Five hundred."}, [J("q1", 3.0)], {"q1": 480}),
        (("paper_rag", "bm25", "native"), {"q1": "Paper RAG."}, [J("q1", 2.0)], {"q1": 9500}),
        (DIRECT, {"q1": "Direct."}, [J("q1", None)], {"q1": 6000}),
        (
            SRH_2K,
            {"q1": "Two K answer.", "q2": "Two K q2."},
            [J("q1", 5.0, False), J("q2", 4.25, True)],
            {"q1": 1995, "q2": 1990},
        ),
        (PRB_2K, {"q1": "Hidden paper 2K answer."}, [J("q1", 9.0)], {"q1": 2000}),
    ]
    files = {}
    for i, (cell, answers, judged, chars) in enumerate(spec):
        a = write_jsonl(
            root / f"{i}.a.jsonl", [{"question_id": q, "answer": t} for q, t in answers.items()]
        )
        j = write_jsonl(root / f"{i}.j.jsonl", judged)
        c = write_jsonl(
            root / f"{i}.c.jsonl",
            [{"question_id": q, "achieved_chars": n, "spans": []} for q, n in chars.items()],
        )
        files[cell] = (a, j, c)
    return files


def qual_questions() -> list[Question]:
    return [
        Question("q1", "Did the drug | work?", "It significantly decreased.", (), ("p1",), "L1"),
        Question("q2", "Any effect?", "No difference.", (), ("p1",), "L2"),
        Question("q3", "Unused?", "Nothing.", (), ("p1",), "L3"),
    ]


def md_rows(section: str, heading: str) -> dict[str, list[str]]:
    """Table rows under a '### heading' as first column -> the other columns."""
    block = section.split(f"### {heading}", 1)[1].split("\n### ", 1)[0]
    rows = {}
    for line in block.splitlines():
        if line.startswith("| ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip("|").split(" | ")]
            rows[cells[0]] = cells[1:]
    return rows


def test_excerpt() -> None:
    assert excerpt("short | one", 40) == "short \\| one"
    # flattened: "The drug \| reduced mortality by a larger ..."; 40 characters end in "large"
    assert excerpt(LONG, 40) == "The drug \\| reduced mortality by a …"
    assert excerpt("a  b\n\tc", 10) == "a b c"


def test_write_qualitative(tmp_path: Path) -> None:
    files = qual_fixture(tmp_path / "in")
    questions = choose_questions(qual_questions(), 2)
    assert [q.id for q in questions] == ["q1", "q2"]
    out = tmp_path / "out" / "qual.md"
    write_qualitative(questions, files, "simple_rag/hybrid", 40, "Side by side", out)
    md = out.read_text()
    assert md.startswith("# Side by side\n")
    part_a, part_b = md.split("## B. simple_rag/hybrid across budgets\n")
    assert "### q1: Did the drug \\| work?" in part_a
    assert "Gold answer: It significantly decreased." in part_a
    a1 = md_rows(part_a, "q1")
    assert a1["cell"] == ["score", "gold", "answer"]
    assert a1["simple_rag/hybrid/native"] == [
        "6.50",
        "yes",
        "The drug \\| reduced mortality by a …",
    ]
    assert a1["paper_rag/bm25/native"] == ["2.00", "–", "Paper RAG."]
    assert a1["base"] == ["1.00", "no", "Base says \\| maybe."]
    assert a1["direct_read"] == ["invalid", "–", "Direct."]
    assert len(a1) == 5  # header + the four native / LLM-only cells; no 2K, 10K or 500 cells
    a2 = md_rows(part_a, "q2")
    assert a2["simple_rag/hybrid/native"] == ["invalid", "–", "No effect."]
    assert len(a2) == 2
    assert "Hidden paper" not in md and "Ten K." not in part_a

    b1 = md_rows(part_b, "q1")
    assert b1["budget"] == ["chars", "score", "gold", "answer"]
    budgets = [b for b in b1 if b != "budget"]
    assert sorted(budgets) == sorted(["native", "500", "2K", "10K"])
    numeric = [b for b in budgets if b != "native"]
    assert numeric == ["500", "2K", "10K"]  # by size, not as strings
    assert b1["500"] == ["480", "3.00", "–", "Five hundred."]
    assert b1["2K"] == ["1995", "5.00", "no", "Two K answer."]
    assert b1["10K"] == ["9990", "7.00", "yes", "Ten K."]
    assert b1["native"] == ["9000", "6.50", "yes", "The drug \\| reduced mortality by a …"]
    b2 = md_rows(part_b, "q2")
    assert b2["10K"] == ["–", "–", "–", "Ten K q2."]  # no judgment and no context record
    assert b2["2K"] == ["1990", "4.25", "yes", "Two K q2."]
    assert "500" not in b2


def test_write_qualitative_without_the_system(tmp_path: Path) -> None:
    files = qual_fixture(tmp_path / "in")
    out = tmp_path / "qual.md"
    write_qualitative(qual_questions()[:1], files, "simple_rag/dense", 40, "T", out)
    part_b = out.read_text().split("## B. simple_rag/dense across budgets\n")[1]
    assert "not applicable" in part_b and "### q1" not in part_b


def test_choose_questions() -> None:
    qs = qual_questions()
    assert [q.id for q in choose_questions(qs, 1)] == ["q1"]
    assert [q.id for q in choose_questions(qs, ["q3", "q1"])] == ["q3", "q1"]
    with pytest.raises(ValueError, match=r"unknown question ids \['q7', 'q8'\]"):
        choose_questions(qs, ["q1", "q7", "q8"])


# --- figures ------------------------------------------------------------------------------------


def png_size(data: bytes) -> tuple[int, int]:
    assert data[:8] == PNG
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def twice(tmp_path: Path, name: str, draw: Any) -> bytes:
    first, second = tmp_path / f"{name}1.png", tmp_path / "again" / f"{name}2.png"
    draw(first)
    draw(second)
    data = first.read_bytes()
    assert data == second.read_bytes()
    return data


def bars_of(ax: Any) -> dict[str, tuple[list[float], list[float]]]:
    """label -> (bar centres, bar heights) for every bar group on the axes."""
    return {
        c.get_label(): (
            [b.get_x() + b.get_width() / 2 for b in c.patches],
            [b.get_height() for b in c.patches],
        )
        for c in ax.containers
    }


def test_tier_bars_png(tmp_path: Path) -> None:
    table = ScoreTable(X_SCORES, "rubric")
    data = twice(
        tmp_path, "tiers", lambda p: tier_bars(table, [SRH_2K, PRB_2K, BASE], TIERS, "tiers", p)
    )
    assert png_size(data) == (840, 540)  # max(7, 0.6 * 3 cells * 3 tiers) x 4.5 in at 120 dpi
    # a cell without judgments and an empty tier list still draw
    empty = twice(tmp_path, "empty", lambda p: tier_bars(table, [DIRECT], {}, "none", p))
    assert png_size(empty) == (840, 540)


def test_tier_bars_plot_valid_means_per_tier(tmp_path: Path) -> None:
    fig = tier_bars(
        ScoreTable(X_SCORES, "rubric"), [SRH_2K, PRB_2K, BASE], TIERS, "tiers", tmp_path / "t.png"
    )
    (ax,) = fig.axes
    # valid X_SCORES by tier (q1, q2: L1; q3: L2; q4: L3); invalid ones are left out:
    #   simple_rag/hybrid/2K: L1 q1 8 (q2 invalid), L2 6, L3 4
    #   paper_rag/bm25/2K:    L1 (5 + 7) / 2 = 6, L2 3, L3 2
    #   base:                 L1 q2 2 (q1 invalid), L2 1, L3 3
    # three groups of bars 0.8 / 3 wide, centred on the tier ticks 0, 1, 2
    w = 0.8 / 3
    bars = bars_of(ax)
    assert list(bars) == ["simple_rag/hybrid/2K", "paper_rag/bm25/2K", "base"]
    for i, (label, heights) in enumerate(
        [("simple_rag/hybrid/2K", [8, 6, 4]), ("paper_rag/bm25/2K", [6, 3, 2]), ("base", [2, 1, 3])]
    ):
        centres, got = bars[label]
        assert got == heights, label
        assert centres == pytest.approx([j + (i - 1) * w for j in range(3)]), label
    # n per bar, in drawing order (cell by cell, tier by tier): only paper_rag's L1 has two
    assert [t.get_text() for t in ax.texts] == ["n=1"] * 3 + ["n=2", "n=1", "n=1"] + ["n=1"] * 3
    assert [t.get_text() for t in ax.get_xticklabels()] == ["L1", "L2", "L3"]
    assert ax.get_xticks().tolist() == [0, 1, 2]
    assert ax.get_ylabel() == "mean composite score (0-10, valid judgments)"
    assert ax.get_ylim() == (0, 10.5)
    assert ax.get_title() == "tiers"
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend == ["simple_rag/hybrid/2K", "paper_rag/bm25/2K", "base"]


def test_tier_bars_mark_a_tier_without_valid_scores(tmp_path: Path) -> None:
    # Y_SCORES: base has no L3 score (q4 never scored) but a valid 0.0 on q3 (L2).
    fig = tier_bars(ScoreTable(Y_SCORES, "qwen"), [SRH_2K, BASE], TIERS, "y", tmp_path / "y.png")
    (ax,) = fig.axes
    bars = bars_of(ax)
    # simple_rag/hybrid/2K: L1 (7.5 + 6.0) / 2 = 6.75, L2 6.5, L3 3.0
    assert bars["simple_rag/hybrid/2K"][1] == [6.75, 6.5, 3.0]
    # base: L1 2.5, L2 a real 0.0 (n=1), L3 nothing: drawn at 0 but labelled n/a
    assert bars["base"][1] == [2.5, 0.0, 0.0]
    assert [t.get_text() for t in ax.texts] == ["n=2", "n=1", "n=1", "n=1", "n=1", "n/a"]
    # a cell with no judgments at all and no tiers: one "L1" group with an n/a bar
    fig = tier_bars(ScoreTable(X_SCORES, "rubric"), [DIRECT], {}, "none", tmp_path / "e.png")
    (ax,) = fig.axes
    assert bars_of(ax) == {"direct_read": ([0.0], [0.0])}
    assert [t.get_text() for t in ax.texts] == ["n/a"]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["L1"]


def test_judge_scatter_png(tmp_path: Path) -> None:
    xs, ys = [b[0] for b in BOTH], [b[1] for b in BOTH]
    stats = {"slope": 0.9, "intercept": 0.3, "pearson_r": 0.95, "system_rank_spearman": None}
    pairs = [("rubric", "qwen", xs, ys, stats), ("rubric", "broken", [], [], {})]
    data = twice(tmp_path, "scatter", lambda p: judge_scatter(pairs, "calibration", p))
    assert png_size(data) == (1080, 540)  # two 4.5 in panels
    none = twice(tmp_path, "none", lambda p: judge_scatter([], "calibration", p))
    assert png_size(none) == (540, 540)
    assert none != data


def test_judge_scatter_plots_points_diagonal_and_fit(tmp_path: Path) -> None:
    xs, ys = [b[0] for b in BOTH], [b[1] for b in BOTH]
    fit = linregress(xs, ys)
    r = pearsonr(xs, ys).statistic
    stats = {"slope": fit.slope, "intercept": fit.intercept, "pearson_r": r,
             "system_rank_spearman": 0.5}  # fmt: skip
    pairs = [("rubric", "qwen", xs, ys, stats), ("rubric", "broken", [], [], {})]
    fig = judge_scatter(pairs, "calibration", tmp_path / "s.png")
    left, right = fig.axes
    assert fig.get_suptitle() == "calibration"
    # the eight cells both judges scored, as (x, y) points
    (points,) = left.collections
    assert points.get_offsets().tolist() == [[x, y] for x, y in zip(xs, ys, strict=True)]
    lines = {line.get_label(): line for line in left.get_lines()}
    diagonal = lines["y = x"]
    assert diagonal.get_linestyle() == "--"
    assert (list(diagonal.get_xdata()), list(diagonal.get_ydata())) == ([0, 10], [0, 10])
    # the least-squares line from scipy, drawn from x = 0 to x = 10
    fit_label = f"fit y = {fit.slope:.2f}x + {fit.intercept:.2f}"
    line = lines[fit_label]
    assert list(line.get_xdata()) == [0, 10]
    assert list(line.get_ydata()) == pytest.approx([fit.intercept, fit.intercept + 10 * fit.slope])
    assert left.get_title() == f"r = {r:.2f}, rank rho = 0.50, n = 8"
    assert (left.get_xlabel(), left.get_ylabel()) == ("rubric composite", "qwen composite")
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["y = x", fit_label]
    # a pair with no valid cells: no points, no fit, statistics shown as n/a
    assert right.collections[0].get_offsets().shape[0] == 0
    assert [line.get_label() for line in right.get_lines()] == ["y = x"]
    assert right.get_title() == "r = n/a, rank rho = n/a, n = 0"
    assert (right.get_xlabel(), right.get_ylabel()) == ("rubric composite", "broken composite")
    # one judge only: a single panel that says why there is nothing to plot
    fig = judge_scatter([], "calibration", tmp_path / "n.png")
    (ax,) = fig.axes
    assert not ax.axison
    assert [t.get_text() for t in ax.texts] == [
        "not applicable:\ncalibration needs two or more judges"
    ]


def test_agreement_figure_png(tmp_path: Path) -> None:
    table = ScoreTable(AGREE_TABLE, "rubric")
    rows = agreement_rows(table, AGREE_VOTES, [0, 1, 2, 4], [0, 0.5, 1])
    data = twice(tmp_path, "agree", lambda p: agreement_figure(rows, "agreement", p))
    assert png_size(data) == (1200, 504)
    na = agreement_rows(table, None, [0, 1], [0])
    blank = twice(tmp_path, "na", lambda p: agreement_figure(na, "agreement", p))
    assert png_size(blank) == (1200, 504)
    assert blank != data


def errorbars_of(ax: Any) -> tuple[list[float], list[float], list[tuple[float, float]]]:
    """x, y and the (low, high) end of each error bar of the single errorbar plot on ax."""
    (container,) = ax.containers
    data_line, _caps, (bars,) = container.lines
    ends = [(float(seg[0][1]), float(seg[1][1])) for seg in bars.get_segments()]
    return list(data_line.get_xdata()), list(data_line.get_ydata()), ends


def test_agreement_figure_plots_rates_with_wilson_bars(tmp_path: Path) -> None:
    table = ScoreTable(AGREE_TABLE, "rubric")
    rows = agreement_rows(table, AGREE_VOTES, [0, 1, 2, 4], [0, 0.5, 1])
    fig = agreement_figure(rows, "agreement", tmp_path / "a.png")
    left, right = fig.axes
    assert fig.get_suptitle() == "agreement"
    # By |gap| at tau 0 (see test_agreement_rows_by_gap_and_tau): [0, 1) 1 of 2 (gaps .5, 0),
    # [1, 2) 1 of 2 (-1.5, +1), [2, 4) 1 of 1 (+3); [4, inf) is empty and is not drawn.
    xs, ys, ends = errorbars_of(left)
    assert xs == [0, 1, 2]
    assert ys == [0.5, 0.5, 1.0]
    for (lo, hi), (k, n) in zip(ends, [(1, 2), (1, 2), (1, 1)], strict=True):
        assert (lo, hi) == pytest.approx(wilson(k, n), abs=5e-4)  # rows carry 3 decimals
    assert [t.get_text() for t in left.get_xticklabels()] == [
        "[0, 1)\nn=2", "[1, 2)\nn=2", "[2, 4)\nn=1"
    ]  # fmt: skip
    assert left.get_xlabel() == "|judge score gap|"
    # Overall by tau over the 5 usable votes: tau 0 -> 3 agree (q1, q3, q4); tau .5 -> 4 (q2's
    # +.5 becomes a tie); tau 1 -> 4 (q5's +1 becomes a tie, but the human voted B).
    xs, ys, ends = errorbars_of(right)
    assert xs == [0, 1, 2]
    assert ys == [0.6, 0.8, 0.8]
    for (lo, hi), k in zip(ends, [3, 4, 4], strict=True):
        assert (lo, hi) == pytest.approx(wilson(k, 5), abs=5e-4)
    assert [t.get_text() for t in right.get_xticklabels()] == ["0\nn=5", "0.5\nn=5", "1\nn=5"]
    assert right.get_xlabel() == "tie tolerance tau"
    for ax in (left, right):
        assert ax.get_ylabel() == "judge-human agreement (Wilson 95% CI)"
        assert ax.get_ylim() == (0, 1.05)
    # without votes both panels say why, with no axes drawn
    na = agreement_rows(table, None, [0, 1], [0])
    fig = agreement_figure(na, "agreement", tmp_path / "na.png")
    for ax in fig.axes:
        assert not ax.axison and not ax.containers
        assert [t.get_text() for t in ax.texts] == [na[0]["view"]]
        assert ax.texts[0].get_text().startswith("not applicable")


# --- analysis config ----------------------------------------------------------------------------

CONFIG_GRID = [
    ("simple_rag", "hybrid", "2K"),
    ("simple_rag", "bm25", "2K"),
    ("paper_rag", "bm25", "2K"),
    ("paper_rag", "bm25", "native"),
    BASE,
]


def test_check_analysis_config_defaults() -> None:
    assert check_analysis_config({}, CONFIG_GRID) == {
        "router_systems": ["paper_rag/bm25", "simple_rag/bm25", "simple_rag/hybrid"],
        "qualitative_system": "simple_rag/hybrid",
    }
    no_hybrid = [c for c in CONFIG_GRID if c[1] != "hybrid"]
    assert check_analysis_config({}, no_hybrid)["qualitative_system"] == "paper_rag/bm25"
    given = {"router": {"systems": ["simple_rag/bm25"]}, "qualitative": {"system": "paper_rag/bm25"},
             "gap_buckets": [0, 0.5, 3], "contrasts": [{"a": "simple_rag/hybrid/2K", "b": "base"}]}  # fmt: skip
    assert check_analysis_config(given, CONFIG_GRID) == {
        "router_systems": ["simple_rag/bm25"],
        "qualitative_system": "paper_rag/bm25",
    }


@pytest.mark.parametrize(
    ("analysis", "where"),
    [
        (
            {"router": {"systems": ["simple_rag/hybrid", "simple_rag/dense"]}},
            "analysis.router.systems[1]",
        ),
        ({"router": {"systems": ["base"]}}, "analysis.router.systems[0]"),
        ({"qualitative": {"system": "simple_rag/dense"}}, "analysis.qualitative.system"),
        ({"qualitative": {"system": "base"}}, "analysis.qualitative.system"),
        ({"gap_buckets": [1, 2]}, "analysis.gap_buckets"),
        ({"gap_buckets": [0, 2, 2]}, "analysis.gap_buckets"),
        ({"gap_buckets": [0, 3, 1]}, "analysis.gap_buckets"),
        (
            {"contrasts": [{"a": "simple_rag/hybrid/2K", "b": "direct_read"}]},
            "analysis.contrasts[0].b",
        ),
    ],
)
def test_check_analysis_config_errors(analysis: dict, where: str) -> None:
    with pytest.raises(ConfigError) as exc:
        check_analysis_config(analysis, CONFIG_GRID, source="my.yaml")
    msg = str(exc.value)
    assert where in msg
    if not where.startswith("analysis.contrasts"):
        assert msg.startswith(f"my.yaml: {where}")
    if "systems" in where or "qualitative" in where:
        assert "known: paper_rag/bm25, simple_rag/bm25, simple_rag/hybrid" in msg
