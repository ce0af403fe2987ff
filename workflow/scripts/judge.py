"""Judge one cell's answers with the rubric judge or an LLM judge."""

from pathlib import Path

from srb.joblog import job_logging
from srb.judge import judge_cell
from srb.llm.session import open_client

wc, llm = snakemake.wildcards, snakemake.params.llm
name = f"judge[{wc.corpus}/{wc.synth}/{wc.judge}/{wc.system}/{wc.modality}/{wc.budget}]"
with job_logging(snakemake.log[0], name):
    if wc.judge == "rubric":
        judge_cell(
            snakemake.input.answers,
            snakemake.input.cell,
            Path(snakemake.input.questions).parent,
            "rubric",
            snakemake.output.judgments,
        )
    else:
        judge_cell(
            snakemake.input.answers,
            snakemake.input.cell,
            Path(snakemake.input.questions).parent,
            wc.judge,
            snakemake.output.judgments,
            client=open_client(llm, wc.judge)[0],
            template_file=llm["prompts"]["judge"],
            retries=llm["judge_retries"],
            max_tokens=llm["judge_max_tokens"],
            max_context_chars=llm["judge_context_chars"],
        )
