"""kill -9 of `snakemake` at a seeded point of the tiny corpus's whole run, then the README's
resume (`python -m srb resume` + `snakemake`): a truthful exit status, outputs equal to an
uninterrupted run's, no completed model call repeated, an intact call cache and no orphans;
after Ctrl-C (SIGINT to the process group) the run must also have stopped on its own.
`make reliability-kill` runs the full 10-point sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.reliability.kill_sweep import (
    PHASES,
    STORE_PHASES,
    choose_points,
    outputs,
    selected_phases,
    sweep,
)

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


STORE_LOG = """rule ingest_store:
rule ingest_store:
rule doctor_store:
localrule restore_store:
rule sequential_theoria_observe:
rule synthesize:
rule judge:
"""


def test_store_points_fall_in_the_store_phases_and_wait_into_an_ingest() -> None:
    points = choose_points(20, seed=1, reference_log=STORE_LOG, phases=STORE_PHASES)
    assert {p.phase for p in points} == set(STORE_PHASES)
    assert all(p.rule in STORE_PHASES[p.phase] for p in points)
    ingest = [p.delay_s for p in points if p.phase == "ingest"]
    # an ingest job imports its library first: its points may wait up to 30 s, the others 2 s
    assert max(ingest) > 2 and all(0 <= d <= 30 for d in ingest)
    assert all(p.delay_s <= 2 for p in points if p.phase in ("synthesis", "judging"))
    assert {p.occurrence for p in points if p.phase == "ingest"} <= {1, 2}


def _write_run(root: Path, wall: float, items: int) -> dict[str, str]:
    d = root / "results/tiny"
    (d / "units").mkdir(parents=True)
    (d / "diagnostics").mkdir()
    (d / "store/mem0").mkdir(parents=True)
    (d / "store/mem0/segment.bin").write_bytes(str(wall).encode())  # the store's own bytes
    ingest = {"items": items, "wall_s": wall, "per_paper": [{"id": "P1", "seconds": wall}],
              "model_calls": {"encoded_texts": int(wall), "llm_requests": 4}}  # fmt: skip
    (d / "units/mem0.ingest.json").write_text(json.dumps(ingest))
    (d / "diagnostics/cost.csv").write_text(f"system,items,wall_s\nmem0,{items},{wall}\n")
    (d / "diagnostics/cost.md").write_text(
        f"# Cost\n\n| system | items | wall_s |\n|---|---|---|\n| mem0 | {items} | {wall} |\n"
    )
    return outputs(root)


def test_outputs_compare_results_but_not_run_fields_or_store_bytes(tmp_path) -> None:
    a = _write_run(tmp_path / "a", wall=73.6, items=2)
    b = _write_run(tmp_path / "b", wall=2.5, items=2)
    c = _write_run(tmp_path / "c", wall=2.5, items=3)
    assert a == b  # only wall clocks, cache misses and the store's own bytes differ
    assert "results/tiny/store/mem0/segment.bin" not in a
    assert {k for k in a if a[k] != c[k]} == {
        "results/tiny/units/mem0.ingest.json",
        "results/tiny/diagnostics/cost.csv",
        "results/tiny/diagnostics/cost.md",
    }


def test_points_cycle_through_the_signals_asked_for() -> None:
    points = choose_points(5, seed=3, reference_log=LOG, signals=("KILL", "INT", "TERM"))
    assert [p.signal for p in points] == ["KILL", "INT", "TERM", "KILL", "INT"]
    # the phases and rules are the seed's, whatever the signals
    assert [(p.phase, p.rule) for p in points] == [
        (p.phase, p.rule) for p in choose_points(5, seed=3, reference_log=LOG)
    ]
    with pytest.raises(ValueError, match="HUP"):
        choose_points(2, seed=3, reference_log=LOG, signals=("HUP",))


def test_points_fall_only_in_the_phases_asked_for() -> None:
    log = "rule ingest_store:\nrule ingest_store:\nrule sequential_theoria:\nrule synthesize:\n"
    wanted = selected_phases("stores", ("sequential", "ingest"))
    assert list(wanted) == ["ingest", "sequential"]  # the grid's order, not the caller's
    points = choose_points(6, seed=1, reference_log=log, phases=wanted)
    assert {p.phase for p in points} == {"ingest", "sequential"}
    assert selected_phases("stores") == STORE_PHASES


def test_a_phase_the_grid_lacks_is_refused_before_any_run(tmp_path) -> None:
    with pytest.raises(ValueError, match="grid 'stores' has no phase 'indexing'"):
        sweep(tmp_path, 1, grid_name="stores", phases=("ingest", "indexing"))
    assert list(tmp_path.iterdir()) == []  # no reference run, no tape server started


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
