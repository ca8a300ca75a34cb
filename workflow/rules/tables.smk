rule evaluate_table:
    input:
        metrics=eval_path("metrics.json"),
        records=eval_path("records.jsonl"),
    output:
        tsv=report(
            "results/tables/evaluate.tsv",
            caption="../report/evaluate_table.rst",
            category="Evaluation",
        ),
        md=report(
            "results/tables/evaluate.md",
            caption="../report/evaluate_table.rst",
            category="Evaluation",
        ),
        plot=report(
            "results/plots/evaluate.png",
            caption="../report/evaluate_plot.rst",
            category="Evaluation",
        ),
    log:
        "results/logs/tables/evaluate.log",
    benchmark:
        "results/benchmarks/tables/evaluate.tsv"
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        code=CODE["tables"],
    script:
        "../scripts/evaluate_table.py"
