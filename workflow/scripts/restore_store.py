"""Restore every budget's cell of one store system/modality by re-querying its store."""

from pathlib import Path

from srb.data.canonical import load_canonical
from srb.ingest import read_units
from srb.joblog import job_logging
from srb.store import (
    StoreRanker,
    bm25_channel,
    endpoint_dense,
    memory_slice,
    opened_store,
    restore_store_cells,
)
from srb.systems import get_store_system

wc, p, inp, out = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output
dense = endpoint_dense(p.dense, snakemake.config)
with job_logging(snakemake.log[0], f"restore_store[{wc.corpus}/{wc.system}/{wc.modality}]"):
    _, questions = memory_slice(load_canonical(Path(inp.questions).parent), p.memory["papers"])
    system = (
        get_store_system(wc.system).configure(p.memory).use_environment(snakemake.input.get("env"))
    )
    units = read_units(inp.store_items)
    with opened_store(system, inp.store, p.llm, p.memory, dense) as handle:
        restore_store_cells(
            StoreRanker(system, handle, units, bm25_channel(inp.bm25, p.bm25), p.depth, p.rrf_k),
            questions,
            wc.modality,
            p.budgets,
            p.mode,
            out.cells,
            out.verdicts,
            p.tolerance,
            p.gate,
            where=f"corpus {wc.corpus}, system {wc.system}, modality {wc.modality}",
        )
