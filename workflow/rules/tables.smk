# One comparison table (TSV + Markdown) and plot per stage, from all of its runs.
TABLE_INPUTS = {
    "evaluate": {
        "metrics": paths(PLAN.generation_runs("evaluate"), "evaluate", "metrics.json"),
        "records": paths(PLAN.generation_runs("evaluate"), "evaluate", "records.jsonl"),
    },
    "self_consistency": {
        "metrics": paths(
            PLAN.generation_runs("self_consistency"), "self_consistency", "metrics.json"
        ),
        "records": paths(
            PLAN.generation_runs("self_consistency"),
            "self_consistency",
            "records.jsonl",
        ),
    },
    "grpo": {
        "metrics": paths(PLAN.grpo_runs(), "grpo", "metrics.json"),
        "logs": paths(PLAN.grpo_runs(), "grpo", "log.csv"),
    },
    "distill": {
        "metrics": paths(PLAN.distill_runs(), "distill", "metrics.json"),
        "logs": paths(PLAN.distill_runs(), "distill", "log.csv"),
        "evaluations": paths(PLAN.student_evaluations(), "evaluate", "metrics.json"),
        "evaluation_records": paths(
            PLAN.student_evaluations(), "evaluate", "records.jsonl"
        ),
    },
}
TABLE_CATEGORIES = {
    "evaluate": "Evaluation",
    "self_consistency": "Self-consistency",
    "grpo": "GRPO",
    "distill": "Distillation",
}


for stage, category in TABLE_CATEGORIES.items():

    rule:
        name:
            f"{stage}_table"
        input:
            **TABLE_INPUTS[stage],
        output:
            tsv=report(
                f"results/tables/{stage}.tsv",
                caption=f"../report/{stage}_table.rst",
                category=category,
            ),
            md=report(
                f"results/tables/{stage}.md",
                caption=f"../report/{stage}_table.rst",
                category=category,
            ),
            plot=report(
                f"results/plots/{stage}.png",
                caption=f"../report/{stage}_plot.rst",
                category=category,
            ),
        log:
            f"results/logs/tables/{stage}.log",
        benchmark:
            f"results/benchmarks/tables/{stage}.tsv"
        localrule: True
        threads: 1
        resources:
            mem_mb=1000,
            runtime="10m",
        params:
            stage=stage,
            skipped=PLAN.skipped(stage),
            code=CODE["table"],
        script:
            "../scripts/table.py"


rule story_table:
    input:
        self_consistency="results/tables/self_consistency.tsv",
        grpo="results/tables/grpo.tsv",
        distill="results/tables/distill.tsv",
    output:
        tsv=report(
            "results/tables/story.tsv",
            caption="../report/story_table.rst",
            category="Story",
        ),
        md=report(
            "results/tables/story.md",
            caption="../report/story_table.rst",
            category="Story",
        ),
        plot=report(
            "results/plots/story.png",
            caption="../report/story_plot.rst",
            category="Story",
        ),
    log:
        "results/logs/tables/story.log",
    benchmark:
        "results/benchmarks/tables/story.tsv"
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        code=CODE["story"],
    script:
        "../scripts/story.py"
