"""Leaderboards from judgment and cell files: valid-only means, invalid counts, budget columns."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from srb.data.canonical import write_canonical
from srb.data.schema import Corpus, Paper, Question
from srb.leaderboard import (
    budget_sweep_figure,
    build_leaderboard,
    columns,
    write_leaderboard,
)

TIERS = {"q1": "L1", "q2": "L1", "q3": "L2", "q4": "L3"}


@pytest.fixture
def corpus_dir(tmp_path: Path) -> Path:
    papers = (Paper(id="p1", title="P1", text="Some paper text. " * 20),)
    questions = tuple(
        Question(
            id=qid,
            question=f"Question {qid}?",
            gold_answer="It significantly decreased.",
            must_have=(),
            paper_ids=("p1",),
            tier=tier,
            gold_label="significantly decreased",
        )
        for qid, tier in TIERS.items()
    )
    out = tmp_path / "corpus"
    write_canonical(Corpus(name="tiny", papers=papers, questions=questions), out)
    return out


def J(qid: str, composite: float | None, label_correct: bool | None = None) -> dict:
    return {
        "question_id": qid,
        "judge": "rubric",
        "valid": composite is not None,
        "scores": None,
        "composite": composite,
        "attempts": 1,
        "error": None if composite is not None else "attempt 3: garbage",
        "stated_label": None,
        "label_correct": label_correct,
    }


def write_cell(
    root: Path, name: str, judgments: list[dict], chars: dict[str, int]
) -> tuple[Path, Path]:
    jfile, cfile = root / f"{name}.judgments.jsonl", root / f"{name}.cell.jsonl"
    jfile.write_text("".join(json.dumps(r) + "\n" for r in judgments))
    cfile.write_text(
        "".join(
            json.dumps({"question_id": q, "achieved_chars": c, "spans": [], "context": ""}) + "\n"
            for q, c in chars.items()
        )
    )
    return jfile, cfile


def uniform(score: float) -> list[dict]:
    return [J(q, score, True) for q in TIERS]


def flat(n: int) -> dict[str, int]:
    return dict.fromkeys(TIERS, n)


@pytest.fixture
def cells(tmp_path: Path) -> list[tuple]:
    root = tmp_path / "cells"
    root.mkdir()
    spec = [
        # system, modality, budget, judgments, achieved chars per question
        (
            "base",
            "none",
            "native",
            [J("q1", 2.0, False), J("q2", 4.0, False), J("q3", 1.0), J("q4", 1.0)],
            flat(0),
        ),
        ("direct_read", "none", "6K", uniform(3.5), flat(6000)),
        ("paper_rag", "bm25", "native", uniform(4.5), flat(9000)),
        (
            "simple_rag",
            "hybrid",
            "native",
            # q3 is invalid: excluded from the means (not a zero), counted in n_invalid
            [J("q1", 8.0, True), J("q2", 6.0, False), J("q3", None, True), J("q4", 3.0)],
            {"q1": 1000, "q2": 2000, "q3": 3000, "q4": 4000},
        ),
        # budgets given out of order; "10K" sorts before "2K" as a string
        ("simple_rag", "hybrid", "10K", uniform(5.0), flat(9990)),
        ("simple_rag", "hybrid", "500", [*uniform(2.0)[:3], J("q4", None, False)], flat(480)),
        ("simple_rag", "hybrid", "2K", uniform(4.25), flat(1995)),
    ]
    out = []
    for i, (system, modality, budget, judgments, chars) in enumerate(spec):
        j, c = write_cell(root, f"{i}-{system}-{budget}", judgments, chars)
        out.append((system, modality, budget, j, c))
    return out


def test_build_leaderboard(corpus_dir: Path, cells: list[tuple]) -> None:
    rows = build_leaderboard(corpus_dir, cells)
    assert [r["system"] for r in rows] == ["simple_rag", "paper_rag", "base", "direct_read"]
    by = {r["system"]: r for r in rows}
    rag = by["simple_rag"]
    assert rag["native_avg"] == 5.67  # mean(8, 6, 3); invalid q3 excluded, not scored 0
    assert rag["native_L1"] == 7.0
    assert rag["native_L2"] is None  # its only question was invalid
    assert rag["native_L3"] == 3.0
    assert rag["native_chars"] == 2500
    assert rag["native_label_acc"] == 0.667  # True, False, True (label is LLM-free)
    assert rag["n_questions"] == 4
    assert rag["n_invalid"] == 2  # one native, one at 500
    assert (rag["500_score"], rag["500_chars"], rag["500_label_acc"]) == (2.0, 480, 0.75)
    assert (rag["2K_score"], rag["2K_chars"], rag["2K_label_acc"]) == (4.25, 1995, 1.0)
    assert (rag["10K_score"], rag["10K_chars"]) == (5.0, 9990)
    assert rag["_budgets"] == ["500", "2K", "6K", "10K"]

    base = by["base"]
    assert (base["native_avg"], base["native_L1"], base["native_L2"], base["native_L3"]) == (
        2.0,
        3.0,
        1.0,
        1.0,
    )
    assert base["native_chars"] == 0
    assert base["native_label_acc"] == 0.0
    assert base["n_invalid"] == 0

    dr = by["direct_read"]
    assert "native_avg" not in dr
    assert (dr["6K_score"], dr["6K_chars"], dr["6K_label_acc"]) == (3.5, 6000, 1.0)
    assert by["paper_rag"]["modality"] == "bm25" and by["paper_rag"]["native_avg"] == 4.5


# Characters per budget label, by hand: what orders the budget blocks (not the label text).
BUDGET_CHARS = {"500": 500, "1K": 1_000, "2K": 2_000, "5K": 5_000, "6K": 6_000, "10K": 10_000,
                "30K": 30_000, "50K": 50_000}  # fmt: skip


def documented_columns(budgets: list[str]) -> list[str]:
    """The README's Table 4/5 shape for the configured budgets: "native Avg / L1 / L2 / L3 /
    chars; per budget score, chars and label accuracy; invalid counts". The LLM-free label
    accuracy sits beside the native score too (README's measured table: "native label
    accuracy"), the question count beside the invalid count, and per budget the cell's budget
    verdict (the issue on store systems: an overshooting knob is said in the leaderboard)."""
    native = [n for n in budgets if n == "native"]
    sized = sorted((b for b in budgets if b != "native"), key=BUDGET_CHARS.__getitem__)
    cols = ["system", "modality"]
    if native:
        cols += [f"native_{part}" for part in ("avg", "L1", "L2", "L3", "chars", "label_acc")]
    for b in sized:
        cols += [f"{b}_{part}" for part in ("score", "chars", "label_acc", "budget")]
    return [*cols, "n_questions", "n_invalid", "synthesis", "doctor"]


def test_documented_columns_for_the_default_budgets() -> None:
    import yaml

    config = yaml.safe_load((Path(__file__).parents[1] / "config/config.yaml").read_text())
    configured = config["budgets"]
    assert configured[0] == "native" and len(configured) >= 3
    sized = [b for b in configured if b != "native"]
    expected = documented_columns(configured)
    got = columns(sized)
    assert got == expected
    # the shape, spelled out: the native block, then one block of three per budget, then counts
    assert got[:7] == [
        "system",
        "modality",
        "native_avg",
        "native_L1",
        "native_L2",
        "native_L3",
        "native_chars",
    ]
    for b in sized:
        block = [c for c in got if c.startswith(f"{b}_")]
        assert block == [f"{b}_score", f"{b}_chars", f"{b}_label_acc", f"{b}_budget"]
    assert "n_invalid" in got
    assert len(got) == 2 + 6 + 4 * len(sized) + 4  # n_questions, n_invalid, synthesis, doctor


def test_leaderboard_budget_blocks_follow_size_not_label_order(
    corpus_dir: Path, cells: list[tuple], tmp_path: Path
) -> None:
    # The fixture's cells use budgets native, 10K, 500 and 2K (simple_rag) and 6K (direct_read).
    rows = build_leaderboard(corpus_dir, cells)
    configured = ["native", "10K", "500", "2K", "6K"]
    csv_out, md_out = tmp_path / "lb.csv", tmp_path / "lb.md"
    write_leaderboard(rows, "t", csv_out, md_out)
    with open(csv_out, newline="") as fh:
        header = next(csv.reader(fh))
    assert header == documented_columns(configured)
    # 500 < 2K < 6K < 10K by characters, although "10K" < "2K" < "500" < "6K" as strings
    blocks = [c.removesuffix("_score") for c in header if c.endswith("_score")]
    assert blocks == ["500", "2K", "6K", "10K"]
    # a budget no cell used gets no columns
    assert not any(c.startswith(("1K_", "5K_")) for c in header)


def test_write_leaderboard(corpus_dir: Path, cells: list[tuple], tmp_path: Path) -> None:
    rows = build_leaderboard(corpus_dir, cells)
    csv_out, md_out = tmp_path / "out" / "lb.csv", tmp_path / "out" / "lb.md"
    write_leaderboard(rows, "tiny: synthesizer s, judge rubric", csv_out, md_out)

    with open(csv_out, newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == documented_columns(["native", "500", "2K", "6K", "10K"])
        table = list(reader)
    assert [r["system"] for r in table] == ["simple_rag", "paper_rag", "base", "direct_read"]
    rag = table[0]
    assert rag["native_avg"] == "5.67" and rag["native_L2"] == "" and rag["native_L1"] == "7.0"
    assert rag["2K_score"] == "4.25" and rag["500_chars"] == "480"
    assert rag["n_invalid"] == "2" and rag["n_questions"] == "4"
    assert table[3]["native_avg"] == "" and table[3]["6K_score"] == "3.5"
    assert "_budgets" not in csv_out.read_text()
    # The whole simple_rag/hybrid row by hand from the fixture's judgments and cells:
    #   native: valid composites q1 8, q2 6, q4 3 (q3 invalid: left out, not a 0) -> 17/3 = 5.67;
    #     L1 = q1, q2 -> (8 + 6)/2 = 7.0; L2 = q3 only, invalid -> empty; L3 = q4 -> 3.0;
    #     chars over all judged questions (1000 + 2000 + 3000 + 4000)/4 = 2500;
    #     label_correct True, False, True, None -> 2 of the 3 known = 0.667.
    #   500: q1-q3 2.0 each, q4 invalid -> 2.0; chars 480; labels T, T, T, F -> 0.75.
    #   2K: 4.25, 1995 chars, all labels True -> 1.0.   6K: no simple_rag cell -> empty.
    #   10K: 5.0, 9990 chars, 1.0.   questions 4; invalid 1 (native) + 1 (500) = 2.
    assert rag == {
        "system": "simple_rag",
        "modality": "hybrid",
        "native_avg": "5.67",
        "native_L1": "7.0",
        "native_L2": "",
        "native_L3": "3.0",
        "native_chars": "2500",
        "native_label_acc": "0.667",
        "500_score": "2.0",
        "500_chars": "480",
        "500_label_acc": "0.75",
        "500_budget": "",
        "2K_score": "4.25",
        "2K_chars": "1995",
        "2K_label_acc": "1.0",
        "2K_budget": "",
        "6K_score": "",
        "6K_chars": "",
        "6K_label_acc": "",
        "6K_budget": "",
        "10K_score": "5.0",
        "10K_chars": "9990",
        "10K_label_acc": "1.0",
        "10K_budget": "",
        "n_questions": "4",
        "n_invalid": "2",
        "synthesis": "external",
        "doctor": "",
    }
    # base: composites q1 2, q2 4 (L1 -> 3.0), q3 1 (L2), q4 1 (L3) -> 8/4 = 2.0; 0 chars;
    # labels False, False (q3, q4 unknown) -> 0.0; nothing at any budget.
    base = table[2]
    assert [base[c] for c in documented_columns(["native"])] == [
        "base", "none", "2.0", "3.0", "1.0", "1.0", "0", "0.0", "4", "0", "external", ""
    ]  # fmt: skip
    assert all(base[c] == "" for c in base if c[0].isdigit())

    md = md_out.read_text()
    assert md.startswith("# tiny: synthesizer s, judge rubric\n\n")
    assert "over valid judgments" in md
    lines = md.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("| system |"))
    assert (
        lines[header]
        == "| " + " | ".join(documented_columns(["native", "500", "2K", "6K", "10K"])) + " |"
    )
    assert lines[header + 2].startswith(
        "| simple_rag | hybrid | 5.67 | 7.0 | – | 3.0 | 2500 | 0.667 | 2.0 | 480 | 0.75 | – | "
        "4.25 | 1995 | 1.0 | – | – | – | – | – | 5.0 | 9990 | 1.0 | – | 4 | 2 | external | – |"
    )
    assert lines[header + 5].startswith("| direct_read | none | – |")


def test_budget_sweep_figure_png_is_deterministic(
    corpus_dir: Path, cells: list[tuple], tmp_path: Path
) -> None:
    rows = build_leaderboard(corpus_dir, cells)
    a, b = tmp_path / "a.png", tmp_path / "fig" / "b.png"
    budget_sweep_figure(rows, "tiny sweep", a)
    budget_sweep_figure(rows, "tiny sweep", b)
    data = a.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 5000
    assert data == b.read_bytes()
    # 7 x 4.5 inches at 120 dpi
    assert int.from_bytes(data[16:20], "big") == 840
    assert int.from_bytes(data[20:24], "big") == 540


@pytest.fixture
def sweep_cells(tmp_path: Path) -> list[tuple]:
    """simple_rag in three modalities at native, 1K, 2K and 5K, plus base and direct_read."""
    root = tmp_path / "sweep"
    root.mkdir()
    spec = [
        # hybrid at 5K: q3 invalid -> mean of 6.0, 6.5, 6.25 = 18.75 / 3 = 6.25
        ("hybrid", "5K", [J("q1", 6.0), J("q2", 6.5), J("q3", None), J("q4", 6.25)], 4950),
        ("hybrid", "native", uniform(5.5), 3100),
        ("hybrid", "1K", uniform(3.0), 990),
        ("hybrid", "2K", uniform(4.0), 2010),
        ("dense", "native", uniform(5.0), 2900),
        ("dense", "1K", uniform(2.5), 1005),
        ("dense", "2K", uniform(3.75), 1980),
        ("dense", "5K", uniform(5.75), 5020),
        ("bm25", "1K", uniform(2.0), 970),
        ("bm25", "native", uniform(4.0), 3050),
        ("bm25", "2K", uniform(3.25), 2040),
        ("bm25", "5K", uniform(4.5), 4990),
    ]
    out = []
    for i, (modality, budget, judgments, chars) in enumerate(spec):
        j, c = write_cell(root, f"{i}-{modality}-{budget}", judgments, flat(chars))
        out.append(("simple_rag", modality, budget, j, c))
    # base: composites 2, 3, 1, 2 -> 2.0, no context (0 chars: no point on a log axis)
    base = [J("q1", 2.0), J("q2", 3.0), J("q3", 1.0), J("q4", 2.0)]
    out.append(("base", "none", "native", *write_cell(root, "base", base, flat(0))))
    out.append(("direct_read", "none", "6K", *write_cell(root, "dr", uniform(3.5), flat(6000))))
    return out


def test_budget_sweep_figure_plots_the_leaderboard(
    corpus_dir: Path, sweep_cells: list[tuple], tmp_path: Path
) -> None:
    from matplotlib.figure import Figure

    rows = build_leaderboard(corpus_dir, sweep_cells)
    png = tmp_path / "sweep.png"
    fig = budget_sweep_figure(rows, "tiny sweep", png)
    assert isinstance(fig, Figure)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    (ax,) = fig.axes
    assert ax.get_xscale() == "log"
    assert ax.get_xlabel() == "achieved context characters (log)"
    assert ax.get_ylabel() == "composite score (0-10)"
    assert ax.get_title() == "tiny sweep"
    lines = {line.get_label(): line for line in ax.get_lines()}
    # One line per modality through (mean achieved chars, mean valid composite), in order of
    # characters: native (about 3K here) falls between the 2K and 5K points.
    expected = {
        "simple_rag (hybrid)": ("-", [990, 2010, 3100, 4950], [3.0, 4.0, 5.5, 6.25]),
        "simple_rag (dense)": ("--", [1005, 1980, 2900, 5020], [2.5, 3.75, 5.0, 5.75]),
        "simple_rag (bm25)": (":", [970, 2040, 3050, 4990], [2.0, 3.25, 4.0, 4.5]),
    }
    for label, (style, xs, ys) in expected.items():
        line = lines[label]
        assert line.get_linestyle() == style, label  # solid hybrid, dashed dense, dotted BM25
        assert list(line.get_xdata()) == xs, label
        assert list(line.get_ydata()) == ys, label
        assert line.get_marker() == "o"
    # base has no context, so no point on the log axis: a grey reference line at its 2.0
    ref = lines["base (no retrieval)"]
    assert list(ref.get_ydata()) == [2.0, 2.0]
    assert set(lines) == {*expected, "base (no retrieval)"}
    # direct_read has one cell (6K): a single marker, not a line
    (dots,) = ax.collections
    assert dots.get_label() == "direct_read"
    assert dots.get_offsets().tolist() == [[6000.0, 3.5]]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert sorted(legend) == sorted([*expected, "base (no retrieval)", "direct_read"])


def test_budget_sweep_figure_single_points_and_reference(
    corpus_dir: Path, cells: list[tuple], tmp_path: Path
) -> None:
    # The leaderboard fixture: simple_rag/hybrid at 500 (480 chars, 2.0), 2K (1995, 4.25),
    # native (2500, 5.67) and 10K (9990, 5.0); paper_rag/bm25 only at native (9000, 4.5);
    # direct_read at 6K (6000, 3.5); base at native (0 chars, 2.0).
    fig = budget_sweep_figure(build_leaderboard(corpus_dir, cells), "t", tmp_path / "f.png")
    (ax,) = fig.axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    assert set(lines) == {"simple_rag (hybrid)", "base (no retrieval)"}
    rag = lines["simple_rag (hybrid)"]
    assert rag.get_linestyle() == "-"
    assert list(rag.get_xdata()) == [480, 1995, 2500, 9990]
    assert list(rag.get_ydata()) == [2.0, 4.25, 5.67, 5.0]
    assert list(lines["base (no retrieval)"].get_ydata()) == [2.0, 2.0]
    points = {c.get_label(): c.get_offsets().tolist() for c in ax.collections}
    assert points == {"paper_rag (bm25)": [[9000.0, 4.5]], "direct_read": [[6000.0, 3.5]]}


def test_a_cells_budget_verdict_shows_in_its_block(corpus_dir: Path, cells: list[tuple]) -> None:
    """A verdict file beside the cell (as restore jobs write it) puts its status in the row."""
    system, modality, budget, judgments, context = cells[-1]  # simple_rag/hybrid/2K
    verdict = Path(context).with_name(Path(context).stem + ".budget.json")
    verdict.write_text(json.dumps({"status": "knob_limited", "requested": 2000}))
    rows = build_leaderboard(corpus_dir, cells)
    rag = next(r for r in rows if r["system"] == "simple_rag")
    assert rag["2K_budget"] == "knob_limited"
    assert rag["500_budget"] is None  # no verdict beside that cell


def test_a_failed_doctor_is_named_on_its_systems_rows(
    corpus_dir: Path, cells: list[tuple], tmp_path: Path
) -> None:
    report = tmp_path / "graphiti.json"
    report.write_text(json.dumps({"ok": False, "checks": [{"name": "probe_context", "ok": False}]}))
    ok = tmp_path / "ok.json"
    ok.write_text(json.dumps({"ok": True, "checks": []}))
    rows = build_leaderboard(corpus_dir, cells, {"simple_rag": report, "paper_rag": ok})
    by = {r["system"]: r for r in rows}
    assert by["simple_rag"]["doctor"] == "FAILED: probe_context"
    assert by["paper_rag"]["doctor"] == "ok"
    assert by["base"]["doctor"] is None  # no doctor for systems without retrieval


def test_internal_synthesis_is_marked_and_its_budgets_say_why_they_are_empty(
    corpus_dir: Path, cells: list[tuple], tmp_path: Path
) -> None:
    j, c = write_cell(tmp_path, "prism", uniform(6.0), flat(3000))
    cells = [*cells, ("prism", "native", "native", j, c)]
    rows = {r["system"]: r for r in build_leaderboard(corpus_dir, cells, None, ["prism/native"])}
    assert rows["prism"]["synthesis"] == "internal"
    assert rows["prism"]["2K_budget"] == "n/a: internal synthesis"
    assert rows["simple_rag"]["synthesis"] == "external"
    assert rows["simple_rag"]["2K_budget"] != "n/a: internal synthesis"
