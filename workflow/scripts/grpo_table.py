from batched_reasoning.io import log_to
from batched_reasoning.tables import grpo_table, plot_grpo, write_table

with log_to(snakemake.log[0]):
    table = grpo_table(snakemake.input.metrics)
    write_table(table, snakemake.output.tsv, snakemake.output.md, "GRPO with batched rollouts")
    plot_grpo(
        snakemake.input.metrics, snakemake.input.logs, snakemake.output.plot,
        "GRPO: learning curves and time per step",
    )
