"""`arith`, the offline default data set: arithmetic word problems in MATH-500's record format.

A problem is a chain of operations on a count of things ("Ann has 5 apples, gets 3 more, gives
away half, then doubles them."), and its level is the length of the chain: 1, 2, 4, 6 or 8
operations. Every intermediate count stays a single digit, so each step is one fact from a
small table (`7-3=4`, `4*2=8`, `8/2=4`) that a tiny model learns quickly, while the answer of
a long chain, computed in one go, depends on every operation in order: doubling and halving
are not sums, so attention cannot shortcut it. Working step by step (the `solution` writes one
line per operation) is what makes the long chains solvable, as in the book's story.

A worked line restates the phrase it works (`gets 3 more: 5+3=8`): the next step is then the
phrase that follows the last one copied, found by matching text (what small transformers learn
first and reliably), not by counting phrases, where a tiny model confuses operands.

Within a problem every `gets N more` has the same N and every `gives away N` the same N. With
different amounts, the toy learnt which kind of operation came next long before it learnt which
of several `gives away N` it was at: in three pretrained models that failed long chains, every
wrong first step (49 to 59 of 60 problems of levels 4-5) had the right operation and another
phrase's amount, and when it learnt that varied by hundreds of steps between seeds and CPUs.
"""

from __future__ import annotations

import random

NAMES = ("Ann", "Ben", "Cal", "Dee", "Eva", "Fin", "Gus", "Ivy")
ITEMS = ("apples", "pens", "books", "cups", "eggs", "cards", "shells", "coins")
# Operations per problem at levels 1-5.
CHAIN_LENGTHS = (1, 2, 4, 6, 8)
LARGEST = 9  # every count is a single digit


def next_operations(value: int, amounts: dict[str, int]) -> list[str]:
    """The operations that keep `value` a single digit (halving only an even count), adding or
    taking away the problem's amount for that operation if it has one already."""
    ops = []
    if value + amounts.get("+", 1) <= LARGEST:
        ops.append("+")
    if value - amounts.get("-", 1) >= 0:
        ops.append("-")
    if 1 <= value <= LARGEST // 2:
        ops.append("*2")
    if 1 <= value <= LARGEST // 3:
        ops.append("*3")
    if value >= 2 and value % 2 == 0:
        ops.append("/2")
    return ops


def apply(rng: random.Random, value: int, op: str, amounts: dict[str, int]) -> tuple[int, str, str]:
    """(new value, the problem's phrase, the worked line) of one operation on `value`; the
    first `+` or `-` of a problem draws its amount into `amounts`, later ones reuse it."""
    if op == "+":
        amount = amounts.setdefault("+", rng.randint(1, LARGEST - value))
        phrase, symbol, result = f"gets {amount} more", f"+{amount}", value + amount
    elif op == "-":
        amount = amounts.setdefault("-", rng.randint(1, value))
        phrase, symbol, result = f"gives away {amount}", f"-{amount}", value - amount
    elif op == "/2":
        phrase, symbol, result = "gives away half", "/2", value // 2
    else:
        factor = int(op[1])
        phrase = "doubles them" if factor == 2 else "triples them"
        symbol, result = f"*{factor}", value * factor
    return result, phrase, f"{phrase}: {value}{symbol}={result}"


def arith_problem(rng: random.Random, level: int) -> tuple[str, list[str], int]:
    """(problem text, worked lines, answer) of one problem of `level` (1-5)."""
    if not 1 <= level <= len(CHAIN_LENGTHS):
        raise ValueError(f"level must be 1..{len(CHAIN_LENGTHS)}, got {level}")
    name, items = rng.choice(NAMES), rng.choice(ITEMS)
    while True:  # a chain can run out of operations (7 after +3 and -8): draw it again
        value = start = rng.randint(1, LARGEST)
        phrases, lines, amounts = [], [], {}
        for _ in range(CHAIN_LENGTHS[level - 1]):
            ops = next_operations(value, amounts)
            if not ops:
                break
            value, phrase, line = apply(rng, value, rng.choice(ops), amounts)
            phrases.append(phrase)
            lines.append(line)
        else:
            break
    chain = phrases[0] if len(phrases) == 1 else ", ".join(phrases[:-1]) + ", then " + phrases[-1]
    return f"{name} has {start} {items}, {chain}. How many {items} does {name} have now?", lines, value


def direct_answer(answer) -> str:
    """The answer as the book's prompt asks for it, without any working."""
    return f"The answer is \\boxed{{{answer}}}."


def arith_split(rng: random.Random, n: int, split: str, exclude: set[str], unique: bool) -> list[dict]:
    """`n` records avoiding the `exclude` problems (and each other, if `unique`); levels are
    dealt round-robin, so any prefix is balanced."""
    records, seen = [], set(exclude)
    for i in range(n):
        level = i % len(CHAIN_LENGTHS) + 1
        for _ in range(10_000):
            problem, lines, answer = arith_problem(rng, level)
            if problem not in seen:
                break
        else:
            raise ValueError(f"cannot draw {n} distinct {split} problems at level {level}; "
                             f"lower n_{split}")
        if unique:
            seen.add(problem)
        records.append({
            "problem": problem,
            "solution": "\n".join(lines) + "\n" + direct_answer(answer),
            "answer": str(answer),
            "subject": "Arithmetic",
            "level": level,
            "unique_id": f"arith/{split}/{i:05d}",
        })
    return records


def make_arith(seed: int, n_train: int, n_test: int) -> dict[str, list[dict]]:
    """Seeded `{"train": [...], "test": [...]}`. Test problems are distinct and never appear in
    train (train may repeat itself: level 1 has a few hundred distinct problems). Each split has
    its own random stream, so the test set does not change with `n_train`."""
    test = arith_split(random.Random(f"arith-test-{seed}"), n_test, "test", set(), unique=True)
    train = arith_split(random.Random(f"arith-train-{seed}"), n_train, "train",
                        {r["problem"] for r in test}, unique=False)
    return {"train": train, "test": test}
