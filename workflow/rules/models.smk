rule download_model:
    output:
        model=directory(download_path("{model}")),
    log:
        out("logs/download_model/{model}.log"),
    benchmark:
        out("benchmarks/download_model/{model}.tsv")
    wildcard_constraints:
        model=WIRE.names_of("hub", "models"),
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
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


rule build_toy_tokenizer:
    input:
        train=dataset_path("arith", "train"),
    output:
        tokenizer=directory(ToyTokenizer.pattern(root=RESULTS)),
    log:
        out("logs/build_toy_tokenizer/{model}.log"),
    benchmark:
        out("benchmarks/build_toy_tokenizer/{model}.tsv")
    wildcard_constraints:
        model=WIRE.names_of("toy", "models"),
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        vocab_size=config["toy"]["vocab_size"],
        code=CODE["build_toy_tokenizer"],
    script:
        "../scripts/build_toy_tokenizer.py"


rule build_toy_model:
    input:
        tokenizer=ToyTokenizer.pattern(root=RESULTS),
    output:
        init=directory(Pretraining.pattern("init", RESULTS)),
    log:
        out("seed{seed}/logs/build_toy_model/{model}.log"),
    benchmark:
        out("seed{seed}/benchmarks/build_toy_model/{model}.tsv")
    wildcard_constraints:
        model=WIRE.names_of("toy", "models"),
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime="10m",
    params:
        architecture=config["toy"],
        seed=WIRE.seed_of,
        code=CODE["build_toy_model"],
    script:
        "../scripts/build_toy_model.py"


rule pretrain:
    input:
        init=Pretraining.pattern("init", RESULTS),
        train=dataset_path("arith", "train"),
    output:
        model=directory(Pretraining.pattern("model", RESULTS)),
        log_csv=Pretraining.pattern("log.csv", RESULTS),
        metrics=Pretraining.pattern("metrics.json", RESULTS),
        plot=report(
            Pretraining.pattern("loss.png", RESULTS),
            caption="../report/pretrain.rst",
            category="Pretraining",
        ),
    log:
        out("seed{seed}/logs/pretrain/{model}.log"),
    benchmark:
        out("seed{seed}/benchmarks/pretrain/{model}.tsv")
    wildcard_constraints:
        model=WIRE.names_of("toy", "models"),
    conda:
        "../envs/batched-reasoning.yaml"
    threads: config["threads"]
    resources:
        mem_mb=2000,
        runtime="1h",
        gpu=1 if config["pretrain"]["device"] == "cuda" else 0,
    params:
        **PLAN.settings("pretrain"),
        checkpoints=Pretraining.pattern("checkpoints", RESULTS),
        seed=WIRE.seed_of,
        code=CODE["pretrain"],
    script:
        "../scripts/pretrain.py"
