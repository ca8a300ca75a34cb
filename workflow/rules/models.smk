rule download_model:
    output:
        directory("resources/models/{model}"),
    log:
        "results/logs/download_model/{model}.log",
    benchmark:
        "results/benchmarks/download_model/{model}.tsv"
    wildcard_constraints:
        model=alternation(names_of("hub", "models")),
    localrule: True
    threads: 1
    resources:
        mem_mb=1000,
        runtime="1h",
    params:
        repo_id=lambda w: config["models"][w.model]["repo_id"],
        revision=lambda w: config["models"][w.model]["revision"],
        code=CODE["hub"],
    script:
        "../scripts/download_model.py"


rule build_toy_model:
    input:
        train="resources/data/arith/train.jsonl",
    output:
        directory("resources/models/{model}"),
    log:
        "results/logs/build_toy_model/{model}.log",
    benchmark:
        "results/benchmarks/build_toy_model/{model}.tsv"
    wildcard_constraints:
        model=alternation(names_of("toy", "models")),
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        architecture=config["toy"],
        seed=config["seed"],
        code=CODE["toy"],
    script:
        "../scripts/build_toy_model.py"
