from batched_reasoning.stages.tokenization import tokenize
from batched_reasoning.core.io import log_to

with log_to(snakemake.log[0], note=f"the job's model: {snakemake.params.model_entry}"):
    tokenize(
        snakemake.input.tokenizer, snakemake.input.records,
        snakemake.output.batches, snakemake.output.stats,
        prompt_style=snakemake.params.prompt_style,
        batch_size=int(snakemake.wildcards.batch_size),
        sort_by_length=snakemake.params.sort_by_length,
        limit=snakemake.params.limit,
    )
