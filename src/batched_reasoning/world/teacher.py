"""Teacher reasoning traces for distillation (the book's chapter 8): where they come from and
which of their rows a student can learn from.

A row has the book's fields: `problem`, `gtruth_answer`, `message_thinking` (the reasoning)
and `message_content` (the final answer).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from .arith import direct_answer
from ..data.records import parse_records_file
from ..data.hub import download_dataset_file
from ..core.io import atomic_path, read_jsonl, write_json

TEACHER_FIELDS = ("problem", "gtruth_answer", "message_thinking", "message_content")
LISTED_MALFORMED = 10


def prepare_teacher(teacher: dict, out_path: str, train_path: str | None = None,
                    source_path: str | None = None) -> None:
    """Write the teacher file of config `distill.teacher`: arith worked solutions, a hub file,
    or a local file copied as is (malformed rows are counted when the distill stage reads it)."""
    if teacher["source"] == "arith-traces":
        write_json(make_teacher_traces(read_jsonl(train_path)), out_path)
    elif teacher["source"] == "hub":
        download_dataset_file(teacher["repo_id"], teacher["filename"], out_path,
                              teacher["revision"])
    else:
        with atomic_path(out_path) as tmp:
            shutil.copyfile(source_path, tmp)


def make_teacher_traces(records: list[dict]) -> list[dict]:
    """`arith` records as teacher rows: the worked steps think, the boxed answer concludes."""
    rows = []
    for record in records:
        content = direct_answer(record["answer"])
        if not record["solution"].endswith(content):
            raise ValueError(f"{record.get('unique_id')}: solution does not end with {content!r}")
        rows.append({
            "problem": record["problem"],
            "gtruth_answer": record["answer"],
            "message_thinking": record["solution"].removesuffix(content).strip(),
            "message_content": content,
        })
    return rows


def row_problem(row) -> str | None:
    """What makes a teacher row unusable (None if it is usable)."""
    if not isinstance(row, dict):
        return f"is a {type(row).__name__}, not an object"
    missing = [f for f in TEACHER_FIELDS if f not in row]
    if missing:
        return "missing " + ", ".join(missing)
    wrong = [f"{f} is {type(row[f]).__name__}" for f in TEACHER_FIELDS if not isinstance(row[f], str)]
    if wrong:
        return ", ".join(wrong)
    if not row["message_content"].strip():
        return "empty message_content"  # the book refuses these too
    return None


def load_teacher_rows(path) -> tuple[list[dict], dict]:
    """Usable rows of a teacher file (JSON list or JSONL) and a report of the unusable ones.

    A file that is not JSON stops the run with the line at fault; a bad row is skipped, not
    fatal (public trace dumps have a few), but counted and listed so the metrics show how much
    teacher data the student never saw.
    """
    items = parse_records_file(Path(path))
    rows, malformed = [], []
    for location, item in items:
        problem = row_problem(item)
        if problem is None:
            rows.append(item)
        else:
            malformed.append(f"{location}: {problem}")
    report = {"n_rows": len(items), "n_malformed": len(malformed),
              "malformed": malformed[:LISTED_MALFORMED]}
    if malformed:
        print(f"{path}: skipped {len(malformed)} malformed of {len(items)} rows; first: "
              + "; ".join(malformed[:LISTED_MALFORMED]), flush=True)
    return rows, report
