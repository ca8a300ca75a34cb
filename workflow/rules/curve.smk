POINT = CurvePoint.pattern(root=RESULTS)


# The batching curves: one job per stage, model, dataset, batch size, device and thread count
# times every configured strategy at that size (warm-up excluded, repeats, intervals).
rule time_generation:
    input:
        model=WIRE.model_input,
        records=WIRE.dataset_file,
    output:
        records=f"{POINT}/records.jsonl",
        metrics=f"{POINT}/metrics.json",
    log:
        out(
            "seed{seed}/logs/curve/{stage}/{model}/{dataset}/bs{batch_size}/{device}/t{threads}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/curve/{stage}/{model}/{dataset}/bs{batch_size}/{device}/t{threads}.tsv"
        )
    wildcard_constraints:
        stage=r"evaluate|self_consistency",
    conda:
        "../envs/batched-reasoning.yaml"
    threads: lambda wildcards: int(wildcards.threads)
    resources:
        **PARTITION,
        timing=1,
        mem_mb=WIRE.curve_resource("mem_mb"),
        runtime="2h",
        gpu=WIRE.curve_resource("gpu"),
    params:
        strategies=lambda w: PLAN.curve_strategies(w.stage, int(w.batch_size)),
        problems=lambda w: PLAN.curve_setting(w.stage)["problems"],
        timing=config["timing"],
        sampling=lambda w: PLAN.curve_sampling(w.stage),
        dtype=WIRE.dtype_of,
        compile=WIRE.compile_of,
        max_new_tokens=lambda w: config[w.stage]["max_new_tokens"],
        prompt_style=WIRE.prompt_style_of,
        seed=WIRE.seed_of,
        code=CODE["time_generation"],
    script:
        "../scripts/time_generation.py"
