from pathlib import Path

from batched_reasoning.stages.distill import distill
from batched_reasoning.training.distributed import launch
from batched_reasoning.core.io import log_to

with log_to(snakemake.log[0]):
    p = snakemake.params
    launch(
        distill, int(snakemake.wildcards.world_size),
        snakemake.input.model, snakemake.input.teacher, snakemake.output.model,
        str(Path(snakemake.output.metrics).parent / "checkpoints"),  # not an output: survives a failed job
        snakemake.output.log_csv, snakemake.output.metrics, snakemake.output.curve,
        prompt_style=p.prompt_style, batch_size=int(snakemake.wildcards.batch_size),
        examples_per_step=p.examples_per_step,
        device=snakemake.wildcards.device, dtype=p.dtype, epochs=p.epochs, lr=p.lr,
        max_seq_len=p.max_seq_len, validation_size=p.validation_size,
        max_examples=p.max_examples,
        use_think_tokens=p.use_think_tokens, sort_by_length=p.sort_by_length,
        grad_clip=p.grad_clip, seed=p.seed, log_every=p.log_every,
        checkpoint_every=p.checkpoint_every, threads=snakemake.threads,
        params=dict(p.items()), labels=dict(snakemake.wildcards.items()),
    )
