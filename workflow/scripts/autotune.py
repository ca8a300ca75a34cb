from batched_reasoning.workflow.autotune import probe
from batched_reasoning.core.io import log_to

w = snakemake.wildcards
with log_to(snakemake.log[0], note=f"the job's model: {snakemake.params.model_entry}"):
    probe(
        w.stage, snakemake.input.model, snakemake.input.records, snakemake.output.json,
        device=w.device,
        dtype=snakemake.params.dtype,
        compile=snakemake.params.compile,
        threads=snakemake.threads,
        prompt_style=snakemake.params.prompt_style,
        settings=dict(snakemake.params.settings),
        memory_budget_mb=snakemake.params.memory_budget_mb,
        seed=snakemake.params.seed,
        params=dict(snakemake.params.items()),
        labels={"seed": int(w.seed), "model": w.model, "dataset": w.dataset, "device": w.device},
    )
