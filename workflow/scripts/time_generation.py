from batched_reasoning.core.io import log_to
from batched_reasoning.core.timing import Repeats
from batched_reasoning.stages.timing import time_generation

with log_to(snakemake.log[0]):
    time_generation(
        snakemake.input.model, snakemake.input.records, snakemake.output.records,
        snakemake.output.metrics,
        strategies=snakemake.params.strategies,
        batch_size=int(snakemake.wildcards.batch_size),
        device=snakemake.wildcards.device,
        dtype=snakemake.params.dtype,
        compile=snakemake.params.compile,
        max_new_tokens=snakemake.params.max_new_tokens,
        prompt_style=snakemake.params.prompt_style,
        threads=snakemake.threads,
        n_problems=snakemake.params.problems,
        repeats=Repeats.from_config(snakemake.params.timing),
        **snakemake.params.sampling,
        seed=snakemake.params.seed,
        params=dict(snakemake.params.items()),
        labels=dict(snakemake.wildcards.items()),
    )
