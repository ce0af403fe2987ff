# Beyond the paper: Theoria evaluated sequentially (srb/theoria/sequential.py). Papers arrive
# through its service's POST /observe in seeded batches; after each batch the answerable
# questions are asked through POST /retrieve + the synthesizer and GET /theories is
# snapshotted; the bulk-ingested store answers the same questions for comparison. Two jobs,
# one model each: the observing job runs in the ingest model's phase, the answering job after.


rule sequential_theoria_observe:
    """The memory side, ingest model only: batches observed on a fresh store, then what
    /retrieve finds for the questions answerable so far, and the /theories counts."""
    input:
        papers="results/{corpus}/corpus/papers.jsonl",
        questions="results/{corpus}/corpus/questions.jsonl",
        bulk_store="results/{corpus}/store/theoria",
        memory_model=lambda wc: model_card(MEMORY["llm"]),
    output:
        store=directory("results/{corpus}/sequential/theoria/store"),
        observed="results/{corpus}/sequential/theoria/observed.json",
    log:
        "results/logs/sequential_theoria_observe/{corpus}.log",
    benchmark:
        "results/benchmarks/sequential_theoria_observe/{corpus}.tsv"
    priority: 11
    conda:
        "../envs/srb.yaml"
    threads: MODEL_CLIENT_THREADS
    resources:
        model_clients=1,
        mem_mb=6000,
        runtime=600,
    params:
        memory=memory_params("sequential"),
        llm=memory_llm_params,
        dense=encoder_params(),
    script:
        "../workflow/scripts/sequential_theoria_observe.py"


rule sequential_theoria:
    """Theoria's incremental memory vs its bulk ingest, batch by batch (table + figure): the
    recorded retrievals answered by the synthesizer once the ingest model's server is gone.
    """
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        observed="results/{corpus}/sequential/theoria/observed.json",
        synth_model=lambda wc: model_card(SYNTH),
        template=lambda wc: PROMPTS["synthesize"],
        after=after_memory_llm,
    output:
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
    priority: MEMORY_CHAIN_PRIORITY
    conda:
        "../envs/srb.yaml"
    threads: MODEL_CLIENT_THREADS
    resources:
        model_clients=1,
        mem_mb=4000,
        runtime=120,
    params:
        memory=memory_params("sequential"),
        synth=lambda wc: llm_params(wc.synth, "synthesize"),
    script:
        "../workflow/scripts/sequential_theoria.py"
