from batched_reasoning.core.io import log_to
from batched_reasoning.core.timing import Repeats
from batched_reasoning.stages.training_timing import time_distill, time_grpo

params, wildcards = snakemake.params, snakemake.wildcards
time_stage = {"grpo": time_grpo, "distill": time_distill}[wildcards.stage]
settings = {"grpo": "settings", "distill": "batch_sizes"}[wildcards.stage]
decode = {} if params.compile is None else {"compile": params.compile}  # GRPO's rollouts
with log_to(snakemake.log[0], note=f"the job's model: {snakemake.params.model_entry}"):
    time_stage(
        snakemake.input.model,
        snakemake.input.records,
        snakemake.output.metrics,
        config=params.config,
        **{settings: params.settings},
        timed_steps=params.timed_steps,
        device=wildcards.device,
        dtype=params.dtype,
        threads=snakemake.threads,
        prompt_style=params.prompt_style,
        seed=params.seed,
        repeats=Repeats.from_config(snakemake.params.timing),
        params=dict(params.items()),
        labels=dict(wildcards.items()),
        **decode,
    )
