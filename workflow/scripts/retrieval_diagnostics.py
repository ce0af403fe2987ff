"""LLM-free evidence recall and source-paper recall for every retrieval cell of a corpus."""

from pathlib import Path

from srb.diagnostics import retrieval_table
from srb.joblog import job_logging

wc = snakemake.wildcards
with job_logging(snakemake.log[0], f"diagnostics[{wc.corpus}]"):
    cells = [(*g, f) for g, f in zip(snakemake.params.grid, snakemake.input.cells, strict=True)]
    retrieval_table(
        wc.corpus,
        Path(snakemake.input.questions).parent,
        cells,
        snakemake.output.csv,
        snakemake.output.md,
        verdict_files=snakemake.input.verdicts,
        tolerance=snakemake.params.tolerance,
        gate=snakemake.params.gate,
        doctor_reports=dict(zip(snakemake.params.systems, snakemake.input.doctor, strict=True)),
    )
