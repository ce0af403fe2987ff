rule scifact_anchor:
    """Retrieval-correctness anchor on BEIR SciFact, graded against config/anchors/scifact.yaml."""
    input:
        expected="config/anchors/scifact.yaml",
    output:
        table="results/anchors/scifact.tsv",
        md="results/anchors/scifact.md",
    log:
        "results/logs/anchors/scifact.log",
    benchmark:
        "results/benchmarks/anchors/scifact.tsv"
    conda:
        "../envs/srb.yaml"
    threads: 2
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        data=config["anchors"]["scifact"],
        dense=config["dense"],
    script:
        "../workflow/scripts/scifact_anchor.py"
