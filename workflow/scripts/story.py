from batched_reasoning.core.io import log_to
from batched_reasoning.workflow.story import make_story

with log_to(snakemake.log[0]):
    make_story(dict(snakemake.input.items()), dict(snakemake.output.items()))
