"""Pre-run doctor for one corpus x system: six checks, a JSON report, a named failure."""

from pathlib import Path

from srb.doctor import run_doctor
from srb.joblog import job_logging

wc, inp = snakemake.wildcards, snakemake.input
with job_logging(snakemake.log[0], f"doctor[{wc.corpus}/{wc.system}]"):
    run_doctor(
        wc.corpus,
        wc.system,
        Path(inp.manifest).parent,
        inp.units,
        inp.ingest_log,
        inp.bm25 or None,
        inp.dense or None,
        snakemake.params.settings,
        snakemake.output.report,
    )
