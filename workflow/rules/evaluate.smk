rule evaluate:
    input:
        model=model_input,
        records=dataset_file,
        batches=out("seed{seed}/tokenized/{model}/{dataset}/bs{batch_size}.safetensors"),
        stats=out("seed{seed}/tokenized/{model}/{dataset}/bs{batch_size}.stats.json"),
    output:
        records=out(
            "seed{seed}/evaluate/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/records.jsonl"
        ),
        metrics=out(
            "seed{seed}/evaluate/{model}/{dataset}/{strategy}/bs{batch_size}/{device}/metrics.json"
        ),
    log:
        out(
            "seed{seed}/logs/evaluate/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/evaluate/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.tsv"
        )
    threads: config["threads"]
    resources:
        **PARTITION,
        timing=1,
        mem_mb=generation_resource("evaluate", "mem_mb"),
        runtime="2h",
        gpu=generation_resource("evaluate", "gpu"),
    params:
        dtype=dtype_of,
        compile=compile_of,
        max_new_tokens=EVAL["max_new_tokens"],
        prompt_style=prompt_style_of,
        seed=seed_of,
        code=CODE["evaluate"],
    script:
        "../scripts/evaluate.py"
