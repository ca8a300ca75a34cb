# Appendix E's table: each workload one at a time against batched. Evaluation and
# self-consistency come from their batching curves (curve.smk); GRPO and distillation time their
# first steps here, under each setting from the same starting weights.
rule time_training:
    input:
        unpack(autotune_input),
    output:
        metrics=out(
            "seed{seed}/timed_training/{stage}/{model}/{dataset}/{device}/t{threads}/metrics.json"
        ),
    log:
        out(
            "seed{seed}/logs/timed_training/{stage}/{model}/{dataset}/{device}/t{threads}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/timed_training/{stage}/{model}/{dataset}/{device}/t{threads}.tsv"
        )
    wildcard_constraints:
        stage=r"grpo|distill",
    threads: lambda wildcards: int(wildcards.threads)
    resources:
        **PARTITION,
        timing=1,
        mem_mb=timed_training_resource("mem_mb"),
        runtime="2h",
        gpu=timed_training_resource("gpu"),
    params:
        config=lambda w: config[w.stage],
        settings=lambda w: PLAN.timed_settings(
            w.stage, int(w.seed), w.model, w.dataset, w.device
        ),
        timing=config["timing"],
        dtype=dtype_of,
        prompt_style=prompt_style_of,
        seed=seed_of,
        code=CODE["time_training"],
    script:
        "../scripts/time_training.py"


rule appendix_e_table:
    input:
        unpack(lambda wildcards: PLAN.appendix_inputs()),
        book="workflow/resources/appendix_e8_book.tsv",
    output:
        tsv=report(
            out("tables/appendix_e.tsv"),
            caption="../report/appendix_e_table.rst",
            category="Appendix E",
        ),
        md=report(
            out("tables/appendix_e.md"),
            caption="../report/appendix_e_table.rst",
            category="Appendix E",
        ),
        plot=report(
            out("plots/appendix_e.png"),
            caption="../report/appendix_e_plot.rst",
            category="Appendix E",
        ),
    log:
        out("logs/tables/appendix_e.log"),
    benchmark:
        out("benchmarks/tables/appendix_e.tsv")
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        configured=PLAN.configured_settings(),
        code=CODE["appendix_e"],
    script:
        "../scripts/appendix_e.py"
