"""Contexts for the LLM-only systems (base, direct_read)."""

from pathlib import Path

from srb.joblog import job_logging
from srb.retrieve import parse_budget
from srb.synthesize import llm_only_cell

wc = snakemake.wildcards
with job_logging(snakemake.log[0], f"llm_only_context[{wc.corpus}/{wc.system}/{wc.budget}]"):
    llm_only_cell(
        wc.system,
        Path(snakemake.input.questions).parent,
        parse_budget(wc.budget),
        snakemake.params.seed,
        snakemake.output.cell,
    )
