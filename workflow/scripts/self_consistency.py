from batched_reasoning.core.io import log_to
from batched_reasoning.stages.self_consistency import self_consistency

with log_to(snakemake.log[0]):
    self_consistency(
        snakemake.input.model, snakemake.input.records,
        snakemake.output.samples, snakemake.output.metrics,
        strategy=snakemake.wildcards.strategy,
        batch_size=int(snakemake.wildcards.batch_size),
        device=snakemake.wildcards.device,
        dtype=snakemake.params.dtype,
        compile=snakemake.params.compile,
        num_samples=snakemake.params.num_samples,
        temperature=snakemake.params.temperature,
        top_p=snakemake.params.top_p,
        max_new_tokens=snakemake.params.max_new_tokens,
        prompt_style=snakemake.params.prompt_style,
        prompt_suffix=snakemake.params.prompt_suffix,
        seed=snakemake.params.seed,
        early_stop=snakemake.params.early_stop,
        limit=snakemake.params.limit,
        threads=snakemake.threads,
        params=dict(snakemake.params.items()),
        labels=dict(snakemake.wildcards.items()),
    )
