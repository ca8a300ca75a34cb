from batched_reasoning.core.io import log_to
from batched_reasoning.stages.pretrain import pretrain

with log_to(snakemake.log[0]):
    pretrain(
        snakemake.input.init, snakemake.input.train, snakemake.output.model,
        snakemake.params.checkpoints, snakemake.output.log_csv, snakemake.output.plot,
        snakemake.output.metrics,
        steps=snakemake.params.steps, batch_size=snakemake.params.batch_size,
        lr=snakemake.params.lr, warmup=snakemake.params.warmup,
        weight_decay=snakemake.params.weight_decay,
        worked_share=snakemake.params.worked_share,
        checkpoint_every=snakemake.params.checkpoint_every, seed=snakemake.params.seed,
        device=snakemake.params.device, threads=snakemake.threads,
        params=dict(snakemake.params.items()),
    )
