"""Paired bootstrap CIs for the configured contrasts (the paper's Table 7 shape)."""

from srb.analysis import BOOTSTRAP_COLUMNS, bootstrap_rows, parse_contrasts
from srb.joblog import job_logging
from srb.scores import ScoreTable
from srb.tables import write_table

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"paired_bootstrap[{wc.corpus}/{wc.synth}/{wc.judge}]"):
    table = ScoreTable.from_grid(wc.judge, p.grid, snakemake.input.judgments)
    contrasts = parse_contrasts(p.contrasts, [tuple(c) for c in p.full_grid])
    b = p.bootstrap
    rows = bootstrap_rows(table, contrasts, b["resamples"], b["seed"], b["confidence"], b["min_n"],
                          judged={tuple(c) for c in p.grid})  # fmt: skip
    if not rows:
        rows = [{"contrast": "not applicable: no contrasts configured (analysis.contrasts)"}]
    note = (
        f"Paired bootstrap over questions: B = {b['resamples']:,} resamples, seed {b['seed']}, "
        f"percentile {b['confidence']:.0%} CI of the mean composite difference a - b (judge "
        f"{wc.judge}). n = questions both cells scored validly; n_excluded = the rest. "
        f"* = the interval excludes 0 (only marked when n >= {b['min_n']})."
    )
    write_table(rows, BOOTSTRAP_COLUMNS, snakemake.output.csv, snakemake.output.md,
                f"{wc.corpus}: paired bootstrap ({wc.synth}, judge {wc.judge})", note)  # fmt: skip
