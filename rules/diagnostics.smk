rule retrieval_diagnostics:
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        cells=lambda wc: retrieval_cells(wc.corpus),
    output:
        csv=report(
            "results/{corpus}/diagnostics/retrieval.csv",
            caption="../report/retrieval_diagnostics.rst",
            category="Retrieval",
        ),
        md="results/{corpus}/diagnostics/retrieval.md",
    params:
        grid=lambda wc: [
            (s, m, b) for s in SYSTEMS for m in MODALITIES for b in BUDGETS
        ],
    log:
        "results/logs/diagnostics/{corpus}.log",
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../workflow/scripts/retrieval_diagnostics.py"
