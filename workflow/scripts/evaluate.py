from batched_reasoning.stages.evaluate import evaluate
from batched_reasoning.core.io import log_to

with log_to(snakemake.log[0]):
    evaluate(
        snakemake.input.model, snakemake.input.batches, snakemake.input.stats,
        snakemake.output.generations, snakemake.output.metrics,
        strategy=snakemake.wildcards.strategy,
        batch_size=int(snakemake.wildcards.batch_size),
        device=snakemake.wildcards.device,
        dtype=snakemake.params.dtype,
        compile=snakemake.params.compile,
        max_new_tokens=snakemake.params.max_new_tokens,
        prompt_style=snakemake.params.prompt_style,
        threads=snakemake.threads,
        params=dict(snakemake.params.items()),
        labels=dict(snakemake.wildcards.items()),
    )
