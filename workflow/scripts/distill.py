from pathlib import Path

from batched_reasoning.core.io import log_to
from batched_reasoning.stages.distill import DistillSettings, distill
from batched_reasoning.training.distributed import launch
from batched_reasoning.training.settings import TrainingFiles

params, wildcards, output = dict(snakemake.params.items()), snakemake.wildcards, snakemake.output
with log_to(snakemake.log[0], note=f"the job's model: {snakemake.params.model_entry}"):
    settings = DistillSettings.from_params(
        params, batch_size=int(wildcards.batch_size), device=wildcards.device,
        threads=snakemake.threads)
    files = TrainingFiles(
        model=output.model, log_csv=output.log_csv, curve_png=output.curve,
        metrics_json=output.metrics,
        # not an output: survives a failed job, so its rerun resumes
        work_dir=str(Path(output.metrics).parent / "checkpoints"))
    launch(distill, int(wildcards.world_size), snakemake.input.model, snakemake.input.teacher,
           files, settings, params, dict(wildcards.items()))
