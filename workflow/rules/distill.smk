rule teacher_traces:
    input:
        unpack(teacher_input),
    output:
        teacher="resources/teacher/{dataset}.json",
    log:
        out("logs/teacher_traces/{dataset}.log"),
    benchmark:
        out("benchmarks/teacher_traces/{dataset}.tsv")
    localrule: True
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
        model=model_input,
        teacher="resources/teacher/{dataset}.json",
    output:
        model=directory(
            out(
                "seed{seed}/distill/{model}/{dataset}/bs{batch_size}/{device}/ws{world_size}/model"
            )
        ),
        log_csv=out(
            "seed{seed}/distill/{model}/{dataset}/bs{batch_size}/{device}/ws{world_size}/log.csv"
        ),
        metrics=out(
            "seed{seed}/distill/{model}/{dataset}/bs{batch_size}/{device}/ws{world_size}/metrics.json"
        ),
        curve=report(
            out(
                "seed{seed}/distill/{model}/{dataset}/bs{batch_size}/{device}/ws{world_size}/curve.png"
            ),
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
    threads: training_resource("distill", "cpus_per_task")
    resources:
        **PARTITION,
        timing=1,
        mem_mb=training_resource("distill", "mem_mb"),
        runtime="12h",
        gpu=training_resource("distill", "gpu"),
        cpus_per_task=training_resource("distill", "cpus_per_task"),
    params:
        dtype=dtype_of,
        prompt_style=prompt_style_of,
        examples_per_step=DISTILL["examples_per_step"],
        epochs=DISTILL["epochs"],
        lr=DISTILL["lr"],
        max_seq_len=DISTILL["max_seq_len"],
        validation_size=DISTILL["validation_size"],
        max_examples=DISTILL["max_examples"],
        use_think_tokens=DISTILL["use_think_tokens"],
        sort_by_length=DISTILL["sort_by_length"],
        grad_clip=DISTILL["grad_clip"],
        log_every=DISTILL["log_every"],
        checkpoint_every=DISTILL["checkpoint_every"],
        teacher=DISTILL["teacher"],
        seed=seed_of,
        code=CODE["distill"],
    script:
        "../scripts/distill.py"
