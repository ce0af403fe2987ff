"""Run the SciFact retrieval anchor and grade it against the expected values."""

import os

os.environ["OMP_NUM_THREADS"] = str(snakemake.threads)  # before torch: no oversubscription

from srb.anchor import format_rows, run_anchor, write_anchor_table  # noqa: E402
from srb.joblog import job_logging  # noqa: E402

with job_logging(snakemake.log[0], "scifact_anchor") as log:
    rows = run_anchor(
        snakemake.params.data, snakemake.input.expected, snakemake.params.dense, snakemake.threads
    )
    write_anchor_table(rows, snakemake.output.table, snakemake.output.md)
    log.info("\n%s", format_rows(rows))
