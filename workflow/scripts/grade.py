from batched_reasoning.core.io import log_to
from batched_reasoning.stages.grade import grade_answers

with log_to(snakemake.log[0]):
    grade_answers(
        snakemake.input.problems, snakemake.input.generations, snakemake.input.generation,
        snakemake.output.records, snakemake.output.metrics,
    )
