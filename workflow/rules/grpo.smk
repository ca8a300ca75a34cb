GRPO_DIR = TrainingRun.pattern(root=RESULTS, stage="grpo")


rule grpo:
    input:
        model=WIRE.model_input,
        train=dataset_path("{dataset}", "train"),
        test=dataset_path("{dataset}", "test"),
    output:
        log=f"{GRPO_DIR}/log.csv",
        metrics=f"{GRPO_DIR}/metrics.json",
        curve=report(
            f"{GRPO_DIR}/curve.png",
            caption="../report/grpo_curve.rst",
            category="GRPO",
            subcategory="Learning curves",
        ),
        model=directory(f"{GRPO_DIR}/model"),
    log:
        out(
            "seed{seed}/logs/grpo/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/ws{world_size}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/grpo/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/ws{world_size}.tsv"
        )
    conda:
        "../envs/batched-reasoning.yaml"
    threads: WIRE.training_resource("grpo", "cpus_per_task")
    resources:
        **PARTITION,
        timing=1,
        mem_mb=WIRE.training_resource("grpo", "mem_mb"),
        runtime="8h",
        gpu=WIRE.training_resource("grpo", "gpu"),
        cpus_per_task=WIRE.training_resource("grpo", "cpus_per_task"),
    params:
        **PLAN.settings("grpo"),
        # Resume state: not a declared output, so a killed job's checkpoints survive Snakemake's
        # cleanup of failed outputs and the rerun continues from the latest one.
        checkpoints=f"{GRPO_DIR}/checkpoints",
        dtype=WIRE.dtype_of,
        compile=WIRE.compile_of,
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        seed=WIRE.seed_of,
        code=CODE["grpo"],
    script:
        "../scripts/grpo.py"
