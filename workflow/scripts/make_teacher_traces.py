from batched_reasoning.distill import prepare_teacher
from batched_reasoning.io import log_to

with log_to(snakemake.log[0]):
    prepare_teacher(
        snakemake.params.teacher, snakemake.output[0],
        train_path=snakemake.input.get("train"), source_path=snakemake.input.get("source"),
    )
