"""Grading: whether an extracted answer equals the reference answer.

Equivalence checking is delegated to math-verify (LaTeX parsed into sympy), except for plain
integers, which are compared directly. Its own module, so a change to grading regrades every
run (the `grade` and `vote` jobs) and generates nothing again.
"""

from __future__ import annotations

from .answers import (INTEGER, extract_answer, majority_vote, parse_answer, parse_timeout,
                      strip_answer)


def is_correct(extracted: str | None, truth: str) -> bool:
    """Whether the extracted answer is mathematically equal to the reference answer.

    math-verify's comparison is order-aware for tuples, so ``(2,1)`` != ``(1,2)``.
    Any parsing/comparison error counts as incorrect instead of aborting the run.
    """
    if extracted is None:
        return False
    gold_text, pred_text = strip_answer(str(truth)), strip_answer(extracted)
    if INTEGER.fullmatch(gold_text) and INTEGER.fullmatch(pred_text):
        return int(gold_text) == int(pred_text)
    from math_verify import verify

    try:
        gold = parse_answer(strip_answer(str(truth)))
        pred = parse_answer(strip_answer(extracted))
        if not gold or not pred:
            return False
        return bool(verify(list(gold), list(pred), timeout_seconds=parse_timeout()))
    except Exception:
        return False


def correct_answers(problems: list[dict], keys: list[tuple[int, int]], texts: list[str],
                    num_samples: int) -> list[bool]:
    """Per problem of a timed workload, whether its answer is right: the greedy answer, or
    the samples' vote (`keys`: each text's problem and sample)."""
    answers: dict[int, list] = {}
    for (p, _), text in zip(keys, texts):
        answers.setdefault(p, []).append(extract_answer(text))
    if num_samples == 1:
        return [is_correct(answers[p][0], problems[p]["answer"]) for p in sorted(answers)]
    return [is_correct(majority_vote(answers[p]).answer, problems[p]["answer"])
            for p in sorted(answers)]
