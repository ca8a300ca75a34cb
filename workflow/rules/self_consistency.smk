rule self_consistency:
    input:
        model=model_input,
        records=dataset_file,
    output:
        records=out(
            "seed{seed}/self_consistency/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/records.jsonl"
        ),
        metrics=out(
            "seed{seed}/self_consistency/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/metrics.json"
        ),
    log:
        out(
            "seed{seed}/logs/self_consistency/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/self_consistency/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.tsv"
        )
    threads: config["threads"]
    resources:
        **PARTITION,
        timing=1,
        mem_mb=generation_resource("self_consistency", "mem_mb"),
        runtime="4h",
        gpu=generation_resource("self_consistency", "gpu"),
    params:
        dtype=dtype_of,
        compile=compile_of,
        prompt_style=prompt_style_of,
        num_samples=SC["num_samples"],
        temperature=SC["temperature"],
        top_p=SC["top_p"],
        max_new_tokens=SC["max_new_tokens"],
        prompt_suffix=SC["prompt_suffix"],
        early_stop=SC["early_stop"],
        limit=SC["limit"],
        seed=seed_of,
        code=CODE["self_consistency"],
    script:
        "../scripts/self_consistency.py"
