import json
import re
from collections import Counter
from pathlib import Path

import pytest

from batched_reasoning import grading
from batched_reasoning.data import REQUIRED_FIELDS, DatasetError, load_records, make_arith
from batched_reasoning.io import write_jsonl

MATH500 = Path(__file__).resolve().parents[2] / "shared/data/math500_test.json"
STEP = re.compile(r"^(\d+)([+\-*])(\d+)=(-?\d+)$")


@pytest.fixture(scope="module")
def arith():
    return make_arith(seed=1, n_train=2000, n_test=250)


def test_make_arith_is_deterministic(arith):
    assert make_arith(seed=1, n_train=2000, n_test=250) == arith
    assert make_arith(seed=2, n_train=2000, n_test=250) != arith


def test_make_arith_test_split_does_not_depend_on_train_size(arith):
    assert make_arith(seed=1, n_train=10, n_test=250)["test"] == arith["test"]


def test_make_arith_splits_are_disjoint_and_sized(arith):
    assert len(arith["train"]) == 2000 and len(arith["test"]) == 250
    test_problems = {r["problem"] for r in arith["test"]}
    assert len(test_problems) == 250
    assert not test_problems & {r["problem"] for r in arith["train"]}


def test_make_arith_levels_are_balanced(arith):
    for split, records in arith.items():
        counts = Counter(r["level"] for r in records)
        assert sorted(counts) == [1, 2, 3, 4, 5]
        assert max(counts.values()) - min(counts.values()) <= 1, split


def test_make_arith_record_format(arith):
    for split, records in arith.items():
        for i, r in enumerate(records):
            assert set(r) == {"problem", "solution", "answer", "subject", "level", "unique_id"}
            assert r["subject"] == "Arithmetic"
            assert r["unique_id"] == f"arith/{split}/{i:05d}"
            assert r["solution"].endswith(f"The answer is \\boxed{{{r['answer']}}}.")


def test_make_arith_problems_are_short(arith):
    limits = {1: 120, 2: 150, 3: 200, 4: 250, 5: 300}
    for r in arith["train"] + arith["test"]:
        assert len(r["problem"]) + len(r["solution"]) < limits[r["level"]], r


def test_make_arith_answers_and_steps_are_correct(arith):
    ops = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}
    for r in arith["train"] + arith["test"]:
        *steps, final = r["solution"].split("\n")
        assert grading.extract_answer(r["solution"]) == r["answer"]
        assert grading.is_correct(grading.extract_answer(r["solution"]), r["answer"])
        assert int(r["answer"]) >= 0
        assert 1 <= len(steps) <= 4
        for step in steps:
            a, op, b, c = STEP.match(step).groups()
            assert ops[op](int(a), int(b)) == int(c), step
        assert int(c) == int(r["answer"])  # the last step yields the answer


def test_make_arith_difficulty_grows_with_level(arith):
    def mean(values):
        return sum(values) / len(values)

    steps = {
        level: mean([r["solution"].count("\n") for r in arith["train"] if r["level"] == level])
        for level in range(1, 6)
    }
    assert steps[1] == steps[2] == 1
    assert steps[1] <= steps[2] < steps[3] < steps[5]
    level1 = [r for r in arith["train"] if r["level"] == 1]
    assert all(int(r["answer"]) <= 18 for r in level1)


def _records():
    return [
        {"problem": f"What is {i}+1?", "solution": f"\\boxed{{{i + 1}}}", "answer": str(i + 1), "level": 1}
        for i in range(6)
    ]


def test_load_records_round_trips_json_and_jsonl(tmp_path):
    records = _records()
    (tmp_path / "data.json").write_text(json.dumps(records, indent=2))
    write_jsonl(records, tmp_path / "data.jsonl")
    assert load_records(tmp_path / "data.json") == records
    assert load_records(tmp_path / "data.jsonl") == records


def test_load_records_converts_int_answers(tmp_path):
    path = tmp_path / "ints.jsonl"
    write_jsonl([{"problem": "1+1?", "answer": 2}], path)
    assert load_records(path) == [{"problem": "1+1?", "answer": "2"}]


@pytest.mark.parametrize("suffix", [".json", ".jsonl"])
def test_load_records_names_file_index_and_field(tmp_path, suffix):
    records = _records()
    del records[3]["answer"]
    path = tmp_path / f"broken{suffix}"
    if suffix == ".json":
        path.write_text(json.dumps(records))
    else:
        write_jsonl(records, path)
    with pytest.raises(DatasetError) as err:
        load_records(path)
    message = str(err.value)
    assert path.name in message and "record 3" in message and "'answer'" in message
    if suffix == ".jsonl":
        assert "line 4" in message


def test_load_records_collects_all_bad_records(tmp_path):
    records = [{"problem": "p", "answer": "1"}] + [{"problem": i} for i in range(15)]
    records += ["text", {"problem": "p", "answer": 1.5}]
    path = tmp_path / "many.json"
    path.write_text(json.dumps(records))
    with pytest.raises(DatasetError) as err:
        load_records(path)
    message = str(err.value)
    assert "17 bad record(s)" in message and "and 7 more" in message
    assert "record 1:" in message and "record 10:" in message and "record 11:" not in message
    assert all(field in message for field in REQUIRED_FIELDS)


def test_load_records_names_bad_json_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"problem": "a", "answer": "1"}\n\n{"problem": "b", "answer": \n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl.*\n.*line 3"):
        load_records(path)


@pytest.mark.parametrize("content", ["", "  \n", "[]"])
def test_load_records_rejects_empty_files(tmp_path, content):
    path = tmp_path / "empty.json"
    path.write_text(content)
    with pytest.raises(DatasetError, match="empty.json"):
        load_records(path)


def test_load_records_reads_math500():
    if not MATH500.exists():
        pytest.skip(f"{MATH500} not present")
    records = load_records(MATH500)
    assert len(records) == 500
    assert all(isinstance(r["answer"], str) and r["problem"] for r in records)
