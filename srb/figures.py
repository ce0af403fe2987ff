"""Figures beside the tables, readable without the code: per-tier bars, judge-vs-judge
scatter with its least-squares fit, and judge-human agreement by score gap.

Every figure states n in its labels; PNGs are written without timestamps so reruns are
byte-identical.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from srb.atomic import atomic_write
from srb.scores import Cell, ScoreTable, cell_label, mean_or_none

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def pyplot():
    """matplotlib's pyplot on the file-only Agg backend (jobs have no display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_png(fig: Any, png_out: str | Path) -> None:
    """Atomic, timestamp-free PNG, so a rerun writes identical bytes. The figure is closed in
    pyplot (no window or memory is kept), but the object and what it plots stay readable."""
    with atomic_write(png_out, "wb") as fh:
        fig.savefig(fh, format="png", metadata={"Software": None})
    pyplot().close(fig)


def tier_bars(
    table: ScoreTable,
    cells: Sequence[Cell],
    tiers: Mapping[str, str],
    title: str,
    png_out: str | Path,
) -> Figure:
    """Mean composite per question tier (L1 lookup .. L3 synthesis), one bar per cell.
    Returns the (closed) figure, for inspection."""
    plt = pyplot()
    tier_names = sorted({tiers[q] for c in cells for q in table.valid(c) if q in tiers}) or ["L1"]
    fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(cells) * len(tier_names)), 4.5), dpi=120)
    width = 0.8 / max(1, len(cells))
    for i, cell in enumerate(cells):
        valid = table.valid(cell)
        means, ns = [], []
        for t in tier_names:
            vals = [s for q, s in valid.items() if tiers.get(q) == t]
            means.append(mean_or_none(vals))
            ns.append(len(vals))
        xs = [j + (i - (len(cells) - 1) / 2) * width for j in range(len(tier_names))]
        bars = ax.bar(xs, [m if m is not None else 0 for m in means], width, label=cell_label(cell))
        for bar, m, n in zip(bars, means, ns, strict=True):
            ax.annotate("n/a" if m is None else f"n={n}", (bar.get_x() + bar.get_width() / 2,
                        bar.get_height()), ha="center", va="bottom", fontsize=6)  # fmt: skip
    ax.set_xticks(range(len(tier_names)), tier_names)
    ax.set_ylabel("mean composite score (0-10, valid judgments)")
    ax.set_ylim(0, 10.5)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2, loc="upper right")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    save_png(fig, png_out)
    return fig


def judge_scatter(
    pairs: Sequence[tuple[str, str, Sequence[float], Sequence[float], Mapping[str, Any]]],
    title: str,
    png_out: str | Path,
) -> Figure:
    """One panel per judge pair: cell scores of X vs Y, the y = x diagonal and the LS fit.
    Returns the (closed) figure, for inspection."""
    plt = pyplot()
    n = max(1, len(pairs))
    fig, axes = plt.subplots(1, n, figsize=(4.5 * n, 4.5), dpi=120, squeeze=False)
    if not pairs:
        ax = axes[0][0]
        ax.text(0.5, 0.5, "not applicable:\ncalibration needs two or more judges",
                ha="center", va="center", transform=ax.transAxes)  # fmt: skip
        ax.set_axis_off()
    for ax, (jx, jy, xs, ys, stats) in zip(axes[0], pairs, strict=False):
        ax.scatter(xs, ys, s=12, alpha=0.4)
        ax.plot([0, 10], [0, 10], "--", color="grey", linewidth=1, label="y = x")
        if stats.get("slope") is not None:
            a, b = stats["slope"], stats["intercept"]
            ax.plot([0, 10], [b, b + 10 * a], color="C3", label=f"fit y = {a:.2f}x + {b:.2f}")
        r = stats.get("pearson_r")
        rho = stats.get("system_rank_spearman")
        ax.set_title(
            f"r = {'n/a' if r is None else f'{r:.2f}'}, rank rho = "
            f"{'n/a' if rho is None else f'{rho:.2f}'}, n = {len(xs)}",
            fontsize=9,
        )
        ax.set_xlabel(f"{jx} composite")
        ax.set_ylabel(f"{jy} composite")
        ax.set_xlim(-0.3, 10.3)
        ax.set_ylim(-0.3, 10.3)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, png_out)
    return fig


def agreement_figure(rows: Sequence[Mapping[str, Any]], title: str, png_out: str | Path) -> Figure:
    """Left: agreement by |gap| bucket with Wilson 95% bars; right: overall agreement by tau.
    Returns the (closed) figure, for inspection."""
    plt = pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), dpi=120)
    by_gap = [r for r in rows if str(r.get("view", "")).startswith("by |gap|")]
    by_tau = [r for r in rows if r.get("view") == "overall"]
    if not by_gap and not by_tau:
        reason = next((r["view"] for r in rows if "not applicable" in str(r.get("view"))),
                      "no votes")  # fmt: skip
        for ax in (left, right):
            ax.text(0.5, 0.5, reason, ha="center", va="center", wrap=True, transform=ax.transAxes)
            ax.set_axis_off()
    for ax, data, key, label in ((left, by_gap, "bucket", "|judge score gap|"),
                                 (right, by_tau, "tau", "tie tolerance tau")):  # fmt: skip
        shown = [r for r in data if r.get("rate") is not None]
        if not data:
            continue
        xs = list(range(len(shown)))
        rates = [r["rate"] for r in shown]
        err = [[r["rate"] - r["ci_low"] for r in shown], [r["ci_high"] - r["rate"] for r in shown]]
        ax.errorbar(xs, rates, yerr=err, fmt="o", capsize=4)
        ax.set_xticks(xs, [f"{r[key]}\nn={r['n']}" for r in shown], fontsize=8)
        ax.set_xlabel(label)
        ax.set_ylabel("judge-human agreement (Wilson 95% CI)")
        ax.set_ylim(0, 1.05)
        ax.grid(True, alpha=0.3)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, png_out)
    return fig
