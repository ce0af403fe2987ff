"""Ranked unit lists per modality, reciprocal rank fusion, and budgeted context restoration.

A ranking (per question, per system and modality) is computed once at a fixed depth; every
budget cell is then a cheap cut of it. Three budget controls:
- `native`: the system's own top_k;
- `calibrated` (the paper's): top_k = round(B / mean characters per unit on the native run),
  then capped at (1 + tolerance) x B so a system whose single unit dwarfs the budget (a whole
  paper under a 1K budget) is cut, and marked truncated, instead of silently overspending;
- `pack`: units in rank order until B characters, the last one cut so the cap is exact.
Each restored query records requested and achieved characters so no budget claim goes unchecked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from srb.units import Unit

MODALITIES = ("dense", "bm25", "hybrid")
BUDGET_MODES = ("calibrated", "pack")
NATIVE = "native"

Hit = tuple[str, float]

_BUDGET = re.compile(r"^(\d+)([KkMm]?)$")


def parse_budget(label: str | int) -> int | None:
    """'native' -> None; '10K' -> 10000; '2500' -> 2500. Negative or malformed -> ValueError."""
    if isinstance(label, int) and not isinstance(label, bool):
        if label <= 0:
            raise ValueError(f"budget must be a positive number of characters, got {label}")
        return label
    label = str(label).strip()
    if label == NATIVE:
        return None
    m = _BUDGET.match(label)
    if not m:
        raise ValueError(
            f"budget {label!r} is not 'native' or a positive character count such as 10K or 2500"
        )
    value = int(m.group(1)) * {"": 1, "k": 1000, "m": 1_000_000}[m.group(2).lower()]
    if value <= 0:
        raise ValueError(f"budget must be a positive number of characters, got {label!r}")
    return value


def strictly_decreasing(hits: Sequence[Hit]) -> list[Hit]:
    """Nudge tied scores down by one ulp each so scores strictly decrease down the ranking.

    The input order is the tie-break (already deterministic); values change by < 1e-12.
    """
    out: list[Hit] = []
    for doc, score in hits:
        if out and score >= out[-1][1]:
            score = math.nextafter(out[-1][1], -math.inf)
        out.append((doc, score))
    return out


def sort_hits(hits: Sequence[Hit]) -> list[Hit]:
    """Order by score descending, then by unit id, and make scores strictly decreasing."""
    return strictly_decreasing(sorted(hits, key=lambda h: (-h[1], h[0])))


def rrf(runs: Sequence[Sequence[Hit]], k: int = 60, depth: int | None = None) -> list[Hit]:
    """Reciprocal rank fusion: score(d) = sum over runs of 1 / (k + rank_run(d)), ranks from 1.

    Ties break by the best rank a unit reached in any run, then by unit id, so the fused order
    never depends on dict iteration or input order.
    """
    terms: dict[str, list[float]] = {}
    best_rank: dict[str, int] = {}
    for run in runs:
        for rank, (doc, _) in enumerate(run, start=1):
            terms.setdefault(doc, []).append(1.0 / (k + rank))
            best_rank[doc] = min(best_rank.get(doc, rank), rank)
    # fsum is correctly rounded, so equal rank multisets give bit-equal scores in any run order
    scores = {doc: math.fsum(t) for doc, t in terms.items()}
    fused = sorted(scores.items(), key=lambda item: (-item[1], best_rank[item[0]], item[0]))
    if depth is not None:
        fused = fused[:depth]
    return strictly_decreasing(fused)


@dataclass(frozen=True)
class Restored:
    question_id: str
    hits: list[Hit]
    texts: list[str]
    requested_chars: int | None
    top_k: int | None
    truncated: bool

    @property
    def achieved_chars(self) -> int:
        return sum(len(t) for t in self.texts)

    def to_record(self, units: Mapping[str, Unit], separator: str = "\n\n") -> dict[str, Any]:
        spans: list[list[Any]] = []
        for (uid, _), text in zip(self.hits, self.texts, strict=True):
            u = units[uid]
            if u.start is None:  # a store system's rewritten item: its papers, no characters
                spans.extend([paper, None, None] for paper in u.sources)
            else:
                spans.append([u.paper_id, u.start, u.start + len(text)])
        return {
            "question_id": self.question_id,
            "unit_ids": [uid for uid, _ in self.hits],
            "scores": [s for _, s in self.hits],
            "spans": spans,
            "requested_chars": self.requested_chars,
            "achieved_chars": self.achieved_chars,
            "top_k": self.top_k,
            "truncated": self.truncated,
            "context": separator.join(self.texts),
        }


def restore_top_k(
    qid: str, hits: Sequence[Hit], units: Mapping[str, Unit], top_k: int, requested: int | None
) -> Restored:
    chosen = list(hits[:top_k])
    return Restored(qid, chosen, [units[u].text for u, _ in chosen], requested, top_k, False)


def cap_restored(restored: Restored, cap: int) -> Restored:
    """Cut a restoration to at most `cap` characters in rank order (the last unit kept is cut)."""
    if restored.achieved_chars <= cap:
        return restored
    hits: list[Hit] = []
    texts: list[str] = []
    used = 0
    for hit, text in zip(restored.hits, restored.texts, strict=True):
        if used >= cap:
            break
        text = text[: cap - used]
        hits.append(hit)
        texts.append(text)
        used += len(text)
    return Restored(
        restored.question_id, hits, texts, restored.requested_chars, restored.top_k, True
    )


def budget_cap(budget: int, tolerance: float) -> int:
    """The most characters a calibrated cell may restore for a requested budget."""
    if tolerance < 0:
        raise ValueError(f"budget tolerance must be >= 0, got {tolerance}")
    return math.floor(budget * (1 + tolerance) + 1e-6)  # 100 x 1.15 is 114.999... in binary


def restore_packed(
    qid: str, hits: Sequence[Hit], units: Mapping[str, Unit], budget: int
) -> Restored:
    """Fill exactly up to `budget` characters in rank order; the last unit is cut to fit."""
    chosen: list[Hit] = []
    texts: list[str] = []
    used, truncated = 0, False
    for hit in hits:
        if used >= budget:
            break
        text = units[hit[0]].text
        if used + len(text) > budget:
            text, truncated = text[: budget - used], True
        chosen.append(hit)
        texts.append(text)
        used += len(text)
    return Restored(qid, chosen, texts, budget, None, truncated)


def calibrated_top_k(budget: int, native_mean_unit_chars: float) -> int:
    """The paper's budget control: B / mean characters per unit measured on the native run."""
    if native_mean_unit_chars <= 0:
        raise ValueError("the native run restored no characters; cannot calibrate top_k")
    return max(1, math.floor(budget / native_mean_unit_chars + 0.5))  # half rounds up


def mean_unit_chars(native_records: Sequence[Mapping[str, Any]]) -> float:
    n_units = sum(len(r["unit_ids"]) for r in native_records)
    chars = sum(r["achieved_chars"] for r in native_records)
    return chars / n_units if n_units else 0.0


@dataclass(frozen=True)
class Calibration:
    """How a calibrated cell was sized: the knob (top_k), the cap, and what it was derived from."""

    requested: int
    mean_unit_chars: float
    top_k: int
    cap: int


def restore_budget(
    rankings: Mapping[str, Sequence[Hit]],
    units: Mapping[str, Unit],
    budget: int,
    mode: str,
    tolerance: float,
    native: Sequence[Mapping[str, Any]] = (),
) -> tuple[list[Restored], Calibration | None]:
    """One budget cell over `rankings`, the single path the cells and the doctor share.

    `native`: the native restoration's records (question, unit ids, achieved characters) that a
    calibrated budget derives its top_k from; over all questions for real cells, over the
    probes for the doctor.
    """
    if mode == "pack":
        return [restore_packed(q, h, units, budget) for q, h in rankings.items()], None
    if mode != "calibrated":
        raise ValueError(f"unknown budget mode {mode!r}")
    mean_unit = mean_unit_chars(native)
    calibration = Calibration(
        budget, mean_unit, calibrated_top_k(budget, mean_unit), budget_cap(budget, tolerance)
    )
    cells = [
        cap_restored(restore_top_k(q, h, units, calibration.top_k, budget), calibration.cap)
        for q, h in rankings.items()
    ]
    return cells, calibration


def ran_short(cell: Restored, ranking_length: int) -> bool:
    """The question's ranking held fewer units than the budget asked for (corpus or depth)."""
    if cell.top_k is not None:
        return ranking_length < cell.top_k
    return ranking_length == len(cell.hits) and not cell.truncated
