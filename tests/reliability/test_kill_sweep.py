"""kill -9 of `snakemake` at a seeded point of the tiny corpus's whole run, then the README's
resume (`python -m srb resume` + `snakemake`): a truthful exit status, outputs equal to an
uninterrupted run's, no completed model call repeated, an intact call cache and no orphans;
after Ctrl-C (SIGINT to the process group) the run must also have stopped on its own.
`make reliability-kill` runs the full 10-point sweep."""

from __future__ import annotations

import pytest

from tests.reliability.kill_sweep import PHASES, choose_points, sweep

pytestmark = pytest.mark.integration

LOG = """rule prepare_corpus:
rule build_units:
rule build_units:
localrule rank:
rule synthesize:
rule judge:
rule leaderboard:
"""


def test_points_cycle_through_every_logged_phase_with_seeded_choices() -> None:
    points = choose_points(10, seed=3, reference_log=LOG)
    phases = [p.phase for p in points]
    logged = {"corpus", "indexing", "ranking", "synthesis", "judging", "analysis"}
    assert set(phases[:6]) == logged  # each phase once before any repeats
    assert all(p.rule in PHASES[p.phase] for p in points)
    assert all(1 <= p.occurrence <= LOG.count(f"rule {p.rule}:") for p in points)
    assert all(0 <= p.delay_s <= 2 for p in points)
    assert choose_points(10, seed=3, reference_log=LOG) == points  # seeded: the same again
    assert choose_points(10, seed=4, reference_log=LOG) != points
    assert {p.signal for p in points} == {"KILL"}


def test_points_cycle_through_the_signals_asked_for() -> None:
    points = choose_points(5, seed=3, reference_log=LOG, signals=("KILL", "INT", "TERM"))
    assert [p.signal for p in points] == ["KILL", "INT", "TERM", "KILL", "INT"]
    # the phases and rules are the seed's, whatever the signals
    assert [(p.phase, p.rule) for p in points] == [
        (p.phase, p.rule) for p in choose_points(5, seed=3, reference_log=LOG)
    ]
    with pytest.raises(ValueError, match="HUP"):
        choose_points(2, seed=3, reference_log=LOG, signals=("HUP",))


def test_a_kill_and_a_ctrl_c_point_resume_identically(tmp_path) -> None:
    result = sweep(tmp_path, n=2, seed=0, signals=("KILL", "INT"))
    assert [p.signal for p in result.points] == ["KILL", "INT"]
    for p in result.points:
        assert p.killed, f"point {p.index}: the run ended before the kill"
        assert not p.hung, f"point {p.index}: still running {p.stop_s:.0f} s after SIG{p.signal}"
        assert p.truthful, f"point {p.index}: exit {p.resume_returncode}, missing {p.missing}"
        assert p.identical, f"point {p.index}: differ {p.differing}, missing {p.missing}"
        assert p.repeated_calls == 0
        assert not p.cache_corrupt
        assert not p.orphans, p.orphans
