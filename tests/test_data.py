import json
from pathlib import Path

import pytest

from batched_reasoning.data.records import REQUIRED_FIELDS, DatasetError, load_records
from batched_reasoning.core.io import write_jsonl

MATH500 = Path(__file__).resolve().parents[2] / "shared/data/math500_test.json"


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


def test_an_interrupted_folder_write_leaves_the_old_folder(tmp_path):
    from batched_reasoning.core.io import atomic_dir

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "old.txt").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with atomic_dir(tmp_path / "out") as staging:
            (staging / "new.txt").write_text("half")
            raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["old.txt"]
    with atomic_dir(tmp_path / "out") as staging:
        (staging / "new.txt").write_text("whole")
    assert [p.name for p in tmp_path.iterdir()] == ["out"]
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["new.txt"]
