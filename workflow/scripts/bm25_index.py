"""Build the Lucene BM25 index over a system's units."""

from srb.ingest import build_bm25
from srb.joblog import job_logging

wc = snakemake.wildcards
with job_logging(snakemake.log[0], f"bm25_index[{wc.corpus}/{wc.system}]"):
    build_bm25(snakemake.input.units, snakemake.output.index, snakemake.threads)
