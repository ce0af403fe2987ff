"""Qualitative Markdown tables: answer excerpts and scores per system and across budgets."""

from pathlib import Path

from srb.data.canonical import load_canonical
from srb.joblog import job_logging
from srb.qualitative import choose_questions, write_qualitative

wc, p, inp = snakemake.wildcards, snakemake.params, snakemake.input
with job_logging(snakemake.log[0], f"qualitative[{wc.corpus}/{wc.synth}/{wc.judge}]"):
    corpus = load_canonical(Path(inp.questions).parent)
    files = {
        tuple(c): (a, j, x)
        for c, a, j, x in zip(p.grid, inp.answers, inp.judgments, inp.cells, strict=True)
    }
    questions = choose_questions(corpus.questions, p.questions)
    write_qualitative(questions, files, p.system, p.excerpt_chars,
                      f"{wc.corpus}: answers side by side ({wc.synth}, judge {wc.judge})",
                      snakemake.output.md)  # fmt: skip
