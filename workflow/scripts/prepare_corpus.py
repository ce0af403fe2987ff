"""Load a configured corpus, validate it, and write it in the canonical layout."""

from pathlib import Path

from srb.atomic import atomic_write
from srb.data import load_corpus
from srb.data.canonical import write_canonical
from srb.joblog import job_logging

with job_logging(snakemake.log[0], f"prepare_corpus[{snakemake.wildcards.corpus}]") as log:
    corpus, problems = load_corpus(snakemake.wildcards.corpus, snakemake.params.spec)
    write_canonical(corpus, Path(snakemake.output.papers).parent)
    with atomic_write(snakemake.output.problems) as fh:
        fh.writelines(f"{p}\n" for p in problems)
    log.info(
        "%d papers, %d questions, %d import problems",
        len(corpus.papers),
        len(corpus.questions),
        len(problems),
    )
