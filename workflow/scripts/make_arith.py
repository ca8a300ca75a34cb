from batched_reasoning.world.arith import make_arith
from batched_reasoning.core.io import log_to, write_jsonl

with log_to(snakemake.log[0]):
    splits = make_arith(snakemake.params.seed, snakemake.params.n_train, snakemake.params.n_test)
    write_jsonl(splits["train"], snakemake.output.train)
    write_jsonl(splits["test"], snakemake.output.test)
