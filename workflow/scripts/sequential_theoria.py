"""Theoria's sequential evaluation, answer side (srb.theoria.sequential.answer_sequentially):
what each batch retrieved, answered by the fixed synthesizer and scored; table and figure."""

import json
from pathlib import Path

from srb.atomic import write_json
from srb.data.canonical import load_canonical
from srb.joblog import job_logging
from srb.llm.session import open_client
from srb.store import memory_slice
from srb.synthesize import ContextFitter, template_hash
from srb.tables import write_table
from srb.theoria.sequential import Answerer, answer_sequentially, sequential_figure

wc, p, inp, out = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output
with job_logging(snakemake.log[0], f"sequential_theoria[{wc.corpus}/{wc.synth}]"):
    _, questions = memory_slice(load_canonical(Path(inp.questions).parent), p.memory["papers"])
    observed = json.loads(Path(inp.observed).read_text(encoding="utf-8"))
    client, model_dir = open_client(p.synth, wc.synth)
    spec = p.synth["models"][wc.synth]
    answerer = Answerer(
        client,
        Path(inp.template).read_text(encoding="utf-8"),
        template_hash(inp.template, p.synth["prompts"]["synthesize_base"]),
        ContextFitter(model_dir, spec["max_model_len"], p.synth["max_answer_tokens"]),
        p.synth["max_answer_tokens"],
    )
    result = answer_sequentially(observed, questions, answerer)
    columns = list(result["rows"][0])
    write_table(
        result["rows"],
        columns,
        out.csv,
        out.md,
        f"Theoria, sequential vs bulk ({wc.corpus}, {wc.synth})",
        f"Arrival order (seed {result['seed']}): {', '.join(result['order'])}; batches of "
        f"{result['batch_size']} paper(s); k = {result['k']}. Scores: LLM-free rubric "
        "composite (0-10) and gold-label accuracy of the answers to the questions answerable "
        "so far.",
    )
    write_json(out.details, result)
    sequential_figure(result, f"Theoria sequential vs bulk — {wc.corpus}", out.png)
