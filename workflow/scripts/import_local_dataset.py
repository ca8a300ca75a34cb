from batched_reasoning.data.records import import_records
from batched_reasoning.core.io import log_to

with log_to(snakemake.log[0]):
    import_records(snakemake.input.source, snakemake.output.records)
