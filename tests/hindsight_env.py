"""Hindsight's own venv, as the workflow's rule system_env builds it (reused while
envs/hindsight.txt holds): its Python and its PostgreSQL binaries, for tests that need them."""

from __future__ import annotations

from pathlib import Path

from srb.system_env import ensure_env

REPO = Path(__file__).resolve().parents[1]


def hindsight_venv() -> Path:
    record = ensure_env("hindsight", REPO / "envs/hindsight.txt", REPO / "cache/envs/hindsight")
    return Path(record["venv"])
