"""Ingest the memory slice into one store system through the caching endpoint."""

from pathlib import Path

from srb.data.canonical import load_canonical
from srb.joblog import job_logging
from srb.priority import join_server_priority
from srb.store import endpoint_dense, ingest_store, memory_endpoint, memory_slice
from srb.systems import get_store_system

wc, p, out = snakemake.wildcards, snakemake.params, snakemake.output
dense = endpoint_dense(p.dense, snakemake.config)
with job_logging(snakemake.log[0], f"ingest_store[{wc.corpus}/{wc.system}]"):
    if snakemake.config["memory"].get("ingest_at_server_priority", False):
        join_server_priority()
    corpus = load_canonical(Path(snakemake.input.papers).parent)
    papers, questions = memory_slice(corpus, p.memory["papers"])
    system = (
        get_store_system(wc.system).configure(p.memory).use_environment(snakemake.input.get("env"))
    )
    settings = system.endpoint_settings()
    with memory_endpoint(p.llm, p.memory["llm"], dense, **settings) as (endpoint, server):
        ingest_store(
            system,
            papers,
            out.store,
            out.store_items,
            out.ingest_log,
            endpoint,
            server.stats.to_dict,
            retries=p.memory["retries"],
            concurrency=snakemake.config["memory"]["concurrency"],  # speed only: not a param
            meta={
                "corpus": wc.corpus,
                "llm": p.memory["llm"],
                "encoder": p.dense["encoder"],
                "settings": p.memory,
                "slice_questions": [q.id for q in questions],
            },
        )
