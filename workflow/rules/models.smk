rule download_model:
    output:
        model=directory("resources/models/{model}"),
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
        shape=lambda w: config["models"][w.model]["shape"],
        code=CODE["download_model"],
    script:
        "../scripts/download_model.py"


rule build_toy_model:
    input:
        train="resources/data/arith/train.jsonl",
    output:
        init=directory("results/seed{seed}/pretrain/{model}/init"),
    log:
        "results/seed{seed}/logs/build_toy_model/{model}.log",
    benchmark:
        "results/seed{seed}/benchmarks/build_toy_model/{model}.tsv"
    wildcard_constraints:
        model=alternation(names_of("toy", "models")),
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        architecture=config["toy"],
        seed=seed_of,
        code=CODE["build_toy_model"],
    script:
        "../scripts/build_toy_model.py"


rule pretrain:
    input:
        init="results/seed{seed}/pretrain/{model}/init",
        train="resources/data/arith/train.jsonl",
    output:
        model=directory("results/seed{seed}/pretrain/{model}/model"),
        log_csv="results/seed{seed}/pretrain/{model}/log.csv",
        metrics="results/seed{seed}/pretrain/{model}/metrics.json",
        plot=report(
            "results/seed{seed}/pretrain/{model}/loss.png",
            caption="../report/pretrain.rst",
            category="Pretraining",
        ),
    log:
        "results/seed{seed}/logs/pretrain/{model}.log",
    benchmark:
        "results/seed{seed}/benchmarks/pretrain/{model}.tsv"
    wildcard_constraints:
        model=alternation(names_of("toy", "models")),
    threads: config["threads"]
    resources:
        mem_mb=2000,
        runtime="1h",
        gpu=1 if config["pretrain"]["device"] == "cuda" else 0,
    params:
        checkpoints="results/seed{seed}/pretrain/{model}/checkpoints",
        steps=config["pretrain"]["steps"],
        batch_size=config["pretrain"]["batch_size"],
        lr=config["pretrain"]["lr"],
        warmup=config["pretrain"]["warmup"],
        weight_decay=config["pretrain"]["weight_decay"],
        worked_share=config["pretrain"]["worked_share"],
        checkpoint_every=config["pretrain"]["checkpoint_every"],
        device=config["pretrain"]["device"],
        seed=seed_of,
        code=CODE["pretrain"],
    script:
        "../scripts/pretrain.py"
