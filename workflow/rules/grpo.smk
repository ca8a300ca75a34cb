GRPO_DIR = out(
    "seed{seed}/grpo/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/ws{world_size}"
)


rule grpo:
    input:
        model=model_input,
        train="resources/data/{dataset}/train.jsonl",
        test="resources/data/{dataset}/test.jsonl",
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
    threads: training_resource("grpo", "cpus_per_task")
    resources:
        **PARTITION,
        timing=1,
        mem_mb=training_resource("grpo", "mem_mb"),
        runtime="8h",
        gpu=training_resource("grpo", "gpu"),
        cpus_per_task=training_resource("grpo", "cpus_per_task"),
    params:
        # Resume state: not a declared output, so a killed job's checkpoints survive Snakemake's
        # cleanup of failed outputs and the rerun continues from the latest one.
        checkpoints=f"{GRPO_DIR}/checkpoints",
        dtype=dtype_of,
        steps=GRPO["steps"],
        problems_per_step=GRPO["problems_per_step"],
        num_rollouts=GRPO["num_rollouts"],
        max_new_tokens=GRPO["max_new_tokens"],
        temperature=GRPO["temperature"],
        top_p=GRPO["top_p"],
        lr=GRPO["lr"],
        grad_clip=GRPO["grad_clip"],
        checkpoint_every=GRPO["checkpoint_every"],
        eval_every=GRPO["eval_every"],
        eval_problems=GRPO["eval_problems"],
        train_problems=GRPO["train_problems"],
        skip_zero_advantage=GRPO["skip_zero_advantage"],
        prompt_style=prompt_style_of,
        seed=seed_of,
        code=CODE["grpo"],
    script:
        "../scripts/grpo.py"
