"""What a model answered: the answer extracted from its text, its voting key, and votes.

Extraction is our own (last ``\\boxed{}``, else last number) so that it behaves the
same on every model's output; normalisation for voting is delegated to math-verify,
which parses LaTeX into sympy and knows the many ways one answer can be written.
Comparing an answer with the reference is `grading`'s: sampling with early stop needs
answers and votes, never the reference.
"""

from __future__ import annotations

import functools
import re
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import sympy


# math-verify bounds each parse/compare with signal.alarm, which raises outside the
# main thread; there we run without its timeout rather than fail every answer.
_MAIN_THREAD_TIMEOUT_S = 5

_NUMBER = re.compile(
    r"(?<![\w.])-?"  # a leading minus only when it is not a binary minus ("5-3")
    r"(?:\d{1,3}(?:,\d{3})+|\d+)"  # 1,000 style thousands separators, or plain digits
    r"(?:\.\d+)?"
    r"(?:/\d+)?"  # simple fractions such as 3/4
)


def parse_timeout() -> int | None:
    return _MAIN_THREAD_TIMEOUT_S if threading.current_thread() is threading.main_thread() else None


def strip_answer(answer: str) -> str:
    """Remove whitespace and unescaped surrounding ``$`` (but keep a ``\\$`` currency sign)."""
    answer = answer.strip()
    while answer.startswith("$"):
        answer = answer[1:].strip()
    while answer.endswith("$") and not answer.endswith("\\$"):
        answer = answer[:-1].strip()
    return answer


def _braced(text: str, start: int) -> str | None:
    """Content of the brace group opening at ``text[start]``; None if it is never closed.

    Backslash escapes (``\\{``, ``\\}``, ``\\\\``) are skipped so set braces and matrix
    row breaks inside an answer do not end it early.
    """
    depth = 0
    i = start
    while i < len(text):
        char = text[i]
        if char == "\\":
            i += 2
            continue
        if char == "{":
            depth += 1
        elif char == "}":
            depth -= 1
            if depth == 0:
                return text[start + 1 : i]
        i += 1
    return None


def _last_boxed(text: str) -> str | None:
    """Content of the last complete, non-empty ``\\boxed{...}`` or ``\\boxed token``."""
    for match in reversed(list(re.finditer(r"\\boxed", text))):
        rest = match.end()
        if text.startswith("{", rest):
            content = _braced(text, rest)
        else:
            token = re.match(r"\s+([^\s$]+)", text[rest:])
            content = token.group(1) if token else None
        if content is not None and strip_answer(content):
            return strip_answer(content)
    return None


def extract_answer(text: str) -> str | None:
    """The model's final answer: last ``\\boxed{}`` content, else last number, else None.

    Models are prompted to box their answer; the number fallback still gives partial
    credit to outputs that state the answer without boxing it (or were truncated).
    """
    boxed = _last_boxed(text)
    if boxed is not None:
        return boxed
    numbers = _NUMBER.findall(text)
    return numbers[-1].replace(",", "") if numbers else None


# Plain integers need no parser: they are compared and normalised directly, so a job whose
# answers are all integers (the toy's) never imports math-verify and sympy (~0.7 s).
INTEGER = re.compile(r"-?\d+")


@functools.lru_cache(maxsize=65536)
def parse_answer(answer: str) -> tuple:
    """math-verify parse of a bare answer; boxing it makes bare LaTeX (``\\frac12``) parse."""
    from math_verify import parse

    return tuple(parse(f"$\\boxed{{{answer}}}$", parsing_timeout=parse_timeout()))


def _canonical(expr: sympy.Basic) -> sympy.Basic:
    """Exact, printable representative: floats become rationals, ``x = 5`` becomes 5."""
    import sympy

    if isinstance(expr, sympy.Eq) and isinstance(expr.lhs, sympy.Symbol):
        expr = expr.rhs
    floats = expr.atoms(sympy.Float)
    if floats:
        expr = expr.xreplace({f: sympy.nsimplify(f, rational=True) for f in floats})
    return expr


@functools.lru_cache(maxsize=65536)
def normalize_answer(answer: str | None) -> str | None:
    """Voting key: equal answers (``1/2``, ``\\frac{1}{2}``, ``0.5``) share one string.

    Unparseable answers fall back to the answer with all whitespace removed, so voting
    still works on free-text answers; never raises.
    """
    if answer is None:
        return None
    answer = strip_answer(answer)
    if INTEGER.fullmatch(answer):
        return str(int(answer))
    import sympy

    try:
        parsed = parse_answer(answer)
        if parsed and isinstance(parsed[0], (sympy.Basic, sympy.MatrixBase)):
            return str(_canonical(parsed[0]))
    except Exception:  # a voting key must never crash an evaluation run
        pass
    return re.sub(r"\s+", "", answer)


@dataclass
class Vote:
    winner: str | None  # normalised answer with the most votes (None: no sample had an answer)
    answer: str | None  # the winner as the first sample that voted for it wrote it
    counts: dict[str, int]  # votes per normalised answer, in order of first appearance


def majority_vote(answers: list[str | None]) -> Vote:
    """Vote on normalised answers; samples without an answer abstain; ties go to the earliest."""
    counts: dict[str, int] = {}
    first: dict[str, str] = {}
    for answer in answers:
        key = normalize_answer(answer)
        if key is not None:
            counts[key] = counts.get(key, 0) + 1
            first.setdefault(key, answer)
    if not counts:
        return Vote(None, None, {})
    winner = max(counts, key=counts.get)  # first maximum in insertion (= appearance) order
    return Vote(winner, first[winner], counts)


def is_decided(answers: list[str | None], num_samples: int) -> bool:
    """Whether one answer already holds a strict majority of all `num_samples` samples."""
    counts = majority_vote(answers).counts
    return bool(counts) and 2 * max(counts.values()) > num_samples
