rule doctor:
    """The paper's pre-run checklist per corpus x system; every ranking of the system waits on it.

    The rank rule takes the report as a plain input: with ancient() a doctor that had to rerun
    (changed settings) was the only job Snakemake 9.27 planned, and a run exited 0 with its
    requested cells missing. A doctor setting change now reruns what follows it, replayed from
    the encoder and LLM call caches."""
    input:
        manifest="results/{corpus}/corpus/manifest.json",
        questions="results/{corpus}/corpus/questions.jsonl",
        units="results/{corpus}/units/{system}.jsonl",
        ingest_log="results/{corpus}/units/{system}.ingest.json",
        bm25=lambda wc: channel_index(wc, "bm25"),
        dense=lambda wc: channel_index(wc, "dense"),
        after=after_ingest_phase,
    output:
        report=report(
            "results/{corpus}/doctor/{system}.json",
            caption="../report/doctor.rst",
            category="Doctor",
        ),
    log:
        "results/logs/doctor/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/doctor/{corpus}/{system}.tsv"
    wildcard_constraints:
        system=UNIT_PATTERN,
    conda:
        "../envs/srb.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=20,
    params:
        settings=doctor_settings,
    script:
        "../workflow/scripts/doctor.py"
