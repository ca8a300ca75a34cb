"""Datasets in MATH-500's record format: loading with actionable errors, and a toy generator.

A record is a dict with ``problem``, ``solution``, ``answer``, ``subject``, ``level`` and
``unique_id``; only ``problem`` and ``answer`` are needed to evaluate a model, the
other fields are kept as they are for reporting.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

from .io import write_jsonl

REQUIRED_FIELDS = ("problem", "answer")
_MAX_LISTED_ERRORS = 10
_FIX_HINT = (
    "Each record must be a JSON object with string fields 'problem' and 'answer' "
    "(MATH-500 format); fix or remove the records listed above."
)


class DatasetError(ValueError):
    """A dataset file that cannot be used; the message says where and how to fix it."""


def _parse_file(path: Path) -> list[tuple[str, object]]:
    """(location, value) pairs of a JSON list or JSONL file, location like ``record 3 (line 4)``."""
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
    items = _parse_file(path)
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


# --- Toy arithmetic word problems ----------------------------------------------------
# Short templates over a small fixed vocabulary, so a tiny model can learn the language
# quickly and its accuracy is governed by the arithmetic: difficulty rises with the
# number of steps (1 -> 4) and the digit count of the operands.

_NAMES = ("Ann", "Ben", "Cal", "Dee", "Eva", "Fin", "Gus", "Ivy")
_ITEMS = ("apples", "pens", "books", "cups", "eggs", "cards", "shells", "coins")
_OPS = {"+": lambda x, y: x + y, "-": lambda x, y: x - y, "*": lambda x, y: x * y}


def _chain(first: int, *steps: tuple[str, int]) -> tuple[list[str], int]:
    """Apply (op, operand) steps left to right; each step becomes one ``a+b=c`` line."""
    lines, value = [], first
    for op, operand in steps:
        result = _OPS[op](value, operand)
        lines.append(f"{value}{op}{operand}={result}")
        value = result
    return lines, value


def _two_digit(rng: random.Random) -> int:
    return rng.randint(10, 99)


def _arith_problem(rng: random.Random, level: int) -> tuple[str, list[str], int]:
    """(problem text, worked step lines, answer) for one problem of the given level."""
    name, items = rng.choice(_NAMES), rng.choice(_ITEMS)
    question = f"How many {items} does {name} have now?"

    if level == 1:  # single-digit addition
        a, b = rng.randint(2, 9), rng.randint(1, 9)
        text = f"{name} has {a} {items} and gets {b} more."
        lines, answer = _chain(a, ("+", b))
    elif level == 2:  # two-digit addition or non-negative subtraction
        a = _two_digit(rng)
        if rng.random() < 0.5:
            b = _two_digit(rng)
            text = f"{name} has {a} {items} and gets {b} more."
            lines, answer = _chain(a, ("+", b))
        else:
            b = rng.randint(10, a)
            text = f"{name} has {a} {items} and gives away {b}."
            lines, answer = _chain(a, ("-", b))
    elif level == 3:  # two steps: a+b-c
        a, b = _two_digit(rng), _two_digit(rng)
        c = rng.randint(10, min(99, a + b))
        text = f"{name} has {a} {items}, gets {b} more, then gives away {c}."
        lines, answer = _chain(a, ("+", b), ("-", c))
    elif level == 4:  # one-by-two-digit product, or three steps a+b-c+d
        if rng.random() < 0.5:
            a, b = rng.randint(2, 9), _two_digit(rng)
            text = f"{name} buys {a} boxes of {b} {items}."
            lines, answer = _chain(a, ("*", b))
        else:
            a, b, d = _two_digit(rng), _two_digit(rng), _two_digit(rng)
            c = rng.randint(10, min(99, a + b))
            text = f"{name} has {a} {items}, gets {b} more, gives away {c}, then gets {d} more."
            lines, answer = _chain(a, ("+", b), ("-", c), ("+", d))
    elif level == 5:  # products mixed with +/-: three or four steps, never negative
        a, b = rng.randint(2, 9), _two_digit(rng)
        if rng.random() < 0.5:
            c = _two_digit(rng)
            d = rng.randint(10, min(99, a * b + c))
            text = f"{name} buys {a} boxes of {b} {items}, gets {c} more, then gives away {d}."
            lines, answer = _chain(a, ("*", b), ("+", c), ("-", d))
        else:
            c, d = rng.randint(2, 9), _two_digit(rng)
            e = rng.randint(10, min(99, a * b + c * d))
            text = f"{name} buys {a} boxes of {b} {items} and {c} boxes of {d}, then gives away {e}."
            first, p = _chain(a, ("*", b))
            second, q = _chain(c, ("*", d))
            rest, answer = _chain(p, ("+", q), ("-", e))
            lines = first + second + rest
    else:
        raise ValueError(f"level must be 1..5, got {level}")
    return f"{text} {question}", lines, answer


def _arith_split(
    rng: random.Random, n: int, split_name: str, exclude: set[str], unique: bool
) -> list[dict]:
    """``n`` records avoiding the ``exclude`` texts (and each other, if ``unique``)."""
    records: list[dict] = []
    seen = set(exclude)
    for i in range(n):
        level = i % 5 + 1  # round-robin keeps levels balanced in any prefix
        for _ in range(10_000):
            problem, lines, answer = _arith_problem(rng, level)
            if problem not in seen:
                break
        else:
            raise ValueError(
                f"cannot draw {n} distinct {split_name} problems at level {level}; lower n_{split_name}"
            )
        if unique:
            seen.add(problem)
        records.append(
            {
                "problem": problem,
                "solution": "\n".join(lines) + f"\nThe answer is \\boxed{{{answer}}}.",
                "answer": str(answer),
                "subject": "Arithmetic",
                "level": level,
                "unique_id": f"arith/{split_name}/{i:05d}",
            }
        )
    return records


def make_arith(seed: int, n_train: int, n_test: int) -> dict[str, list[dict]]:
    """Seeded toy arithmetic dataset ``{"train": [...], "test": [...]}`` in five levels.

    Test problems are distinct and never appear verbatim in train (train may repeat
    itself: level 1 only has a few thousand distinct problems). Each split has its own
    random stream, so the test set does not change with ``n_train``.
    """
    test = _arith_split(random.Random(f"arith-test-{seed}"), n_test, "test", set(), unique=True)
    train = _arith_split(
        random.Random(f"arith-train-{seed}"), n_train, "train", {r["problem"] for r in test}, unique=False
    )
    return {"train": train, "test": test}


def import_records(source: str | os.PathLike, destination: str | os.PathLike) -> list[dict]:
    """Validate a MATH-500-format file and store it as the workflow's JSONL."""
    records = load_records(source)
    write_jsonl(records, destination)
    return records
