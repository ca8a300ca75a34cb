from batched_reasoning.core.io import log_to
from batched_reasoning.workflow.stage_tables import make_table

with log_to(snakemake.log[0]):
    make_table(
        snakemake.params.stage,
        dict(snakemake.input.items()),
        dict(snakemake.output.items()),
        snakemake.params.skipped,
    )
