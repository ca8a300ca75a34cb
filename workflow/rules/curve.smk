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
        settings=lambda w: PLAN.curve_settings(w.stage, int(w.batch_size)),
        dtype=WIRE.dtype_of,
        compile=WIRE.compile_of,
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        seed=WIRE.seed_of,
        code=CODE["time_generation"],
    script:
        "../scripts/time_generation.py"
