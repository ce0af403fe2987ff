rule rank_bm25:
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        index="results/{corpus}/index/{system}/bm25",
        doctor=ancient("results/{corpus}/doctor/{system}.json"),
    output:
        ranking="results/{corpus}/rankings/{system}/bm25.jsonl",
    log:
        "results/logs/rank/{corpus}/{system}/bm25.log",
    conda:
        "../envs/srb.yaml"
    threads: config["bm25"]["threads"]
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        depth=config["retrieval"]["depth"],
        k1=config["bm25"]["k1"],
        b=config["bm25"]["b"],
    script:
        "../workflow/scripts/rank_bm25.py"


rule rank_dense:
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        index="results/{corpus}/index/{system}/dense",
        doctor=ancient("results/{corpus}/doctor/{system}.json"),
    output:
        ranking="results/{corpus}/rankings/{system}/dense.jsonl",
    log:
        "results/logs/rank/{corpus}/{system}/dense.log",
    conda:
        "../envs/srb.yaml"
    threads: config["dense"]["threads"]
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=1 if config["dense"]["gpu"] else 0,
    params:
        depth=config["retrieval"]["depth"],
        dense=config["dense"],
    script:
        "../workflow/scripts/rank_dense.py"


rule rank_hybrid:
    input:
        channels=expand(
            "results/{{corpus}}/rankings/{{system}}/{channel}.jsonl",
            channel=HYBRID_CHANNELS,
        ),
        doctor=ancient("results/{corpus}/doctor/{system}.json"),
    output:
        ranking="results/{corpus}/rankings/{system}/hybrid.jsonl",
    log:
        "results/logs/rank/{corpus}/{system}/hybrid.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        depth=config["retrieval"]["depth"],
        rrf_k=config["retrieval"]["rrf_k"],
    script:
        "../workflow/scripts/rank_hybrid.py"


rule restore_context:
    input:
        ranking="results/{corpus}/rankings/{system}/{modality}.jsonl",
        units="results/{corpus}/units/{system}.jsonl",
        native=native_cell,
    output:
        cell="results/{corpus}/retrieval/{system}/{modality}/{budget}.jsonl",
        verdict="results/{corpus}/retrieval/{system}/{modality}/{budget}.budget.json",
    log:
        "results/logs/restore/{corpus}/{system}/{modality}/{budget}.log",
    wildcard_constraints:
        system="|".join(SYSTEMS),
        modality="|".join(MODALITIES),
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        mode=config["budget_mode"],
        tolerance=config["budget_tolerance"],
        gate=config["budget_gate"],
    script:
        "../workflow/scripts/restore_context.py"
