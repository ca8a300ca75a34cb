from batched_reasoning.core.io import log_to
from batched_reasoning.world.toy import build_toy_model

with log_to(snakemake.log[0]):
    build_toy_model(
        snakemake.input.tokenizer, snakemake.output.init,
        architecture=dict(snakemake.params.architecture), seed=snakemake.params.seed,
    )
