"""The paper's statistics on small fixed fixtures, checked against independent computations.

Every expected value here comes from scipy.stats, plain numpy or hand arithmetic, never from
the function under test.
"""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from scipy.stats import binomtest, bootstrap, linregress, norm, pearsonr, spearmanr

from srb.stats import (
    VOTES,
    BootstrapCI,
    agreement_by_gap,
    agreement_by_tau,
    judge_calibration,
    judge_preference,
    paired_bootstrap,
    router_headroom,
    wilson_interval,
)


def scipy_wilson(k, n, confidence=0.95):
    ci = binomtest(k, n).proportion_ci(confidence_level=confidence, method="wilson")
    return ci.low, ci.high


# --------------------------------------------------------------------------- paired bootstrap

# Fractional scores so that bootstrap means are (almost surely) distinct between seeds.
A = [7.2, 5.0, 8.1, 6.4, 9.0, 4.3, 7.7, 8.0, 6.25, 5.5, 9.1, 7.0]
B = [6.1, 5.0, 6.3, 6.4, 7.45, 5.2, 5.05, 7.3, 6.0, 3.15, 8.35, 6.6]


def test_bootstrap_delta_is_mean_difference():
    ci = paired_bootstrap(A, B, resamples=500, seed=1)
    expected = sum(x - y for x, y in zip(A, B, strict=True)) / len(A)
    assert ci.delta == pytest.approx(expected)
    assert ci.delta == pytest.approx(float(np.mean(A) - np.mean(B)))
    assert ci.n == len(A)
    assert ci.resamples == 500
    assert ci.confidence == 0.95


def test_bootstrap_same_seed_identical_different_seed_differs():
    first = paired_bootstrap(A, B, resamples=2000, seed=7)
    again = paired_bootstrap(A, B, resamples=2000, seed=7)
    other = paired_bootstrap(A, B, resamples=2000, seed=8)
    assert (first.low, first.high) == (again.low, again.high)
    assert first == again
    assert (first.low, first.high) != (other.low, other.high)


def test_bootstrap_ci_contains_delta():
    for seed in range(5):
        ci = paired_bootstrap(A, B, resamples=2000, seed=seed)
        assert ci.low <= ci.delta <= ci.high
        assert ci.low < ci.high


# Paired fixtures on the judges' quarter-point grid with n = 16 (a power of two): every
# difference, every partial sum and the mean are exact binary fractions, so the point estimate
# can be compared with ==, and every resampled mean lies on the lattice k / 64.
A16 = [7.5, 6.25, 8.0, 5.5, 9.0, 6.75, 7.0, 8.25, 4.5, 6.0, 7.75, 8.5, 5.25, 6.5, 9.25, 7.25]
# a - b for a clear gain: running sum 1.25, 1.75, 3.75, 3.5, 5, 5.75, 6.75, 6.75, 8.5, 9, 10.25,
# 12.5, 12, 13, 13.75, 15.25 -> delta = 15.25 / 16 = 0.953125; 14 of 16 differences >= 0.
D_CLEAR = [1.25, 0.5, 2.0, -0.25, 1.5, 0.75, 1.0, 0.0, 1.75, 0.5, 1.25, 2.25, -0.5, 1.0, 0.75, 1.5]
# a - b with no real effect: running sum 1.5, .5, 1.25, .75, 2.75, 1, 1.25, 1, 2, .5, 1, 1, .25,
# 1.5, -.5, 1 -> delta = 1 / 16 = 0.0625, against a spread of about +-1.2 per question.
D_NULL = [
    1.5,
    -1.0,
    0.75,
    -0.5,
    2.0,
    -1.75,
    0.25,
    -0.25,
    1.0,
    -1.5,
    0.5,
    0.0,
    -0.75,
    1.25,
    -2.0,
    1.5,
]
LATTICE = 1 / 64  # resampled means of n = 16 quarter-point differences are multiples of 1/64


def minus(a, d):
    """b = a - d, exact on the quarter-point grid."""
    return [x - y for x, y in zip(a, d, strict=True)]


def monte_carlo_tolerance(d, resamples, confidence, step):
    """How far one CI endpoint may sit from an independent estimate of the same endpoint.

    A p-quantile estimated from B resamples has standard error sqrt(p (1 - p) / B) / f(q_p),
    f being the density of the bootstrap distribution of the mean at that quantile. By the CLT
    that distribution is close to normal with sd s = sd(d) / sqrt(n) (population sd: resampling
    draws from the empirical distribution of the n differences), so f(q_p) = phi(z_p) / s. Two
    independent estimates (ours and scipy's, with another generator) differ by sqrt(2) SE
    standard deviations: 4 of those is a ~1-in-16,000 false alarm. On top of that, either
    estimate may land on the lattice point next to the other's, hence one lattice `step`.
    """
    p = (1 - confidence) / 2
    s = float(np.std(d)) / math.sqrt(len(d))
    se = math.sqrt(p * (1 - p) / resamples) * s / float(norm.pdf(norm.ppf(p)))
    return 4 * math.sqrt(2) * se + step


def scipy_paired_percentile_ci(a, b, resamples, confidence, seed):
    ref = bootstrap(
        (np.asarray(a), np.asarray(b)),
        lambda x, y, axis: np.mean(x - y, axis=axis),
        paired=True,
        vectorized=True,
        method="percentile",
        n_resamples=resamples,
        confidence_level=confidence,
        batch=10_000,
        rng=np.random.default_rng(seed),
    )
    return float(ref.confidence_interval.low), float(ref.confidence_interval.high)


@pytest.mark.parametrize(
    ("d", "delta", "confidence", "excludes"),
    [
        (D_CLEAR, 0.953125, 0.95, True),
        (D_CLEAR, 0.953125, 0.90, True),
        (D_NULL, 0.0625, 0.95, False),
        (D_NULL, 0.0625, 0.90, False),
    ],
    ids=["clear-95", "clear-90", "null-95", "null-90"],
)
def test_bootstrap_matches_scipy_within_monte_carlo_error(d, delta, confidence, excludes):
    resamples = 100_000
    a, b = A16, minus(A16, d)
    ours = paired_bootstrap(a, b, resamples=resamples, seed=0, confidence=confidence)
    assert ours.delta == delta  # hand-computed above; exact on this grid
    assert (ours.n, ours.resamples, ours.confidence) == (16, resamples, confidence)
    low, high = scipy_paired_percentile_ci(a, b, resamples, confidence, seed=12345)
    tol = monte_carlo_tolerance(d, resamples, confidence, LATTICE)
    # tol is 0.023-0.030 here, while moving from a 95% to a 90% interval shifts each endpoint
    # by 0.06-0.09 and resampling a and b unpaired roughly triples the width: both would fail.
    assert tol < 0.031
    assert ours.low == pytest.approx(low, abs=tol)
    assert ours.high == pytest.approx(high, abs=tol)
    assert ours.excludes_zero is excludes
    if excludes:  # clearly: the oracle's lower end is more than 0.5 points above zero
        assert low > 0.5 and ours.low > 0.5
    else:  # clearly: zero sits inside, with about half a point to spare on both sides
        assert low < -0.4 < 0.4 < high
        assert ours.low < -0.4 < 0.4 < ours.high


def exact_bootstrap_quantiles(d, confidence):
    """Quantiles of the exact bootstrap distribution of mean(d*), d* = n draws with replacement
    from d. On the quarter-point grid the resampled sum in quarters is the n-fold convolution of
    the empirical pmf, computed exactly (no random numbers at all). Returns (low, high, pmf over
    the lattice, lattice values)."""
    k = np.round(np.asarray(d) * 4).astype(int)
    assert np.array_equal(k / 4, np.asarray(d))  # really on the grid
    pmf = np.bincount(k - k.min()) / len(k)
    dist = np.array([1.0])
    for _ in range(len(k)):
        dist = np.convolve(dist, pmf)
    values = (np.arange(len(dist)) + k.min() * len(k)) / (4 * len(k))
    cdf = np.cumsum(dist)
    p = (1 - confidence) / 2
    i_low, i_high = int(np.searchsorted(cdf, p)), int(np.searchsorted(cdf, 1 - p))
    return values[i_low], values[i_high], dist, values


@pytest.mark.parametrize("d", [D_CLEAR, D_NULL], ids=["clear", "null"])
@pytest.mark.parametrize("confidence", [0.95, 0.90])
def test_bootstrap_endpoints_match_exact_bootstrap_distribution(d, confidence):
    resamples = 100_000
    ours = paired_bootstrap(A16, minus(A16, d), resamples=resamples, seed=0, confidence=confidence)
    low, high, dist, values = exact_bootstrap_quantiles(d, confidence)
    # The empirical CDF of B resamples is within 4 sqrt(p (1 - p) / B) (= 0.002 at p = 2.5%)
    # of the exact one at any fixed point. Each lattice point next to an exact quantile carries
    # more mass than that (checked here), so the estimated endpoint can at worst slide onto a
    # neighbouring lattice point: tolerance one lattice step, 1/64.
    p = (1 - confidence) / 2
    band = 4 * math.sqrt(p * (1 - p) / resamples)
    for q in (low, high):
        i = int(np.searchsorted(values, q))
        assert values[i] == q
        assert dist[i - 1] > band and dist[i + 1] > band
    assert ours.low == pytest.approx(low, abs=LATTICE)
    assert ours.high == pytest.approx(high, abs=LATTICE)
    # the exact distribution's own mean is the point estimate
    assert float(np.dot(dist, values)) == pytest.approx(ours.delta, abs=1e-12)


def test_bootstrap_matches_scipy_over_several_chunks():
    # n = 512 questions: the production code draws its resamples in blocks of
    # 2_000_000 // 512 = 3906 rows, so 40,000 resamples take 11 blocks; every block must
    # contribute properly drawn resamples for the percentiles to match the oracle.
    rng = np.random.default_rng(2024)
    a = (rng.integers(0, 41, size=512) / 4).tolist()  # scores 0..10 in quarter points
    d = (rng.integers(-6, 9, size=512) / 4).tolist()  # a - b, mostly positive
    resamples = 40_000
    ours = paired_bootstrap(a, minus(a, d), resamples=resamples, seed=0)
    # exact: quarter-point sums are exact in floats and 512 is a power of two
    assert ours.delta == math.fsum(d) / 512
    low, high = scipy_paired_percentile_ci(a, minus(a, d), resamples, 0.95, seed=99)
    tol = monte_carlo_tolerance(d, resamples, 0.95, 1 / (4 * 512))
    assert ours.low == pytest.approx(low, abs=tol)
    assert ours.high == pytest.approx(high, abs=tol)


def test_bootstrap_single_question_degenerates_to_point():
    ci = paired_bootstrap([3.0], [1.5], resamples=50, seed=0)
    assert ci.delta == ci.low == ci.high == 1.5
    assert ci.excludes_zero


def test_bootstrap_ties_give_zero_width_interval():
    ci = paired_bootstrap([4.0, 6.0, 5.0], [4.0, 6.0, 5.0], resamples=200, seed=0)
    assert (ci.delta, ci.low, ci.high) == (0.0, 0.0, 0.0)
    assert not ci.excludes_zero


@pytest.mark.parametrize(
    ("low", "high", "excludes"),
    [
        (0.1, 0.9, True),
        (-0.9, -0.1, True),
        (-0.1, 0.1, False),
        (0.0, 0.5, False),
        (-0.5, 0.0, False),
        (0.0, 0.0, False),
    ],
)
def test_excludes_zero(low, high, excludes):
    ci = BootstrapCI(delta=(low + high) / 2, low=low, high=high, n=3, resamples=10, confidence=0.9)
    assert ci.excludes_zero is excludes
    d = ci.to_dict()
    assert d["excludes_zero"] is excludes
    assert {k: d[k] for k in ("low", "high", "n", "resamples", "confidence")} == {
        "low": low,
        "high": high,
        "n": 3,
        "resamples": 10,
        "confidence": 0.9,
    }


def test_bootstrap_excludes_zero_on_clear_difference():
    a = [8.0, 9.0, 7.0, 8.0, 9.0, 8.0]
    b = [3.0, 4.0, 2.0, 3.0, 5.0, 4.0]
    ci = paired_bootstrap(a, b, resamples=1000, seed=0)
    assert ci.excludes_zero and ci.low > 0
    flipped = paired_bootstrap(b, a, resamples=1000, seed=0)
    assert flipped.excludes_zero and flipped.high < 0


@pytest.mark.parametrize(
    ("a", "b", "kwargs"),
    [
        ([], [], {}),
        ([1.0, 2.0, 3.0], [1.0, 2.0], {}),
        ([1.0], [1.0, 2.0, 3.0], {}),
        ([1.0, 2.0], [0.0, 1.0], {"resamples": 0}),
        ([1.0, 2.0], [0.0, 1.0], {"resamples": -5}),
    ],
)
def test_bootstrap_errors(a, b, kwargs):
    with pytest.raises(ValueError):
        paired_bootstrap(a, b, **kwargs)


# ------------------------------------------------------------------------ judge calibration

# Three systems, two tiers, ties within both judges' scores.
CAL_X = [6.0, 7.0, 7.0, 3.0, 4.0, 4.0, 8.0, 9.0, 8.0, 5.0]
CAL_Y = [7.0, 7.0, 8.0, 4.0, 3.0, 4.0, 8.0, 7.5, 9.0, 5.0]
CAL_G = ["s1", "s1", "s1", "s2", "s2", "s2", "s3", "s3", "s3", "s1"]
CAL_T = ["L1", "L2", "L1", "L1", "L2", "L2", "L1", "L2", "L2", "L1"]


def test_calibration_against_scipy_and_hand_arithmetic():
    out = judge_calibration(CAL_X, CAL_Y, CAL_G, CAL_T)
    assert out["n_pairs"] == 10
    assert out["pearson_r"] == pytest.approx(pearsonr(CAL_X, CAL_Y).statistic)
    fit = linregress(CAL_X, CAL_Y)
    assert out["slope"] == pytest.approx(fit.slope)
    assert out["intercept"] == pytest.approx(fit.intercept)
    # |x - y|: 1, 0, 1, 1, 1, 0, 0, 1.5, 1, 0 -> 9 of 10 within a point (boundary 1 counts).
    assert out["within_1_share"] == pytest.approx(0.9)
    # y - x: 1, 0, 1, 1, -1, 0, 0, -1.5, 1, 0 -> 1.5 over the 10 cells.
    assert out["mean_diff"] == pytest.approx(0.15)
    # System means by hand: s1 x (6+7+7+5)/4 = 6.25, y (7+7+8+5)/4 = 6.75;
    # s2 x 11/3, y 11/3; s3 x 25/3, y 24.5/3.
    assert out["n_systems"] == 3
    rho = spearmanr([6.25, 11 / 3, 25 / 3], [6.75, 11 / 3, 24.5 / 3]).statistic
    assert rho == pytest.approx(1.0)
    assert out["system_rank_spearman"] == pytest.approx(rho)
    # Tier L1: cells 0, 2, 3, 6, 9 -> y - x = 1, 1, 1, 0, 0 -> 3/5.
    # Tier L2: cells 1, 4, 5, 7, 8 -> y - x = 0, -1, 0, -1.5, 1 -> -1.5/5.
    assert out["tier_mean_diff"] == pytest.approx({"L1": 0.6, "L2": -0.3})
    assert list(out["tier_mean_diff"]) == ["L1", "L2"]
    assert out["tier_n"] == {"L1": 5, "L2": 5}


def test_calibration_system_rank_with_tied_means():
    # System means: x = a 2, b 4, c 4, d 6 (tie b/c); y = a 1, b 3, c 5, d 5 (tie c/d).
    x = [2.0, 2.0, 4.0, 4.0, 3.0, 5.0, 6.0, 6.0]
    y = [1.0, 1.0, 3.0, 3.0, 5.0, 5.0, 4.0, 6.0]
    g = ["a", "a", "b", "b", "c", "c", "d", "d"]
    out = judge_calibration(x, y, g, ["L1"] * 8)
    # Average ranks: x -> 1, 2.5, 2.5, 4 and y -> 1, 2, 3.5, 3.5.
    rx, ry = np.array([1, 2.5, 2.5, 4]), np.array([1, 2, 3.5, 3.5])
    by_hand = float(np.corrcoef(rx, ry)[0, 1])
    assert by_hand == pytest.approx(spearmanr([2, 4, 4, 6], [1, 3, 5, 5]).statistic)
    assert out["system_rank_spearman"] == pytest.approx(by_hand)
    assert out["n_systems"] == 4


def test_calibration_within_share_boundary():
    # |diff| = 1 exactly is within; 1.5 is not; the sign does not matter.
    out = judge_calibration([3.0, 3.0, 3.0, 3.0], [4.0, 2.0, 4.5, 3.0], ["a"] * 4, ["L1"] * 4)
    assert out["within_1_share"] == pytest.approx(3 / 4)
    wide = judge_calibration([3.0, 3.0], [4.5, 1.0], ["a", "b"], ["L1", "L1"], within=2.0)
    assert wide["within_1_share"] == pytest.approx(1.0)


def test_calibration_constant_scores_give_none_not_zero():
    groups = ["a", "b", "c", "a", "b", "c"]
    tiers = ["L1"] * 6
    varying = [1.0, 2.0, 3.0, 5.0, 4.0, 6.0]
    flat_x = judge_calibration([5.0] * 6, varying, groups, tiers)
    assert flat_x["pearson_r"] is None
    assert flat_x["slope"] is None and flat_x["intercept"] is None
    assert flat_x["system_rank_spearman"] is None
    flat_y = judge_calibration(varying, [5.0] * 6, groups, tiers)
    assert flat_y["pearson_r"] is None
    assert flat_y["system_rank_spearman"] is None
    # A flat y is still a well-defined (zero-slope) least-squares fit.
    assert flat_y["slope"] == pytest.approx(0.0)
    assert flat_y["intercept"] == pytest.approx(5.0)
    assert flat_y["mean_diff"] == pytest.approx(5.0 - statistics.fmean(varying))


def test_calibration_fewer_than_three_systems_gives_none_rank():
    x = [1.0, 2.0, 6.0, 8.0]
    y = [2.0, 1.0, 7.0, 9.0]
    out = judge_calibration(x, y, ["a", "a", "b", "b"], ["L1", "L2", "L1", "L2"])
    assert out["n_systems"] == 2
    assert out["system_rank_spearman"] is None
    assert out["pearson_r"] == pytest.approx(pearsonr(x, y).statistic)


def test_calibration_missing_cell_changes_counts():
    # A cell a judge failed on is simply not passed: it must not count as a zero.
    keep = [i for i in range(len(CAL_X)) if i != 4]
    out = judge_calibration(
        [CAL_X[i] for i in keep],
        [CAL_Y[i] for i in keep],
        [CAL_G[i] for i in keep],
        [CAL_T[i] for i in keep],
    )
    assert out["n_pairs"] == 9
    assert out["tier_n"] == {"L1": 5, "L2": 4}
    # L2 without cell 4: y - x = 0, 0, -1.5, 1 -> -0.5 / 4.
    assert out["tier_mean_diff"]["L2"] == pytest.approx(-0.125)
    assert out["mean_diff"] == pytest.approx(2.5 / 9)


def test_calibration_empty_input_is_all_none():
    out = judge_calibration([], [], [], [])
    assert out["n_pairs"] == 0
    for key in ("pearson_r", "slope", "intercept", "within_1_share", "mean_diff"):
        assert out[key] is None
    assert out["system_rank_spearman"] is None
    assert out["n_systems"] == 0
    assert out["tier_mean_diff"] == {} and out["tier_n"] == {}


def test_calibration_unequal_lengths_raise():
    with pytest.raises(ValueError):
        judge_calibration([1.0, 2.0, 3.0], [1.0, 2.0], ["a", "b", "c"], ["L1"] * 3)
    with pytest.raises(ValueError):
        judge_calibration([1.0, 2.0], [1.0, 2.0], ["a"], ["L1", "L1"])
    with pytest.raises(ValueError):
        judge_calibration([1.0, 2.0], [1.0, 2.0], ["a", "b"], ["L1"])


# --------------------------------------------------------------------------------- Wilson CI


@pytest.mark.parametrize(("k", "n"), [(0, 1), (1, 1), (0, 7), (3, 7), (7, 7), (12, 40), (1, 3)])
@pytest.mark.parametrize("confidence", [0.95, 0.9, 0.99])
def test_wilson_matches_scipy_binomtest(k, n, confidence):
    low, high = wilson_interval(k, n, confidence)
    ref_low, ref_high = scipy_wilson(k, n, confidence)
    assert low == pytest.approx(ref_low, abs=1e-12)
    assert high == pytest.approx(ref_high, abs=1e-12)
    assert 0.0 <= low <= k / n + 1e-12
    assert k / n - 1e-12 <= high <= 1.0


@pytest.mark.parametrize("n", [1, 5, 20])
def test_wilson_at_zero_and_all_successes(n):
    z = norm.ppf(0.975)
    # Closed forms: k = 0 -> [0, z^2 / (n + z^2)];  k = n -> [n / (n + z^2), 1].
    low, high = wilson_interval(0, n)
    assert low == pytest.approx(0.0, abs=1e-12)
    assert high == pytest.approx(z * z / (n + z * z))
    low, high = wilson_interval(n, n)
    assert low == pytest.approx(n / (n + z * z))
    assert high == pytest.approx(1.0, abs=1e-12)


def test_wilson_hand_value():
    # k = 3, n = 10, z = 1.959964: centre = (0.3 + z^2/20) / (1 + z^2/10).
    z = 1.959963984540054
    denom = 1 + z * z / 10
    centre = (0.3 + z * z / 20) / denom
    half = z * math.sqrt(0.3 * 0.7 / 10 + z * z / 400) / denom
    low, high = wilson_interval(3, 10)
    assert low == pytest.approx(centre - half)
    assert high == pytest.approx(centre + half)
    assert (low, high) == pytest.approx((0.10779, 0.60322), abs=1e-5)


@pytest.mark.parametrize(("k", "n"), [(0, 0), (1, 0), (-1, 5), (6, 5), (0, -1)])
def test_wilson_errors(k, n):
    with pytest.raises(ValueError):
        wilson_interval(k, n)


# ----------------------------------------------------------------- judge preference, by gap/tau


@pytest.mark.parametrize(
    ("gap", "tau", "vote"),
    [
        (0.0, 0.0, "tie"),
        (0.1, 0.0, "A"),
        (-0.1, 0.0, "B"),
        (1.0, 1.0, "tie"),
        (-1.0, 1.0, "tie"),
        (1.5, 1.0, "A"),
        (-1.5, 1.0, "B"),
        (0.5, 0.5, "tie"),
        (-2.0, 2.0, "tie"),
        (2.5, 2.0, "A"),
    ],
)
def test_judge_preference(gap, tau, vote):
    assert judge_preference(gap, tau) == vote
    assert vote in VOTES


GAPS = [0.0, 0.5, -0.5, 1.0, -1.0, 1.5, -1.5, 2.5, -3.0, 6.0, -7.0]
VOTES_H = ["tie", "A", "tie", "A", "tie", "A", "B", "A", "B", "B", "B"]


def test_agreement_by_gap_buckets():
    rows = agreement_by_gap(GAPS, VOTES_H, [0, 1, 2, 5], tau=0.0)
    assert [r["bucket"] for r in rows] == ["[0, 1)", "[1, 2)", "[2, 5)", ">= 5"]
    # tau = 0: judge votes tie, A, B | A, B, A, B | A, B | A, B.
    # [0, 1): gaps 0, .5, -.5 -> humans tie, A, tie -> agree 2 of 3.
    # [1, 2): gaps 1, -1, 1.5, -1.5 (1 is the closed lower edge) -> A, tie, A, B -> 3 of 4.
    # [2, 5): gaps 2.5, -3 (abs) -> A, B -> 2 of 2.
    # >= 5: gaps 6, -7 -> humans B, B -> judge A, B -> 1 of 2.
    expected = [(3, 2), (4, 3), (2, 2), (2, 1)]
    for row, (n, agree) in zip(rows, expected, strict=True):
        assert (row["n"], row["agree"]) == (n, agree)
        assert row["rate"] == pytest.approx(agree / n)
        low, high = scipy_wilson(agree, n)
        assert row["ci_low"] == pytest.approx(low, abs=1e-12)
        assert row["ci_high"] == pytest.approx(high, abs=1e-12)


def test_agreement_by_gap_empty_bucket_and_tau():
    rows = agreement_by_gap(GAPS, VOTES_H, [0, 1, 2, 2.25, 5], tau=1.0)
    empty = rows[2]
    assert empty["bucket"] == "[2, 2.25)"
    assert empty == {
        "bucket": "[2, 2.25)",
        "n": 0,
        "agree": 0,
        "rate": None,
        "ci_low": None,
        "ci_high": None,
    }
    # tau = 1: |gap| <= 1 is a tie. [0, 1): all tie -> humans tie, A, tie -> 2 of 3.
    # [1, 2): 1 -> tie (human A), -1 -> tie (tie), 1.5 -> A (A), -1.5 -> B (B) -> 3 of 4.
    assert [(r["n"], r["agree"]) for r in rows] == [(3, 2), (4, 3), (0, 0), (2, 2), (2, 1)]


def test_agreement_by_gap_open_last_bucket_only():
    rows = agreement_by_gap([-100.0, 0.0, 3.0], ["B", "tie", "A"], [0])
    assert len(rows) == 1
    assert rows[0]["bucket"] == ">= 0"
    assert (rows[0]["n"], rows[0]["agree"], rows[0]["rate"]) == (3, 3, 1.0)
    assert rows[0]["ci_low"] == pytest.approx(scipy_wilson(3, 3)[0])
    assert rows[0]["ci_high"] == pytest.approx(1.0)


def test_agreement_by_gap_confidence_passed_to_wilson():
    rows = agreement_by_gap(GAPS, VOTES_H, [0, 1], confidence=0.8)
    # >= 1 bucket, tau 0: gaps 1, -1, 1.5, -1.5, 2.5, -3, 6, -7; the judge disagrees only on
    # -1 (B vs human tie) and 6 (A vs human B) -> 6 of 8.
    assert (rows[1]["n"], rows[1]["agree"]) == (8, 6)
    low, high = scipy_wilson(6, 8, 0.8)
    assert (rows[1]["ci_low"], rows[1]["ci_high"]) == pytest.approx((low, high))


@pytest.mark.parametrize("edges", [[], [1, 2], [0, 2, 1], [-1, 0, 1], [0.5]])
def test_agreement_by_gap_bad_edges(edges):
    with pytest.raises(ValueError):
        agreement_by_gap(GAPS, VOTES_H, edges)


def test_agreement_by_gap_repeated_edge_rejected():
    with pytest.raises(ValueError):
        agreement_by_gap(GAPS, VOTES_H, [0, 1, 1, 2])


def test_agreement_by_gap_unequal_lengths_raise():
    with pytest.raises(ValueError):
        agreement_by_gap([0.0, 1.0], ["tie"], [0, 1])


def expected_vote(gap, tau):
    if abs(gap) <= tau:
        return "tie"
    return "A" if gap > 0 else "B"


def test_agreement_by_tau():
    taus = [0, 0.5, 1, 1.5, 2]
    rows = agreement_by_tau(GAPS, VOTES_H, taus)
    # Hand counts: tau 0 -> 8 (gap 0, .5, 1, 1.5, -1.5, 2.5, -3, -7 agree);
    # tau .5 -> 8 (gap .5 lost, -.5 gained); tau 1 -> 8 (1 lost, -1 gained);
    # tau 1.5 -> 6 (1.5 and -1.5 become ties; humans voted A and B); tau 2 -> 6.
    hand = [8, 8, 8, 6, 6]
    assert [r["tau"] for r in rows] == taus
    for row, tau, agree in zip(rows, taus, hand, strict=True):
        indep = sum(expected_vote(g, tau) == v for g, v in zip(GAPS, VOTES_H, strict=True))
        assert indep == agree
        assert row["n"] == len(GAPS)
        assert row["agree"] == agree
        assert row["rate"] == pytest.approx(agree / len(GAPS))
        low, high = scipy_wilson(agree, len(GAPS))
        assert row["ci_low"] == pytest.approx(low, abs=1e-12)
        assert row["ci_high"] == pytest.approx(high, abs=1e-12)


def test_agreement_by_tau_boundary_is_tie():
    # Every gap sits exactly at |gap| == tau: the judge calls all of them ties.
    rows = agreement_by_tau([1.0, -1.0, 1.0], ["tie", "tie", "A"], [1.0])
    assert (rows[0]["agree"], rows[0]["n"]) == (2, 3)


def test_agreement_by_tau_empty_input():
    rows = agreement_by_tau([], [], [0, 1])
    assert rows == [
        {"tau": 0, "n": 0, "agree": 0, "rate": None, "ci_low": None, "ci_high": None},
        {"tau": 1, "n": 0, "agree": 0, "rate": None, "ci_low": None, "ci_high": None},
    ]


def test_agreement_by_tau_unequal_lengths_raise():
    with pytest.raises(ValueError):
        agreement_by_tau([0.0, 1.0], ["tie"], [0])


# ---------------------------------------------------------------------------- router headroom

ROUTER_SCORES = {
    "alpha": {"q1": 9.0, "q2": 8.0, "q3": 7.0, "q4": 2.0, "q5": 3.0, "q6": 1.0},
    "beta": {"q1": 6.0, "q2": 7.0, "q3": 9.0, "q4": 5.0, "q5": 4.0, "q6": 6.0},
    "gamma": {"q1": 5.0, "q2": 5.0, "q3": 5.0, "q4": 4.0, "q5": 6.0, "q6": 7.0},
}
ROUTER_TIERS = {"q1": "easy", "q2": "easy", "q3": "easy", "q4": "hard", "q5": "hard", "q6": "hard"}


def test_router_headroom_by_hand():
    out = router_headroom(ROUTER_SCORES, ROUTER_TIERS)
    # System means: alpha 30/6, beta 37/6, gamma 32/6 -> best single is beta.
    # Oracle: per-question max 9, 8, 9, 5, 6, 7 -> 44/6.
    # Router (mean of the other questions of the same tier):
    #   q1: alpha 7.5, beta 8, gamma 5 -> beta (6)     q4: 2, 5, 6.5 -> gamma (4)
    #   q2: alpha 8, beta 7.5, gamma 5 -> alpha (8)    q5: 1.5, 5.5, 5.5 -> tie, beta by mean (4)
    #   q3: alpha 8.5, beta 6.5, gamma 5 -> alpha (7)  q6: 2.5, 4.5, 5 -> gamma (7)
    #   routed 6 + 8 + 7 + 4 + 4 + 7 = 36 -> 6.
    assert out["n_questions"] == 6
    assert out["systems"] == ["alpha", "beta", "gamma"]
    assert out["best_single"] == "beta"
    assert out["best_single_score"] == pytest.approx(37 / 6)
    assert out["oracle_score"] == pytest.approx(44 / 6)
    assert out["router_score"] == pytest.approx(6.0)
    assert out["oracle_gap"] == pytest.approx(44 / 6 - 37 / 6)
    assert out["router_gap"] == pytest.approx(6.0 - 37 / 6)
    assert out["router_choices"] == {"alpha": 2, "beta": 2, "gamma": 2}
    assert out["system_means"] == pytest.approx({"alpha": 5.0, "beta": 37 / 6, "gamma": 32 / 6})
    # Leave-one-question-out single system: totals alpha 30, beta 37, gamma 32, less q's own:
    #   q1: 21, 31, 27 -> beta (6)    q4: 28, 32, 28 -> beta (5)
    #   q2: 22, 30, 27 -> beta (7)    q5: 27, 33, 26 -> beta (4)
    #   q3: 23, 28, 27 -> beta (9)    q6: 29, 31, 25 -> beta (6)
    #   6 + 7 + 9 + 5 + 4 + 6 = 37 -> 37/6, the in-sample best here since beta always wins.
    assert out["loqo_single_score"] == pytest.approx(37 / 6)
    assert out["router_gap_loqo"] == pytest.approx(6.0 - 37 / 6)


def test_router_headroom_matches_numpy_oracle_and_best():
    out = router_headroom(ROUTER_SCORES, ROUTER_TIERS)
    names = sorted(ROUTER_SCORES)
    qs = sorted(ROUTER_TIERS)
    m = np.array([[ROUTER_SCORES[s][q] for s in names] for q in qs])
    assert out["oracle_score"] == pytest.approx(float(m.max(axis=1).mean()))
    assert out["best_single_score"] == pytest.approx(float(m.mean(axis=0).max()))


def test_router_uses_only_common_questions():
    scores = {s: dict(qs) for s, qs in ROUTER_SCORES.items()}
    del scores["gamma"]["q6"]  # gamma failed on q6: q6 leaves the comparison for everyone
    scores["alpha"]["q7"] = 10.0  # scored by alpha only: ignored
    out = router_headroom(scores, ROUTER_TIERS)
    assert out["n_questions"] == 5
    # Means over q1..q5: alpha 29/5, beta 31/5, gamma 25/5; oracle 9, 8, 9, 5, 6 -> 37/5.
    assert out["system_means"] == pytest.approx({"alpha": 5.8, "beta": 6.2, "gamma": 5.0})
    assert out["best_single"] == "beta"
    assert out["oracle_score"] == pytest.approx(37 / 5)
    # Easy tier unchanged (6, 8, 7). Hard tier q4, q5 only:
    #   q4: pool q5 -> alpha 3, beta 4, gamma 6 -> gamma (4); q5: pool q4 -> beta (4).
    assert out["router_score"] == pytest.approx((6 + 8 + 7 + 4 + 4) / 5)
    assert out["router_choices"] == {"alpha": 2, "beta": 2, "gamma": 1}
    # Leave-one-out single system over q1..q5 (totals alpha 29, beta 31, gamma 25):
    #   q1: 20, 25, 20 -> beta (6); q2: 21, 24, 20 -> beta (7);
    #   q3: 22, 22, 20 -> alpha by name (7); q4: 27, 26, 21 -> alpha (2); q5: 26, 27, 19 -> beta (4)
    #   6 + 7 + 7 + 2 + 4 = 26 -> 5.2, below the in-sample best 6.2: selection bias at work.
    assert out["loqo_single_score"] == pytest.approx(26 / 5)
    assert out["router_gap_loqo"] == pytest.approx(29 / 5 - 26 / 5)


def test_router_best_single_tie_broken_by_name():
    scores = {
        "zeta": {"q1": 4.0, "q2": 6.0},
        "eta": {"q1": 6.0, "q2": 4.0},
        "mu": {"q1": 1.0, "q2": 2.0},
    }
    out = router_headroom(scores, {"q1": "L1", "q2": "L1"})
    assert out["systems"] == ["eta", "mu", "zeta"]
    assert out["best_single"] == "eta"
    assert out["best_single_score"] == pytest.approx(5.0)
    assert out["oracle_score"] == pytest.approx(6.0)
    # q1 goes by q2 -> zeta (4); q2 goes by q1 -> eta (4).
    assert out["router_score"] == pytest.approx(4.0)
    assert out["router_choices"] == {"eta": 1, "zeta": 1}
    # One tier, so the held-out single system makes the same picks: zeta (4), eta (4).
    assert out["loqo_single_score"] == pytest.approx(4.0)
    assert out["router_gap_loqo"] == 0.0


def test_router_single_question_tier_falls_back_to_all_other_questions():
    scores = {
        "a": {"q1": 9.0, "q2": 9.0, "q3": 0.0},
        "b": {"q1": 5.0, "q2": 5.0, "q3": 8.0},
    }
    # q3 is alone in its tier: it goes to the best system on q1, q2 -> a (0).
    # q1, q2 share a tier: each goes by the other -> a (9, 9).
    out = router_headroom(scores, {"q1": "L1", "q2": "L1", "q3": "L3"})
    assert out["router_score"] == pytest.approx(18 / 3)
    assert out["router_choices"] == {"a": 3}
    assert out["oracle_score"] == pytest.approx((9 + 9 + 8) / 3)
    # The held-out single system ignores tiers: q1 by q2, q3 -> a 9 v b 13 -> b (5); q2
    # likewise b (5); q3 by q1, q2 -> a 18 v b 10 -> a (0): 10/3, so tiers gain 6 - 10/3.
    assert out["loqo_single_score"] == pytest.approx(10 / 3)
    assert out["router_gap_loqo"] == pytest.approx(6 - 10 / 3)
    # Questions with no tier share one unknown tier.
    untiered = router_headroom(scores, {})
    # All in one tier: q1 by q2, q3 -> a 4.5 vs b 6.5 -> b (5); q2 likewise b (5);
    # q3 by q1, q2 -> a (0).
    assert untiered["router_score"] == pytest.approx(10 / 3)
    assert untiered["router_choices"] == {"a": 1, "b": 2}
    assert untiered["loqo_single_score"] == pytest.approx(10 / 3)
    assert untiered["router_gap_loqo"] == 0.0


def test_router_tie_break_does_not_see_held_out_question():
    # a and b tie on q2, q3, so q1's pick must not depend on q1's own scores: a non-leaking
    # tie-break (mean on the other questions, then name) picks a on q1 (score 0).
    scores = {"a": {"q1": 0.0, "q2": 1.0, "q3": 1.0}, "b": {"q1": 1.0, "q2": 1.0, "q3": 1.0}}
    swapped = {"a": {"q1": 1.0, "q2": 1.0, "q3": 1.0}, "b": {"q1": 0.0, "q2": 1.0, "q3": 1.0}}
    tiers = {"q1": "L1", "q2": "L1", "q3": "L1"}
    # q2 (pool q1, q3) and q3 (pool q1, q2) go to whichever system has 1 on q1 -> 1 each.
    assert router_headroom(scores, tiers)["router_score"] == pytest.approx(2 / 3)
    assert router_headroom(swapped, tiers)["router_score"] == pytest.approx(1.0)


def test_router_with_one_tier_is_the_loqo_single_system():
    # With every question in one tier the router's pool is all other questions, exactly what
    # the held-out single system ranks by, so both make the same pick on every question.
    one_tier = dict.fromkeys(ROUTER_TIERS, "L1")
    out = router_headroom(ROUTER_SCORES, one_tier)
    # beta wins every leave-one-out (see test_router_headroom_by_hand): 37/6 either way
    assert out["router_score"] == pytest.approx(37 / 6)
    assert out["loqo_single_score"] == pytest.approx(37 / 6)
    assert out["router_gap_loqo"] == 0.0
    assert out["router_choices"] == {"beta": 6}
    # a fixture where the pick changes with the held-out question: (totals a 16, b 15)
    scores = {"a": {"q1": 9.0, "q2": 1.0, "q3": 6.0}, "b": {"q1": 2.0, "q2": 8.0, "q3": 5.0}}
    # q1: a 7 v b 13 -> b (2); q2: a 15 v b 7 -> a (1); q3: a 10 v b 10 -> a by name (6)
    for tiers in ({"q1": "L2", "q2": "L2", "q3": "L2"}, {}):
        out = router_headroom(scores, tiers)
        assert out["router_score"] == pytest.approx(9 / 3)
        assert out["loqo_single_score"] == pytest.approx(9 / 3)
        assert out["router_gap_loqo"] == 0.0
        assert out["router_choices"] == {"a": 2, "b": 1}
        # in-sample a (16/3) looks better than any pick made without seeing the question
        assert out["best_single_score"] == pytest.approx(16 / 3)


def test_router_one_question_uses_the_first_system_by_name():
    out = router_headroom({"zed": {"q1": 9.0}, "abe": {"q1": 3.0}}, {"q1": "L1"})
    assert out["best_single"] == "zed"
    assert out["router_score"] == pytest.approx(3.0)
    assert out["loqo_single_score"] == pytest.approx(3.0)
    assert out["router_gap_loqo"] == 0.0
    assert out["router_choices"] == {"abe": 1}


def test_router_errors():
    with pytest.raises(ValueError):
        router_headroom({"only": {"q1": 1.0}}, {"q1": "L1"})
    with pytest.raises(ValueError):
        router_headroom({}, {})
    with pytest.raises(ValueError):
        router_headroom({"a": {"q1": 1.0}, "b": {"q2": 2.0}}, {"q1": "L1", "q2": "L1"})
    with pytest.raises(ValueError):
        router_headroom({"a": {}, "b": {}}, {})
