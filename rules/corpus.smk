rule prepare_corpus:
    input:
        corpus_source,
    output:
        papers="results/{corpus}/corpus/papers.jsonl",
        questions="results/{corpus}/corpus/questions.jsonl",
        manifest="results/{corpus}/corpus/manifest.json",
        problems="results/{corpus}/corpus/import_problems.txt",
    log:
        "results/logs/prepare_corpus/{corpus}.log",
    benchmark:
        "results/benchmarks/prepare_corpus/{corpus}.tsv"
    priority: 30  # every job waits on it (it waited 0.9 min behind an own-env build)
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    params:
        spec=lambda wc: config["corpus_sources"][wc.corpus],
    script:
        "../workflow/scripts/prepare_corpus.py"
