"""Datasets in MATH-500's record format, loaded with actionable errors.

A record is a dict with ``problem``, ``solution``, ``answer``, ``subject``, ``level`` and
``unique_id``; only ``problem`` and ``answer`` are needed to evaluate a model, the
other fields are kept as they are for reporting.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..core.io import write_jsonl

REQUIRED_FIELDS = ("problem", "answer")
_MAX_LISTED_ERRORS = 10
_FIX_HINT = (
    "Each record must be a JSON object with string fields 'problem' and 'answer' "
    "(MATH-500 format); fix or remove the records listed above."
)


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message says where and how to fix it."""


def parse_records_file(path: Path) -> list[tuple[str, object]]:
    """(location, value) pairs of a JSON list, JSONL or Parquet file, location like
    ``record 3 (line 4)``. Parquet is how the Hub's `datasets` stores most data sets (e.g. the
    MATH training problems the book's GRPO uses)."""
    if path.suffix == ".parquet":
        return parse_parquet(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise DatasetError(f"{path}: not UTF-8 text ({e}); save it as UTF-8 JSON or JSONL.") from e
    if not text.strip():
        raise DatasetError(f"{path}: file is empty; expected a JSON list or JSONL of records.")

    if path.suffix not in (".jsonl", ".ndjson") and text.lstrip().startswith("["):
        try:
            values = json.loads(text)
        except json.JSONDecodeError as e:
            raise DatasetError(
                f"{path}: invalid JSON at line {e.lineno}, column {e.colno}: {e.msg}. "
                "Fix the syntax (a JSON list of record objects, or one object per line as JSONL)."
            ) from e
        if not isinstance(values, list):
            raise DatasetError(f"{path}: expected a JSON list of records, got {type(values).__name__}.")
        return [(f"record {i}", value) for i, value in enumerate(values)]

    items: list[tuple[str, object]] = []
    bad_lines: list[str] = []
    for lineno, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        location = f"record {len(items)} (line {lineno})"
        try:
            items.append((location, json.loads(line)))
        except json.JSONDecodeError as e:
            bad_lines.append(f"line {lineno}: invalid JSON ({e.msg} at column {e.colno})")
    if bad_lines:
        raise DatasetError(
            _summary(path, bad_lines)
            + "\nEach line of a JSONL file must be one complete JSON object; fix the listed lines."
        )
    return items


def parse_parquet(path: Path) -> list[tuple[str, object]]:
    """A Parquet file's rows as plain JSON values (numpy's integers become ints)."""
    import pandas as pd

    try:
        frame = pd.read_parquet(path)
    except (OSError, ValueError) as e:
        raise DatasetError(f"{path}: not a readable Parquet file ({e}).") from e
    rows = json.loads(frame.to_json(orient="records", force_ascii=False))
    return [(f"record {i} (row {i})", row) for i, row in enumerate(rows)]


def _summary(path: Path, problems: list[str]) -> str:
    listed = "\n".join(f"  {p}" for p in problems[:_MAX_LISTED_ERRORS])
    more = len(problems) - _MAX_LISTED_ERRORS
    tail = f"\n  ... and {more} more" if more > 0 else ""
    return f"{path}: {len(problems)} bad record(s):\n{listed}{tail}"


def _check(record: object) -> str | None:
    """What is wrong with one record (None if usable); an int answer is converted to str in place."""
    if not isinstance(record, dict):
        return f"is a {type(record).__name__}, not a JSON object"
    missing = [f for f in REQUIRED_FIELDS if f not in record]
    if missing:
        return "missing required field(s) " + ", ".join(repr(f) for f in missing)
    answer = record["answer"]
    if isinstance(answer, int) and not isinstance(answer, bool):
        record["answer"] = str(answer)
    for field in REQUIRED_FIELDS:
        value = record[field]
        if not isinstance(value, str):
            return f"field {field!r} must be a string, got {type(value).__name__} {value!r:.40}"
        if not value.strip():
            return f"field {field!r} is empty"
    return None


def load_records(path: str | os.PathLike) -> list[dict]:
    """Records of a JSON-list or JSONL file, validated up front.

    All bad records are reported in one error so a broken file is fixed in one pass
    rather than one failed workflow run per record.
    """
    path = Path(path)
    items = parse_records_file(path)
    if not items:
        raise DatasetError(f"{path}: contains no records; expected at least one.")
    problems = []
    for location, record in items:
        issue = _check(record)
        if issue is not None:
            problems.append(f"{location}: {issue}")
    if problems:
        raise DatasetError(_summary(path, problems) + "\n" + _FIX_HINT)
    return [record for _, record in items]


def import_records(source: str | os.PathLike, destination: str | os.PathLike) -> list[dict]:
    """Validate a MATH-500-format file and store it as the workflow's JSONL."""
    records = load_records(source)
    write_jsonl(records, destination)
    return records
