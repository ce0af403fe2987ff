"""Rank units for every question with the dense index."""

import os

os.environ["OMP_NUM_THREADS"] = str(snakemake.threads)  # before torch: no oversubscription

from pathlib import Path  # noqa: E402

from srb.joblog import job_logging  # noqa: E402
from srb.rank import rank_dense  # noqa: E402

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"rank_dense[{wc.corpus}/{wc.system}]"):
    rank_dense(
        Path(snakemake.input.questions).parent,
        snakemake.input.index,
        snakemake.output.ranking,
        p.depth,
        p.dense,
        snakemake.threads,
    )
