rule paired_bootstrap:
    """The paper's Table 7: paired bootstrap CIs over questions for the configured contrasts."""
    input:
        judgments=judgment_files,
    output:
        csv=report(
            "results/{corpus}/stats/{synth}/{judge}/bootstrap.csv",
            caption="../report/bootstrap.rst",
            category="Analyses",
            subcategory="{judge}",
        ),
        md="results/{corpus}/stats/{synth}/{judge}/bootstrap.md",
    log:
        "results/logs/paired_bootstrap/{corpus}/{synth}/{judge}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid=lambda wc: judged_cells(wc.judge),
        full_grid=lambda wc: llm_cells(),
        contrasts=ANALYSIS["contrasts"] if ANALYSIS else [],
        bootstrap=ANALYSIS["bootstrap"] if ANALYSIS else {},
    script:
        "../workflow/scripts/paired_bootstrap.py"


rule router_headroom:
    """Per budget: per-question oracle vs best single system vs a LOQO tier-conditioned router."""
    input:
        judgments=judgment_files,
        questions="results/{corpus}/corpus/questions.jsonl",
    output:
        csv=report(
            "results/{corpus}/stats/{synth}/{judge}/router.csv",
            caption="../report/router.rst",
            category="Analyses",
            subcategory="{judge}",
        ),
        md="results/{corpus}/stats/{synth}/{judge}/router.md",
    log:
        "results/logs/router_headroom/{corpus}/{synth}/{judge}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid=lambda wc: judged_cells(wc.judge),
        systems=ROUTER_SYSTEMS if LLM else [],
        budgets=lambda wc: judged_budgets(wc.judge),
    script:
        "../workflow/scripts/router_headroom.py"


rule tier_bars:
    """Mean composite per question tier for every native-budget cell."""
    input:
        judgments=judgment_files,
        questions="results/{corpus}/corpus/questions.jsonl",
    output:
        png=report(
            "results/{corpus}/stats/{synth}/{judge}/tiers.png",
            caption="../report/tiers.rst",
            category="Figures",
            subcategory="{judge}",
        ),
    log:
        "results/logs/tier_bars/{corpus}/{synth}/{judge}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid=lambda wc: judged_cells(wc.judge),
    script:
        "../workflow/scripts/tier_bars.py"


rule judge_calibration:
    """Judge-vs-judge agreement over the cells every judge scored (not applicable with one)."""
    input:
        judgments=all_judgment_files,
        questions="results/{corpus}/corpus/questions.jsonl",
    output:
        csv=report(
            "results/{corpus}/stats/{synth}/calibration.csv",
            caption="../report/calibration.rst",
            category="Analyses",
            subcategory="judges",
        ),
        md="results/{corpus}/stats/{synth}/calibration.md",
        png=report(
            "results/{corpus}/stats/{synth}/calibration.png",
            caption="../report/calibration_scatter.rst",
            category="Figures",
            subcategory="judges",
        ),
    log:
        "results/logs/judge_calibration/{corpus}/{synth}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grids=lambda wc: [judged_cells(j) for j in JUDGES],
        judges=JUDGES,
        within=ANALYSIS["calibration"]["within"] if ANALYSIS else 1.0,
    script:
        "../workflow/scripts/judge_calibration.py"


rule human_agreement:
    """Judge vs human side-by-side votes: by |score gap| bucket and by tie tolerance tau."""
    input:
        judgments=judgment_files,
        questions="results/{corpus}/corpus/questions.jsonl",
        votes=[ANALYSIS["votes"]] if ANALYSIS and ANALYSIS["votes"] else [],
    output:
        csv=report(
            "results/{corpus}/stats/{synth}/{judge}/human_agreement.csv",
            caption="../report/human_agreement.rst",
            category="Analyses",
            subcategory="{judge}",
        ),
        md="results/{corpus}/stats/{synth}/{judge}/human_agreement.md",
        png=report(
            "results/{corpus}/stats/{synth}/{judge}/human_agreement.png",
            caption="../report/human_agreement.rst",
            category="Figures",
            subcategory="{judge}",
        ),
    log:
        "results/logs/human_agreement/{corpus}/{synth}/{judge}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid=lambda wc: judged_cells(wc.judge),
        edges=ANALYSIS["gap_buckets"] if ANALYSIS else [],
        taus=ANALYSIS["tie_tolerances"] if ANALYSIS else [],
    script:
        "../workflow/scripts/human_agreement.py"


rule qualitative:
    """Answer excerpts with scores: every system on chosen questions, one system across budgets."""
    input:
        judgments=judgment_files,
        answers=answer_files,
        cells=cell_context_files,
        questions="results/{corpus}/corpus/questions.jsonl",
    output:
        md=report(
            "results/{corpus}/qualitative/{synth}/{judge}.md",
            caption="../report/qualitative.rst",
            category="Qualitative",
        ),
    log:
        "results/logs/qualitative/{corpus}/{synth}/{judge}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid=lambda wc: judged_cells(wc.judge),
        questions=ANALYSIS["qualitative"]["questions"] if ANALYSIS else 0,
        system=QUALITATIVE_SYSTEM if LLM else None,
        excerpt_chars=ANALYSIS["qualitative"]["excerpt_chars"] if ANALYSIS else 0,
    script:
        "../workflow/scripts/qualitative.py"
