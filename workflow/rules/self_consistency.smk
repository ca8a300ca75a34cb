SAMPLING = GenerationRun.pattern(root=RESULTS, stage="self_consistency")


rule self_consistency:
    input:
        model=WIRE.model_input,
        records=WIRE.dataset_file,
    output:
        samples=f"{SAMPLING}/samples.jsonl",
        metrics=f"{SAMPLING}/sampling.json",
    log:
        out(
            "seed{seed}/logs/self_consistency/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/self_consistency/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.tsv"
        )
    conda:
        "../envs/batched-reasoning.yaml"
    threads: config["threads"]
    resources:
        **PARTITION,
        timing=1,
        mem_mb=WIRE.generation_resource("self_consistency", "mem_mb"),
        runtime="4h",
        gpu=WIRE.generation_resource("self_consistency", "gpu"),
    params:
        **PLAN.settings("self_consistency"),
        dtype=WIRE.dtype_of,
        compile=WIRE.compile_of,
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        seed=WIRE.seed_of,
        code=CODE["self_consistency"],
    script:
        "../scripts/self_consistency.py"


# Voting and grading in a job of their own: a change to the grader regrades, and samples nothing
# again.
rule vote:
    input:
        problems=WIRE.dataset_file,
        samples=f"{SAMPLING}/samples.jsonl",
        sampling=f"{SAMPLING}/sampling.json",
    output:
        records=f"{SAMPLING}/records.jsonl",
        metrics=f"{SAMPLING}/metrics.json",
    log:
        out(
            "seed{seed}/logs/vote/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/vote/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.tsv"
        )
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime="30m",
    params:
        code=CODE["vote"],
    script:
        "../scripts/vote.py"
