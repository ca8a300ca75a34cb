rule evaluate_table:
    input:
        metrics=sweep_paths("evaluate", "metrics.json"),
        records=sweep_paths("evaluate", "records.jsonl"),
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
        skipped=skipped_runs("evaluate"),
        code=CODE["evaluate_table"],
    script:
        "../scripts/evaluate_table.py"


rule self_consistency_table:
    input:
        metrics=sweep_paths("self_consistency", "metrics.json"),
        records=sweep_paths("self_consistency", "records.jsonl"),
    output:
        tsv=report(
            "results/tables/self_consistency.tsv",
            caption="../report/self_consistency_table.rst",
            category="Self-consistency",
        ),
        md=report(
            "results/tables/self_consistency.md",
            caption="../report/self_consistency_table.rst",
            category="Self-consistency",
        ),
        plot=report(
            "results/plots/self_consistency.png",
            caption="../report/self_consistency_plot.rst",
            category="Self-consistency",
        ),
    log:
        "results/logs/tables/self_consistency.log",
    benchmark:
        "results/benchmarks/tables/self_consistency.tsv"
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        skipped=skipped_runs("self_consistency"),
        code=CODE["self_consistency_table"],
    script:
        "../scripts/self_consistency_table.py"


rule grpo_table:
    input:
        metrics=grpo_paths("metrics.json"),
        logs=grpo_paths("log.csv"),
    output:
        tsv=report(
            "results/tables/grpo.tsv",
            caption="../report/grpo_table.rst",
            category="GRPO",
        ),
        md=report(
            "results/tables/grpo.md",
            caption="../report/grpo_table.rst",
            category="GRPO",
        ),
        plot=report(
            "results/plots/grpo.png",
            caption="../report/grpo_plot.rst",
            category="GRPO",
        ),
    log:
        "results/logs/tables/grpo.log",
    benchmark:
        "results/benchmarks/tables/grpo.tsv"
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        code=CODE["grpo_table"],
    script:
        "../scripts/grpo_table.py"


rule distill_table:
    input:
        metrics=distill_path("metrics.json"),
        logs=distill_path("log.csv"),
        evaluations=distill_evaluations(),
    output:
        tsv=report(
            "results/tables/distill.tsv",
            caption="../report/distill_table.rst",
            category="Distillation",
        ),
        md=report(
            "results/tables/distill.md",
            caption="../report/distill_table.rst",
            category="Distillation",
        ),
        plot=report(
            "results/plots/distill.png",
            caption="../report/distill_plot.rst",
            category="Distillation",
        ),
    log:
        "results/logs/tables/distill.log",
    benchmark:
        "results/benchmarks/tables/distill.tsv"
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        code=CODE["distill_table"],
    script:
        "../scripts/distill_table.py"
