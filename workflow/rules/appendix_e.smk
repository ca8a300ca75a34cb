# Appendix E's table: each workload one at a time against batched. Evaluation and
# self-consistency come from their batching curves (curve.smk); GRPO and distillation time their
# first steps here, under each setting from the same starting weights.
rule time_training:
    input:
        unpack(WIRE.autotune_input),
        probes=WIRE.probe_outputs,
    output:
        metrics=TimedTraining.pattern("metrics.json", RESULTS),
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
    conda:
        "../envs/batched-reasoning.yaml"
    threads: lambda wildcards: int(wildcards.threads)
    resources:
        **PARTITION,
        timing=1,
        mem_mb=WIRE.timed_training_resource("mem_mb"),
        runtime="2h",
        gpu=WIRE.timed_training_resource("gpu"),
    params:
        # the stage's settings, not its whole section: its world sizes do not change a timing
        config=lambda w: PLAN.settings(w.stage),
        timed_steps=lambda w: config[w.stage]["timed_steps"],
        settings=lambda w: PLAN.timed_settings(
            w.stage, int(w.seed), w.model, w.dataset, w.device
        ),
        timing=config["timing"],
        dtype=WIRE.dtype_of,
        compile=WIRE.stage_compile_of,
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        seed=WIRE.seed_of,
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
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        configured=PLAN.configured_settings(),
        code=CODE["appendix_e"],
    script:
        "../scripts/appendix_e.py"
