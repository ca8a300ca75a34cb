from batched_reasoning.hub import download_model
from batched_reasoning.io import log_to

with log_to(snakemake.log[0]):
    download_model(snakemake.params.repo_id, snakemake.output[0], snakemake.params.revision)
