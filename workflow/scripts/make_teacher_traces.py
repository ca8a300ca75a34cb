from batched_reasoning.core.io import log_to
from batched_reasoning.world.teacher import prepare_teacher

with log_to(snakemake.log[0]):
    prepare_teacher(
        snakemake.params.teacher, snakemake.output.teacher,
        train_path=snakemake.input.get("train"), source_path=snakemake.input.get("source"),
    )
