from batched_reasoning.tables import accuracies, distill_table, plot_distill, write_distill_table
from batched_reasoning.io import log_to

with log_to(snakemake.log[0]):
    accuracy = accuracies(snakemake.input.get("evaluations", []))
    table = distill_table(snakemake.input.metrics, accuracy)
    write_distill_table(table, snakemake.output.tsv, snakemake.output.md,
                        "Distillation on teacher reasoning traces")
    plot_distill(snakemake.input.metrics, snakemake.input.logs, snakemake.output.plot)
