rule tokenize:
    input:
        tokenizer=WIRE.tokenizer_input,
        records=WIRE.dataset_file,
    output:
        batches=out("seed{seed}/tokenized/{model}/{dataset}/bs{batch_size}.safetensors"),
        stats=out("seed{seed}/tokenized/{model}/{dataset}/bs{batch_size}.stats.json"),
    log:
        out("seed{seed}/logs/tokenize/{model}/{dataset}/bs{batch_size}.log"),
    benchmark:
        out("seed{seed}/benchmarks/tokenize/{model}/{dataset}/bs{batch_size}.tsv")
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        sort_by_length=EVAL["sort_by_length"],
        limit=EVAL["limit"],
        code=CODE["tokenize"],
    script:
        "../scripts/tokenize.py"
