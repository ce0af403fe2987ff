"""Router headroom per budget: oracle vs best single system vs a LOQO tier-conditioned router."""

from srb.analysis import ROUTER_COLUMNS, router_rows
from srb.joblog import job_logging
from srb.scores import ScoreTable, load_tiers
from srb.tables import write_table

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"router_headroom[{wc.corpus}/{wc.synth}/{wc.judge}]"):
    table = ScoreTable.from_grid(wc.judge, p.grid, snakemake.input.judgments)
    rows = router_rows(table, p.systems, p.budgets, load_tiers(snakemake.input.questions))
    note = (
        f"Candidates: {', '.join(p.systems)}. Over the questions every candidate scored validly: "
        "oracle = mean of the per-question best score; best single = the best mean; router = "
        "each question sent to the system with the best mean on the other questions of its tier "
        "(leave-one-question-out). Gaps are against the best single system."
    )
    write_table(rows, ROUTER_COLUMNS, snakemake.output.csv, snakemake.output.md,
                f"{wc.corpus}: router headroom ({wc.synth}, judge {wc.judge})", note)  # fmt: skip
