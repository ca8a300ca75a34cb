rule make_arith:
    output:
        train="resources/data/{dataset}/train.jsonl",
        test="resources/data/{dataset}/test.jsonl",
    log:
        "results/logs/make_arith/{dataset}.log",
    benchmark:
        "results/benchmarks/make_arith/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternation(names_of("arith", "datasets")),
    threads: 1
    resources:
        mem_mb=500,
        runtime="5m",
    params:
        n_train=lambda w: config["datasets"][w.dataset]["n_train"],
        n_test=lambda w: config["datasets"][w.dataset]["n_test"],
        seed=lambda w: config["datasets"][w.dataset].get("seed", 0),
        code=CODE["make_arith"],
    script:
        "../scripts/make_arith.py"


rule download_dataset:
    output:
        test="resources/data/{dataset}/test.jsonl",
    log:
        "results/logs/download_dataset/{dataset}.log",
    benchmark:
        "results/benchmarks/download_dataset/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternation(names_of("hub", "datasets")),
    localrule: True
    threads: 1
    resources:
        mem_mb=500,
        runtime="30m",
    params:
        repo_id=lambda w: config["datasets"][w.dataset]["repo_id"],
        filename=lambda w: config["datasets"][w.dataset]["filename"],
        revision=lambda w: config["datasets"][w.dataset]["revision"],
        code=CODE["download_dataset"],
    script:
        "../scripts/download_dataset.py"


rule import_local_dataset:
    input:
        source=lambda w: config["datasets"][w.dataset]["path"],
    output:
        test="resources/data/{dataset}/test.jsonl",
    log:
        "results/logs/import_local_dataset/{dataset}.log",
    benchmark:
        "results/benchmarks/import_local_dataset/{dataset}.tsv"
    wildcard_constraints:
        dataset=alternation(names_of("local", "datasets")),
    localrule: True
    threads: 1
    resources:
        mem_mb=500,
        runtime="5m",
    params:
        code=CODE["import_local_dataset"],
    script:
        "../scripts/import_local_dataset.py"
