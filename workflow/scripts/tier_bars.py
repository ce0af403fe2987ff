"""Per-tier bars of the native-budget cells for one synthesizer and judge."""

from srb.figures import tier_bars
from srb.joblog import job_logging
from srb.scores import ScoreTable, load_tiers

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"tier_bars[{wc.corpus}/{wc.synth}/{wc.judge}]"):
    table = ScoreTable.from_grid(wc.judge, p.grid, snakemake.input.judgments)
    cells = [tuple(c) for c in p.grid if c[2] == "native" or c[0] == "direct_read"]
    tier_bars(table, cells, load_tiers(snakemake.input.questions),
              f"{wc.corpus}: score by tier ({wc.synth}, judge {wc.judge})",
              snakemake.output.png)  # fmt: skip
