import json
from pathlib import Path

import pytest

from batched_reasoning.data.answers import extract_answer, normalize_answer
from batched_reasoning.data.grading import is_correct

MATH500 = Path(__file__).resolve().parents[2] / "shared/data/math500_test.json"


def test_math500_reference_answers_grade_correct():
    if not MATH500.exists():
        pytest.skip(f"{MATH500} not present")
    records = json.loads(MATH500.read_text())
    assert len(records) == 500
    failures = [
        (i, r["answer"], extract_answer(f"... \\boxed{{{r['answer']}}}"))
        for i, r in enumerate(records)
        if not is_correct(extract_answer(f"... \\boxed{{{r['answer']}}}"), r["answer"])
    ]
    assert not failures, f"{len(failures)} failures (index, answer, extracted): {failures[:20]}"


@pytest.mark.parametrize(
    "pred, truth",
    [
        ("3/4", "\\frac{3}{4}"),
        ("0.5", "1/2"),
        ("\\dfrac12", "0.5"),
        ("90^\\circ", "90"),
        ("x = 5", "5"),
        ("(2,1)", "(2,1)"),
        ("\\text{(C)}", "\\text{(C)}"),
        ("1,000", "1000"),
    ],
)
def test_equivalent_answers_are_correct(pred, truth):
    assert is_correct(pred, truth)


@pytest.mark.parametrize(
    "pred, truth",
    [
        ("(1,2)", "(2,1)"),
        ("(2,1)", "(1,2)"),
        ("5", "6"),
        ("\\frac{1}{3}", "0.5"),
        ("\\text{(A)}", "\\text{(C)}"),
    ],
)
def test_wrong_answers_are_rejected(pred, truth):
    assert not is_correct(pred, truth)


def test_none_and_garbage_are_incorrect_without_raising():
    assert is_correct(None, "5") is False
    assert is_correct("}}{{\\frac", "5") is False
    assert is_correct("", "5") is False


@pytest.mark.parametrize(
    "text, expected",
    [
        ("first \\boxed{1}, finally \\boxed{2}.", "2"),
        ("so $\\boxed{\\frac{1}{2}}$", "\\frac{1}{2}"),
        ("sets: \\boxed{\\{1,2\\}}", "\\{1,2\\}"),
        ("$\\boxed 5$", "5"),
        ("\\boxed{ $7$ }", "7"),
        ("We get 12 apples, then 3/4 of them, so 9.", "9"),
        ("The total is 1,000", "1000"),
        ("It drops to -7.", "-7"),
        ("5-3=2", "2"),
        ("ratio 3/4", "3/4"),
        ("cut off \\boxed{12", "12"),
        ("no numbers here", None),
        ("", None),
    ],
)
def test_extract_answer(text, expected):
    assert extract_answer(text) == expected


def test_normalize_answer_merges_equal_answers():
    keys = {normalize_answer(a) for a in ["1/2", "\\frac{1}{2}", "\\dfrac12", "0.5", " 1/2 "]}
    assert len(keys) == 1
    assert normalize_answer("90^\\circ") == normalize_answer("90")
    assert normalize_answer("x = 5") == normalize_answer("5")
    assert normalize_answer("2") != normalize_answer("3")
    assert normalize_answer(None) is None


def test_normalize_answer_never_raises_and_is_deterministic():
    for junk in ["}}}{{\\frac", "", "\\boxed{", "hello world", "\\begin{pmatrix}"]:
        key = normalize_answer(junk)
        assert isinstance(key, str)
        assert normalize_answer(junk) == key


def test_grading_works_outside_the_main_thread():
    # math-verify's signal-based timeout cannot run in worker threads.
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(is_correct, ["\\frac{6}{8}", "7"], ["0.75", "8"]))
        key = pool.submit(normalize_answer, "0.25").result()
    assert results == [True, False]
    assert key == normalize_answer("\\frac14")
