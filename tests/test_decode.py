"""The static decode step (`engine.decode`) and its compiled forms (`engine.compiled`).

Every strategy decodes through `DecodeState`; test_generation.py and test_continuous.py hold
each to the sequential tokens. Here: the static step against the model's own forward pass
through a `KVCache`, the compiled step against the eager one (token for token, or a near-tie
the margins show), no recompilation once a run's shapes are traced, the graph bound, and
`auto` deciding on a fake clock.
"""

import pytest
import torch
from conftest import EOS, PAD, needs_cuda, random_model

from batched_reasoning.core import calibration
from batched_reasoning.core.memory import process_rss_mb
from batched_reasoning.engine import compiled, decode
from batched_reasoning.engine.compiled import Bucketed, Eager
from batched_reasoning.engine.decode import DecodeState, graph_bound
from batched_reasoning.engine.generation import STRATEGIES, generate
from batched_reasoning.engine.kv_cache import KVCache
from batched_reasoning.engine.memory_model import weights_mb
from batched_reasoning.engine.padding import left_pad
from batched_reasoning.engine.agreement import compare_answer

SHAPES = {"hidden-size": dict(hidden_size=48, head_dim=12), "gqa": dict(num_key_value_heads=1),
          "default": {}}


def prompts_of(lengths, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randint(4, 97, (n,), generator=generator).tolist() for n in lengths]


def run(model, prompts, strategy, batch_size, **kw):
    return generate(model, prompts, strategy=strategy, batch_size=batch_size, max_new_tokens=20,
                    eos_token_id=kw.pop("eos", (EOS, EOS + 1)), pad_token_id=PAD, **kw)


@pytest.fixture(scope="module", params=list(SHAPES))
def shaped_model(request):
    model = random_model(seed=7, **SHAPES[request.param])
    with torch.no_grad():  # end tokens likely enough that rows end at very different steps
        model.lm_head.weight[EOS] *= 2.5
        model.lm_head.weight[EOS + 1] *= 2.3
    return model


@pytest.mark.parametrize("masked_rows", [False, True])
def test_the_static_step_gives_the_forward_pass_logits(shaped_model, masked_rows):
    """One decode step of a left-padded batch (or of an unpadded one, without a mask) through
    the static step equals the model's forward pass over a `KVCache`, in float64."""
    model = random_model(seed=3).double()
    prompts = prompts_of([5, 12, 3] if masked_rows else [6, 6, 6], seed=1)
    ids, mask = left_pad(prompts, PAD)
    with torch.inference_mode():
        reference = KVCache.for_model(model, 3, 20)
        model(ids, mask, cache=reference)
        step = torch.tensor([[7], [8], [9]])
        expected = model(step, torch.ones_like(step, dtype=torch.bool), cache=reference)[:, -1]
        cache = KVCache.for_model(model, 3, 20)
        model(ids, mask, cache=cache)
        state = DecodeState.after_batch_prefill(model, cache, Eager())
        assert state.holes is masked_rows
        with model.decoding(20):
            logits = state.step([7, 8, 9])
    torch.testing.assert_close(logits, expected, atol=1e-12, rtol=1e-12)
    assert state.lengths == ([13, 13, 13] if masked_rows else [7, 7, 7])


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_bucketed_shapes_give_the_exact_shapes_tokens(shaped_model, strategy, monkeypatch):
    """The compiled steppers' shapes (length buckets, finished rows kept as masked
    placeholders until a batch bucket) run eagerly give the eager tokens: float32, padding,
    drops, refills and two end tokens. Negative control: placeholders left unmasked."""
    prompts = prompts_of([1, 40, 5, 23, 2, 17, 9], seed=2)
    exact = run(shaped_model, prompts, strategy, 4)
    assert len({len(t) for t in exact.tokens}) >= 3 and {EOS, EOS + 1} <= set(exact.stop_tokens)

    class EagerBuckets(Bucketed):
        name = "bucketed"

        def run(self, state, ids, end):
            return decode.decode_step(state.model, ids, state.keys, state.values,
                                      state.key_valid, state.write_at, state.rope_pos, end, True,
                                      state.in_float32)

    monkeypatch.setattr(compiled, "compiled_for", lambda model: EagerBuckets())
    bucketed = run(shaped_model, prompts, strategy, 4, compile="on")
    assert bucketed.compiled == "bucketed" and bucketed.graphs >= 2
    assert bucketed.tokens == exact.tokens
    assert bucketed.stop_tokens == exact.stop_tokens


def test_placeholders_past_a_rows_end_must_stay_masked(monkeypatch):
    """The negative control of the test above: a step that attends to every position of its
    length bucket (the mask ignored) changes the tokens."""
    model = random_model(seed=7)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 2.5
    prompts = prompts_of([1, 40, 5, 23], seed=2)
    exact = run(model, prompts, "batched_stop", 4)
    real_step = decode.decode_step

    class Unmasked(Bucketed):
        name = "unmasked"

        def run(self, state, ids, end):
            state.key_valid[:, :end] = True  # the bug: padding and unwritten slots attended
            return real_step(state.model, ids, state.keys, state.values, state.key_valid,
                             state.write_at, state.rope_pos, end, True, state.in_float32)

    monkeypatch.setattr(compiled, "compiled_for", lambda model: Unmasked())
    broken = run(model, prompts, "batched_stop", 4, compile="on")
    verdicts = [compare_answer(b, e, m, "float32")
                for b, e, m in zip(broken.tokens, exact.tokens, exact.margins)]
    assert "MISMATCH" in verdicts


@pytest.mark.slow
@pytest.mark.parametrize("frozen", [True, False], ids=["frozen", "weights-as-inputs"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_compiled_gives_the_eager_tokens_and_never_recompiles(strategy, frozen):
    """torch.compile of the static step gives the eager tokens (or a near-tie the margins
    show); a second run of the same shapes, drops and refills included, compiles nothing:
    dynamo raises on any recompilation there. Both kinds of graph: an inference-only model's
    (weights frozen in) and a training model's."""
    model = random_model(seed=7)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 2.5
    if frozen:
        model.inference_only = True  # as `pack_for_inference` marks it
    prompts = prompts_of([1, 40, 5, 23, 2, 17, 9, 30], seed=4)
    eager = run(model, prompts, strategy, 4)
    first = run(model, prompts, strategy, 4, compile="on")
    assert first.compiled == "compiled" and first.compile_seconds > 0
    assert first.graphs <= graph_bound(4, max(map(len, prompts)) + 20)
    assert same_or_near_tie(first, eager)
    with torch._dynamo.config.patch(error_on_recompile=True):
        again = run(model, prompts, strategy, 4, compile="on")
    assert again.tokens == first.tokens and again.compile_seconds == 0


def same_or_near_tie(compiled_run, eager_run) -> bool:
    return {compare_answer(c, e, m, "float32") for c, e, m in zip(
        compiled_run.tokens, eager_run.tokens, eager_run.margins)} <= {"same", "near-tie"}


def nudge(model) -> None:
    """Change the matrices in place, as an optimizer step would (not the norms: a new q/k norm
    is also a new tensor that dynamo guards on, which would hide a stale graph)."""
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for weight in model.parameters():
            if weight.ndim == 2:
                weight.add_(0.5 * torch.randn(weight.shape, generator=generator))


@pytest.mark.slow
def test_frozen_graphs_follow_the_weights():
    """An inference-only model's compiled graphs hold its weights as constants (inductor's
    freezing): if they change in place anyway, or another model of the same shape comes, the
    compiled step computes with the new ones, as the eager step does. (Two rows: the products
    then run as `F.linear`, whose weights freezing folds and packs.)"""
    model, other = random_model(seed=7), random_model(seed=8)
    for m in (model, other):
        m.inference_only = True  # as `pack_for_inference` marks it (the tiny model stays plain)
    prompts = prompts_of([3, 9, 5, 12], seed=2)
    before = run(model, prompts, "batched", 2, compile="on", eos=None)
    nudge(model)
    after = run(model, prompts, "batched", 2, compile="on", eos=None)
    assert after.tokens != before.tokens  # the change shows in the tokens
    assert same_or_near_tie(after, run(model, prompts, "batched", 2, eos=None))
    assert same_or_near_tie(run(other, prompts, "batched", 2, compile="on", eos=None),
                            run(other, prompts, "batched", 2, eos=None))


@pytest.mark.slow
def test_a_training_models_graphs_outlive_its_weight_updates():
    """GRPO's policy generates between optimizer steps: its compiled step reads the weights as
    inputs, so it follows an update without compiling anything anew."""
    model = random_model(seed=7)
    prompts = prompts_of([3, 9, 5, 12], seed=2)
    before = run(model, prompts, "batched", 2, compile="on", eos=None)
    nudge(model)
    with torch._dynamo.config.patch(error_on_recompile=True):
        after = run(model, prompts, "batched", 2, compile="on", eos=None)
    assert after.tokens != before.tokens and after.compile_seconds == 0
    assert same_or_near_tie(after, run(model, prompts, "batched", 2, eos=None))


@pytest.mark.slow
def test_compiled_graphs_share_the_weights():
    """A graph holds an inference-only model's weights as constants, but the same tensors for
    every graph: a run compiles up to `graph_bound` graphs, and a copy of the weights per graph
    (as inductor's `cpp.weight_prepack` makes) would multiply the model's memory by that. One
    wide layer of plain float32 weights (~250 MiB, not packed: its products go through
    inductor); a second graph (a new length bucket) must add far less than the weights."""
    model = random_model(seed=3, vocab_size=512, hidden_size=2048, num_attention_heads=16,
                         num_key_value_heads=8, head_dim=128, intermediate_size=8192,
                         num_hidden_layers=1)
    model.inference_only = True  # as `pack_for_inference` marks it
    weights = weights_mb(model)
    assert weights > 200
    run(model, prompts_of([3, 5]), "batched", 2, compile="on", eos=None)  # 16, 32 positions
    before = process_rss_mb()
    second = run(model, prompts_of([40, 5]), "batched", 2, compile="on", eos=None)  # 64
    grown = process_rss_mb() - before
    assert second.graphs == 1 and second.compile_seconds > 0  # a graph of its own
    assert grown < weights / 4, f"a second graph added {grown:.0f} MiB; weights {weights:.0f}"


@pytest.mark.parametrize("batch, capacity, bound", [
    (1, 16, 1),  # one row, one length bucket
    (64, 4096, 7 * 9),  # 1..64 rows; 16..4096 positions
    (12, 2700, 5 * 9),  # 1, 2, 4, 8, 12 rows (the first batch's own size); 16..4096
])
def test_graph_bound(batch, capacity, bound):
    assert graph_bound(batch, capacity) == bound


def test_a_math500_length_run_compiles_a_bounded_number_of_graphs():
    """The book's MATH-500 evaluation (batch 64, prompts up to ~600 tokens, 2048 new tokens):
    at most 63 graphs, whatever the answers' lengths."""
    assert graph_bound(64, 600 + 2048) == 63


class FakeClock:
    """`time` as `calibration.median_ms` and the stepper see it: an eager step takes
    `eager_ms`, a compiled one `compiled_ms`, compiling a graph `compile_s`."""

    def __init__(self, eager_ms, compiled_ms, compile_s):
        self.now, self.eager_ms, self.compiled_ms, self.compile_s = 0.0, eager_ms, compiled_ms, compile_s

    def perf_counter(self):
        return self.now


@pytest.mark.parametrize("steps, expected, measures", [
    (10, "off", False), (20_000, "off", False), (40_000, "off", True), (200_000, "on", True)])
def test_auto_compiles_only_where_the_run_pays_it_back(monkeypatch, tmp_path, steps, expected,
                                                       measures):
    """On a fake clock: an eager step 1 ms, a compiled one 0.4 ms, compiling 12 s a graph. A run
    of 10 steps (0.01 s of eager decode, under `MIN_COMPILE_SECONDS` for each of its 3 graphs)
    decides without compiling anything, and so does one of 20000 (20 s, under what measuring
    costs, `MEASURE_SECONDS`); 40000 steps are measured and would save 24 s, not the 3 graphs'
    36 s; 200000 steps save 120 s."""
    monkeypatch.setenv(calibration.WISDOM_ENV, str(tmp_path / "wisdom.json"))
    monkeypatch.setattr(calibration, "_made", {})
    clock = FakeClock(eager_ms=1.0, compiled_ms=0.4, compile_s=12.0)
    monkeypatch.setattr(calibration, "time", clock)
    measured = []

    def fake_steps(model, stepper, rows):
        def step():
            clock.now += (clock.eager_ms if isinstance(stepper, Eager) else clock.compiled_ms) / 1e3
        return step

    def fake_measure(model):
        measured.append(model)
        return {"choice": True, "compile_seconds": clock.compile_s, "eager_ms": clock.eager_ms,
                "compiled_ms": clock.compiled_ms}

    monkeypatch.setattr(compiled, "scratch_steps", fake_steps)
    monkeypatch.setattr(compiled, "measure_compile", fake_measure)
    model = random_model()
    mode = compiled.resolve(model, "auto", 1, 40, steps)
    assert mode == expected
    assert bool(measured) is measures  # a hopeless run decides without compiling anything


def test_compile_modes_are_checked():
    with pytest.raises(ValueError, match="compile must be one of"):
        compiled.resolve(random_model(), "yes", 1, 16, 10)


@needs_cuda("needs a CUDA GPU")
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cuda_graphs_give_the_eager_tokens(strategy):
    """On a GPU, `compile: on` captures the step as CUDA graphs (one per cache and shape) and
    replays them: the eager tokens, or a near-tie the margins show."""
    model = random_model(seed=7).cuda()
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 2.5
    prompts = prompts_of([1, 40, 5, 23, 2, 17, 9, 30], seed=4)
    eager = run(model, prompts, strategy, 4)
    graphed = run(model, prompts, strategy, 4, compile="on")
    assert graphed.compiled == "cuda-graphs" and graphed.graphs >= 1
    verdicts = {compare_answer(c, e, m, "float32")
                for c, e, m in zip(graphed.tokens, eager.tokens, eager.margins)}
    assert verdicts <= {"same", "near-tie"}


def test_a_step_that_cannot_compile_runs_eagerly_with_one_log_line(monkeypatch, capsys):
    """Where compiling fails (no C++ compiler, an op inductor cannot lower), the run goes on
    eagerly, says so once, and gives the eager tokens."""
    model = random_model(seed=7)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 2.5
    prompts = prompts_of([1, 40, 5, 23], seed=2)
    eager = run(model, prompts, "continuous", 2)

    def cannot(self, state, ids, end):
        raise RuntimeError("no C++ compiler found")

    monkeypatch.setattr(compiled.Compiled, "run", cannot)
    fallen = run(model, prompts, "continuous", 2, compile="on")
    assert fallen.tokens == eager.tokens and fallen.compiled == "eager"
    assert capsys.readouterr().err.count("cannot compile the decode step") == 1
