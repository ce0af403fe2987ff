"""Thread counts Snakemake exports to a job, made valid for jobs that are model-server clients.

Why this exists: jobs that mostly wait on a model server (ingest, store restore, synthesis, LLM
judging) declare `threads: 0`, so they hold none of the machine's cores and the retrieval jobs
run beside them (on 2 cores the four ingests held both job slots for the whole ingest phase and
the unit systems' retrieval ran only after it). Snakemake then exports `OMP_NUM_THREADS=0` and
the same for MKL/OpenBLAS/..., which libgomp rejects ("Invalid value"), so the package replaces
a zero with one thread before torch or numpy is imported (`srb/__init__.py`).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

#: Thread counts Snakemake exports to a job besides OMP_NUM_THREADS (its `threads`).
JOB_THREAD_VARS = (
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "GOTO_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)

#: What a `threads: 0` job computes on: its own work is light (query encoding, JSON, a JVM).
CLIENT_JOB_THREADS = 1


def normalise_thread_env(environ: MutableMapping[str, str] | None = None) -> list[str]:
    """Replace a zero thread count (a `threads: 0` job) with CLIENT_JOB_THREADS in place;
    returns the names it changed. Any other value, set or unset, is left as it is."""
    env = os.environ if environ is None else environ
    changed = []
    for var in ("OMP_NUM_THREADS", *JOB_THREAD_VARS):
        if env.get(var, "").strip() == "0":
            env[var] = str(CLIENT_JOB_THREADS)
            changed.append(var)
    return changed
