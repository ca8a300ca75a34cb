from batched_reasoning.core.io import log_to
from batched_reasoning.world.toy_tokenizer import build_toy_tokenizer

with log_to(snakemake.log[0]):
    build_toy_tokenizer(
        snakemake.input.train, snakemake.output.tokenizer,
        vocab_size=snakemake.params.vocab_size,
    )
