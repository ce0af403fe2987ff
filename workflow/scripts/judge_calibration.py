"""Judge-vs-judge calibration table and scatter for one synthesizer."""

from srb.analysis import CALIBRATION_COLUMNS, calibration
from srb.figures import judge_scatter
from srb.joblog import job_logging
from srb.scores import ScoreTable, load_tiers
from srb.tables import write_table

wc, p = snakemake.wildcards, snakemake.params
with job_logging(snakemake.log[0], f"judge_calibration[{wc.corpus}/{wc.synth}]"):
    files, tables, start = list(snakemake.input.judgments), [], 0
    for judge, grid in zip(p.judges, p.grids, strict=True):  # judge-major, each its own cells
        tables.append(ScoreTable.from_grid(judge, grid, files[start : start + len(grid)]))
        start += len(grid)
    tiers = load_tiers(snakemake.input.questions)
    rows, panels = calibration(tables, tiers, p.within)
    note = (
        "Per pair of judges over the cells (system x budget x question) both scored validly: "
        "Pearson r, least-squares slope/intercept of Y on X, Spearman rho of the system "
        f"configurations' mean scores, share of cells within {p.within:g} point, mean Y - X "
        "overall and per tier. Cells a judge failed on are excluded and counted."
    )
    title = f"{wc.corpus}: judge calibration ({wc.synth})"
    write_table(rows, CALIBRATION_COLUMNS, snakemake.output.csv, snakemake.output.md, title, note)
    judge_scatter(panels, title, snakemake.output.png)
