from batched_reasoning.core.io import log_to
from batched_reasoning.stages.pretrain import PretrainSettings, pretrain
from batched_reasoning.training.settings import TrainingFiles

params, output = dict(snakemake.params.items()), snakemake.output
with log_to(snakemake.log[0]):
    settings = PretrainSettings.from_params(params, threads=snakemake.threads)
    files = TrainingFiles(model=output.model, log_csv=output.log_csv, curve_png=output.plot,
                          metrics_json=output.metrics, work_dir=params["checkpoints"])
    pretrain(snakemake.input.init, snakemake.input.train, files, settings, params)
