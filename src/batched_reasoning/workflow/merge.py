"""Merge the batching curves and Appendix E's tables of several runs, e.g. a laptop's and a
cluster GPU's, into one table and figure each: the comparison the book keeps by hand, built
from runs.

    python -m batched_reasoning.workflow.merge laptop/results gpu/results --out merged

Each `results/` folder is read as it is: every curve point under `seed*/curve/` with its
records, and its `tables/appendix_e.tsv`. A row keeps its machine (processor, threads), so rows
of different machines are never compared with each other, only shown side by side.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from ..core.io import read_json
from .appendix_e import merge_tables
from .curve import compact, curve_lines, curve_table, plot_curve
from .names import dataset_path
from .tables import write_table

STAGES = {"evaluate": ("problems", 4), "self_consistency": ("problems x samples", 2)}


def curve_files(results: list[Path], stage: str) -> tuple[list[str], list[str], list]:
    """Every curve point of `stage` in the `results` folders: metrics and records paths, and
    its problems where the run's folder still has them (`resources/` beside `results/`), so
    its answers are graded (else the merged table has no accuracy nor goodput for it)."""
    found = sorted((str(p), folder) for folder in results
                   for p in folder.glob(f"seed*/curve/{stage}/**/metrics.json"))
    problems = [folder.parent / dataset_path(read_json(p)["dataset"]) for p, folder in found]
    return ([p for p, _ in found], [str(Path(p).with_name("records.jsonl")) for p, _ in found],
            [str(path) if path.is_file() else None for path in problems])


def merge(results: list[Path], out: Path) -> list[Path]:
    """Write `out/<stage>.{tsv,md,png}` for each stage with points; returns the tables."""
    for folder in results:
        if not folder.is_dir():
            raise SystemExit(f"merge: {folder} is not a folder (give the results/ folders)")
    written = []
    for stage, (unit, panels) in STAGES.items():
        metrics, records, problems = curve_files(results, stage)
        if not metrics:
            continue
        table = curve_table(metrics, records, problems)
        out.mkdir(parents=True, exist_ok=True)
        plot_curve(table, str(out / f"{stage}.png"), f"Batching curves ({stage}), merged",
                   panels=panels)
        write_table(table, str(out / f"{stage}.tsv"), str(out / f"{stage}.md"),
                    f"Batching curves of {stage}, merged from {len(results)} runs",
                    curve_lines(table, unit), shown=compact(table))
        written.append(out / f"{stage}.tsv")
    appendix = [folder / "tables" / "appendix_e.tsv" for folder in results
                if (folder / "tables" / "appendix_e.tsv").is_file()]
    if appendix:
        written.append(merge_tables(appendix, out))
    if not written:
        raise SystemExit("merge: no curve points (seed*/curve/) nor tables/appendix_e.tsv in "
                         + ", ".join(map(str, results)))
    return written


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", type=Path, help="results/ folders of runs")
    parser.add_argument("--out", type=Path, required=True, help="folder for the merged tables")
    args = parser.parse_args(argv)
    for path in merge(args.results, args.out):
        print(path)


if __name__ == "__main__":
    main()
