from batched_reasoning.core.io import log_to
from batched_reasoning.stages.timing import TimingSettings, time_generation

params, wildcards, output = dict(snakemake.params.items()), snakemake.wildcards, snakemake.output
with log_to(snakemake.log[0], note=f"the job's model: {snakemake.params.model_entry}"):
    settings = TimingSettings.from_params(
        params["settings"] | params, batch_size=int(wildcards.batch_size),
        device=wildcards.device, threads=snakemake.threads)
    time_generation(snakemake.input.model, snakemake.input.records, output.records,
                    output.metrics, settings, params, dict(wildcards.items()))
