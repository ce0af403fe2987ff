"""Restore each question's context under one budget: one retrieval cell."""

from srb.joblog import job_logging
from srb.rank import restore_cell

wc = snakemake.wildcards
with job_logging(snakemake.log[0], f"restore[{wc.corpus}/{wc.system}/{wc.modality}/{wc.budget}]"):
    restore_cell(
        snakemake.input.ranking,
        snakemake.input.units,
        wc.system,
        wc.budget,
        snakemake.params.mode,
        snakemake.output.cell,
        snakemake.input.native or None,
        snakemake.params.tolerance,
        verdict_out=snakemake.output.verdict,
        gate=snakemake.params.gate,
        where=f"corpus {wc.corpus}, system {wc.system}, modality {wc.modality}, budget {wc.budget}",
    )
