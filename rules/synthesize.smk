rule llm_only_context:
    """Contexts for systems without retrieval: base (none) and direct_read (gold + filler papers)."""
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
    output:
        cell="results/{corpus}/retrieval/{system}/none/{budget}.jsonl",
    log:
        "results/logs/llm_only_context/{corpus}/{system}/{budget}.log",
    wildcard_constraints:
        system="base|direct_read",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        seed=LLM["seed"] if LLM else 0,
    script:
        "../workflow/scripts/llm_only_context.py"


rule synthesize:
    """One job per retrieval cell: the fixed synthesizer answers every question (temperature 0)."""
    input:
        cell="results/{corpus}/retrieval/{system}/{modality}/{budget}.jsonl",
        questions="results/{corpus}/corpus/questions.jsonl",
        model=lambda wc: model_card(wc.synth),
        templates=synthesis_templates,
        after=after_memory_llm,
    output:
        answers="results/{corpus}/answers/{synth}/{system}/{modality}/{budget}.jsonl",
    log:
        "results/logs/synthesize/{corpus}/{synth}/{system}/{modality}/{budget}.log",
    benchmark:
        "results/benchmarks/synthesize/{corpus}/{synth}/{system}/{modality}/{budget}.tsv"
    conda:
        "../envs/srb.yaml"
    threads: MODEL_CLIENT_THREADS
    resources:
        model_clients=1,
        mem_mb=4000,
        runtime=120,
    params:
        llm=lambda wc: llm_params(wc.synth, "synthesize", wc.system, wc.modality),
        cell_questions=lambda wc: wc.system in STORE_SYSTEMS,
        template_hash=lambda wc: file_hash(*synthesis_templates(wc)),
    script:
        "../workflow/scripts/synthesize.py"
