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
            unpack(WIRE.table_inputs(stage)),
        output:
            tsv=report(
                out(f"tables/{stage}.tsv"),
                caption=f"../report/{stage}_table.rst",
                category=category,
            ),
            md=report(
                out(f"tables/{stage}.md"),
                caption=f"../report/{stage}_table.rst",
                category=category,
            ),
            plot=report(
                out(f"plots/{stage}.png"),
                caption=f"../report/{stage}_plot.rst",
                category=category,
            ),
        log:
            out(f"logs/tables/{stage}.log"),
        benchmark:
            out(f"benchmarks/tables/{stage}.tsv")
        localrule: True
        conda:
            "../envs/batched-reasoning.yaml"
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
        self_consistency=out("tables/self_consistency.tsv"),
        grpo=out("tables/grpo.tsv"),
        distill=out("tables/distill.tsv"),
    output:
        tsv=report(
            out("tables/story.tsv"),
            caption="../report/story_table.rst",
            category="Story",
        ),
        md=report(
            out("tables/story.md"),
            caption="../report/story_table.rst",
            category="Story",
        ),
        plot=report(
            out("plots/story.png"),
            caption="../report/story_plot.rst",
            category="Story",
        ),
    log:
        out("logs/tables/story.log"),
    benchmark:
        out("benchmarks/tables/story.tsv")
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
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
            out("tables/autotune.tsv"),
            caption="../report/autotune_table.rst",
            category="Batch sizes (auto)",
        ),
        md=report(
            out("tables/autotune.md"),
            caption="../report/autotune_table.rst",
            category="Batch sizes (auto)",
        ),
        plot=report(
            out("plots/autotune.png"),
            caption="../report/autotune_plot.rst",
            category="Batch sizes (auto)",
        ),
    log:
        out("logs/tables/autotune.log"),
    benchmark:
        out("benchmarks/tables/autotune.tsv")
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
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
