"""Is a budget cell on its budget? One verdict for the doctor's probes and for every real cell.

The paper's comparisons are only fair when each system restores about the characters asked
for. A cell is judged on the mean achieved characters over its questions, within a tolerance
of the requested budget B. When it is off, the reason matters:

- `granularity_limited`: no whole number of units lands inside [(1 - tol) B, (1 + tol) B]
  (a unit is wider than the window, as a whole paper under a small budget): a property of the
  system's granularity, reported and marked, as the paper did for Hindsight and Cognee;
- `depth_limited`: the questions' rankings ran out of units (a small corpus or a shallow
  ranking) and the questions that did not run out are on budget: reported and marked;
- `knob_limited`: a store system's own knob returned more than (1 + tol) B before the cap cut
  it (Graphiti's per-channel limits return up to k items per channel): reported and marked,
  with the knob's own size, as the paper reported Graphiti's overshoot;
- `under_budget` / `over_budget`: the knob was set wrong for this corpus: a failure;
- `empty`: nothing was restored: a failure;
- `knob_inert` (across a system's budgets): the achieved size does not move when the budget
  does, so the knob does nothing: a failure of the workflow's own knob (unit systems);
- `knob_flat`: the same for a store system, whose knob is the library's own (the paper saw
  Hindsight's recall return ~19K characters whatever was asked): the library's behaviour, so
  every cell of that system/modality is reported and marked, by name, and the run goes on.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from srb.retrieve import Calibration, Restored, ran_short

OK = "ok"
MARKED = ("granularity_limited", "depth_limited", "knob_limited", "knob_flat")
FAILURES = ("under_budget", "over_budget", "empty", "knob_inert")


class BudgetError(RuntimeError):
    """A cell off its budget for a reason the gate does not accept; names the cell."""


@dataclass(frozen=True)
class BudgetVerdict:
    requested: int
    achieved_mean: float
    ratio: float
    status: str
    reason: str
    n_questions: int
    n_ran_short: int
    top_k: int | None = None
    mean_unit_chars: float | None = None
    knob_mean: float | None = None  # a store system's mean characters before the cap
    knob_steps: tuple[int, ...] | None = None  # a store knob re-aimed from its own cell

    @property
    def failed(self) -> bool:
        return self.status in FAILURES

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["achieved_mean"] = round(self.achieved_mean, 1)
        out["ratio"] = round(self.ratio, 4)
        if self.mean_unit_chars is not None:
            out["mean_unit_chars"] = round(self.mean_unit_chars, 1)
        if self.knob_mean is not None:
            out["knob_mean"] = round(self.knob_mean, 1)
        else:
            del out["knob_mean"]
        if self.knob_steps is None:
            del out["knob_steps"]
        else:
            out["knob_steps"] = list(self.knob_steps)
        return out


def knob_limited(
    verdict: BudgetVerdict, knob_mean: float, tolerance: float, item_chars: float | None = None
) -> BudgetVerdict:
    """Mark an otherwise acceptable store-system cell whose knob alone overshot the cap. When
    its items are so coarse that no whole number of them fits the window (Cognee's chunks at a
    small budget), the knob could not have done better: `granularity_limited`, by name."""
    over = knob_mean > verdict.requested * (1 + tolerance) + 1e-9
    if verdict.failed or not over:
        return replace(verdict, knob_mean=knob_mean)
    item_chars = item_chars or verdict.mean_unit_chars
    if item_chars and not whole_units_can_reach(verdict.requested, item_chars, tolerance):
        return replace(
            verdict,
            status="granularity_limited",
            reason=(
                f"the library's knob moves in whole ~{item_chars:.0f}-char items and no whole "
                f"number of them fits within {tolerance:.0%} of the {verdict.requested} budget: "
                f"it returned {knob_mean:.0f} chars on average, cut to {1 + tolerance:.2f} x B, "
                f"achieved mean {verdict.achieved_mean:.0f}"
            ),
            knob_mean=knob_mean,
            mean_unit_chars=item_chars,
        )
    return replace(
        verdict,
        status="knob_limited",
        reason=(
            f"the library's knob returned {knob_mean:.0f} chars on average for a "
            f"{verdict.requested} budget ({knob_mean / verdict.requested:.2f} x B); cut to "
            f"{1 + tolerance:.2f} x B, achieved mean {verdict.achieved_mean:.0f}"
        ),
        knob_mean=knob_mean,
    )


def whole_units_can_reach(requested: int, unit_chars: float, tolerance: float) -> bool:
    """Whether some whole number k >= 1 of units of `unit_chars` lands inside the window."""
    if unit_chars <= 0:
        return False
    low, high = (1 - tolerance) * requested, (1 + tolerance) * requested
    k = max(1, math.ceil(low / unit_chars - 1e-9))
    return k * unit_chars <= high + 1e-9


def budget_verdict(
    requested: int,
    achieved: Sequence[int],
    ran_short: Sequence[bool],
    tolerance: float,
    top_k: int | None = None,
    mean_unit_chars: float | None = None,
) -> BudgetVerdict:
    """The verdict on one cell: `achieved` and `ran_short` hold one entry per question."""
    if len(achieved) != len(ran_short):
        raise ValueError("achieved and ran_short must hold one entry per question")
    mean = statistics.fmean(achieved) if achieved else 0.0
    ratio = mean / requested
    n_short = sum(ran_short)

    def verdict(status: str, reason: str) -> BudgetVerdict:
        return BudgetVerdict(
            requested, mean, ratio, status, reason, len(achieved), n_short, top_k, mean_unit_chars
        )

    where = f"requested {requested}, achieved mean {mean:.0f} (ratio {ratio:.2f})"
    if mean == 0:
        return verdict("empty", f"{where}: nothing restored")
    if ratio > 1 + tolerance + 1e-9:
        return verdict("over_budget", f"{where}: more than {1 + tolerance:.2f} x B")
    if ratio >= 1 - tolerance - 1e-9:
        return verdict(OK, f"{where}: within {tolerance:.0%}")
    full = [a for a, short in zip(achieved, ran_short, strict=True) if not short]
    if n_short:
        rest = statistics.fmean(full) / requested if full else None
        if rest is None or rest >= 1 - tolerance - 1e-9:
            on = "no question" if rest is None else f"the other questions at ratio {rest:.2f}"
            return verdict(
                "depth_limited",
                f"{where}: {n_short} of {len(achieved)} questions' rankings ran out of units "
                f"({on})",
            )
    if mean_unit_chars and not whole_units_can_reach(requested, mean_unit_chars, tolerance):
        return verdict(
            "granularity_limited",
            f"{where}: no whole number of ~{mean_unit_chars:.0f}-char units fits within "
            f"{tolerance:.0%} of B (top_k {top_k})",
        )
    knob = f", top_k {top_k} from ~{mean_unit_chars:.0f}-char units" if top_k else ""
    return verdict("under_budget", f"{where}: below {1 - tolerance:.2f} x B{knob}")


def knob_inert(verdicts: Mapping[str, BudgetVerdict], tolerance: float) -> str | None:
    """A reason when the achieved size does not follow the budget across one system/modality's
    budgets (ignoring cells whose rankings ran out); None when it does or cannot be told."""
    usable = {b: v for b, v in verdicts.items() if v.status != "depth_limited"}
    if len(usable) < 2:
        return None
    lo = min(usable.values(), key=lambda v: v.requested)
    hi = max(usable.values(), key=lambda v: v.requested)
    if hi.requested <= lo.requested * (1 + 2 * tolerance):
        return None  # budgets too close to tell a working knob from an inert one
    if hi.achieved_mean <= lo.achieved_mean * 1.01:
        return (
            f"the budget knob does nothing: {lo.requested} requested -> {lo.achieved_mean:.0f} "
            f"achieved, {hi.requested} requested -> {hi.achieved_mean:.0f} achieved"
        )
    return None


def mark_knob_flat(
    verdicts: Mapping[str, BudgetVerdict | None], tolerance: float
) -> dict[str, BudgetVerdict | None]:
    """A store system's verdicts, each numeric one marked `knob_flat` when the library's knob
    does not move the size it returns across budgets (measured before the cap cut it: capped
    cells differ only by their caps). An under- or overspent cell is then the knob's doing
    and is marked too; an empty one stays a failure."""
    numeric = {b: v for b, v in verdicts.items() if v is not None}
    before_cap = {
        b: replace(v, achieved_mean=v.knob_mean) if v.knob_mean is not None else v
        for b, v in numeric.items()
    }
    inert = knob_inert(before_cap, tolerance)
    if not inert:
        return dict(verdicts)
    reason = inert.replace("the budget knob does nothing", "the library's knob does not move")
    return {
        b: v if v is None or v.status == "empty" else replace(v, status="knob_flat", reason=reason)
        for b, v in verdicts.items()
    }


def cell_verdict(
    cells: Sequence[Restored],
    ranking_lengths: Sequence[int],
    requested: int,
    tolerance: float,
    calibration: Calibration | None = None,
) -> BudgetVerdict:
    """The verdict for restored cells, one per question, beside each question's ranking length."""
    return budget_verdict(
        requested,
        [c.achieved_chars for c in cells],
        [ran_short(c, n) for c, n in zip(cells, ranking_lengths, strict=True)],
        tolerance,
        calibration.top_k if calibration else None,
        calibration.mean_unit_chars if calibration else None,
    )


def apply_gate(verdicts: Mapping[str, BudgetVerdict | None], gate: str, where: str) -> None:
    """With `gate: fail`, raise BudgetError naming every off-budget cell of one
    system/modality (after all of them were written); `warn` only leaves them marked."""
    failed = [(b, v) for b, v in verdicts.items() if v is not None and v.failed]
    if failed and gate == "fail":
        lines = "\n".join(f"  budget {b}: {v.status}: {v.reason}" for b, v in failed)
        raise BudgetError(
            f"budget gate: {where}: {len(failed)} cell(s) off budget\n{lines}\n"
            "  (budget_gate: warn records them in the diagnostics instead of failing)"
        )
