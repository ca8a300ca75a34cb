from batched_reasoning.data.hub import download_model
from batched_reasoning.core.io import log_to
from batched_reasoning.workflow.plan import check_shape

with log_to(snakemake.log[0]):
    download_model(snakemake.params.repo_id, snakemake.output.model, snakemake.params.revision)
    check_shape(
        snakemake.output.model, snakemake.params.shape, f"models.{snakemake.wildcards.model}.shape"
    )
