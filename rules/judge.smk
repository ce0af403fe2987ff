rule judge:
    """One job per (cell, judge): rubric (deterministic) or an LLM judge with strict JSON."""
    input:
        answers="results/{corpus}/answers/{synth}/{system}/{modality}/{budget}.jsonl",
        cell="results/{corpus}/retrieval/{system}/{modality}/{budget}.jsonl",
        questions="results/{corpus}/corpus/questions.jsonl",
        model=lambda wc: [] if wc.judge == "rubric" else model_card(wc.judge),
        template=lambda wc: [] if wc.judge == "rubric" else PROMPTS["judge"],
        after=lambda wc: [] if wc.judge == "rubric" else after_memory_llm(wc),
    output:
        judgments="results/{corpus}/judgments/{synth}/{judge}/{system}/{modality}/{budget}.jsonl",
    log:
        "results/logs/judge/{corpus}/{synth}/{judge}/{system}/{modality}/{budget}.log",
    conda:
        "../envs/srb.yaml"
    threads: lambda wc: 1 if wc.judge == "rubric" else MODEL_CLIENT_THREADS  # rubric computes
    resources:
        model_clients=lambda wc: 0 if wc.judge == "rubric" else 1,
        mem_mb=4000,
        runtime=120,
    params:
        llm=lambda wc: llm_params(wc.judge, "judge"),
        template_hash=lambda wc: (
            "" if wc.judge == "rubric" else file_hash(PROMPTS["judge"])
        ),
    script:
        "../workflow/scripts/judge.py"


rule leaderboard:
    """Per corpus, synthesizer and judge: the paper's Table 4/5 shape and the budget sweep."""
    input:
        judgments=judgment_files,
        cells=cell_context_files,
        questions="results/{corpus}/corpus/questions.jsonl",
        doctor=lambda wc: expand(
            "results/{corpus}/doctor/{system}.json",
            corpus=wc.corpus,
            system=LLM["systems"],
        ),
    output:
        csv=report(
            "results/{corpus}/leaderboard/{synth}/{judge}.csv",
            caption="../report/leaderboard.rst",
            category="Leaderboards",
        ),
        md="results/{corpus}/leaderboard/{synth}/{judge}.md",
        png=report(
            "results/{corpus}/leaderboard/{synth}/{judge}.png",
            caption="../report/budget_sweep.rst",
            category="Figures",
        ),
    log:
        "results/logs/leaderboard/{corpus}/{synth}/{judge}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid=lambda wc: judged_cells(wc.judge),
        judged_subset=lambda wc: judged_subset(wc.judge),
        systems=LLM["systems"] if LLM else [],
        internal=INTERNAL_CELLS,
    script:
        "../workflow/scripts/leaderboard.py"
