"""One line per CPU class and dtype from benchmark runs: the figures issue 27 sets goals on.

Each run of `python -m batched_reasoning.bench` (one CPU class, one dtype) writes NAME.csv and
NAME-decode.csv. This reads any number of them and reports, per run:
- `best_vs_transformers_bs{N}`: our best strategy's tokens/s over transformers' at batch N
  (both from the same run, back to back);
- `pct_of_bound_bs1`: the batch-1 decode step's roofline bound over its measured time;
- `attention_share_bs{N}`: attention's share of the profiled decode step at the largest batch.

    python -m batched_reasoning.bench.summary native-*.csv avx2-*.csv ... [--markdown OUT.md]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from .cli import beside


def summary_row(runs: pd.DataFrame, steps: pd.DataFrame) -> dict:
    """The figures of one benchmark run (its table and its decode-step table)."""
    ours = runs[runs.implementation == "ours"]
    theirs = runs[runs.implementation == "transformers"].set_index("batch_size").tokens_per_s
    row = {"cpu_class": runs.cpu_class.iloc[0], "dtype": runs.dtype.iloc[0]}
    for batch_size, best in ours.groupby("batch_size").tokens_per_s.max().items():
        row[f"best_vs_transformers_bs{batch_size}"] = (
            best / theirs[batch_size] if batch_size in theirs else float("nan"))
    one = steps[steps.batch_size == 1]
    row["pct_of_bound_bs1"] = float(one.pct_of_bound.iloc[0]) if len(one) else float("nan")
    largest = steps.loc[steps.batch_size.idxmax()]
    row[f"attention_share_bs{int(largest.batch_size)}"] = (
        float(largest.attention_ms / largest.profiled_step_ms))
    return row


COMPANIONS = ("decode", "llama")  # the tables a run writes beside NAME.csv


def runs_among(csvs: list[str]) -> list[str]:
    """The run tables among `csvs`: a shell glob (`avx2-*.csv`) also matches the tables each
    run writes beside its own (NAME-decode.csv), which are read with their run, not as runs."""
    companions = {beside(csv, part) for csv in csvs for part in COMPANIONS}
    return [csv for csv in csvs if Path(csv) not in companions]


def summarize(csvs: list[str]) -> pd.DataFrame:
    return pd.DataFrame([summary_row(pd.read_csv(csv), pd.read_csv(beside(csv, "decode")))
                         for csv in runs_among(csvs)])


def main(argv=None) -> pd.DataFrame:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("csvs", nargs="+", help="benchmark tables (NAME.csv; NAME-decode.csv beside)")
    parser.add_argument("--markdown", help="also write the table as Markdown")
    args = parser.parse_args(argv)
    table = summarize(args.csvs)
    text = table.to_markdown(index=False, floatfmt=".2f")
    print(text)
    if args.markdown:
        with open(args.markdown, "w") as out:
            out.write(text + "\n")
    return table


if __name__ == "__main__":
    main()
