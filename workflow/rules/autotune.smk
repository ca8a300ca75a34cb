# `batch_sizes: auto`: a probe per stage, model, dataset and device measures batch sizes 1, 2,
# 4, ... and chooses one (src/batched_reasoning/workflow/autotune.py). A checkpoint: the runs at the
# chosen size, and the tables, are planned once it has run.


checkpoint autotune:
    input:
        unpack(WIRE.autotune_input),
    output:
        json=Probe.pattern(root=RESULTS),
    log:
        out("logs/autotune/seed{seed}/{stage}/{model}/{dataset}/{device}.log"),
    benchmark:
        out("benchmarks/autotune/seed{seed}/{stage}/{model}/{dataset}/{device}.tsv")
    wildcard_constraints:
        stage=r"evaluate|self_consistency|grpo|distill",
    conda:
        "../envs/batched-reasoning.yaml"
    threads: config["threads"]
    resources:
        # the same kind of node as the jobs it sizes, and no other timed job beside it
        **PARTITION,
        timing=1,
        mem_mb=WIRE.autotune_memory,
        runtime="2h",
        gpu=lambda w: 1 if w.device == "cuda" else 0,
    params:
        settings=lambda w: config[w.stage],
        memory_budget_mb=lambda w: config["memory_budget_mb"][w.device],
        dtype=WIRE.dtype_of,
        compile=WIRE.stage_compile_of,
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        seed=WIRE.seed_of,
        code=CODE["autotune"],
    script:
        "../scripts/autotune.py"
