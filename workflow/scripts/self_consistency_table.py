from batched_reasoning.io import log_to
from batched_reasoning.tables import plot_self_consistency, self_consistency_table, write_table

with log_to(snakemake.log[0]):
    table = self_consistency_table(
        snakemake.input.metrics, snakemake.input.records, snakemake.params.skipped
    )
    write_table(table, snakemake.output.tsv, snakemake.output.md, "Self-consistency (majority vote)")
    plot_self_consistency(table, snakemake.input.records, snakemake.output.plot)
