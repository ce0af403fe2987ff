rule retrieval_diagnostics:
    input:
        questions="results/{corpus}/corpus/questions.jsonl",
        cells=lambda wc: retrieval_cells(wc.corpus),
        verdicts=lambda wc: budget_verdict_files(wc.corpus),
        doctor=expand("results/{{corpus}}/doctor/{system}.json", system=ALL_SYSTEMS),
    output:
        csv=report(
            "results/{corpus}/diagnostics/retrieval.csv",
            caption="../report/retrieval_diagnostics.rst",
            category="Retrieval",
        ),
        md="results/{corpus}/diagnostics/retrieval.md",
    log:
        "results/logs/diagnostics/{corpus}.log",
    conda:
        "../envs/srb.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid=lambda wc: retrieval_grid(),
        systems=ALL_SYSTEMS,
        tolerance=config["budget_tolerance"],
        gate=config["budget_gate"],
    script:
        "../workflow/scripts/retrieval_diagnostics.py"
