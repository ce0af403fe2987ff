"""The ingest-cost table of every store system on one corpus (CSV + Markdown)."""

from srb.ingest_cost import ingest_cost_table
from srb.joblog import job_logging

with job_logging(snakemake.log[0], f"ingest_cost[{snakemake.wildcards.corpus}]"):
    ingest_cost_table(
        snakemake.wildcards.corpus,
        snakemake.input.logs,
        snakemake.output.csv,
        snakemake.output.md,
    )
