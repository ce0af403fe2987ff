"""Restore every budget's cell of one store system/modality by re-querying its store."""

from pathlib import Path

from srb.data.canonical import load_canonical
from srb.ingest import read_units
from srb.joblog import job_logging
from srb.store import StoreRanker, memory_endpoint, memory_slice, restore_store_cells
from srb.systems import get_store_system

wc, p, inp, out = snakemake.wildcards, snakemake.params, snakemake.input, snakemake.output
with job_logging(snakemake.log[0], f"restore_store[{wc.corpus}/{wc.system}/{wc.modality}]"):
    corpus = load_canonical(Path(inp.questions).parent)
    _, questions = memory_slice(corpus, p.memory["papers"])
    system = get_store_system(wc.system).configure(p.memory)
    system.check_installed()  # a missing library is named with its env file, not a bare import
    units = read_units(inp.store_items)
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
            restore_store_cells(
                StoreRanker(system, handle, units, bm25, p.depth, p.rrf_k),
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
        finally:
            handle.close()
