"""Leaderboard table (CSV, Markdown) and budget-sweep figure for one synthesizer and judge."""

from pathlib import Path

from srb.joblog import job_logging
from srb.leaderboard import budget_sweep_figure, build_leaderboard, write_leaderboard

wc = snakemake.wildcards
with job_logging(snakemake.log[0], f"leaderboard[{wc.corpus}/{wc.synth}/{wc.judge}]"):
    cells = [
        (*g, j, c)
        for g, j, c in zip(
            snakemake.params.grid, snakemake.input.judgments, snakemake.input.cells, strict=True
        )
    ]
    doctor = dict(zip(snakemake.params.systems, snakemake.input.doctor, strict=True))
    rows = build_leaderboard(
        Path(snakemake.input.questions).parent, cells, doctor, snakemake.params.internal
    )
    title = f"{wc.corpus}: synthesizer {wc.synth}, judge {wc.judge}"
    if snakemake.params.judged_subset:
        title += f" (only {snakemake.params.judged_subset})"
    write_leaderboard(rows, title, snakemake.output.csv, snakemake.output.md)
    budget_sweep_figure(rows, title, snakemake.output.png)
