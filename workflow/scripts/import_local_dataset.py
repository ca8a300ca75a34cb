from batched_reasoning.data import import_records
from batched_reasoning.io import log_to

with log_to(snakemake.log[0]):
    import_records(snakemake.input.source, snakemake.output.test)
