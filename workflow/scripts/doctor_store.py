"""The doctor's six checks on one store system's ingested store."""

import json
from pathlib import Path

from srb.data.canonical import iter_jsonl, load_canonical
from srb.ingest import read_units
from srb.joblog import job_logging
from srb.store import StoreRanker, memory_endpoint, memory_slice
from srb.store_doctor import StoreDoctor, run_store_doctor
from srb.systems import get_store_system

wc, p, inp = snakemake.wildcards, snakemake.params, snakemake.input
with job_logging(snakemake.log[0], f"doctor_store[{wc.corpus}/{wc.system}]"):
    corpus = load_canonical(Path(inp.questions).parent)
    papers, questions = memory_slice(corpus, p.memory["papers"])
    if not isinstance(p.probes, int):
        raise ValueError(
            "doctor.probes: store systems probe with the memory slice's own questions; "
            "give a number of questions, not query texts"
        )
    probes = questions[: p.probes]
    system = get_store_system(wc.system).configure(p.memory)
    system.check_installed()  # a missing library is named with its env file, not a bare import
    units = read_units(inp.store_items)
    n_items_file = sum(1 for _ in iter_jsonl(Path(inp.store_items)))
    bm25 = None
    if inp.bm25:
        from srb.index.lucene import BM25Searcher

        searcher = BM25Searcher(inp.bm25, p.bm25["k1"], p.bm25["b"])

        def bm25(query, depth):
            return searcher.search([query], ["q"], depth, 1)["q"]

    with memory_endpoint(
        p.llm,
        p.memory["llm"],
        p.dense,
        p.memory["max_completion_tokens"],
        p.memory["structured_output"],
    ) as (endpoint, _):
        handle = system.open(Path(inp.store), endpoint)
        try:
            doctor = StoreDoctor(
                StoreRanker(system, handle, units, bm25, p.depth, p.rrf_k),
                probes,
                p.budgets,
                p.tolerance,
                p.memory["max_failed_share"],
            )
            run_store_doctor(
                wc.corpus,
                doctor,
                json.loads(Path(inp.ingest_log).read_text()),
                n_items_file,
                len(papers),
                snakemake.output.report,
                gate=p.memory["doctor_gate"],
            )
        finally:
            handle.close()
