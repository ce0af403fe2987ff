"""Fuse the enabled channels' rankings with reciprocal rank fusion."""

from srb.joblog import job_logging
from srb.rank import rank_hybrid

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"rank_hybrid[{wc.corpus}/{wc.system}]"):
    rank_hybrid(list(snakemake.input.channels), snakemake.output.ranking, p.depth, p.rrf_k)
