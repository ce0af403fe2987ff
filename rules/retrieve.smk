rule rank:
    """Every modality's ranking of one system in one job: one JVM and one encoder load."""
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        bm25=lambda wc: channel_index(wc, "bm25"),
        dense=lambda wc: channel_index(wc, "dense"),
        doctor="results/{corpus}/doctor/{system}.json",  # not ancient(): see rules/doctor.smk
    output:
        rankings=expand(
            "results/{{corpus}}/rankings/{{system}}/{modality}.jsonl",
            modality=RANKED_MODALITIES,
        ),
    log:
        "results/logs/rank/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/rank/{corpus}/{system}.tsv"
    wildcard_constraints:
        system=UNIT_PATTERN,
    conda:
        "../envs/srb.yaml"
    threads: max(config["bm25"]["threads"], config["dense"]["threads"])
    resources:
        mem_mb=4000,
        runtime=60,
        gpu=1 if config["dense"]["gpu"] else 0,
    params:
        modalities=RANKED_MODALITIES,
        depth=config["retrieval"]["depth"],
        bm25={"k1": config["bm25"]["k1"], "b": config["bm25"]["b"]},
        dense=config["dense"],
        rrf_k=config["retrieval"]["rrf_k"],
        hybrid_channels=HYBRID_CHANNELS,
    script:
        "../workflow/scripts/rank.py"


rule restore_context:
    """Every budget's cell of one system/modality, each with its budget verdict."""
    input:
        ranking="results/{corpus}/rankings/{system}/{modality}.jsonl",
        units="results/{corpus}/units/{system}.jsonl",
    output:
        cells=expand(
            "results/{{corpus}}/retrieval/{{system}}/{{modality}}/{budget}.jsonl",
            budget=BUDGETS,
        ),
        verdicts=expand(
            "results/{{corpus}}/retrieval/{{system}}/{{modality}}/{budget}.budget.json",
            budget=BUDGETS,
        ),
    log:
        "results/logs/restore/{corpus}/{system}/{modality}.log",
    benchmark:
        "results/benchmarks/restore_context/{corpus}/{system}/{modality}.tsv"
    wildcard_constraints:
        system=UNIT_PATTERN,
        modality="|".join(MODALITIES),
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        budgets=BUDGETS,
        mode=config["budget_mode"],
        tolerance=config["budget_tolerance"],
        gate=config["budget_gate"],
    script:
        "../workflow/scripts/restore_context.py"
