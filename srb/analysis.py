"""The paper's analyses as tables: paired bootstrap contrasts (Table 7 shape), judge
calibration, human-vote agreement and router headroom. Rows in, CSV + Markdown out.

Each table says when it does not apply (one judge, no votes, one router system) in a row of
its own rather than leaving an empty file that could pass for a result.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from itertools import combinations
from typing import Any

from srb.errors import ConfigError
from srb.scores import Cell, ScoreTable, cell_label, parse_cell, rounded
from srb.stats import (
    agreement_by_gap,
    agreement_by_tau,
    check_gap_edges,
    judge_calibration,
    paired_bootstrap,
    router_headroom,
)
from srb.votes import Vote

# --- paired bootstrap ---------------------------------------------------------------------------

BOOTSTRAP_COLUMNS = ["contrast", "a", "b", "delta", "ci_low", "ci_high", "ci", "n", "n_excluded",
                     "excludes_zero", "mark"]  # fmt: skip


def parse_contrasts(
    specs: Sequence[Mapping[str, str]], grid: Sequence[Cell]
) -> list[tuple[str, Cell, Cell]]:
    out = []
    for i, spec in enumerate(specs):
        where = f"config analysis.contrasts[{i}]"
        a, b = parse_cell(spec["a"], grid, f"{where}.a"), parse_cell(spec["b"], grid, f"{where}.b")
        out.append((spec.get("label") or f"{cell_label(a)} - {cell_label(b)}", a, b))
    return out


def bootstrap_rows(
    table: ScoreTable,
    contrasts: Sequence[tuple[str, Cell, Cell]],
    resamples: int,
    seed: int,
    confidence: float,
    min_n: int = 10,
    judged: set[Cell] | None = None,
) -> list[dict[str, Any]]:
    """One row per contrast; the `*` mark needs the CI to exclude 0 *and* n >= min_n, since a
    percentile interval over a handful of questions is far too narrow to mean anything.
    `judged`: the cells this judge scored (llm.judge_scope, llm.judge_systems); a contrast on
    another cell is marked not applicable, not computed on nothing."""
    rows = []
    for label, a, b in contrasts:
        _, xa, xb, excluded = table.paired(a, b)
        row: dict[str, Any] = {"contrast": label, "a": cell_label(a), "b": cell_label(b),
                               "n": len(xa), "n_excluded": excluded}  # fmt: skip
        unjudged = [cell_label(c) for c in (a, b) if judged is not None and c not in judged]
        if unjudged:
            row.update({"ci": f"not applicable: judge {table.judge} does not score "
                        f"{' or '.join(unjudged)} (llm.judge_scope, llm.judge_systems)",
                        "mark": "", "n": 0, "n_excluded": 0})  # fmt: skip
        elif not xa:
            row.update({"ci": "not applicable: no question scored validly in both cells",
                        "mark": ""})  # fmt: skip
        else:
            ci = paired_bootstrap(xa, xb, resamples, seed, confidence)
            row.update(
                {
                    "delta": ci.delta,
                    "ci_low": ci.low,
                    "ci_high": ci.high,
                    "ci": f"[{ci.low:+.2f}, {ci.high:+.2f}]",
                    "excludes_zero": ci.excludes_zero,
                    "mark": ("*" if ci.excludes_zero else "")
                    if len(xa) >= min_n
                    else f"n < {min_n}: no mark",
                }
            )
        rows.append(rounded(row))
    return rows


# --- judge calibration --------------------------------------------------------------------------

CALIBRATION_COLUMNS = ["judge_x", "judge_y", "status", "n_pairs", "n_excluded_x_invalid",
                       "n_excluded_y_invalid", "pearson_r", "slope", "intercept",
                       "system_rank_spearman", "n_systems", "within_1_share", "mean_diff",
                       "tier_mean_diff"]  # fmt: skip


def calibration_pairs(
    x: ScoreTable, y: ScoreTable, tiers: Mapping[str, str]
) -> tuple[list[float], list[float], list[str], list[str], dict[str, int]]:
    """Per cell x question, both judges' scores where both are valid; exclusions counted."""
    xs, ys, groups, cell_tiers = [], [], [], []
    excluded = {"x_invalid": 0, "y_invalid": 0}
    for cell in x.scores:
        if cell not in y.scores:  # a cell only one judge scores (llm.judge_scope) is no pair
            continue
        for q, sx in x.scores[cell].items():
            sy = y.scores.get(cell, {}).get(q)
            if sx is None:
                excluded["x_invalid"] += 1
            if sy is None:
                excluded["y_invalid"] += 1
            if sx is None or sy is None:
                continue
            xs.append(sx)
            ys.append(sy)
            groups.append(cell_label(cell))
            cell_tiers.append(tiers.get(q, "?"))
    return xs, ys, groups, cell_tiers, excluded


Panel = tuple[str, str, list[float], list[float], dict[str, Any]]  # judge x, judge y, xs, ys, row


def calibration(
    tables: Sequence[ScoreTable], tiers: Mapping[str, str], within: float = 1.0
) -> tuple[list[dict[str, Any]], list[Panel]]:
    """Table rows and scatter panels per pair of judges, pairing each judge pair's cells once."""
    if len(tables) < 2:
        only = tables[0].judge if tables else "none"
        return [{"judge_x": only, "judge_y": "", "status": "not applicable: calibration needs two "
                 "or more judges scoring the same cells (llm.judges)"}], []  # fmt: skip
    rows, panels = [], []
    for x, y in combinations(tables, 2):
        xs, ys, groups, cell_tiers, excluded = calibration_pairs(x, y, tiers)
        row: dict[str, Any] = {
            "judge_x": x.judge,
            "judge_y": y.judge,
            "n_excluded_x_invalid": excluded["x_invalid"],
            "n_excluded_y_invalid": excluded["y_invalid"],
        }
        if not xs:
            row.update({"status": "not applicable: no cell scored validly by both", "n_pairs": 0})
        else:
            stats = judge_calibration(xs, ys, groups, cell_tiers, within)
            tier_diff = stats.pop("tier_mean_diff")
            stats.pop("tier_n")
            row.update(stats)
            row["status"] = "ok"
            row["tier_mean_diff"] = "; ".join(f"{t} {d:+.2f}" for t, d in tier_diff.items())
        rows.append(rounded(row))
        panels.append((x.judge, y.judge, xs, ys, rows[-1]))
    return rows, panels


def calibration_rows(
    tables: Sequence[ScoreTable], tiers: Mapping[str, str], within: float = 1.0
) -> list[dict[str, Any]]:
    return calibration(tables, tiers, within)[0]


# --- human votes --------------------------------------------------------------------------------

AGREEMENT_COLUMNS = ["view", "bucket", "tau", "n", "agree", "rate", "ci_low", "ci_high"]


def vote_gaps(table: ScoreTable, votes: Sequence[Vote]) -> tuple[list[float], list[str], int]:
    """Judge score gaps (A minus B) for votes whose two answers the judge scored validly."""
    gaps, kept, skipped = [], [], 0
    for v in votes:
        sa = table.scores.get(v.cell_a, {}).get(v.question_id)
        sb = table.scores.get(v.cell_b, {}).get(v.question_id)
        if sa is None or sb is None:
            skipped += 1
            continue
        gaps.append(sa - sb)
        kept.append(v.vote)
    return gaps, kept, skipped


def agreement_rows(
    table: ScoreTable,
    votes: Sequence[Vote] | None,
    edges: Sequence[float],
    taus: Sequence[float],
) -> list[dict[str, Any]]:
    if votes is None:
        return [{"view": "not applicable: no human votes configured (analysis.votes)"}]
    gaps, kept, skipped = vote_gaps(table, votes)
    rows: list[dict[str, Any]] = []
    if skipped:
        rows.append({"view": f"excluded: {skipped} votes on answers the judge scored invalid "
                     "or did not score", "n": skipped})  # fmt: skip
    if not kept:
        rows.append({"view": "not applicable: no vote pairs the judge scored validly"})
        return rows
    rows += [
        {"view": "by |gap| (tau 0)", "tau": 0, **r} for r in agreement_by_gap(gaps, kept, edges)
    ]
    rows += [{"view": "overall", "bucket": "all", **r} for r in agreement_by_tau(gaps, kept, taus)]
    return [rounded(r) for r in rows]


# --- router headroom ----------------------------------------------------------------------------

ROUTER_COLUMNS = ["budget", "status", "n_questions", "n_excluded", "n_systems", "best_single",
                  "best_single_score", "oracle_score", "oracle_gap", "router_score", "router_gap",
                  "loqo_single_score", "router_gap_loqo", "router_choices"]  # fmt: skip


def router_rows(
    table: ScoreTable, candidates: Sequence[str], budgets: Sequence[str], tiers: Mapping[str, str]
) -> list[dict[str, Any]]:
    rows = []
    for budget in budgets:
        cells = [c for c in table.scores if f"{c[0]}/{c[1]}" in candidates and c[2] == budget]
        row: dict[str, Any] = {"budget": budget, "n_systems": len(cells)}
        scores = {f"{c[0]}/{c[1]}": table.valid(c) for c in cells}
        common = set.intersection(*(set(s) for s in scores.values())) if scores else set()
        every = set().union(*(set(table.scores[c]) for c in cells)) if cells else set()
        row["n_excluded"] = len(every - common)
        if len(cells) < 2:
            row["status"] = "not applicable: fewer than two router systems at this budget"
        elif not common:
            row["status"] = "not applicable: no question scored validly by every system"
        else:
            r = router_headroom(scores, tiers)
            row.update({k: r[k] for k in ROUTER_COLUMNS if k in r})
            row["status"] = "ok"
            row["router_choices"] = "; ".join(f"{s} {n}" for s, n in r["router_choices"].items())
        rows.append(rounded(row))
    return rows


# --- config -------------------------------------------------------------------------------------


def check_analysis_config(
    analysis: dict[str, Any], grid: list[tuple[str, str, str]], source: str = "config"
) -> dict[str, Any]:
    """Resolve the analysis section against the synthesized grid; unknown names fail here,
    before any job, naming the entry. Returns router systems and the qualitative system."""
    parse_contrasts(analysis.get("contrasts", []), grid)
    pairs = sorted({f"{s}/{m}" for s, m, _ in grid if s not in ("base", "direct_read")})
    router = analysis.get("router", {}).get("systems")
    for i, name in enumerate(router or []):
        if name not in pairs:
            raise ConfigError(
                f"{source}: analysis.router.systems[{i}]: {name!r} is not a synthesized "
                f"system/modality; known: {', '.join(pairs) or 'none'}"
            )
    qual = analysis.get("qualitative", {}).get("system")
    if qual is not None and qual not in pairs:
        raise ConfigError(
            f"{source}: analysis.qualitative.system: {qual!r} is not a synthesized "
            f"system/modality; known: {', '.join(pairs) or 'none'}"
        )
    if qual is None and pairs:
        hybrid = [p for p in pairs if p.endswith("/hybrid")]
        qual = (hybrid or pairs)[0]
    edges = analysis.get("gap_buckets", [0, 1, 2, 4])
    try:
        check_gap_edges(edges)
    except ValueError:
        raise ConfigError(
            f"{source}: analysis.gap_buckets must start at 0 and strictly increase, got {edges}"
        ) from None
    return {"router_systems": router if router is not None else pairs, "qualitative_system": qual}
