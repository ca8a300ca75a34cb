# One comparison table (TSV + Markdown) and plot per stage, from all of its runs.
TABLE_CATEGORIES = {
    "evaluate": "Evaluation",
    "workload": "Evaluation",
    "self_consistency": "Self-consistency",
    "self_consistency_curve": "Self-consistency",
    "grpo": "GRPO",
    "distill": "Distillation",
}


for stage, category in TABLE_CATEGORIES.items():

    rule:
        name:
            f"{stage}_table"
        input:
            unpack(table_inputs(stage)),
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


rule autotune_table:
    input:
        autotune=[probe.path() for probe in PLAN.probes()],
    output:
        tsv=report(
            "results/tables/autotune.tsv",
            caption="../report/autotune_table.rst",
            category="Batch sizes (auto)",
        ),
        md=report(
            "results/tables/autotune.md",
            caption="../report/autotune_table.rst",
            category="Batch sizes (auto)",
        ),
        plot=report(
            "results/plots/autotune.png",
            caption="../report/autotune_plot.rst",
            category="Batch sizes (auto)",
        ),
    log:
        "results/logs/tables/autotune.log",
    benchmark:
        "results/benchmarks/tables/autotune.tsv"
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        stage="autotune",
        skipped=[],
        code=CODE["table"],
    script:
        "../scripts/table.py"
