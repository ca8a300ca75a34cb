DISTILLATION = TrainingRun.pattern(root=RESULTS, stage="distill")


rule teacher_traces:
    input:
        unpack(WIRE.teacher_input),
    output:
        teacher=teacher_path("{dataset}"),
    log:
        out("logs/teacher_traces/{dataset}.log"),
    benchmark:
        out("benchmarks/teacher_traces/{dataset}.tsv")
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime="30m",
    params:
        teacher=DISTILL["teacher"],
        code=CODE["make_teacher_traces"],
    script:
        "../scripts/make_teacher_traces.py"


rule distill:
    input:
        model=WIRE.model_input,
        teacher=teacher_path("{dataset}"),
    output:
        model=directory(f"{DISTILLATION}/model"),
        log_csv=f"{DISTILLATION}/log.csv",
        metrics=f"{DISTILLATION}/metrics.json",
        curve=report(
            f"{DISTILLATION}/curve.png",
            caption="../report/distill_curve.rst",
            category="Distillation",
            subcategory="Loss curves",
        ),
    log:
        out(
            "seed{seed}/logs/distill/{model}/{dataset}/bs{batch_size}/{device}/ws{world_size}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/distill/{model}/{dataset}/bs{batch_size}/{device}/ws{world_size}.tsv"
        )
    conda:
        "../envs/batched-reasoning.yaml"
    threads: WIRE.training_resource("distill", "cpus_per_task")
    resources:
        **PARTITION,
        timing=1,
        mem_mb=WIRE.training_resource("distill", "mem_mb"),
        runtime="12h",
        gpu=WIRE.training_resource("distill", "gpu"),
        cpus_per_task=WIRE.training_resource("distill", "cpus_per_task"),
    params:
        **PLAN.settings("distill"),
        dtype=WIRE.dtype_of,
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        teacher=DISTILL["teacher"],
        seed=WIRE.seed_of,
        code=CODE["distill"],
    script:
        "../scripts/distill.py"
