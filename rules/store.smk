# Memory systems that own their store (srb/systems/store.py): Mem0, Graphiti, ...
# Ingest runs the library on the memory slice with every model call on the caching endpoint;
# restore re-queries the finished store with the library's own knob for every budget.


rule ingest_store:
    """The library ingests the slice into a staging store, moved into place when done; its
    items are exported in the units format and the ingest log records cost and failures.
    """
    input:
        papers="results/{corpus}/corpus/papers.jsonl",
        questions="results/{corpus}/corpus/questions.jsonl",
        model=lambda wc: model_card(MEMORY["llm"]),
        after=ingest_after,
        env=system_env,
    output:
        store=directory("results/{corpus}/store/{system}"),
        store_items="results/{corpus}/units/{system}.jsonl",
        ingest_log="results/{corpus}/units/{system}.ingest.json",
    log:
        "results/logs/ingest_store/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/ingest_store/{corpus}/{system}.tsv"
    wildcard_constraints:
        system=STORE_PATTERN,
    priority: ingest_priority
    conda:
        "../envs/srb.yaml"
    threads: MODEL_CLIENT_THREADS
    resources:
        model_clients=1,
        mem_mb=6000,
        runtime=600,
    params:
        memory=memory_params(),
        llm=memory_llm_params,
        dense=encoder_params(),
    script:
        "../workflow/scripts/ingest_store.py"


rule doctor_store:
    """The six checks adapted to a store: probes of the slice through the cells' search path."""
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        store="results/{corpus}/store/{system}",
        store_items="results/{corpus}/units/{system}.jsonl",
        ingest_log="results/{corpus}/units/{system}.ingest.json",
        bm25=lambda wc: store_bm25_index(wc, STORE_MODALITIES[wc.system]),
        model=lambda wc: model_card(MEMORY["llm"]),
        env=system_env,
    output:
        report=report(
            "results/{corpus}/doctor/{system}.json",
            caption="../report/doctor.rst",
            category="Doctor",
        ),
    log:
        "results/logs/doctor/{corpus}/{system}.log",
    benchmark:
        "results/benchmarks/doctor_store/{corpus}/{system}.tsv"
    wildcard_constraints:
        system=STORE_PATTERN,
    priority: MEMORY_CHAIN_PRIORITY
    conda:
        "../envs/srb.yaml"
    threads: MODEL_CLIENT_THREADS
    resources:
        store_searches=1,
        mem_mb=4000,
        runtime=30,
    params:
        probes=config["doctor"]["probes"],
        memory=memory_params("max_failed_share", "doctor_gate", "knob_refine_steps"),
        llm=memory_llm_params,
        dense=encoder_params(),
        bm25={"k1": config["bm25"]["k1"], "b": config["bm25"]["b"]},
        budgets=lambda wc: system_budgets(wc.system),
        tolerance=config["budget_tolerance"],
        depth=config["retrieval"]["depth"],
        rrf_k=config["retrieval"]["rrf_k"],
    script:
        "../workflow/scripts/doctor_store.py"


rule restore_store:
    """Every budget's cell of one store system/modality, each with its budget verdict."""
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        store="results/{corpus}/store/{system}",
        store_items="results/{corpus}/units/{system}.jsonl",
        bm25=lambda wc: store_bm25_index(wc, [wc.modality]),
        doctor="results/{corpus}/doctor/{system}.json",
        model=lambda wc: model_card(MEMORY["llm"]),
        env=system_env,
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
        "results/logs/restore_store/{corpus}/{system}/{modality}.log",
    benchmark:
        "results/benchmarks/restore_store/{corpus}/{system}/{modality}.tsv"
    wildcard_constraints:
        system=BUDGETED_STORE_PATTERN,
    priority: MEMORY_CHAIN_PRIORITY
    conda:
        "../envs/srb.yaml"
    threads: MODEL_CLIENT_THREADS
    resources:
        store_searches=1,
        mem_mb=4000,
        runtime=30,
    params:
        memory=memory_params("knob_refine_steps"),
        llm=memory_llm_params,
        dense=encoder_params(),
        bm25={"k1": config["bm25"]["k1"], "b": config["bm25"]["b"]},
        budgets=BUDGETS,
        mode=config["budget_mode"],
        tolerance=config["budget_tolerance"],
        gate=config["budget_gate"],
        depth=config["retrieval"]["depth"],
        rrf_k=config["retrieval"]["rrf_k"],
    script:
        "../workflow/scripts/restore_store.py"


# a system with both kinds of cells (Cognee): its internal one is native only
ruleorder: restore_store_native > restore_store


rule restore_store_native:
    """The native cell of a modality the system answers by itself (internal synthesis)."""
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        store="results/{corpus}/store/{system}",
        store_items="results/{corpus}/units/{system}.jsonl",
        bm25=lambda wc: store_bm25_index(wc, [wc.modality]),
        doctor="results/{corpus}/doctor/{system}.json",
        model=lambda wc: model_card(MEMORY["llm"]),
        env=system_env,
    output:
        cells=["results/{corpus}/retrieval/{system}/{modality}/native.jsonl"],
        verdicts=["results/{corpus}/retrieval/{system}/{modality}/native.budget.json"],
    log:
        "results/logs/restore_store_native/{corpus}/{system}/{modality}.log",
    benchmark:
        "results/benchmarks/restore_store_native/{corpus}/{system}/{modality}.tsv"
    wildcard_constraints:
        system=NATIVE_STORE_PATTERN,
        modality=INTERNAL_MODALITY_PATTERN,
    priority: MEMORY_CHAIN_PRIORITY
    conda:
        "../envs/srb.yaml"
    threads: MODEL_CLIENT_THREADS
    resources:
        model_clients=1,
        store_searches=1,
        mem_mb=4000,
        runtime=30,
    params:
        memory=memory_params(),
        llm=memory_llm_params,
        dense=encoder_params(),
        bm25={"k1": config["bm25"]["k1"], "b": config["bm25"]["b"]},
        budgets=["native"],
        mode=config["budget_mode"],
        tolerance=config["budget_tolerance"],
        gate=config["budget_gate"],
        depth=config["retrieval"]["depth"],
        rrf_k=config["retrieval"]["rrf_k"],
    script:
        "../workflow/scripts/restore_store.py"


rule ingest_cost:
    """What each store system's ingest cost: calls, tokens, items, failed papers, wall time."""
    input:
        logs=expand(
            "results/{{corpus}}/units/{system}.ingest.json", system=STORE_SYSTEMS
        ),
    output:
        csv=report(
            "results/{corpus}/diagnostics/ingest_cost.csv",
            caption="../report/ingest_cost.rst",
            category="Retrieval",
        ),
        md="results/{corpus}/diagnostics/ingest_cost.md",
    log:
        "results/logs/ingest_cost/{corpus}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=1000,
        runtime=5,
    script:
        "../workflow/scripts/ingest_cost.py"


rule system_env:
    """A store system's own environment (one that cannot share the project's), built from its
    full lock in envs/ and reused while the lock is unchanged; PostgreSQL's extensions are
    checked here, before any ingest job runs."""
    input:
        lock=lambda wc: str(ENVS_DIR / f"{wc.system}.txt"),
    output:
        record=f"{MEMORY['envs_dir']}/{{system}}.json",
    log:
        "results/logs/system_env/{system}.log",
    benchmark:
        "results/benchmarks/system_env/{system}.tsv"
    wildcard_constraints:
        system=OWN_ENV_PATTERN,
    priority: 20
    conda:
        "../envs/srb.yaml"
    threads: 1
    resources:
        mem_mb=2000,
        runtime=30,
    params:
        venv=lambda wc, output: str(Path(output.record).with_suffix("")),
    script:
        "../workflow/scripts/system_env.py"
