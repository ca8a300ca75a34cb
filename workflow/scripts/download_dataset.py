from batched_reasoning.data.records import import_records
from batched_reasoning.data.hub import download_dataset_file
from batched_reasoning.core.io import log_to

with log_to(snakemake.log[0]):
    raw = download_dataset_file(
        snakemake.params.repo_id, snakemake.params.filename,
        snakemake.output.test + ".download", snakemake.params.revision,
    )
    import_records(raw, snakemake.output.test)
    raw.unlink()
