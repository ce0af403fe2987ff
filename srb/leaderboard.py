"""Leaderboards in the paper's Table 4/5 shape, and the budget-sweep figure.

Rows are system (+ modality); the native block gives Avg / L1 / L2 / L3 / chars, then per budget
the score, the achieved characters and the cell's budget status (`ok`, or why it is off: e.g.
`knob_limited` when a store system's own knob overshot, `depth_limited`; see srb.budget_check). Scores are means over valid judgments only; invalid
judgments are counted in their own column so a judge that failed never reads as a low score.
The LLM-free label accuracy (answer states the gold direction) sits beside the judge's score.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srb.data.canonical import iter_jsonl, load_canonical
from srb.doctor import doctor_status
from srb.figures import pyplot, save_png
from srb.retrieve import parse_budget
from srb.tables import write_table

if TYPE_CHECKING:
    from matplotlib.figure import Figure

Cell = tuple[str, str, str, str | Path, str | Path]  # system, modality, budget, judgments, context


def _mean(values: Sequence[float]) -> float | None:
    return round(statistics.fmean(values), 2) if values else None


def cell_summary(
    judgments_file: str | Path, cell_file: str | Path, tiers: dict[str, str]
) -> dict[str, Any]:
    judged = [r for _, r in iter_jsonl(Path(judgments_file))]
    chars = {r["question_id"]: r["achieved_chars"] for _, r in iter_jsonl(Path(cell_file))}
    valid = [r for r in judged if r["valid"]]
    labels = [r["label_correct"] for r in judged if r["label_correct"] is not None]
    out = {
        "score": _mean([r["composite"] for r in valid]),
        "n": len(judged),
        "n_invalid": len(judged) - len(valid),
        "chars": round(statistics.fmean(chars[r["question_id"]] for r in judged)) if judged else 0,
        "label_acc": round(sum(labels) / len(labels), 3) if labels else None,
    }
    for tier in ("L1", "L2", "L3"):
        out[tier] = _mean([r["composite"] for r in valid if tiers.get(r["question_id"]) == tier])
    return out


def budget_status(cell_file: str | Path) -> str | None:
    """The status of the budget verdict written beside a retrieval cell (None: no verdict)."""
    verdict = Path(cell_file).with_name(Path(cell_file).stem + ".budget.json")
    if not verdict.is_file():
        return None
    return json.loads(verdict.read_text()).get("status")


def build_leaderboard(
    corpus_dir: str | Path,
    cells: Sequence[Cell],
    doctor_reports: Mapping[str, str | Path] | None = None,
    internal_synthesis: Sequence[str] = (),
) -> list[dict[str, Any]]:
    """Rows per system/modality; with `doctor_reports` (system -> report) each row says
    whether its system's doctor passed (a store system's may have failed under
    `memory.doctor_gate: warn`). Cells in `internal_synthesis` ("system/modality") answered
    with the system's own prompt (Prism, Cognee's graph_completion): marked, and their budget columns say why they are empty."""
    tiers = {q.id: q.tier for q in load_canonical(corpus_dir).questions}
    doctor = {
        s: doctor_status(json.loads(Path(f).read_text())) for s, f in (doctor_reports or {}).items()
    }
    budgets = sorted({b for _, _, b, _, _ in cells if b != "native"}, key=lambda b: parse_budget(b))
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for system, modality, budget, judgments, context in cells:
        s = cell_summary(judgments, context, tiers)
        row = rows.setdefault(
            (system, modality),
            {
                "system": system,
                "modality": modality,
                "synthesis": (
                    "internal" if f"{system}/{modality}" in internal_synthesis else "external"
                ),
                "doctor": doctor.get(system),
            },
        )
        if budget == "native":
            row.update(
                {
                    "native_avg": s["score"],
                    "native_L1": s["L1"],
                    "native_L2": s["L2"],
                    "native_L3": s["L3"],
                    "native_chars": s["chars"],
                    "native_label_acc": s["label_acc"],
                }
            )
        else:
            row.update(
                {
                    f"{budget}_score": s["score"],
                    f"{budget}_chars": s["chars"],
                    f"{budget}_label_acc": s["label_acc"],
                    f"{budget}_budget": budget_status(context),
                }
            )
        row["n_questions"] = max(row.get("n_questions", 0), s["n"])
        row["n_invalid"] = row.get("n_invalid", 0) + s["n_invalid"]
    ordered = sorted(rows.values(), key=lambda r: -(r.get("native_avg") or -1))
    for r in ordered:
        r["_budgets"] = budgets
        if r["synthesis"] == "internal":
            for b in budgets:
                r.setdefault(f"{b}_budget", "n/a: internal synthesis")
    return ordered


def columns(budgets: Sequence[str]) -> list[str]:
    cols = [
        "system",
        "modality",
        "native_avg",
        "native_L1",
        "native_L2",
        "native_L3",
        "native_chars",
        "native_label_acc",
    ]
    for b in budgets:
        cols += [f"{b}_score", f"{b}_chars", f"{b}_label_acc", f"{b}_budget"]
    return [*cols, "n_questions", "n_invalid", "synthesis", "doctor"]


def write_leaderboard(
    rows: list[dict[str, Any]], title: str, csv_out: str | Path, md_out: str | Path
) -> None:
    budgets = rows[0]["_budgets"] if rows else []
    note = (
        "Scores: mean composite (accuracy, completeness, specificity, hallucination "
        "avoidance; 0-10) over valid judgments; chars: mean achieved context characters; "
        "label_acc: share of answers stating the gold direction (LLM-free); <budget>_budget: the "
        "cell's budget verdict (ok, or why it is off, e.g. knob_limited = the system's own "
        "knob overshot and the cell was cut to the cap); n_questions: memory systems answer "
        "their slice's questions only; n_invalid: judgments that could not be parsed after "
        "retries (excluded from scores); synthesis: external = the fixed synthesizer with the "
        "shared prompt; internal = the system's own answer prompt (Prism, Cognee's graph_completion), native only, so its "
        "budget columns are n/a; doctor: the system's pre-run doctor (FAILED checks are "
        "named when the run went on under memory.doctor_gate: warn)."
    )
    write_table(rows, columns(budgets), csv_out, md_out, title, note)


def budget_sweep_figure(rows: list[dict[str, Any]], title: str, png_out: str | Path) -> Figure:
    """Composite vs achieved characters (log x), one line per system/modality: solid hybrid,
    dashed dense, dotted BM25. Returns the (closed) figure, for inspection."""
    plt = pyplot()
    styles = {"hybrid": "-", "dense": "--", "bm25": ":", "none": "-."}
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for r in rows:
        budgets = ["native", *r["_budgets"]]
        pts = [
            (
                r.get(f"{b}_chars") if b != "native" else r.get("native_chars"),
                r.get(f"{b}_score") if b != "native" else r.get("native_avg"),
            )
            for b in budgets
        ]
        pts = sorted((x, y) for x, y in pts if x and y is not None)
        if not pts:
            continue
        label = f"{r['system']} ({r['modality']})" if r["modality"] != "none" else r["system"]
        if r["system"] == "base" or len(pts) == 1:
            ax.scatter([p[0] or 1 for p in pts], [p[1] for p in pts], label=label, marker="x")
        else:
            ax.plot(
                [p[0] for p in pts],
                [p[1] for p in pts],
                styles.get(r["modality"], "-"),
                marker="o",
                label=label,
            )
    base = next((r for r in rows if r["system"] == "base"), None)
    if base and base.get("native_avg") is not None:
        ax.axhline(base["native_avg"], color="grey", linewidth=1, label="base (no retrieval)")
    ax.set_xscale("log")
    ax.set_xlabel("achieved context characters (log)")
    ax.set_ylabel("composite score (0-10)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=7, loc="best")
    fig.tight_layout()
    save_png(fig, png_out)
    return fig
