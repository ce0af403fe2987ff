"""Judge agreement with human side-by-side votes (or an explicit not-applicable entry)."""

from srb.analysis import AGREEMENT_COLUMNS, agreement_rows
from srb.figures import agreement_figure
from srb.joblog import job_logging
from srb.scores import ScoreTable, load_tiers
from srb.tables import write_table
from srb.votes import read_votes

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"human_agreement[{wc.corpus}/{wc.synth}/{wc.judge}]"):
    table = ScoreTable.from_grid(wc.judge, p.grid, snakemake.input.judgments)
    grid = [tuple(c) for c in p.grid]
    votes = None
    if snakemake.input.votes:
        qids = list(load_tiers(snakemake.input.questions))
        votes = read_votes(snakemake.input.votes[0], grid, qids)
    rows = agreement_rows(table, votes, p.edges, p.taus)
    note = (
        "Agreement of the judge's preference (higher composite; a tie when |gap| <= tau) with "
        "human votes A / B / tie, by |score gap| bucket at tau = 0 and overall by tau, with "
        "Wilson 95% intervals. Votes on answers the judge scored invalid are excluded and counted."
    )
    title = f"{wc.corpus}: judge {wc.judge} vs human votes ({wc.synth})"
    write_table(rows, AGREEMENT_COLUMNS, snakemake.output.csv, snakemake.output.md, title, note)
    agreement_figure(rows, title, snakemake.output.png)
