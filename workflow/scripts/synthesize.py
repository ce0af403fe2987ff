"""Answer every question of one retrieval cell with the fixed synthesizer (cache first)."""

from pathlib import Path

from srb.joblog import job_logging
from srb.llm.session import open_client
from srb.synthesize import ContextFitter, synthesize_cell

wc, llm = snakemake.wildcards, snakemake.params.llm
name = f"synthesize[{wc.corpus}/{wc.synth}/{wc.system}/{wc.modality}/{wc.budget}]"
with job_logging(snakemake.log[0], name):
    client, model_dir = open_client(llm, wc.synth)
    spec = llm["models"][wc.synth]
    fitter = ContextFitter(model_dir, spec["max_model_len"], llm["max_answer_tokens"])
    templates = {"context": llm["prompts"]["synthesize"], "base": llm["prompts"]["synthesize_base"]}
    synthesize_cell(
        snakemake.input.cell,
        Path(snakemake.input.questions).parent,
        client,
        templates,
        fitter,
        llm["max_answer_tokens"],
        llm["questions"],
        snakemake.output.answers,
        cell_questions=snakemake.params.cell_questions,
    )
