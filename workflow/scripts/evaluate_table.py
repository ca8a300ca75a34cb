from batched_reasoning.io import log_to
from batched_reasoning.tables import evaluate_table, plot_throughput, write_table

with log_to(snakemake.log[0]):
    table = evaluate_table(
        snakemake.input.metrics, snakemake.input.records, snakemake.params.skipped
    )
    write_table(table, snakemake.output.tsv, snakemake.output.md, "Batched MATH evaluation")
    plot_throughput(table, snakemake.output.plot, "Generation throughput and memory")
