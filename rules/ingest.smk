rule build_units:
    input:
        papers="results/{corpus}/corpus/papers.jsonl",
        questions="results/{corpus}/corpus/questions.jsonl",
    output:
        units="results/{corpus}/units/{system}.jsonl",
        ingest_log="results/{corpus}/units/{system}.ingest.json",
    log:
        "results/logs/build_units/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/build_units/{corpus}/{system}.tsv"
    wildcard_constraints:
        system=UNIT_PATTERN,
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../workflow/scripts/build_units.py"


rule bm25_index:
    input:
        units="results/{corpus}/units/{system}.jsonl",
    output:
        index=directory("results/{corpus}/index/{system}/bm25"),
    log:
        "results/logs/bm25_index/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/bm25_index/{corpus}/{system}.tsv"
    conda:
        "../envs/srb.yaml"
    threads: config["bm25"]["threads"]
    resources:
        mem_mb=8000,
        runtime=120,
    params:
        k1=config["bm25"]["k1"],
        b=config["bm25"]["b"],
    script:
        "../workflow/scripts/bm25_index.py"


rule dense_index:
    input:
        units="results/{corpus}/units/{system}.jsonl",
    output:
        index=directory("results/{corpus}/index/{system}/dense"),
    log:
        "results/logs/dense_index/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/dense_index/{corpus}/{system}.tsv"
    wildcard_constraints:
        system=UNIT_PATTERN,
    conda:
        "../envs/srb.yaml"
    threads: config["dense"]["threads"]
    resources:
        mem_mb=8000,
        runtime=240,
        gpu=1 if config["dense"]["gpu"] else 0,
    params:
        dense=config["dense"],
    script:
        "../workflow/scripts/dense_index.py"
