"""What the Snakemake workflow needs beyond the stages: the plan of runs, the tables and
their statistics, the story check, `batch_sizes: auto`."""
