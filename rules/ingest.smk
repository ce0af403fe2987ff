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
    priority: dense_index_priority
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
        after=after_ingest_phase,
    output:
        index=directory("results/{corpus}/index/{system}/bm25"),
    log:
        "results/logs/bm25_index/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/bm25_index/{corpus}/{system}.tsv"
    conda:
        "../envs/srb.yaml"
    # a store system's exported items are a few hundred at most: one thread, so the index does
    # not wait for both cores (stop 32: Mem0's 6 s index waited 11 min behind an encoder job)
    threads: lambda wc: 1 if wc.system in STORE_SYSTEMS else config["bm25"]["threads"]
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
    priority: dense_index_priority
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
