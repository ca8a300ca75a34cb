from batched_reasoning.core.io import log_to
from batched_reasoning.stages.grade import vote_samples

with log_to(snakemake.log[0]):
    vote_samples(
        snakemake.input.problems, snakemake.input.samples, snakemake.input.sampling,
        snakemake.output.records, snakemake.output.metrics,
    )
