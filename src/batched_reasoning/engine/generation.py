"""Sequential and batched generation with one calling convention.

Strategies (the book's Appendix E, plus one):
- `sequential`: one prompt at a time, the single-example baseline.
- `batched`: a left-padded batch; rows that finished keep emitting the end token (as
  placeholders) until the last row ends.
- `batched_stop`: rows that finished leave the compute batch and the KV cache at once.
- `continuous`: `batch_size` slots stay busy; when a row finishes, the next waiting prompt is
  prefilled into its slot and joins the next decode step (continuous batching, without paging).

Every strategy returns the same tokens for the same prompts under greedy decoding (float32);
tests hold them to that. Bookkeeping happens on the host: each step moves the new tokens to the
host once (`tolist`), which is also what decides who is finished.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
from tqdm.auto import tqdm

from ..core import calibration
from ..core.devices import synchronize
from ..model.kernels import PREFILL_CALL_COST
from .compiled import choose_stepper
from .decode import DecodeState
from .kv_cache import KVCache, SlotCache
from .padding import batches, left_pad, right_pad
from .scheduling import Request, SlotScheduler, row_groups

STRATEGIES = ("sequential", "batched", "batched_stop", "continuous")


@dataclass
class GenerationResult:
    tokens: list[list[int]]  # per prompt, in input order, without the end token
    # Seconds from the start of a prompt's batch (continuous: of its own prefill) until its
    # answer is done: the service latency, without the wait for earlier batches.
    latency: list[float]
    # The end token that ended each answer (None: cut off at max_new_tokens).
    stop_tokens: list[int | None] = field(default_factory=list)
    # Each pick's margin, the end token's pick included: greedy's top-two logit gap, a sampler's
    # distance in logits to a boundary of its draw (`sampling.boundary_margin`).
    margins: list[list[float]] = field(default_factory=list)
    # Sampled only: each pick's uniform draw, so two runs can show they drew the same numbers.
    draws: list[list[float]] = field(default_factory=list)
    # The most key/value storage held at once (MiB): what batching costs in cache memory.
    kv_cache_mb: float = 0.0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    # Prompt indices of each batch (continuous: one rolling batch, in admission order).
    batch_rows: list[list[int]] = field(default_factory=list)
    # Prompts whose prefill ran: repeats of a prompt (self-consistency's samples, GRPO's
    # rollouts) share one prefill.
    prefills: int = 0
    # A client's view (`time.perf_counter` clock): every prompt is submitted when `generate`
    # starts (`started_at`); per prompt, when its first new token was picked and when its answer
    # was done. Completion latency counts the wait for earlier batches; latency does not.
    started_at: float = 0.0
    first_token_at: list[float] = field(default_factory=list)
    finished_at: list[float] = field(default_factory=list)
    decode_steps: int = 0  # model calls that decoded one token per row
    # How decode steps ran (`compiled`): eager, compiled or cuda-graphs; how many graphs were
    # traced, and the seconds their first calls took (tracing, compiling, capturing).
    compiled: str = "eager"
    graphs: int = 0
    compile_seconds: float = 0.0

    @classmethod
    def empty(cls, prompts: int) -> GenerationResult:
        """A result for `prompts` prompts, all submitted now."""
        return cls(tokens=[[] for _ in range(prompts)], latency=[0.0] * prompts,
                   stop_tokens=[None] * prompts, margins=[[] for _ in range(prompts)],
                   draws=[[] for _ in range(prompts)],
                   started_at=time.perf_counter(), first_token_at=[0.0] * prompts,
                   finished_at=[0.0] * prompts)

    @property
    def completion(self) -> list[float]:
        """Seconds from submission until each answer was done."""
        return [done - self.started_at for done in self.finished_at]

    @property
    def time_to_first_token(self) -> list[float]:
        return [first - self.started_at for first in self.first_token_at]

    @property
    def time_per_output_token(self) -> list[float]:
        """Seconds per new token after the first, per answer of two or more picks (the end
        token's pick counts: it is a step the answer waited for)."""
        return [(done - first) / (steps - 1)
                for done, first, steps in zip(self.finished_at, self.first_token_at, self.steps)
                if steps > 1]

    @property
    def steps(self) -> list[int]:
        """Picks each answer took: its tokens, and the end token where one ended it."""
        return [len(t) + (stop is not None) for t, stop in zip(self.tokens, self.stop_tokens)]

    @property
    def generated_tokens(self) -> int:
        return sum(len(t) for t in self.tokens)


class Greedy:
    """Pick the most likely token; the sampler interface with no randomness to seed.

    It also keeps each pick's margin, the top logit minus the runner-up: where two runs of the
    same model disagree, a tiny margin there means rounding broke a near-tie, a large one a bug.
    Pick and margin come from one pass over the vocabulary (`topk` of two); where the top two
    tie, `pick` takes the first of the tied maxima, as `argmax` does.
    """

    margins: torch.Tensor | None = None

    def start(self, keys: Sequence[Sequence[int]], device) -> None:
        pass

    def __call__(self, logits: torch.Tensor, rows: list[int]) -> torch.Tensor:
        values, indices = logits.topk(2, dim=-1)
        values = values.float()
        self.margins = values[:, 0] - values[:, 1]
        return indices[:, 0]


Pick = tuple[int, float | None, float | None]  # a token, its margin and its uniform draw


def pick(sampler, logits: torch.Tensor, rows: list[int]) -> list[Pick]:
    """The sampler's token for each row, with its margin and draw where the sampler keeps them,
    moved to the host in one copy. A greedy exact tie (margin 0, rare) is broken on the host as
    `argmax` breaks it: first index."""
    tokens = sampler(logits, rows)
    margins = getattr(sampler, "margins", None)
    if margins is None:
        return [(token, None, None) for token in tokens.tolist()]
    draws = getattr(sampler, "draws", None)
    columns = [tokens, margins] + ([] if draws is None else [draws])
    rows_out = torch.stack([c.to(torch.float64) for c in columns], dim=1).tolist()
    if draws is not None:
        return [(int(token), margin, draw) for token, margin, draw in rows_out]
    return [(int(logits[row].argmax()) if margin == 0 else int(token), margin, None)
            for row, (token, margin) in enumerate(rows_out)]


def take_token(result: GenerationResult, index: int, picked: Pick,
               end_tokens: frozenset[int], max_new_tokens: int, now: float) -> bool:
    """Add a token picked at time `now` to prompt `index`'s answer unless it is an end token;
    whether the answer is now complete (then it is done at `now`)."""
    token, margin, draw = picked
    if margin is not None:
        result.margins[index].append(margin)
    if draw is not None:
        result.draws[index].append(draw)
    if not result.tokens[index] and result.stop_tokens[index] is None:
        result.first_token_at[index] = now
    if token in end_tokens:
        result.stop_tokens[index] = token
    else:
        result.tokens[index].append(token)
    done = token in end_tokens or len(result.tokens[index]) == max_new_tokens
    if done:
        result.finished_at[index] = now
    return done


def check_request(model, prompts: Sequence[Sequence[int]], strategy: str, batch_size: int,
                  max_new_tokens: int, order: Sequence[int] | None) -> None:
    """A clear error for every request `generate` cannot run, before any work."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}; choose one of {STRATEGIES}")
    check_prompts(model, prompts, max_new_tokens)
    if order is not None and sorted(order) != list(range(len(prompts))):
        raise ValueError("generate: `order` must be a permutation of the prompt indices")
    if batch_size < 1:
        raise ValueError(f"generate: batch_size must be >= 1, got {batch_size}")


def check_prompts(model, prompts: Sequence[Sequence[int]], max_new_tokens: int) -> None:
    if not prompts:
        raise ValueError("generate: no prompts given")
    if max_new_tokens < 1:
        raise ValueError(f"generate: max_new_tokens must be >= 1, got {max_new_tokens}")
    limit = model.cfg.max_position_embeddings
    for index, prompt in enumerate(prompts):
        if len(prompt) == 0:
            raise ValueError(f"generate: prompt {index} is empty")
        if len(prompt) + max_new_tokens > limit:
            raise ValueError(
                f"generate: prompt {index} has {len(prompt)} tokens; with max_new_tokens="
                f"{max_new_tokens} it exceeds the model's context of {limit} positions"
            )


def share_prompts(prompts: Sequence[Sequence[int]], rows: Sequence[int]) -> tuple[list[int], list[int]]:
    """A batch's `rows` in prefill order: one row of every distinct prompt first, shortest first
    (similar lengths prefill together), then the rows that repeat one of them; and for each
    position, the position of the row whose prefill it shares (its own, for the first ones)."""
    first_of: dict[tuple[int, ...], int] = {}
    distinct, repeats = [], []
    for row in sorted(rows, key=lambda r: len(prompts[r])):
        key = tuple(prompts[row])
        if key in first_of:
            repeats.append(row)
        else:
            first_of[key] = len(distinct)
            distinct.append(row)
    sources = list(range(len(distinct))) + [first_of[tuple(prompts[r])] for r in repeats]
    return distinct + repeats, sources


def prefill_call_cost(model) -> int:
    """What one more prefill call costs, in prompt tokens: timed on this CPU (a call of 1 and
    of 65 tokens) for the model's shape, dtype and packing, once per machine (`calibration`);
    `kernels.PREFILL_CALL_COST` off the CPU."""
    if model.device.type != "cpu":
        return PREFILL_CALL_COST[model.dtype]
    cfg = model.cfg
    name = (f"prefill_call/{str(model.dtype).removeprefix('torch.')}/"
            f"{'packed' if model.packed else 'plain'}/{cfg.num_hidden_layers}x{cfg.hidden_size}x"
            f"{cfg.intermediate_size}x{cfg.vocab_size}")

    def prefill(tokens: int) -> None:
        ids = torch.zeros(1, tokens, dtype=torch.long)
        with torch.inference_mode():
            model(ids, torch.ones_like(ids, dtype=torch.bool),
                  cache=KVCache.for_model(model, 1, tokens), last_only=True)

    return calibration.call_cost(name, lambda: prefill, 1, 65)


def prefill_batch(model, cache: KVCache, prompts: list[Sequence[int]], pad_token_id: int) -> torch.Tensor:
    """Prefill `prompts` (ascending length) into the first rows of `cache`, left-padded;
    last-position logits per row. Rows of very different lengths prefill in separate calls
    (`scheduling.row_groups`), each padded only to its own longest prompt, so a batch of one long
    and many short prompts does not compute the short rows' padding; attention then sees the
    cache one left-padded prefill would leave."""
    lengths = [len(p) for p in prompts]
    logits = []
    for first, stop in row_groups(lengths, prefill_call_cost(model)):
        input_ids, attention_mask = left_pad(prompts[first:stop], pad_token_id, model.device)
        view = cache.rows_from(first, stop, lengths[-1] - input_ids.shape[1])
        logits.append(model(input_ids, attention_mask, cache=view, last_only=True)[:, -1])
    cache.prefilled(lengths)
    return torch.cat(logits) if len(logits) > 1 else logits[0]


@dataclass
class Call:
    """What every batch of one `generate` call shares."""

    model: object
    prompts: Sequence[Sequence[int]]
    max_new_tokens: int
    end_tokens: tuple[int, ...]
    pad_token_id: int
    sampler: object
    result: GenerationResult
    stepper: object  # `compiled.Eager` or a compiled stepper

    def __post_init__(self):
        self.ends = frozenset(self.end_tokens)  # looked up for every picked token

    def take(self, index: int, picked: Pick, now: float) -> bool:
        """`take_token` for prompt `index`: whether its answer is now complete."""
        return take_token(self.result, index, picked, self.ends, self.max_new_tokens, now)


def prefill_rows(call: Call, rows: Sequence[int]) -> tuple[list[int], DecodeState, torch.Tensor]:
    """Prefill one batch's prompts (a prompt repeated in several rows once, its keys/values
    then copied into each repeat's row): the rows in cache order, the decode state and the
    first logits of every row."""
    model, prompts, result = call.model, call.prompts, call.result
    rows, sources = share_prompts(prompts, rows)
    distinct = max(sources) + 1
    width = max(len(prompts[r]) for r in rows)
    cache = KVCache.for_model(model, len(rows), call.stepper.capacity(width + call.max_new_tokens))
    result.kv_cache_mb = max(result.kv_cache_mb, cache.megabytes)
    logits = prefill_batch(model, cache, [prompts[r] for r in rows[:distinct]], call.pad_token_id)
    if distinct < len(rows):
        cache.share_rows(sources)
        logits = logits[sources]
    result.prefills += distinct
    return rows, DecodeState.after_batch_prefill(model, cache, call.stepper), logits


@torch.inference_mode()
def generate_batch(call: Call, rows: Sequence[int], drop_finished: bool) -> None:
    """Generate for one batch; write tokens and latencies of prompt indices `rows` into the
    call's result. Finished rows that stay in the batch (`batched`, or until a compiled
    stepper's batch bucket) are fed the pad token as a placeholder; their outputs are never
    read."""
    result, device = call.result, call.model.device
    prefill_call_cost(call.model)  # timed once per machine, before this call's clock starts
    start = time.perf_counter()
    rows, state, logits = prefill_rows(call, rows)
    synchronize(device)
    prefill_end = time.perf_counter()
    result.prefill_seconds += prefill_end - start

    outputs = [result.tokens[r] for r in rows]
    done = [False] * len(rows)
    in_batch = list(range(len(rows)))  # batch positions in the compute batch, in cache order
    while True:
        live = [j for j, b in enumerate(in_batch) if not done[b]]
        live_logits = logits if len(live) == len(in_batch) else logits[live]
        picked = pick(call.sampler, live_logits, [rows[in_batch[j]] for j in live])
        now = time.perf_counter()
        for j, token in zip(live, picked):
            b = in_batch[j]
            done[b] = call.take(rows[b], token, now)
            if done[b]:
                result.latency[rows[b]] = now - start
        if all(done):
            break
        if drop_finished:
            live = [j for j, b in enumerate(in_batch) if not done[b]]
            keep = call.stepper.rows_to_keep(live, len(in_batch))
            if len(keep) < len(in_batch):
                state.keep(keep)
                in_batch = [in_batch[j] for j in keep]
        logits = state.step([call.pad_token_id if done[b] else outputs[b][-1] for b in in_batch])
        result.decode_steps += 1
    synchronize(device)
    result.decode_seconds += time.perf_counter() - prefill_end


def prefill_slots(model, cache: SlotCache, entering: dict[int, Request],
                  held: dict[tuple[int, ...], int], pad_token_id: int) -> int:
    """Prefill the entering requests' prefixes straight into their slots, together
    (right-padded, split by length as in `prefill_batch`, no vocabulary projection); a prefix
    that a slot already holds (`held`: prefix -> slot), or that another entering request
    brings, is copied from that slot instead. Returns how many prefills ran."""
    to_fill = {}  # prefix -> the entering slot it is prefilled into
    for row, request in entering.items():
        if request.prefix and request.prefix not in held:
            to_fill.setdefault(request.prefix, row)
    rows = sorted(to_fill.values(), key=lambda r: len(entering[r].prompt))
    lengths = [len(entering[r].prefix) for r in rows]
    for first, stop in row_groups(lengths, prefill_call_cost(model)):
        input_ids, attention_mask = right_pad(
            [entering[r].prefix for r in rows[first:stop]], pad_token_id, model.device)
        model.hidden_states(input_ids, attention_mask, cache=cache.prefill(rows[first:stop]))
    for row, request in entering.items():
        source = held.get(request.prefix, to_fill.get(request.prefix, row))
        if source != row:
            cache.copy_prefix(row, len(request.prefix), source)
    return len(rows)


def admit(call: Call, scheduler: SlotScheduler, cache: SlotCache, state: DecodeState) -> None:
    """Waiting requests take the free slots: their prefixes are prefilled into them (or copied
    from a slot that holds the same prefix), and the decode state learns their lengths."""
    held = {request.prefix: row for row, request in enumerate(scheduler.slots)
            if request is not None}
    entering = scheduler.admit(time.perf_counter())
    call.result.prefills += prefill_slots(call.model, cache, entering, held, call.pad_token_id)
    for row, request in entering.items():
        state.refill(row, len(request.prefix))


@torch.inference_mode()
def generate_continuous(call: Call, order: Sequence[int], batch_size: int, bar: tqdm) -> None:
    """Continuous batching over `batch_size` slots; write tokens and latencies into the call's
    result.

    The scheduler (`SlotScheduler`) decides which request holds which slot; this loop runs
    the model and the sampler for it. Each step decodes one token for every slot together and
    samples them with one host sync. When requests finish, waiting ones take their slots before
    the next step (`admit`); each slot has its own length. A prompt's last token is its
    request's input to the next decode step, whose logits give the first new token. A prompt's
    latency runs from the start of its prefill.
    """
    model, result, device = call.model, call.result, call.model.device
    capacity = max(len(p) for p in call.prompts) + call.max_new_tokens
    scheduler = SlotScheduler([Request(index, tuple(call.prompts[index])) for index in order],
                              batch_size)
    prefill_call_cost(model)  # timed once per machine, before this call's clock starts
    cache = SlotCache.for_model(model, len(scheduler.slots), call.stepper.capacity(capacity))
    state = DecodeState.empty_slots(model, cache, call.stepper)
    call_start, prefill_seconds = time.perf_counter(), 0.0
    result.kv_cache_mb = cache.megabytes
    while scheduler.slots:
        if scheduler.has_free_slot() and scheduler.waiting:
            synchronize(device)
            prefill_start = time.perf_counter()
            admit(call, scheduler, cache, state)
            synchronize(device)
            prefill_seconds += time.perf_counter() - prefill_start
        logits = state.step([r.next_input if r else call.pad_token_id for r in scheduler.slots])
        result.decode_steps += 1
        live = [row for row, request in enumerate(scheduler.slots) if request is not None]
        picked = pick(call.sampler, logits if len(live) == state.rows else logits[live],
                      [scheduler.slots[row].index for row in live])
        now = time.perf_counter()
        for row, token in zip(live, picked):
            request = scheduler.slots[row]
            request.next_input = token[0]
            if call.take(request.index, token, now):
                result.latency[request.index] = now - request.admitted_at
                scheduler.release(row)
                bar.update(1)
        keep = call.stepper.rows_to_keep(scheduler.rows_to_keep(), state.rows)
        if len(keep) < state.rows:
            scheduler.keep(keep)
            if keep:
                state.keep(keep)
    synchronize(device)
    result.prefill_seconds += prefill_seconds
    result.decode_seconds += time.perf_counter() - call_start - prefill_seconds


def generate(
    model,
    prompts: Sequence[Sequence[int]],
    *,
    strategy: str,
    batch_size: int,
    max_new_tokens: int,
    eos_token_id: int | Sequence[int] | None,
    pad_token_id: int,
    sampler=None,
    keys: Sequence[Sequence[int]] | None = None,
    order: Sequence[int] | None = None,
    progress: bool = False,
    compile: str = "off",
) -> GenerationResult:
    """Generate a continuation for each prompt (token lists in, token lists out, input order).

    `eos_token_id` is the end token, or all of them where a checkpoint declares several (an
    answer ends at whichever comes first); `None` disables stopping (every row runs
    `max_new_tokens`, as in benchmarks).
    `keys` name each prompt for the sampler's per-row random streams (default: its index);
    `order` is the order prompts are batched (continuous: admitted) in (e.g. sorted by length;
    default: input order).
    `compile` (`off`, `auto`, `on`) runs the decode steps compiled (`compiled`); `auto` does
    where this run's decode steps pay back the compile time measured on this machine.
    """
    check_request(model, prompts, strategy, batch_size, max_new_tokens, order)
    sampler = sampler or Greedy()
    sampler.start(keys or [(i,) for i in range(len(prompts))], model.device)
    order = list(order) if order is not None else list(range(len(prompts)))
    batch_size = 1 if strategy == "sequential" else batch_size
    end_tokens = (() if eos_token_id is None
                  else (eos_token_id,) if isinstance(eos_token_id, int) else tuple(eos_token_id))
    result = GenerationResult.empty(len(prompts))
    capacity = max(len(p) for p in prompts) + max_new_tokens
    stepper = choose_stepper(model, compile, batch_size, capacity,
                             expected_steps=-(-len(prompts) // batch_size) * max_new_tokens)
    call = Call(model, prompts, max_new_tokens, end_tokens, pad_token_id, sampler, result, stepper)
    with model.decoding(stepper.capacity(capacity)), tqdm(
            total=len(prompts), desc=f"{strategy} bs={batch_size}", disable=not progress,
            mininterval=5) as bar:
        if strategy == "continuous":
            generate_continuous(call, order, batch_size, bar)
            result.batch_rows.append(order)
        else:
            for rows in batches(order, batch_size):
                generate_batch(call, rows, drop_finished=strategy == "batched_stop")
                result.batch_rows.append(rows)
                bar.update(len(rows))
    result.compiled, result.graphs = stepper.name, stepper.graphs
    result.compile_seconds = stepper.compile_seconds
    return result
