from batched_reasoning.core.io import log_to
from batched_reasoning.workflow.appendix_e import make_appendix_table

with log_to(snakemake.log[0]):
    make_appendix_table(
        {name: list(paths) for name, paths in snakemake.input.items() if name != "book"},
        dict(snakemake.output.items()),
        snakemake.params.configured,
        snakemake.input.book,
    )
