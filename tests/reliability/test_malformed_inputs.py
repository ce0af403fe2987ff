"""Every case of the malformed-input catalogue, through the entry point a user would hit: it
stops non-zero, names the file, the record and the field, and leaves no output Snakemake would
take as complete."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.catalogue import CASES, Case, run_case

pytestmark = pytest.mark.integration


def test_the_catalogue_covers_every_area_with_at_least_25_cases() -> None:
    assert len(CASES) >= 25
    assert len({c.name for c in CASES}) == len(CASES)
    assert {c.area for c in CASES} >= {
        "corpus",
        "config",
        "model source",
        "published loader",
        "hf loader",
        "votes CSV",
        "target",
    }


@pytest.mark.parametrize("case", CASES, ids=[c.name.replace(" ", "-") for c in CASES])
def test_a_malformed_input_stops_with_a_located_message(case: Case, tmp_path: Path) -> None:
    outcome = run_case(case, tmp_path)
    assert outcome.returncode != 0, f"{case.name}: exit 0"
    assert not outcome.missing, f"{case.name}: message lacks {outcome.missing}: {outcome.message}"
    assert not outcome.left, f"{case.name}: outputs left behind: {outcome.left}"
