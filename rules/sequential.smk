# Beyond the paper: Theoria evaluated sequentially (srb/theoria/sequential.py). Papers arrive
# through its service's POST /observe in seeded batches; after each batch the answerable
# questions are asked through POST /retrieve + the synthesizer and GET /theories is
# snapshotted; the bulk-ingested store answers the same questions for comparison.


rule sequential_theoria:
    """Theoria's incremental memory vs its bulk ingest, batch by batch (table + figure)."""
    input:
        papers="results/{corpus}/corpus/papers.jsonl",
        questions="results/{corpus}/corpus/questions.jsonl",
        bulk_store="results/{corpus}/store/theoria",
        memory_model=lambda wc: model_card(MEMORY["llm"]),
        synth_model=lambda wc: model_card(SYNTH),
        template=lambda wc: PROMPTS["synthesize"],
    output:
        store=directory("results/{corpus}/sequential/theoria/{synth}.store"),
        csv=report(
            "results/{corpus}/sequential/theoria/{synth}.csv",
            caption="../report/sequential.rst",
            category="Sequential memory",
        ),
        md="results/{corpus}/sequential/theoria/{synth}.md",
        details="results/{corpus}/sequential/theoria/{synth}.json",
        png=report(
            "results/{corpus}/sequential/theoria/{synth}.png",
            caption="../report/sequential.rst",
            category="Sequential memory",
        ),
    log:
        "results/logs/sequential_theoria/{corpus}/{synth}.log",
    benchmark:
        "results/benchmarks/sequential_theoria/{corpus}/{synth}.tsv"
    conda:
        "../envs/srb.yaml"
    threads: 1
    resources:
        mem_mb=6000,
        runtime=600,
    params:
        memory=memory_params("sequential"),
        llm=memory_llm_params,
        synth=lambda wc: llm_params(wc.synth, "synthesize"),
        dense=encoder_params(),
    script:
        "../workflow/scripts/sequential_theoria.py"
