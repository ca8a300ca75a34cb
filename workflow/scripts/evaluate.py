from batched_reasoning.core.io import log_to
from batched_reasoning.stages.evaluate import EvaluationSettings, evaluate

params, wildcards, output = dict(snakemake.params.items()), snakemake.wildcards, snakemake.output
with log_to(snakemake.log[0], note=f"the job's model: {snakemake.params.model_entry}"):
    settings = EvaluationSettings.from_params(
        params, strategy=wildcards.strategy, batch_size=int(wildcards.batch_size),
        device=wildcards.device, threads=snakemake.threads)
    evaluate(snakemake.input.model, snakemake.input.batches, snakemake.input.stats,
             output.generations, output.metrics, settings, params, dict(wildcards.items()))
