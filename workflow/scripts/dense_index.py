"""Encode a system's units and build the FAISS index."""

import os

os.environ["OMP_NUM_THREADS"] = str(snakemake.threads)  # before torch: no oversubscription

from srb.ingest import build_dense  # noqa: E402
from srb.joblog import job_logging  # noqa: E402

wc = snakemake.wildcards
with job_logging(snakemake.log[0], f"dense_index[{wc.corpus}/{wc.system}]"):
    build_dense(
        snakemake.input.units, snakemake.output.index, snakemake.params.dense, snakemake.threads
    )
