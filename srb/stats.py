"""The paper's statistics, as pure functions over score arrays (no file I/O, no plotting).

- paired bootstrap over questions (percentile CI on the mean difference);
- judge-vs-judge calibration (Pearson r, least-squares fit, system-rank Spearman rho,
  share within a point, per-tier mean difference);
- human side-by-side agreement (Wilson intervals by |score gap| bucket, tie tolerance tau);
- router headroom (per-question oracle, best single system, leave-one-question-out router).

Every function takes already-paired data: callers decide which cells are valid and count the
rest, so a judge that failed on a cell is excluded and reported, never scored as zero.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

VOTES = ("A", "B", "tie")


@dataclass(frozen=True)
class BootstrapCI:
    delta: float  # mean of a - b over the paired questions
    low: float
    high: float
    n: int
    resamples: int
    confidence: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "excludes_zero": self.excludes_zero}


def paired_bootstrap(
    a: Sequence[float],
    b: Sequence[float],
    resamples: int = 10_000,
    seed: int = 0,
    confidence: float = 0.95,
) -> BootstrapCI:
    """Percentile bootstrap CI of mean(a - b), resampling questions (pairs) with replacement.

    The same seed gives the same interval on any machine (numpy's PCG64 stream is fixed).
    """
    diffs = np.asarray(a, dtype=float) - np.asarray(b, dtype=float)
    if diffs.ndim != 1 or len(a) != len(b):
        raise ValueError(f"paired bootstrap needs equal-length 1-D inputs, got {len(a)}, {len(b)}")
    n = len(diffs)
    if n == 0:
        raise ValueError("paired bootstrap needs at least one paired question")
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    rng = np.random.default_rng(seed)
    means = np.empty(resamples)
    chunk = max(1, 2_000_000 // n)  # bound memory at ~16 MB of indices per step
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, n, size=(stop - start, n))
        means[start:stop] = diffs[idx].mean(axis=1)
    tail = (1 - confidence) / 2 * 100
    low, high = np.percentile(means, [tail, 100 - tail])
    return BootstrapCI(float(diffs.mean()), float(low), float(high), n, resamples, confidence)


def _rank_spearman(x: Sequence[float], y: Sequence[float]) -> float | None:
    from scipy.stats import spearmanr

    if len(x) < 3 or len(set(x)) < 2 or len(set(y)) < 2:
        return None
    return float(spearmanr(x, y).statistic)


def judge_calibration(
    x: Sequence[float],
    y: Sequence[float],
    groups: Sequence[str],
    tiers: Sequence[str],
    within: float = 1.0,
) -> dict[str, Any]:
    """Agreement of judge Y with judge X over the cells both scored validly.

    `groups[i]` names the system configuration of cell i (for the rank correlation over
    systems) and `tiers[i]` its question tier. Undefined statistics (constant scores, fewer
    than 3 systems) are None, never 0.
    """
    from scipy.stats import linregress, pearsonr

    if not (len(x) == len(y) == len(groups) == len(tiers)):
        raise ValueError("calibration inputs must have equal lengths")
    n = len(x)
    out: dict[str, Any] = {"n_pairs": n}
    xa, ya = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    varying = n >= 3 and np.ptp(xa) > 0 and np.ptp(ya) > 0
    out["pearson_r"] = float(pearsonr(xa, ya).statistic) if varying else None
    if n >= 2 and np.ptp(xa) > 0:
        fit = linregress(xa, ya)
        out["slope"], out["intercept"] = float(fit.slope), float(fit.intercept)
    else:
        out["slope"] = out["intercept"] = None
    out["within_1_share"] = float(np.mean(np.abs(xa - ya) <= within)) if n else None
    out["mean_diff"] = float(np.mean(ya - xa)) if n else None
    by_group: dict[str, list[int]] = defaultdict(list)
    for i, g in enumerate(groups):
        by_group[g].append(i)
    names = sorted(by_group)
    mx = [float(xa[by_group[g]].mean()) for g in names]
    my = [float(ya[by_group[g]].mean()) for g in names]
    out["n_systems"] = len(names)
    out["system_rank_spearman"] = _rank_spearman(mx, my)
    by_tier: dict[str, list[int]] = defaultdict(list)
    for i, t in enumerate(tiers):
        by_tier[t].append(i)
    out["tier_mean_diff"] = {
        t: float(np.mean(ya[idx] - xa[idx])) for t, idx in sorted(by_tier.items())
    }
    out["tier_n"] = {t: len(idx) for t, idx in sorted(by_tier.items())}
    return out


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sensible at 0, 1 and small n)."""
    from scipy.stats import norm

    if n <= 0:
        raise ValueError("Wilson interval needs n >= 1")
    if not 0 <= successes <= n:
        raise ValueError(f"successes {successes} outside 0..{n}")
    z = float(norm.ppf(1 - (1 - confidence) / 2))
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def judge_preference(gap: float, tau: float) -> str:
    """The judge's vote from its score gap (A minus B): a tie when |gap| <= tau."""
    if gap > tau:
        return "A"
    if gap < -tau:
        return "B"
    return "tie"


def check_gap_edges(edges: Sequence[float]) -> None:
    """|gap| buckets start at 0 and strictly increase (the config check uses this too)."""
    if not edges or edges[0] != 0 or any(b <= a for a, b in zip(edges, edges[1:], strict=False)):
        raise ValueError(
            f"gap bucket edges must start at 0 and strictly increase, got {list(edges)}"
        )


def agreement_by_gap(
    gaps: Sequence[float],
    votes: Sequence[str],
    edges: Sequence[float],
    tau: float = 0.0,
    confidence: float = 0.95,
) -> list[dict[str, Any]]:
    """Judge-human agreement per |gap| bucket [edges[i], edges[i+1]); the last bucket is open.

    Empty buckets are listed with n = 0 and no rate (not a 0% agreement).
    """
    check_gap_edges(edges)
    rows = []
    bounds = [*edges, math.inf]
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=True):
        inside = [(g, v) for g, v in zip(gaps, votes, strict=True) if lo <= abs(g) < hi]
        agree = sum(judge_preference(g, tau) == v for g, v in inside)
        row: dict[str, Any] = {
            "bucket": f"[{lo:g}, {hi:g})" if hi != math.inf else f">= {lo:g}",
            "n": len(inside),
            "agree": agree,
            "rate": agree / len(inside) if inside else None,
            "ci_low": None,
            "ci_high": None,
        }
        if inside:
            row["ci_low"], row["ci_high"] = wilson_interval(agree, len(inside), confidence)
        rows.append(row)
    return rows


def agreement_by_tau(
    gaps: Sequence[float],
    votes: Sequence[str],
    taus: Sequence[float],
    confidence: float = 0.95,
) -> list[dict[str, Any]]:
    """Overall judge-human agreement when the judge calls |gap| <= tau a tie."""
    rows = []
    for tau in taus:
        agree = sum(judge_preference(g, tau) == v for g, v in zip(gaps, votes, strict=True))
        n = len(votes)
        lo, hi = wilson_interval(agree, n, confidence) if n else (None, None)
        rows.append(
            {"tau": tau, "n": n, "agree": agree, "rate": agree / n if n else None,
             "ci_low": lo, "ci_high": hi}
        )  # fmt: skip
    return rows


def router_headroom(
    scores: Mapping[str, Mapping[str, float]], tiers: Mapping[str, str]
) -> dict[str, Any]:
    """Oracle, best single system and a leave-one-question-out tier-conditioned router.

    `scores[system][question]` over the questions every system scored validly. The router
    sends question q to the system with the best mean on the *other* questions of q's tier
    (ties: the better mean on all other questions, then the name); with one question in a tier
    it falls back to the best system on all other questions. Nothing the router uses sees q.
    `best_single` is chosen in-sample (the paper's comparison, and what the oracle is measured
    against); the router's fair baseline is `loqo_single_score`, the best system picked without
    q, since an in-sample pick is biased upward by selection.
    """
    systems = sorted(scores)
    if len(systems) < 2:
        raise ValueError("router headroom needs at least two systems")
    common = sorted(set.intersection(*(set(scores[s]) for s in systems)))
    if not common:
        raise ValueError("no question was scored validly by every router system")
    matrix = np.array([[scores[s][q] for s in systems] for q in common])
    means = matrix.mean(axis=0)
    best = int(np.argmax(means))  # argmax takes the first: names are sorted
    oracle = float(matrix.max(axis=1).mean())
    q_tier = [tiers.get(q, "?") for q in common]
    routed, loqo_single, choices = [], [], defaultdict(int)
    for i in range(len(common)):
        others = [j for j in range(len(common)) if j != i]
        same = [j for j in others if q_tier[j] == q_tier[i]]
        if others:
            # every statistic the router uses excludes question i, tie-breaks included
            sub = matrix[same or others].mean(axis=0)
            rest = matrix[others].mean(axis=0)
            pick = min(range(len(systems)), key=lambda s: (-sub[s], -rest[s], systems[s]))
            single = min(range(len(systems)), key=lambda s: (-rest[s], systems[s]))
        else:
            pick = single = 0  # one question: nothing to learn from, so the first system by name
        choices[systems[pick]] += 1
        routed.append(matrix[i, pick])
        loqo_single.append(matrix[i, single])
    router = float(statistics.fmean(routed))
    held_out_single = float(statistics.fmean(loqo_single))
    return {
        "n_questions": len(common),
        "systems": systems,
        "best_single": systems[best],
        "best_single_score": float(means[best]),
        "oracle_score": oracle,
        "router_score": router,
        "oracle_gap": oracle - float(means[best]),
        "router_gap": router - float(means[best]),
        # the fair baseline for the router: the best single system chosen without question q
        "loqo_single_score": held_out_single,
        "router_gap_loqo": router - held_out_single,
        "router_choices": dict(sorted(choices.items())),
        "system_means": {s: float(m) for s, m in zip(systems, means, strict=True)},
    }
