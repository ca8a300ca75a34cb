rule download_model:
    output:
        model=directory("resources/models/{model}"),
    log:
        out("logs/download_model/{model}.log"),
    benchmark:
        out("benchmarks/download_model/{model}.tsv")
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
        init=directory(out("seed{seed}/pretrain/{model}/init")),
    log:
        out("seed{seed}/logs/build_toy_model/{model}.log"),
    benchmark:
        out("seed{seed}/benchmarks/build_toy_model/{model}.tsv")
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
        init=out("seed{seed}/pretrain/{model}/init"),
        train="resources/data/arith/train.jsonl",
    output:
        model=directory(out("seed{seed}/pretrain/{model}/model")),
        log_csv=out("seed{seed}/pretrain/{model}/log.csv"),
        metrics=out("seed{seed}/pretrain/{model}/metrics.json"),
        plot=report(
            out("seed{seed}/pretrain/{model}/loss.png"),
            caption="../report/pretrain.rst",
            category="Pretraining",
        ),
    log:
        out("seed{seed}/logs/pretrain/{model}.log"),
    benchmark:
        out("seed{seed}/benchmarks/pretrain/{model}.tsv")
    wildcard_constraints:
        model=alternation(names_of("toy", "models")),
    threads: config["threads"]
    resources:
        mem_mb=2000,
        runtime="1h",
        gpu=1 if config["pretrain"]["device"] == "cuda" else 0,
    params:
        checkpoints=out("seed{seed}/pretrain/{model}/checkpoints"),
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
