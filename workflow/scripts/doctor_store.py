"""The doctor's six checks on one store system's ingested store."""

import json
from pathlib import Path

from srb.data.canonical import iter_jsonl, load_canonical
from srb.ingest import read_units
from srb.joblog import job_logging
from srb.store import StoreRanker, bm25_channel, endpoint_dense, memory_slice, opened_store
from srb.store_doctor import StoreDoctor, run_store_doctor
from srb.systems import get_store_system

wc, p, inp = snakemake.wildcards, snakemake.params, snakemake.input
dense = endpoint_dense(p.dense, snakemake.config)
with job_logging(snakemake.log[0], f"doctor_store[{wc.corpus}/{wc.system}]"):
    corpus = load_canonical(Path(inp.questions).parent)
    papers, questions = memory_slice(corpus, p.memory["papers"])
    if not isinstance(p.probes, int):
        raise ValueError(
            "doctor.probes: store systems probe with the memory slice's own questions; "
            "give a number of questions, not query texts"
        )
    system = (
        get_store_system(wc.system).configure(p.memory).use_environment(snakemake.input.get("env"))
    )
    units = read_units(inp.store_items)
    with opened_store(system, inp.store, p.llm, p.memory, dense) as handle:
        ranker = StoreRanker(
            system, handle, units, bm25_channel(inp.bm25, p.bm25), p.depth, p.rrf_k
        )
        run_store_doctor(
            wc.corpus,
            StoreDoctor(
                ranker, questions[: p.probes], p.budgets, p.tolerance, p.memory["max_failed_share"]
            ),  # fmt: skip
            json.loads(Path(inp.ingest_log).read_text()),
            sum(1 for _ in iter_jsonl(Path(inp.store_items))),
            len(papers),
            snakemake.output.report,
            gate=p.memory["doctor_gate"],
        )
