rule prepare_model:
    """Join/verify the packaged GGUF (sha256 pinned in config) and dequantise it once; a rerun
    re-verifies the weights' hash instead of rebuilding."""
    output:
        card=f"{LLM['models_dir'] if LLM else 'cache/models'}/{{model}}.card.json",
    log:
        "results/logs/prepare_model/{model}.log",
    benchmark:
        "results/benchmarks/prepare_model/{model}.tsv"
    conda:
        "../envs/srb.yaml"
    threads: 2
    resources:
        mem_mb=16000,
        runtime=60,
    params:
        spec=lambda wc: LLM["models"][wc.model],
        models_dir=lambda wc, output: Path(output.card).parent,
    script:
        "../workflow/scripts/prepare_model.py"
