"""Rank units for every question in every configured modality of one system."""

import os

os.environ["OMP_NUM_THREADS"] = str(snakemake.threads)  # before torch: no oversubscription

from pathlib import Path  # noqa: E402

from srb.joblog import job_logging  # noqa: E402
from srb.rank import rank_system  # noqa: E402

wc, p, inp = snakemake.wildcards, snakemake.params, snakemake.input
with job_logging(snakemake.log[0], f"rank[{wc.corpus}/{wc.system}]"):
    rank_system(
        Path(inp.questions).parent,
        dict(zip(p.modalities, snakemake.output.rankings, strict=True)),
        p.depth,
        bm25_index=inp.bm25 or None,
        bm25_params=p.bm25,
        dense_index=inp.dense or None,
        dense_cfg=p.dense,
        hybrid_channels=p.hybrid_channels,
        rrf_k=p.rrf_k,
        threads=snakemake.threads,
    )
