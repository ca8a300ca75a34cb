from batched_reasoning.core.io import log_to
from batched_reasoning.stages.grpo import GRPOSettings, train_grpo
from batched_reasoning.training.distributed import launch
from batched_reasoning.training.settings import TrainingFiles

params, wildcards, output = dict(snakemake.params.items()), snakemake.wildcards, snakemake.output
with log_to(snakemake.log[0], note=f"the job's model: {snakemake.params.model_entry}"):
    settings = GRPOSettings.from_params(
        params, strategy=wildcards.strategy, batch_size=int(wildcards.batch_size),
        device=wildcards.device, threads=snakemake.threads)
    files = TrainingFiles(model=output.model, log_csv=output.log, curve_png=output.curve,
                          metrics_json=output.metrics, work_dir=params["checkpoints"])
    launch(train_grpo, int(wildcards.world_size), snakemake.input.model, snakemake.input.train,
           snakemake.input.test, files, settings, params, dict(wildcards.items()))
