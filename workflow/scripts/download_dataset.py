from pathlib import Path

from batched_reasoning.data.records import import_records
from batched_reasoning.data.hub import download_dataset_file
from batched_reasoning.core.io import log_to

source, records = snakemake.params.source, snakemake.output.records
with log_to(snakemake.log[0]):
    # the download keeps its file's suffix: it says how to read it (JSON, JSONL, Parquet)
    raw = download_dataset_file(
        source["repo_id"], source["filename"],
        records + ".download" + Path(source["filename"]).suffix, source["revision"],
    )
    import_records(raw, records)
    raw.unlink()
