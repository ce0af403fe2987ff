"""Theoria's sequential evaluation on the memory slice (srb.theoria.sequential)."""

import shutil
from pathlib import Path

from srb.atomic import write_json
from srb.data.canonical import load_canonical
from srb.joblog import job_logging
from srb.llm.session import open_client
from srb.services import stop_service
from srb.store import memory_slice
from srb.synthesize import ContextFitter, template_hash
from srb.systems import get_store_system
from srb.tables import write_table
from srb.theoria.db import TheoriaDB
from srb.theoria.sequential import Answerer, run_sequential, sequential_figure

wc, p, inp, out = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output
with job_logging(snakemake.log[0], f"sequential_theoria[{wc.corpus}/{wc.synth}]"):
    papers, questions = memory_slice(load_canonical(Path(inp.questions).parent), p.memory["papers"])
    seq = p.memory.get("sequential") or {}
    system = get_store_system("theoria").configure(p.memory)
    system.check_installed()
    system.services = {"llm": dict(p.llm), "dense": dict(p.dense)}
    store = Path(out.store)
    shutil.rmtree(store, ignore_errors=True)
    TheoriaDB(store).close()  # a fresh, empty store: everything arrives through /observe
    _, key = system.service_settings(store, read_only=False)
    try:
        incremental = system.service_url(store, read_only=False)
        bulk = system.service_url(Path(inp.bulk_store))
        client, model_dir = open_client(p.synth, wc.synth)
        spec = p.synth["models"][wc.synth]
        answerer = Answerer(
            client,
            Path(inp.template).read_text(encoding="utf-8"),
            template_hash(inp.template, p.synth["prompts"]["synthesize_base"]),
            ContextFitter(model_dir, spec["max_model_len"], p.synth["max_answer_tokens"]),
            p.synth["max_answer_tokens"],
        )
        result = run_sequential(
            incremental,
            bulk,
            papers,
            questions,
            answerer,
            int(seq.get("k") or system.native_knob),
            int(seq.get("batch_size", 1)),
            int(seq.get("seed", 0)),
        )
    finally:
        stop_service(Path(p.llm["servers_dir"]), key)
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
