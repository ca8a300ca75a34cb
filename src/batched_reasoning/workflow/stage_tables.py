"""A stage's comparison table (TSV and Markdown) and plot, from its runs' files: the `table` rule's one entry point."""

from __future__ import annotations

import pandas as pd

from . import curve
from .autotune_table import autotune_lines, autotune_table, plot_autotune, with_autotune
from .sampling_table import plot_self_consistency, self_consistency_table
from .tables import skipped_lines, write_table
from .training_tables import (distill_lines, distill_table, evaluations, grpo_table, plot_distill,
                              plot_grpo)

def make_table(stage: str, inputs: dict, outputs: dict, skipped: list[dict] = ()) -> pd.DataFrame:
    """A stage's comparison table (TSV and Markdown) and plot from its runs' files."""
    probes = list(inputs.get("autotune", []))
    if stage == "autotune":
        table = autotune_table(probes)
        plot_autotune(probes, outputs["plot"])
        write_table(table, outputs["tsv"], outputs["md"], "Batch sizes chosen by auto",
                    autotune_lines(probes))
        return table
    if stage in ("evaluate", "self_consistency_curve"):
        accuracy = (curve.accuracies(inputs["metrics"], inputs["records"])
                    if stage == "evaluate" else None)
        table = curve.curve_table(inputs["points"], inputs["point_records"],
                                  inputs["point_problems"], accuracy, skipped)
        greedy = stage == "evaluate"
        curve.plot_curve(table, outputs["plot"], "Batched generation: throughput, latency, memory"
                         if greedy else "Self-consistency: sequences in flight",
                         panels=4 if greedy else 2)
        title = "The batching curve" + ("" if greedy else " of self-consistency")
        table = with_autotune(table, probes)
        write_table(table, outputs["tsv"], outputs["md"], title,
                    curve.curve_lines(table, "problems" if greedy else "problems x samples"),
                    shown=curve.compact(table))
        return table
    if stage == "workload":
        table = curve.workload_table(inputs["points"], inputs["point_records"])
        curve.plot_workload(inputs["points"], inputs["point_records"], outputs["plot"])
        write_table(table, outputs["tsv"], outputs["md"], "The timed workload's shape",
                    curve.workload_lines(table), shown=curve.workload_view(table))
        return table
    if stage == "self_consistency":
        table = self_consistency_table(inputs["metrics"], inputs["records"], skipped)
        plot_self_consistency(table, inputs["records"], outputs["plot"])
        title, notes = "Self-consistency (majority vote)", skipped_lines(table)
    elif stage == "grpo":
        table = grpo_table(inputs["metrics"])
        plot_grpo(inputs["metrics"], inputs["logs"], outputs["plot"],
                  "GRPO: learning curves and time per step")
        title, notes = "GRPO with batched rollouts", []
    elif stage == "distill":
        table = distill_table(inputs["metrics"], evaluations(inputs["evaluations"]))
        plot_distill(inputs["metrics"], inputs["logs"], outputs["plot"])
        title, notes = "Distillation on teacher reasoning traces", distill_lines(table)
    else:
        raise ValueError(f"no table for stage {stage!r}")
    table = with_autotune(table, probes)
    write_table(table, outputs["tsv"], outputs["md"], title, notes)
    return table
