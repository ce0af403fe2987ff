"""The workflow as the catalog's workflows are checked: snakemake --lint, snakefmt, ruff."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)


def test_snakemake_lint_is_clean():
    proc = run(sys.executable, "-m", "snakemake", "--lint")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations, your workflow is in a good condition!" in proc.stdout + proc.stderr


def test_snakefmt_check():
    proc = run(str(BIN / "snakefmt"), "--check", "Snakefile", "rules")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ruff_check_and_format():
    lint = run(str(BIN / "ruff"), "check", "srb", "workflow", "tests", "bench")
    assert lint.returncode == 0, lint.stdout
    fmt = run(str(BIN / "ruff"), "format", "--check", "srb", "workflow", "tests", "bench")
    assert fmt.returncode == 0, fmt.stdout
