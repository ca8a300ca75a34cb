rule make_arith:
    output:
        train=dataset_path("{dataset}", "train"),
        test=dataset_path("{dataset}", "test"),
    log:
        out("logs/make_arith/{dataset}.log"),
    benchmark:
        out("benchmarks/make_arith/{dataset}.tsv")
    wildcard_constraints:
        dataset=WIRE.names_of("arith", "datasets"),
    conda:
        "../envs/batched-reasoning.yaml"
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
        records=dataset_path("{dataset}", "{split}"),
    log:
        out("logs/download_dataset/{dataset}/{split}.log"),
    benchmark:
        out("benchmarks/download_dataset/{dataset}/{split}.tsv")
    wildcard_constraints:
        dataset=WIRE.names_of("hub", "datasets"),
        split="train|test",
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=500,
        runtime="30m",
    params:
        source=lambda w: split_source(config["datasets"][w.dataset], w.split),
        code=CODE["download_dataset"],
    script:
        "../scripts/download_dataset.py"


rule import_local_dataset:
    input:
        source=lambda w: split_source(config["datasets"][w.dataset], w.split)["path"],
    output:
        records=dataset_path("{dataset}", "{split}"),
    log:
        out("logs/import_local_dataset/{dataset}/{split}.log"),
    benchmark:
        out("benchmarks/import_local_dataset/{dataset}/{split}.tsv")
    wildcard_constraints:
        dataset=WIRE.names_of("local", "datasets"),
        split="train|test",
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=500,
        runtime="5m",
    params:
        code=CODE["import_local_dataset"],
    script:
        "../scripts/import_local_dataset.py"
