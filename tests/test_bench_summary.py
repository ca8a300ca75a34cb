"""The per-class summary of benchmark runs, from known tables."""

import pandas as pd
import pytest

from batched_reasoning.bench.summary import main, summary_row


def run_table(cpu_class="avx2", dtype="bfloat16"):
    rows = [("ours", "batched_stop", 1, 9.0), ("ours", "continuous", 1, 6.0),
            ("transformers", "generate", 1, 6.0),
            ("ours", "batched_stop", 8, 30.0), ("ours", "continuous", 8, 40.0),
            ("transformers", "generate", 8, 20.0)]
    return pd.DataFrame(rows, columns=["implementation", "strategy", "batch_size", "tokens_per_s"]
                        ).assign(cpu_class=cpu_class, dtype=dtype)


def step_table():
    return pd.DataFrame({"batch_size": [1, 8], "pct_of_bound": [58.0, 54.0],
                         "attention_ms": [4.0, 25.0], "profiled_step_ms": [100.0, 125.0]})


def test_each_figure_comes_from_its_own_batch_size():
    row = summary_row(run_table(), step_table())
    assert row == {"cpu_class": "avx2", "dtype": "bfloat16",
                   "best_vs_transformers_bs1": pytest.approx(1.5),  # the better strategy, 9 / 6
                   "best_vs_transformers_bs8": pytest.approx(2.0),  # 40 / 20
                   "pct_of_bound_bs1": 58.0,
                   "attention_share_bs8": pytest.approx(0.2)}


def test_the_command_reads_each_run_with_its_decode_table(tmp_path):
    for name, dtype in (("a", "bfloat16"), ("b", "float32")):
        run_table(dtype=dtype).to_csv(tmp_path / f"{name}.csv", index=False)
        step_table().to_csv(tmp_path / f"{name}-decode.csv", index=False)
    # as a shell glob gives them: each run's decode table among the runs
    table = main(sorted(str(path) for path in tmp_path.glob("*.csv"))
                 + ["--markdown", str(tmp_path / "summary.md")])
    assert table.dtype.tolist() == ["bfloat16", "float32"]
    assert "best_vs_transformers_bs8" in (tmp_path / "summary.md").read_text()
