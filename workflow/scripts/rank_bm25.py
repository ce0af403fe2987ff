"""Rank units for every question with BM25."""

from pathlib import Path

from srb.joblog import job_logging
from srb.rank import rank_bm25

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"rank_bm25[{wc.corpus}/{wc.system}]"):
    rank_bm25(
        Path(snakemake.input.questions).parent,
        snakemake.input.index,
        snakemake.output.ranking,
        p.depth,
        p.k1,
        p.b,
        snakemake.threads,
    )
