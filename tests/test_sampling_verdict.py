"""Where batched and one-at-a-time sampled answers part, the verdict says why: a draw a rounding
away from its boundary (`near-tie`), or other random numbers or a large margin (`MISMATCH`, a bug).
"""

import torch
from conftest import EOS, PAD

from batched_reasoning.engine.generation import generate
from batched_reasoning.engine.sampling import TopP
from batched_reasoning.engine.agreement import NEAR_TIE_MARGIN, compare_answer

TEMPERATURE, TOP_P = 0.9, 0.9


def sample(logits: torch.Tensor, keys: list[tuple]) -> tuple[list[int], list[float], list[float]]:
    """One pick per row of `logits` with the first draw of each row's key."""
    sampler = TopP(TEMPERATURE, TOP_P, seed=3)
    sampler.start(keys, logits.device)
    tokens = sampler(logits, list(range(len(keys))))
    return tokens.tolist(), sampler.margins.tolist(), sampler.draws.tolist()


def adversarial(logits: torch.Tensor, size: float) -> list[torch.Tensor]:
    """Moves of every logit by at most `size` that push the draw's boundaries hardest: the
    ranks up to each position down and the rest up, or the reverse, at every cut."""
    order = logits.argsort(descending=True)
    moves = []
    for cut in range(1, logits.numel()):
        sign = torch.ones_like(logits)
        sign[order[:cut]] = -1
        moves += [logits + size * sign, logits - size * sign]
    return moves


def test_no_move_of_the_logits_smaller_than_the_margin_changes_the_draw():
    torch.manual_seed(0)
    for row in range(300):
        logits = torch.randn(1, 24, dtype=torch.float64).float() * 2
        token, margin, _ = (v[0] for v in sample(logits, [(row,)]))
        assert margin > 0
        moves = adversarial(logits[0], 0.999 * margin)
        moves += [logits[0] + 0.999 * margin * (2 * torch.rand(24) - 1) for _ in range(50)]
        picks = sample(torch.stack(moves), [(row,)] * len(moves))[0]
        assert set(picks) == {token}, f"row {row}: a move below the margin {margin} changed it"


def test_a_draw_moved_across_its_boundary_by_rounding_is_a_near_tie():
    """One logit walked (bisection) to where a float32 last place decides the token: the two
    computations part, with the same draw, by a margin under the float32 error bound."""
    torch.manual_seed(1)
    logits = torch.randn(1, 512) * 0.5
    first, _, _ = sample(logits, [(0,)])
    low, high = 0.0, 8.0  # lowering the picked token's logit by `high` makes another token win
    assert sample(logits - high * torch.nn.functional.one_hot(torch.tensor(first), 512),
                  [(0,)])[0] != first
    for _ in range(60):
        middle = (low + high) / 2
        moved = logits - middle * torch.nn.functional.one_hot(torch.tensor(first), 512)
        low, high = (middle, high) if sample(moved, [(0,)])[0] == first else (low, middle)
    one_hot = torch.nn.functional.one_hot(torch.tensor(first), 512)
    before, after = logits - low * one_hot, logits - high * one_hot
    assert (after - before).abs().max() < 1e-5  # a rounding's worth
    tokens_a, margins_a, draws_a = sample(before, [(0,)])
    tokens_b, _, draws_b = sample(after, [(0,)])
    assert tokens_a != tokens_b and draws_a == draws_b
    assert margins_a[0] < NEAR_TIE_MARGIN["float32"]
    assert compare_answer(tokens_b, tokens_a, margins_a, "float32", draws_b, draws_a) == "near-tie"


def test_a_swapped_random_stream_is_a_mismatch_even_where_every_pick_is_close():
    """Near-uniform logits over a large vocabulary (random weights): every pick is a near-tie,
    so only the draws can tell two rows' swapped keys from rounding."""
    torch.manual_seed(2)
    logits = (torch.randn(1, 100_000) * 1e-3).expand(4, -1)
    keys = [(0, s) for s in range(4)]
    tokens, margins, draws = sample(logits, keys)
    swapped_tokens, _, swapped_draws = sample(logits, [keys[1], keys[0], *keys[2:]])
    assert max(margins) < NEAR_TIE_MARGIN["float32"]
    for row in (0, 1):
        mine, theirs = [swapped_tokens[row]], [tokens[row]]
        assert mine != theirs
        assert compare_answer(mine, theirs, [margins[row]], "float32") == "near-tie"  # blind
        assert compare_answer(mine, theirs, [margins[row]], "float32",
                              [swapped_draws[row]], [draws[row]]) == "MISMATCH"


PROMPTS = [[5, 9, 11] * 13, [12, 40, 3, 3, 8, 21, 60]]
KEYS = [(p, s) for p in range(len(PROMPTS)) for s in range(3)]


def answers(eos_model, strategy, batch_size, keys):
    result = generate(eos_model, [PROMPTS[p] for p, _ in KEYS], strategy=strategy,
                      batch_size=batch_size, max_new_tokens=16, eos_token_id=EOS,
                      pad_token_id=PAD, sampler=TopP(1.0, 0.95, seed=7), keys=keys)
    return result


def test_the_engine_s_batched_samples_are_judged_the_same_and_swapped_keys_a_mismatch(eos_model):
    base = answers(eos_model, "sequential", 1, KEYS)
    batched = answers(eos_model, "batched", 6, KEYS)
    judged = [compare_answer(*pair) for pair in zip(
        batched.tokens, base.tokens, base.margins, ["float32"] * 6, batched.draws, base.draws)]
    assert judged == ["same"] * 6
    swapped = [KEYS[1], KEYS[0], *KEYS[2:]]  # a shared prompt's first two samples' keys
    bug = answers(eos_model, "batched", 6, swapped)
    judged = [compare_answer(*pair) for pair in zip(
        bug.tokens, base.tokens, base.margins, ["float32"] * 6, bug.draws, base.draws)]
    assert judged[:2] == ["MISMATCH"] * 2 and judged[2:] == ["same"] * 4
