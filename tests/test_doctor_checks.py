"""The doctor's six pre-run checks, on in-memory units and hand-made channel rankings.

No JVM, no FAISS, no files: every `hits` dict is {channel: {probe_id: [(unit_id, score), ...]}}
as `channel_hits` would return it, and every expected number is worked out by hand in the test.
Systems used: simple_rag (native top_k 10), section_rag (3), paper_rag (1).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from srb.doctor import Check, Doctor, Probe
from srb.units import Unit

P1, P2 = Probe("p1", "first probe"), Probe("p2", "second probe")


def make_units(paper: str, sizes: Mapping[str, int]) -> dict[str, Unit]:
    """Contiguous units of one paper, `sizes` in order: id -> length in characters."""
    units, start = {}, 0
    for i, (uid, n) in enumerate(sizes.items()):
        units[uid] = Unit(uid, paper, start, start + n, chr(ord("a") + i % 26) * n)
        start += n
    return units


def ranked(*ids: str) -> list[tuple[str, float]]:
    """A channel ranking in the given order, scores strictly decreasing."""
    return [(uid, 10.0 - 0.5 * i) for i, uid in enumerate(ids)]


def doctor(
    system: str,
    units: Mapping[str, Unit],
    hits: Mapping[str, Mapping[str, list[tuple[str, float]]]],
    *,
    probes: Sequence[Probe] = (P1, P2),
    modalities: Sequence[str] = ("bm25",),
    hybrid_channels: Sequence[str] = ("bm25", "dense"),
    budgets: Sequence[str] = ("native",),
    mode: str = "calibrated",
    tolerance: float = 0.25,
    rrf_k: int = 60,
    depth: int = 100,
) -> Doctor:
    return Doctor(
        system, probes, units, hits, modalities, hybrid_channels, budgets, mode, tolerance,
        rrf_k, depth,
    )  # fmt: skip


def assert_check(check: Check, number: int, name: str, ok: bool | None) -> None:
    assert (check.number, check.name, check.ok) == (number, name, ok), check.message


# ----------------------------------------------------------------- 1. probe_context

# u0..u11 of 100, 110, ..., 210 characters
GRADED = make_units("P", {f"u{i}": 100 + 10 * i for i in range(12)})


def test_probe_context_passes_and_restores_native_top_k() -> None:
    hits = {
        "bm25": {"p1": ranked(*(f"u{i}" for i in range(12))), "p2": ranked("u5")},
        "dense": {"p1": ranked("u11", "u10"), "p2": ranked("u0", "u1")},
    }
    check = doctor("simple_rag", GRADED, hits, modalities=("bm25", "dense")).probe_context()
    assert_check(check, 1, "probe_context", True)
    # simple_rag restores its native 10: u0..u9 = 10 * 100 + 10 * (0 + ... + 9) = 1450 chars
    assert check.seen == {"bm25": {"p1": 1450, "p2": 150}, "dense": {"p1": 210 + 200, "p2": 210}}
    assert check.message == "every probe restored context (min 150 chars)"


def test_probe_context_uses_the_systems_native_top_k() -> None:
    hits = {"bm25": {"p1": ranked("u0", "u1", "u2"), "p2": ranked("u3", "u4")}}
    check = doctor("paper_rag", GRADED, hits).probe_context()
    assert_check(check, 1, "probe_context", True)
    assert check.seen == {"bm25": {"p1": 100, "p2": 130}}  # top-1 only
    check = doctor("section_rag", GRADED, hits).probe_context()
    assert check.seen == {"bm25": {"p1": 100 + 110 + 120, "p2": 130 + 140}}


def test_probe_context_fails_naming_each_empty_modality_and_probe() -> None:
    hits = {
        # p2's only bm25 hit is an id the units file lacks, so it restores nothing either
        "bm25": {"p1": ranked("u0"), "p2": ranked("ghost")},
        "dense": {"p1": ranked("u1", "u2"), "p2": []},
    }
    check = doctor("simple_rag", GRADED, hits, modalities=("bm25", "dense")).probe_context()
    assert_check(check, 1, "probe_context", False)
    assert check.seen == {"bm25": {"p1": 100, "p2": 0}, "dense": {"p1": 110 + 120, "p2": 0}}
    assert "native top_k=10" in check.message
    assert check.message.endswith(": bm25:p2, dense:p2")
    assert "p1" not in check.message


def test_probe_context_fails_when_a_channel_is_missing_entirely() -> None:
    hits = {"bm25": {"p1": ranked("u0"), "p2": ranked("u1")}}  # no dense index searched
    check = doctor("paper_rag", GRADED, hits, modalities=("bm25", "dense")).probe_context()
    assert_check(check, 1, "probe_context", False)
    assert check.seen["dense"] == {"p1": 0, "p2": 0}
    assert "dense:p1, dense:p2" in check.message
    assert "native top_k=1" in check.message


def test_probe_context_hybrid_restores_the_fused_ranking() -> None:
    hits = {"bm25": {"p1": ranked("u0")}, "dense": {"p1": ranked("u1")}}
    check = doctor("simple_rag", GRADED, hits, probes=(P1,), modalities=("hybrid",)).probe_context()
    assert_check(check, 1, "probe_context", True)
    assert check.seen == {"hybrid": {"p1": 100 + 110}}


def test_probe_context_fails_with_no_probes() -> None:
    check = doctor("simple_rag", GRADED, {"bm25": {}}, probes=()).probe_context()
    assert_check(check, 1, "probe_context", False)
    assert check.message == "no probe queries configured"


# ------------------------------------------------------------------ 2. budget_match

# paper A: six 300-char units; paper B: six 500-char units
AB = {
    **make_units("A", {f"A{i}": 300 for i in range(6)}),
    **make_units("B", {f"B{i}": 500 for i in range(6)}),
}
AB_HITS = {
    "bm25": {"p1": ranked(*(f"A{i}" for i in range(6))), "p2": ranked(*(f"B{i}" for i in range(6)))}
}


def test_budget_match_calibrates_top_k_and_caps() -> None:
    # paper_rag native top-1: 300 and 500 chars over 2 units -> mean unit 400 chars.
    # 1K: top_k = floor(1000 / 400 + 0.5) = 3, cap 1.25 * 1000 = 1250:
    #     p1 3 * 300 = 900; p2 3 * 500 = 1500 cut to 1250 -> mean 1075, ratio 1.075
    # 2K: top_k = floor(5 + 0.5) = 5, cap 2500: p1 1500, p2 2500 -> mean 2000, ratio 1.0
    # per probe: 1K 900 / 1000 = 0.9 and 1250 / 1000 = 1.25; 2K 1500 / 2000 = 0.75 and
    # 2500 / 2000 = 1.25 -- the mean is on budget while each probe is well off it
    check = doctor("paper_rag", AB, AB_HITS, budgets=("native", "1K", "2K")).budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen == {
        "bm25/1K": {"requested": 1000, "achieved_mean": 1075.0, "ratio": 1.075,
                    "probe_ratio_min": 0.9, "probe_ratio_max": 1.25, "status": "ok"},
        "bm25/2K": {"requested": 2000, "achieved_mean": 2000.0, "ratio": 1.0,
                    "probe_ratio_min": 0.75, "probe_ratio_max": 1.25, "status": "ok"},
    }  # fmt: skip
    assert check.message == "every budget restores context and follows its knob within 25%"


def test_budget_match_marks_a_ranking_that_ran_out_without_failing() -> None:
    # 5K: top_k = floor(5000 / 400 + 0.5) = 13, but each ranking holds 6 units:
    #     p1 6 * 300 = 1800, p2 6 * 500 = 3000 -> mean 2400, ratio 0.48
    #     per probe 1800 / 5000 = 0.36, 3000 / 5000 = 0.6; both probes ran out of units,
    #     a property of the corpus (depth_limited), so reported but not fatal
    check = doctor("paper_rag", AB, AB_HITS, budgets=("1K", "5K")).budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen["bm25/5K"] == {"requested": 5000, "achieved_mean": 2400.0, "ratio": 0.48,
                                     "probe_ratio_min": 0.36, "probe_ratio_max": 0.6,
                                     "status": "depth_limited"}  # fmt: skip
    assert check.seen["bm25/1K"]["ratio"] == 1.075
    assert "bm25/5K: depth_limited: requested 5000, achieved mean 2400 (ratio 0.48)" in (
        check.message
    )
    assert "2 of 2 questions' rankings ran out" in check.message
    assert "bm25/1K" not in check.message


def test_budget_match_marks_a_tiny_ranking() -> None:
    units = make_units("P", {"only": 400})
    hits = {"bm25": {"p1": ranked("only")}}
    # mean unit 400; 2K: top_k = 5, but one 400-char unit is all there is -> ratio 0.2
    check = doctor("paper_rag", units, hits, probes=(P1,), budgets=("2K",)).budget_match()
    assert_check(check, 2, "budget_match", True)
    # one probe: its ratio is the mean's, so min and max agree
    assert check.seen == {"bm25/2K": {"requested": 2000, "achieved_mean": 400.0, "ratio": 0.2,
                                      "probe_ratio_min": 0.2, "probe_ratio_max": 0.2,
                                      "status": "depth_limited"}}  # fmt: skip
    assert "bm25/2K: depth_limited: requested 2000, achieved mean 400 (ratio 0.20)" in (
        check.message
    )


def test_budget_match_fails_when_the_knob_does_nothing() -> None:
    # an inert knob: one 1000-char unit ranked first, then 20 empty units, so raising top_k
    # adds nothing although the ranking is deep enough
    units = {**make_units("P", {"big": 1000}), **make_units("Q", {f"e{i}": 0 for i in range(20)})}
    hits = {"bm25": {"p1": ranked("big", *(f"e{i}" for i in range(20)))}}
    # calibrated: mean unit over the native top-1 = 1000; 1K top_k 1 -> 1000; 5K top_k 5 ->
    # 1000 + 4 * 0 = 1000: same achieved for a 5x larger budget, and no probe ran out
    check = doctor("paper_rag", units, hits, probes=(P1,), budgets=("1K", "5K")).budget_match()
    assert_check(check, 2, "budget_match", False)
    assert "bm25: the budget knob does nothing: 1000 requested -> 1000 achieved, 5000 " in (
        check.message
    )
    assert "5000 requested -> 1000 achieved" in check.message


def test_budget_match_reports_an_under_budget_probe_estimate_without_failing() -> None:
    # p1: 100, 100, 100, 2000, ...; p2: 2000, 100, 100, ... (paper_rag native top-1)
    # mean unit = (100 + 2000) / 2 = 1050; 2K: top_k = floor(2000 / 1050 + 0.5) = 2, cap 2500
    # p1 100 + 100 = 200; p2 2000 + 100 = 2100 -> mean 1150, ratio 0.575: under, nobody ran
    # short, and 2 x 1050 = 2100 is inside [1500, 2500] -> under_budget; the probe estimate is
    # reported, the real cells are gated after restoration
    units = {**make_units("S", {f"s{i}": 100 for i in range(6)}), **make_units("L", {"L0": 2000})}
    hits = {"bm25": {"p1": ranked("s0", "s1", "s2", "L0", "s3"),
                     "p2": ranked("L0", "s4", "s5", "s0")}}  # fmt: skip
    check = doctor("paper_rag", units, hits, budgets=("2K",)).budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen["bm25/2K"]["status"] == "under_budget"
    assert check.seen["bm25/2K"]["achieved_mean"] == 1150.0
    assert "every real cell is checked after restoration" in check.message
    assert "bm25/2K: under_budget: requested 2000, achieved mean 1150 (ratio 0.57)" in (
        check.message
    )


def test_budget_match_tolerance_decides() -> None:
    # 1K with tolerance 0.05: cap 1050 -> p1 900, p2 1050 -> mean 975, ratio 0.975: within 5%
    check = doctor("paper_rag", AB, AB_HITS, budgets=("1K",), tolerance=0.05).budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen["bm25/1K"] == {"requested": 1000, "achieved_mean": 975.0, "ratio": 0.975,
                                     "probe_ratio_min": 0.9, "probe_ratio_max": 1.05,
                                     "status": "ok"}  # fmt: skip
    assert check.message == "every budget restores context and follows its knob within 5%"
    # tolerance 0: cap 1000 -> p1 900, p2 1000 -> mean 950, ratio 0.95: off; no whole number of
    # 400-char units equals 1000 exactly, so the granularity explains it (reported, not fatal)
    check = doctor("paper_rag", AB, AB_HITS, budgets=("1K",), tolerance=0.0).budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen["bm25/1K"] == {"requested": 1000, "achieved_mean": 950.0, "ratio": 0.95,
                                     "probe_ratio_min": 0.9, "probe_ratio_max": 1.0,
                                     "status": "granularity_limited"}  # fmt: skip
    assert "off by more than 0%" in check.message
    assert "requested 1000, achieved mean 950 (ratio 0.95)" in check.message


def test_budget_match_passes_a_cell_cut_exactly_at_the_cap() -> None:
    units = make_units("C", {f"C{i}": 650 for i in range(3)})
    hits = {"bm25": {"p1": ranked("C0", "C1", "C2")}}
    # mean unit 650; 1K: top_k = floor(1000 / 650 + 0.5) = 2 -> 1300 cut to the cap 1250
    check = doctor("paper_rag", units, hits, probes=(P1,), budgets=("1K",)).budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen["bm25/1K"] == {"requested": 1000, "achieved_mean": 1250.0, "ratio": 1.25,
                                     "probe_ratio_min": 1.25, "probe_ratio_max": 1.25,
                                     "status": "ok"}  # fmt: skip


def test_budget_match_passes_a_cell_at_the_cap_for_any_tolerance() -> None:
    units = make_units("C", {f"C{i}": 600 for i in range(3)})
    hits = {"bm25": {"p1": ranked("C0", "C1", "C2")}}
    # mean unit 600; 1K: top_k = floor(1000 / 600 + 0.5) = 2 -> 1200 cut to the cap 1100
    check = doctor(
        "paper_rag", units, hits, probes=(P1,), budgets=("1K",), tolerance=0.1
    ).budget_match()
    assert check.seen["bm25/1K"] == {"requested": 1000, "achieved_mean": 1100.0, "ratio": 1.1,
                                     "probe_ratio_min": 1.1, "probe_ratio_max": 1.1,
                                     "status": "ok"}  # fmt: skip
    assert check.ok is True, check.message


def test_budget_match_reports_each_modality() -> None:
    hits = {**AB_HITS, "dense": {"p1": ranked("A0"), "p2": ranked("B0")}}
    # dense: mean unit 400, 1K top_k 3, but one unit each: 300 and 500 -> mean 400, ratio 0.4
    # (per probe 0.3 and 0.5); bm25 as in the first test: 900 and 1250 -> 0.9 and 1.25
    check = doctor(
        "paper_rag", AB, hits, modalities=("bm25", "dense"), budgets=("1K",)
    ).budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen == {
        "bm25/1K": {"requested": 1000, "achieved_mean": 1075.0, "ratio": 1.075,
                    "probe_ratio_min": 0.9, "probe_ratio_max": 1.25, "status": "ok"},
        "dense/1K": {"requested": 1000, "achieved_mean": 400.0, "ratio": 0.4,
                     "probe_ratio_min": 0.3, "probe_ratio_max": 0.5, "status": "depth_limited"},
    }  # fmt: skip
    assert "dense/1K: depth_limited: requested 1000, achieved mean 400 (ratio 0.40)" in (
        check.message
    )
    assert "bm25/1K" not in check.message


def test_budget_match_not_applicable_with_only_native_budgets() -> None:
    check = doctor("paper_rag", AB, AB_HITS, budgets=("native",)).budget_match()
    assert_check(check, 2, "budget_match", None)
    assert check.message.startswith("not applicable")
    assert "native" in check.message
    assert check.seen == {}


def test_budget_match_fails_when_native_probes_restore_nothing() -> None:
    hits = {"bm25": {"p1": [], "p2": ranked("ghost")}}
    check = doctor("paper_rag", AB, hits, budgets=("1K",)).budget_match()
    assert_check(check, 2, "budget_match", False)
    assert check.seen == {"bm25/1K": {"requested": 1000, "achieved_mean": 0, "ratio": 0.0}}
    assert "bm25/1K: native probes restored nothing to calibrate on" in check.message


def test_budget_match_pack_mode_fills_exactly() -> None:
    # pack 1K: p1 300 + 300 + 300 + 100 (cut) = 1000; p2 500 + 500 = 1000 -> ratio 1.0
    # pack 2K: p1 6 * 300 = 1800 (all there is); p2 4 * 500 = 2000 -> mean 1900, ratio 0.95
    #          per probe 1800 / 2000 = 0.9, 2000 / 2000 = 1.0
    check = doctor("paper_rag", AB, AB_HITS, budgets=("1K", "2K"), mode="pack").budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen == {
        "bm25/1K": {"requested": 1000, "achieved_mean": 1000.0, "ratio": 1.0,
                    "probe_ratio_min": 1.0, "probe_ratio_max": 1.0, "status": "ok"},
        "bm25/2K": {"requested": 2000, "achieved_mean": 1900.0, "ratio": 0.95,
                    "probe_ratio_min": 0.9, "probe_ratio_max": 1.0, "status": "ok"},
    }  # fmt: skip


def test_budget_match_pack_mode_underfill_is_depth_limited_and_empty_fails() -> None:
    # pack 5K: p1 1800, p2 3000 -> mean 2400, ratio 0.48 (per probe 0.36 and 0.6): every unit
    # of both rankings was packed whole, so the rankings ran out (reported, not fatal)
    check = doctor("paper_rag", AB, AB_HITS, budgets=("5K",), mode="pack").budget_match()
    assert_check(check, 2, "budget_match", True)
    assert check.seen == {"bm25/5K": {"requested": 5000, "achieved_mean": 2400.0, "ratio": 0.48,
                                      "probe_ratio_min": 0.36, "probe_ratio_max": 0.6,
                                      "status": "depth_limited"}}  # fmt: skip
    # pack needs no native calibration: an empty ranking is an empty cell, not "nothing to
    # calibrate"
    hits = {"bm25": {"p1": [], "p2": []}}
    check = doctor("paper_rag", AB, hits, budgets=("1K",), mode="pack").budget_match()
    assert_check(check, 2, "budget_match", False)
    assert "bm25/1K: empty: requested 1000, achieved mean 0 (ratio 0.00)" in check.message
    assert "calibrate" not in check.message


# ---------------------------------------------------------------------- 3. channels

LETTERS = make_units("P", dict.fromkeys("abcdefghij", 10))
# RRF (k=60), section_rag's native top-3 of the fused ranking:
# p1: a 1/61 + 1/62, d 1/61, b 1/62, c = e 1/63 -> a, d, b: from bm25 {a, b}, from dense {a, d}
# p2: f = h 1/61 (id breaks the tie), g = i 1/62 -> f, h, g: from bm25 {f, g}, from dense {h}
CH_HITS = {
    "bm25": {"p1": ranked("a", "b", "c"), "p2": ranked("f", "g")},
    "dense": {"p1": ranked("d", "a", "e"), "p2": ranked("h", "i", "j")},
}


def test_channels_pass_and_count_hybrid_contributions() -> None:
    modalities = ("bm25", "dense", "hybrid")
    check = doctor("section_rag", LETTERS, CH_HITS, modalities=modalities).channels()
    assert_check(check, 3, "channels", True)
    assert check.seen == {
        "hybrid_channels": ["bm25", "dense"],
        "bm25_hits": 3 + 2,
        "bm25_unknown_unit_ids": 0,
        "dense_hits": 3 + 3,
        "dense_unknown_unit_ids": 0,
        "hybrid_units_from": {"bm25": 2 + 2, "dense": 2 + 1},
    }
    assert check.message == "every channel returns hits and feeds hybrid"


def test_channels_hybrid_counts_follow_native_top_k() -> None:
    # paper_rag fuses the same rankings but keeps the top-1: p1 a (both), p2 f (bm25 only)
    check = doctor("paper_rag", LETTERS, CH_HITS, modalities=("hybrid",)).channels()
    assert_check(check, 3, "channels", True)
    assert check.seen["hybrid_units_from"] == {"bm25": 1 + 1, "dense": 1 + 0}


def test_channels_fail_when_hybrid_lacks_bm25() -> None:
    check = doctor(
        "section_rag", LETTERS, CH_HITS, modalities=("hybrid",), hybrid_channels=("dense",)
    ).channels()
    assert_check(check, 3, "channels", False)
    assert "bm25 channel disabled" in check.message
    assert "retrieval.hybrid_channels = ['dense']" in check.message
    assert check.seen["hybrid_channels"] == ["dense"]
    # hybrid is dense alone: top-3 p1 d, a, e and p2 h, i, j all from dense; bm25 is not counted
    assert check.seen["hybrid_units_from"] == {"bm25": 0, "dense": 3 + 3}
    assert "contributed 0" not in check.message  # a disabled channel is reported once, as such


def test_channels_fail_when_a_channel_returns_no_hits() -> None:
    hits = {"bm25": {"p1": [], "p2": []}, "dense": CH_HITS["dense"]}
    check = doctor("section_rag", LETTERS, hits, modalities=("bm25", "hybrid")).channels()
    assert_check(check, 3, "channels", False)
    assert check.seen["bm25_hits"] == 0
    assert check.seen["dense_hits"] == 6
    assert "the bm25 channel returned 0 hits on 2 probes" in check.message
    # hybrid is then dense alone: 3 + 3 of its top-3 units from dense, none from bm25
    assert check.seen["hybrid_units_from"] == {"bm25": 0, "dense": 6}
    assert "the bm25 channel contributed 0 of the hybrid top-3 units" in check.message
    assert "dense channel" not in check.message


def test_channels_fail_when_a_needed_channel_was_not_searched() -> None:
    hits = {"bm25": CH_HITS["bm25"]}
    check = doctor("section_rag", LETTERS, hits, modalities=("dense",)).channels()
    assert_check(check, 3, "channels", False)
    assert check.seen == {"hybrid_channels": ["bm25", "dense"], "dense_hits": 0,
                          "dense_unknown_unit_ids": 0}  # fmt: skip
    assert check.message == "the dense channel returned 0 hits on 2 probes"


def test_channels_fail_on_a_stale_index() -> None:
    hits = {
        "bm25": {"p1": ranked("a", "old-1", "b"), "p2": ranked("old-2", "f")},
        "dense": CH_HITS["dense"],
    }
    check = doctor("section_rag", LETTERS, hits, modalities=("bm25", "dense")).channels()
    assert_check(check, 3, "channels", False)
    assert check.seen["bm25_hits"] == 5
    assert check.seen["bm25_unknown_unit_ids"] == 2
    assert check.seen["dense_unknown_unit_ids"] == 0
    assert check.message == (
        "the bm25 channel returned 2 unit ids the units file lacks (a stale index)"
    )
    assert "hybrid_units_from" not in check.seen  # no hybrid modality configured


# -------------------------------------------------------------------- 4. unit_count


def test_unit_count_passes_when_everything_agrees() -> None:
    stores = {"bm25_index_units": 42, "dense_index_units": 42}
    check = Doctor.unit_count({"n_units": 42}, 42, stores)
    assert_check(check, 4, "unit_count", True)
    assert check.seen == {
        "ingest_log_units": 42,
        "units_file": 42,
        "bm25_index_units": 42,
        "dense_index_units": 42,
    }
    assert check.message == "42 units everywhere"


def test_unit_count_passes_without_stores() -> None:
    assert Doctor.unit_count({"n_units": 7}, 7, {}).ok is True


def test_unit_count_names_the_mismatching_store() -> None:
    stores = {"bm25_index_units": 40, "dense_index_units": 42}
    check = Doctor.unit_count({"n_units": 42}, 42, stores)
    assert_check(check, 4, "unit_count", False)
    assert check.message == "ingest log says 42 units; bm25_index_units 40"
    assert check.seen["bm25_index_units"] == 40


def test_unit_count_names_every_mismatch() -> None:
    stores = {"bm25_index_units": 40, "dense_index_units": 39}
    check = Doctor.unit_count({"n_units": 42}, 41, stores)
    assert_check(check, 4, "unit_count", False)
    assert check.message == (
        "ingest log says 42 units; units_file 41, bm25_index_units 40, dense_index_units 39"
    )


def test_unit_count_fails_without_n_units_in_the_ingest_log() -> None:
    check = Doctor.unit_count({"n_papers": 3}, 42, {"bm25_index_units": 42})
    assert_check(check, 4, "unit_count", False)
    assert check.message == "the ingest log has no n_units"
    assert check.seen == {"ingest_log_units": None, "units_file": 42, "bm25_index_units": 42}


# ---------------------------------------------------------------- 5. document_count

THREE_PAPERS = {
    **make_units("P1", {"P1#0": 5, "P1#1": 5}),
    **make_units("P2", {"P2#0": 5}),
    **make_units("P3", {"P3#0": 5, "P3#1": 5, "P3#2": 5}),
}


def test_document_count_passes_against_the_manifest() -> None:
    check = Doctor.document_count({"n_papers": 3}, THREE_PAPERS)
    assert_check(check, 5, "document_count", True)
    assert check.seen == {"manifest_papers": 3, "papers_with_units": 3}
    assert check.message == "3 papers, as in the manifest"


@pytest.mark.parametrize("n_papers", [2, 4, None])
def test_document_count_fails_off_the_manifest(n_papers: Any) -> None:
    manifest = {} if n_papers is None else {"n_papers": n_papers}
    check = Doctor.document_count(manifest, THREE_PAPERS)
    assert_check(check, 5, "document_count", False)
    assert check.seen == {"manifest_papers": n_papers, "papers_with_units": 3}
    assert check.message == f"the manifest lists {n_papers} papers, the units come from 3"


# ------------------------------------------------------------------ 6. top_k_growth

HUNDREDS = make_units("P", {f"h{i}": 100 for i in range(12)})
TEN = [f"h{i}" for i in range(10)]
SHORT_10 = "ranking holds <= 10 units"


def test_top_k_growth_fails_when_the_ranking_holds_only_native_top_k() -> None:
    # ten units for simple_rag's native top-10: doubling top_k cannot add anything, so the
    # probe is not measured at all
    hits = {"bm25": {"p1": ranked(*TEN)}}
    check = doctor("simple_rag", HUNDREDS, hits, probes=(P1,)).top_k_growth()
    assert_check(check, 6, "top_k_growth", False)
    assert check.seen == {"bm25": {"p1": SHORT_10}}
    assert check.message == (
        "raising top_k did not grow the context: bm25: no probe ranking holds more than 10 units"
    )


def test_top_k_growth_ignores_ids_the_units_lack() -> None:
    # twelve ids, but two are stale: the ten known units are not more than top_k
    hits = {"bm25": {"p1": ranked(*TEN, "gone-1", "gone-2")}}
    check = doctor("simple_rag", HUNDREDS, hits, probes=(P1,)).top_k_growth()
    assert_check(check, 6, "top_k_growth", False)
    assert check.seen == {"bm25": {"p1": SHORT_10}}
    assert check.message.endswith("bm25: no probe ranking holds more than 10 units")


def test_top_k_growth_passes_when_the_ranking_is_deeper() -> None:
    hits = {
        "bm25": {"p1": ranked(*TEN, "h10", "h11"), "p2": ranked("h0")},
        "dense": {"p1": ranked(*reversed(TEN), "h11")},  # no p2 ranking at all
    }
    # p1: top_10 = 10 * 100; top_20 takes all 12 (bm25) or 11 (dense) units.
    # p2 holds one unit (bm25) or none (dense): reported, not measured.
    check = doctor("simple_rag", HUNDREDS, hits, modalities=("bm25", "dense")).top_k_growth()
    assert_check(check, 6, "top_k_growth", True)
    assert check.seen == {
        "bm25": {"p1": {"top_10": 1000, "top_20": 1200}, "p2": SHORT_10},
        "dense": {"p1": {"top_10": 1000, "top_20": 1100}, "p2": SHORT_10},
    }
    assert check.message == "top_20 restores more than top_10"


def test_top_k_growth_fails_for_the_flat_modality_only() -> None:
    hits = {"bm25": {"p1": ranked("h0", "h1")}, "dense": {"p1": ranked("h0")}}
    check = doctor(
        "paper_rag", HUNDREDS, hits, probes=(P1,), modalities=("bm25", "dense")
    ).top_k_growth()
    assert_check(check, 6, "top_k_growth", False)
    # paper_rag's native top-1: bm25 holds 2 units (100 -> 200 chars), dense only 1
    assert check.seen == {
        "bm25": {"p1": {"top_1": 100, "top_2": 200}},
        "dense": {"p1": "ranking holds <= 1 units"},
    }
    assert check.message == (
        "raising top_k did not grow the context: dense: no probe ranking holds more than 1 units"
    )


def test_top_k_growth_passes_on_a_later_probe_when_the_first_is_short() -> None:
    # p1 is a rare-term probe with two hits; p2's ranking is deep enough and grows
    hits = {"bm25": {"p1": ranked("h0", "h1"), "p2": ranked(*TEN, "h10")}}
    check = doctor("simple_rag", HUNDREDS, hits).top_k_growth()
    assert_check(check, 6, "top_k_growth", True)
    assert check.seen == {"bm25": {"p1": SHORT_10, "p2": {"top_10": 1000, "top_20": 1100}}}
    assert check.message == "top_20 restores more than top_10"


def test_top_k_growth_fails_when_no_probe_qualifies() -> None:
    # section_rag's native top-3: p1 holds 3 units, p2 2 (a third id is stale), p3 none
    hits = {"dense": {"p1": ranked("h0", "h1", "h2"), "p2": ranked("h3", "stale", "h4")}}
    probes = (P1, P2, Probe("p3", "third probe"))
    check = doctor(
        "section_rag", HUNDREDS, hits, probes=probes, modalities=("dense",)
    ).top_k_growth()
    assert_check(check, 6, "top_k_growth", False)
    short = "ranking holds <= 3 units"
    assert check.seen == {"dense": {"p1": short, "p2": short, "p3": short}}
    assert check.message == (
        "raising top_k did not grow the context: dense: no probe ranking holds more than 3 units"
    )


def test_top_k_growth_reports_the_first_measured_probe_when_none_grows() -> None:
    # x, y, z are empty units, so a deeper top_k adds units but no characters; p1 is too short
    # to measure, so the message quotes p2 (100 chars), the first measured probe, not p3 (200)
    units = {**make_units("P", {"h0": 100, "h1": 200}), **make_units("Q", dict.fromkeys("xyz", 0))}
    hits = {"bm25": {"p1": ranked("h0"), "p2": ranked("h0", "x", "y"), "p3": ranked("h1", "z")}}
    probes = (P1, P2, Probe("p3", "third probe"))
    check = doctor("paper_rag", units, hits, probes=probes).top_k_growth()
    assert_check(check, 6, "top_k_growth", False)
    assert check.seen == {
        "bm25": {
            "p1": "ranking holds <= 1 units",
            "p2": {"top_1": 100, "top_2": 100},
            "p3": {"top_1": 200, "top_2": 200},
        }
    }
    assert check.message == (
        "raising top_k did not grow the context: bm25: top_1 100 chars, top_2 100 chars"
    )


def test_top_k_growth_fails_with_no_probes() -> None:
    check = doctor("simple_rag", HUNDREDS, {}, probes=()).top_k_growth()
    assert_check(check, 6, "top_k_growth", False)
    assert check.message == "no probe queries configured"
