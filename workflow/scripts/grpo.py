from batched_reasoning.training.distributed import launch
from batched_reasoning.stages.grpo import train_grpo
from batched_reasoning.core.io import log_to

p = snakemake.params
with log_to(snakemake.log[0]):
    launch(
        train_grpo, int(snakemake.wildcards.world_size),
        snakemake.input.model, snakemake.input.train, snakemake.input.test,
        snakemake.output.model, snakemake.output.log, snakemake.output.metrics,
        snakemake.output.curve, p.checkpoints,
        strategy=snakemake.wildcards.strategy,
        batch_size=int(snakemake.wildcards.batch_size),
        device=snakemake.wildcards.device,
        dtype=p.dtype, steps=p.steps, num_rollouts=p.num_rollouts,
        problems_per_step=p.problems_per_step,
        max_new_tokens=p.max_new_tokens, temperature=p.temperature, top_p=p.top_p, lr=p.lr,
        grad_clip=p.grad_clip, seed=p.seed, checkpoint_every=p.checkpoint_every,
        eval_every=p.eval_every, eval_problems=p.eval_problems,
        train_problems=p.train_problems, skip_zero_advantage=p.skip_zero_advantage,
        prompt_style=p.prompt_style, threads=snakemake.threads,
        params=dict(p.items()),
        labels=dict(snakemake.wildcards.items()),
    )
