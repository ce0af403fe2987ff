"""srb.job_threads: a `threads: 0` job (a model-server client) gets OMP_NUM_THREADS=0 from
Snakemake; the package makes it one thread before torch reads it."""

from __future__ import annotations

import os
import subprocess
import sys

from srb.job_threads import JOB_THREAD_VARS, normalise_thread_env


def test_zero_thread_counts_become_one_and_every_other_value_stays() -> None:
    env = {"OMP_NUM_THREADS": "0", "MKL_NUM_THREADS": "0", "OPENBLAS_NUM_THREADS": "4"}
    changed = normalise_thread_env(env)
    assert changed == ["OMP_NUM_THREADS", "MKL_NUM_THREADS"]
    assert env == {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "4"}


def test_unset_counts_stay_unset() -> None:
    env: dict[str, str] = {"PATH": "/bin"}
    assert normalise_thread_env(env) == []
    assert env == {"PATH": "/bin"}


def test_a_threads_0_job_imports_torch_on_one_thread_without_an_openmp_error() -> None:
    """What Snakemake exports to a threads: 0 job, then `import srb` first, as every job script
    does: libgomp warned "Invalid value for environment variable OMP_NUM_THREADS" without it."""
    env = {**os.environ, "OMP_NUM_THREADS": "0", **dict.fromkeys(JOB_THREAD_VARS, "0")}
    code = "import srb, os, torch; print(torch.get_num_threads(), os.environ['MKL_NUM_THREADS'])"
    done = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1", "1"]
    assert "Invalid value" not in done.stderr


def test_srb_is_a_regular_package() -> None:
    """A namespace `srb` (an editable install from before srb/__init__.py) would skip the
    normalisation: `make setup` reinstalls when pyproject.toml changes."""
    import srb

    assert srb.__file__ and srb.__file__.endswith("__init__.py")
