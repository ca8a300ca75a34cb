"""Stages `grade` and `vote`: judge the answers a generation job wrote, in a job of their own.

Generating is the costly part, and it never depends on the grader; grading takes seconds. Kept
apart, a change to the grader (`data.grading`) regrades every run and generates nothing again.
Each writes the graded records and its run's metrics: the generation job's, plus accuracy.
"""

from __future__ import annotations

import numpy as np

from ..core.io import read_json, read_jsonl, write_json, write_jsonl
from ..core.provenance import code_hash
from ..data.answers import extract_answer, majority_vote
from ..data.grading import is_correct


def grade_answers(problems_path: str, generations_path: str, generation_path: str,
                  out_records: str, out_metrics: str) -> dict:
    """Evaluation: each greedy answer extracted and graded against its problem's reference."""
    generations = read_jsonl(generations_path)
    problems = read_jsonl(problems_path)[: len(generations)]
    outputs = []
    for problem, generated in zip(problems, generations):
        extracted = extract_answer(generated["generated_text"])
        correct = is_correct(extracted, problem["answer"])
        outputs.append({"index": generated["index"], "problem": problem["problem"],
                        "gtruth_answer": problem["answer"], "level": problem.get("level")}
                       | generated | {"extracted": extracted, "correct": correct})
    write_jsonl(outputs, out_records)
    metrics = read_json(generation_path) | {
        "accuracy": float(np.mean([o["correct"] for o in outputs])),
        "accuracy_by_level": accuracy_by_level(outputs),
        "grading_code_hash": code_hash(__name__),
    }
    write_json(metrics, out_metrics)
    return metrics


def accuracy_by_level(outputs: list[dict]) -> dict[str, float]:
    levels = sorted({o["level"] for o in outputs if o.get("level") is not None})
    return {
        str(level): float(np.mean([o["correct"] for o in outputs if o["level"] == level]))
        for level in levels
    }


def vote_problem(index: int, problem: dict, texts: list[str]) -> dict:
    """One self-consistency record: every sample, the vote, and whether the vote and sample 1
    are right."""
    answers = [extract_answer(t) for t in texts]
    vote = majority_vote(answers)
    return {
        "index": index, "problem": problem["problem"], "gtruth_answer": problem["answer"],
        "level": problem.get("level"),
        "samples": [{"text": t, "extracted": a} for t, a in zip(texts, answers)],
        "votes": vote.counts, "winner": vote.winner, "winner_answer": vote.answer,
        "correct": is_correct(vote.answer, problem["answer"]),
        "first_sample_correct": is_correct(answers[0], problem["answer"]),
        "samples_used": len(texts),
    }


def agreement(output: dict) -> float:
    """Share of a problem's samples that voted for the winner (0 when nobody answered)."""
    if output["winner"] is None:
        return 0.0
    return output["votes"][output["winner"]] / output["samples_used"]


def accuracy_at_k(outputs: list[dict], num_samples: int) -> list[float]:
    """Vote accuracy over the first k samples, k = 1..num_samples, from a run's records.

    A problem stopped early has fewer samples; past them its vote stays the recorded (final) one.
    """
    accuracy = []
    for k in range(1, num_samples + 1):
        correct = []
        for o in outputs:
            vote = majority_vote([s["extracted"] for s in o["samples"][:k]])
            correct.append(is_correct(vote.answer, o["gtruth_answer"]))
        accuracy.append(float(np.mean(correct)))
    return accuracy


def vote_samples(problems_path: str, samples_path: str, sampling_path: str,
                 out_records: str, out_metrics: str) -> dict:
    """Self-consistency: each problem's samples voted on, the vote graded."""
    samples = read_jsonl(samples_path)
    problems = read_jsonl(problems_path)[: len(samples)]
    outputs = [vote_problem(s["index"], p, s["texts"]) for p, s in zip(problems, samples)]
    write_jsonl(outputs, out_records)
    sampling = read_json(sampling_path)
    metrics = sampling | {
        "accuracy": float(np.mean([o["correct"] for o in outputs])),
        "first_sample_accuracy": float(np.mean([o["first_sample_correct"] for o in outputs])),
        "mean_agreement": float(np.mean([agreement(o) for o in outputs])),
        "accuracy_at_k": accuracy_at_k(outputs, sampling["num_samples"]),
        "grading_code_hash": code_hash(__name__),
    }
    write_json(metrics, out_metrics)
    return metrics

