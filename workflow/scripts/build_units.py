"""Cut a corpus into the system's ingestion units."""

from pathlib import Path

from srb.ingest import build_units
from srb.joblog import job_logging

wc = snakemake.wildcards
with job_logging(snakemake.log[0], f"build_units[{wc.corpus}/{wc.system}]"):
    build_units(
        Path(snakemake.input.papers).parent,
        wc.system,
        snakemake.output.units,
        snakemake.output.ingest_log,
    )
