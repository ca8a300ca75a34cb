"""The toy data set: seeded, balanced, held-out, and every worked step right."""

import re
from collections import Counter

import pytest

from batched_reasoning.data import grading
from batched_reasoning.world.arith import CHAIN_LENGTHS, LARGEST, make_arith

STEP = re.compile(r"^(.+): (\d)([+\-*/])(\d)=(\d)$")
PHRASE = {"+": r"gets (\d) more", "-": r"gives away (\d)", "*2": "doubles them",
          "*3": "triples them", "/2": "gives away half"}
OPS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
       "/": lambda a, b: a // b}


@pytest.fixture(scope="module")
def arith():
    return make_arith(seed=1, n_train=2000, n_test=250)


def test_make_arith_is_deterministic(arith):
    assert make_arith(seed=1, n_train=2000, n_test=250) == arith
    assert make_arith(seed=2, n_train=2000, n_test=250) != arith


def test_test_split_does_not_depend_on_train_size(arith):
    assert make_arith(seed=1, n_train=10, n_test=250)["test"] == arith["test"]


def test_splits_are_disjoint_sized_and_balanced(arith):
    assert len(arith["train"]) == 2000 and len(arith["test"]) == 250
    test_problems = {r["problem"] for r in arith["test"]}
    assert len(test_problems) == 250
    assert not test_problems & {r["problem"] for r in arith["train"]}
    for split, records in arith.items():
        counts = Counter(r["level"] for r in records)
        assert sorted(counts) == [1, 2, 3, 4, 5]
        assert max(counts.values()) - min(counts.values()) <= 1, split


def test_record_format(arith):
    for split, records in arith.items():
        for i, r in enumerate(records):
            assert set(r) == {"problem", "solution", "answer", "subject", "level", "unique_id"}
            assert r["subject"] == "Arithmetic"
            assert r["unique_id"] == f"arith/{split}/{i:05d}"
            assert r["solution"].endswith(f"The answer is \\boxed{{{r['answer']}}}.")


def test_each_worked_line_is_one_operation_of_the_problem_in_order(arith):
    for r in arith["train"] + arith["test"]:
        *lines, final = r["solution"].split("\n")
        assert len(lines) == CHAIN_LENGTHS[r["level"] - 1]
        value, chain = re.fullmatch(r"\w+ has (\d) \w+, (.*)\. How many .*", r["problem"]).groups()
        value = int(value)
        phrases = re.split(r", (?:then )?", chain)
        assert len(phrases) == len(lines)
        for line, phrase in zip(lines, phrases):
            restated, a, op, b, c = STEP.match(line).groups()
            assert restated == phrase, (line, phrase)  # the line names the step it works
            assert int(a) == value and OPS[op](int(a), int(b)) == int(c) <= LARGEST, line
            key = op if op in "+-" else f"{op}{b}"
            match = re.fullmatch(PHRASE[key], phrase)
            assert match and (op not in "+-" or match[1] == b), (line, phrase)
            value = int(c)
        assert str(value) == r["answer"] == grading.extract_answer(r["solution"])


def test_a_problem_adds_and_takes_away_one_amount_each(arith):
    """Every `gets N more` of a problem has the same N, and every `gives away N` too, so a
    worked step's amount is never another phrase's; the chains still mix both."""
    mixed = 0
    for record in arith["train"] + arith["test"]:
        added = set(re.findall(r"gets (\d) more", record["problem"]))
        taken = set(re.findall(r"gives away (\d)", record["problem"]))
        assert len(added) <= 1 and len(taken) <= 1, record["problem"]
        mixed += bool(added and taken)
    assert mixed > 0.2 * len(arith["train"])
