"""`python -m batched_reasoning.bench`: the generation benchmark (`bench.cli`)."""

from .cli import main

main()
