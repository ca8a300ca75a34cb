# One evaluation run's folder (src/batched_reasoning/workflow/paths.py)
EVALUATION = GenerationRun.pattern(root=RESULTS, stage="evaluate")


rule evaluate:
    input:
        model=WIRE.model_input,
        batches=out("seed{seed}/tokenized/{model}/{dataset}/bs{batch_size}.safetensors"),
        stats=out("seed{seed}/tokenized/{model}/{dataset}/bs{batch_size}.stats.json"),
    output:
        generations=f"{EVALUATION}/generations.jsonl",
        metrics=f"{EVALUATION}/generation.json",
    log:
        out(
            "seed{seed}/logs/evaluate/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/evaluate/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.tsv"
        )
    conda:
        "../envs/batched-reasoning.yaml"
    threads: config["threads"]
    resources:
        **PARTITION,
        timing=1,
        mem_mb=WIRE.generation_resource("evaluate", "mem_mb"),
        runtime="2h",
        gpu=WIRE.generation_resource("evaluate", "gpu"),
    params:
        **PLAN.settings("evaluate"),
        dtype=WIRE.dtype_of,
        compile=WIRE.compile_of,
        prompt_style=WIRE.prompt_style_of,
        model_entry=WIRE.model_entry_of,
        seed=WIRE.seed_of,
        code=CODE["evaluate"],
    script:
        "../scripts/evaluate.py"


# Grading in a job of its own: a change to the grader regrades, and generates nothing again.
rule grade:
    input:
        problems=WIRE.dataset_file,
        generations=f"{EVALUATION}/generations.jsonl",
        generation=f"{EVALUATION}/generation.json",
    output:
        records=f"{EVALUATION}/records.jsonl",
        metrics=f"{EVALUATION}/metrics.json",
    log:
        out(
            "seed{seed}/logs/grade/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.log"
        ),
    benchmark:
        out(
            "seed{seed}/benchmarks/grade/{model}/{dataset}/{strategy}/bs{batch_size}/{device}.tsv"
        )
    localrule: True
    conda:
        "../envs/batched-reasoning.yaml"
    threads: 1
    resources:
        mem_mb=1000,
        runtime="30m",
    params:
        code=CODE["grade"],
    script:
        "../scripts/grade.py"
