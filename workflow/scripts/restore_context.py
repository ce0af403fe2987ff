"""Restore each question's context under every budget of one system/modality."""

from srb.joblog import job_logging
from srb.rank import restore_cells

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"restore[{wc.corpus}/{wc.system}/{wc.modality}]"):
    restore_cells(
        snakemake.input.ranking,
        snakemake.input.units,
        wc.system,
        p.budgets,
        p.mode,
        snakemake.output.cells,
        snakemake.output.verdicts,
        p.tolerance,
        p.gate,
        where=f"corpus {wc.corpus}, system {wc.system}, modality {wc.modality}",
    )
