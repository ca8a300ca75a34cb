"""Stage `grpo`: reinforcement learning with verifiable rewards (the book's chapter 6), with
each step's rollouts generated together (Appendix E.6).

A step samples `num_rollouts` answers to one training problem, rewards each 1 if its extracted
answer is correct and 0 if not, turns the rewards into group-relative advantages, and raises the
log-probability of the better-than-average answers while lowering the others'. Generation is
where the time goes, so rollouts go through `generate` with the run's strategy and batch size.
Each rollout draws its randomness from its own stream keyed by (seed, problem, rollout): the same
rollouts come out whatever the strategy, batch size or number of ranks (up to float rounding),
and after a resume. With several ranks (`distributed`), each generates and scores its share of
the step's rollouts; rewards are gathered for the group advantages and the ranks average gradients.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass

import pandas as pd
import torch

from ..training import distributed
from ..model.checkpoint import save_model
from ..core.devices import synchronize
from ..engine.generation import generate
from ..data.answers import extract_answer
from ..data.grading import is_correct
from ..core.io import atomic_path, read_jsonl, write_json
from ..core.memory import PeakMemory
from ..engine.padding import left_pad
from ..core.plots import moving_average, save_figure, subplots
from ..data.prompts import TextTokenizer, format_prompt
from ..core.provenance import run_info
from ..engine.sampling import TopP
from ..training.loop import train_loop
from ..training.losses import token_logprobs
from ..training.state import finish_run, run_identity
from ..core.settings import Settings
from ..training.settings import TrainingFiles

ADVANTAGE_EPS = 1e-4
# Evaluation is not what the runs compare, so it uses one batch size everywhere: accuracies of
# runs with different rollout batch sizes then come from the same computation.
EVAL_BATCH_SIZE = 16
LOG_COLUMNS = [
    "step", "loss", "reward_avg", "reward_std", "skipped", "grad_norm", "tokens_per_sec",
    "avg_response_len", "rollouts_digest", "prefills", "gen_seconds", "update_seconds", "step_seconds",
    "peak_mem_mb", "eval_acc", "eval_seconds",
]


@dataclass(frozen=True)
class GRPOSettings(Settings):
    """A GRPO run's settings: config `grpo:`, and the job's strategy, batch size, device and
    threads. They are the run's identity with its data, starting weights and code."""

    strategy: str
    batch_size: int  # rollouts generated together
    device: str
    dtype: str
    compile: str  # how rollouts' and evaluations' decode steps run (`engine.compiled`)
    steps: int
    num_rollouts: int  # answers sampled per problem
    problems_per_step: int
    max_new_tokens: int
    temperature: float
    top_p: float
    lr: float
    grad_clip: float
    seed: int
    checkpoint_every: int
    eval_every: int
    eval_problems: int
    train_problems: int | None  # the first records, revisited; None: the whole train split
    skip_zero_advantage: bool  # no update when a step's rollouts all earned the same reward
    prompt_style: str
    threads: int

    def __post_init__(self):
        super().__post_init__()
        if self.num_rollouts < 2:
            raise ValueError(f"num_rollouts must be >= 2 (advantages compare them), "
                             f"got {self.num_rollouts}")


def reward(text: str, answer: str) -> float:
    """The book's verifiable reward: 1 for a correct final answer, else 0.

    Answers are extracted as in evaluation (last \\boxed{}, else last number); the book's
    `reward_rlvr` accepts only a \\boxed{} answer.
    """
    return float(is_correct(extract_answer(text), answer))


def group_advantages(rewards: torch.Tensor) -> torch.Tensor:
    """(r - mean) / (std + 1e-4) within one problem's group of rollouts.

    The standard deviation is the sample one (n - 1 in the denominator), as the book's
    `rewards.std()` (torch's default). Equal rewards give zero advantages: nothing to learn.
    """
    return (rewards - rewards.mean()) / (rewards.std() + ADVANTAGE_EPS)


def scored_completion(tokens: list[int], stop_token: int | None) -> list[int]:
    """A rollout's tokens as the policy chose them: with the end token it stopped on.

    `generate` drops the end token; the policy must be credited for choosing it too, or it never
    learns when to stop. A rollout cut off at `max_new_tokens` chose no end token.
    """
    return list(tokens) if stop_token is None else [*tokens, stop_token]


def completion_logprobs(model, prompts: list[list[int]], completions: list[list[int]],
                        pad_token_id: int, device: torch.device) -> torch.Tensor:
    """Summed log-probability of each completion after its prompt, shape (n,).

    One left-padded forward pass over all prompt + completion sequences; prompt and padding
    positions are masked out, so each row equals its own unpadded pass.
    """
    input_ids, attention_mask = left_pad([p + c for p, c in zip(prompts, completions)],
                                         pad_token_id, device)
    width = input_ids.shape[1]
    lengths = torch.tensor([len(c) for c in completions], device=device)
    is_completion = torch.arange(width, device=device)[None, :] >= width - lengths[:, None]
    # entry t of token_logprobs scores token t + 1
    logprobs = token_logprobs(model, input_ids, attention_mask)
    return logprobs.masked_fill(~is_completion[:, 1:], 0.0).sum(-1)


def policy_loss(logprobs: torch.Tensor, advantages: torch.Tensor) -> torch.Tensor:
    """The book's policy-gradient loss: minus the mean advantage-weighted sequence log-prob."""
    return -(advantages.to(logprobs.device) * logprobs).mean()


def policy_update(model, optimizer, prompts, completions, advantages, pad_token_id,
                  grad_clip: float, device, step_rollouts: int) -> tuple[float, float]:
    """One AdamW step on this rank's rollouts out of the step's `step_rollouts`.

    The loss is scaled so that the ranks' average of gradients is the loss over all the step's rollouts
    (world size 1: the scale is exactly 1). Returns (step loss, gradient norm before clipping).
    """
    logprobs = completion_logprobs(model, prompts, completions, pad_token_id, device)
    share = len(completions) / step_rollouts
    loss = policy_loss(logprobs, advantages) * (share * distributed.world_size())
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    distributed.average_gradients(model)
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    (step_loss,) = distributed.all_reduce([loss.item() / distributed.world_size()])
    return step_loss, grad_norm.item()


def eval_correct(model, tokenizer, prompts, answers, max_new_tokens: int,
                 compile: str = "off") -> list[int]:
    """Greedy correctness (1 or 0) on each held-out problem, in order; with several ranks each
    scores its share, so no rank waits in a collective while another evaluates alone. Kept per
    problem so that a table can pair a problem's answers before and after training."""
    mine = distributed.shard(range(len(prompts)))
    scored = []
    if mine:
        result = generate(
            model, [prompts[i] for i in mine], strategy="batched_stop",
            batch_size=EVAL_BATCH_SIZE, max_new_tokens=max_new_tokens,
            eos_token_id=tokenizer.end_token_ids, pad_token_id=tokenizer.pad_token_id,
            compile=compile,
        )
        scored = [(i, int(reward(tokenizer.decode(t), answers[i])))
                  for i, t in zip(mine, result.tokens)]
    return [correct for _, correct in sorted(sum(distributed.all_gather(scored), []))]


@dataclass(frozen=True)
class StepContext:
    """What every GRPO step reads: the run's settings, its tokenizer, the training problems,
    the rollouts' sampler (keyed, so it holds no state between steps) and the device."""

    settings: GRPOSettings
    tokenizer: TextTokenizer
    train: list[dict]
    sampler: TopP
    device: torch.device


def recorded_rollouts(everyone: list[tuple], rollouts: list | None) -> str:
    """The digest of a step's rollout tokens (`everyone`: sorted (problem, rollout, reward,
    tokens, margins, draws)); `rollouts`, where given, gets each one's key, tokens, margins and
    draws."""
    if rollouts is not None:
        rollouts += [{"key": [p, r], "tokens": t, "margins": m, "draws": d}
                     for p, r, _, t, m, d in everyone]
    return hashlib.sha256(json.dumps([t for *_, t, _, _ in everyone]).encode()).hexdigest()


def step_problems(step: int, context: StepContext) -> tuple[list[dict], list[list[int]]]:
    """The training problems of a (0-based) step, cycling through the split, and their prompts."""
    settings = context.settings
    problems = [context.train[(step * settings.problems_per_step + p) % len(context.train)]
                for p in range(settings.problems_per_step)]
    return problems, [context.tokenizer.encode(format_prompt(r["problem"], settings.prompt_style))
                      for r in problems]


def grpo_step(model, optimizer, step: int, context: StepContext,
              rollouts: list | None = None) -> dict:
    """One GRPO step (0-based `step`): this rank's rollouts of the step's problems, their
    rewards and group advantages, and one policy update (none where every reward is equal and
    `skip_zero_advantage`). Returns the step's log row; `rollouts`, where given, gets every
    rollout's key, tokens, pick margins and draws, so a timing can judge where two runs part."""
    settings, tokenizer, torch_device = context.settings, context.tokenizer, context.device
    step_rollouts = settings.problems_per_step * settings.num_rollouts
    problems, prompts = step_problems(step, context)
    mine = distributed.shard([(p, r) for p in range(settings.problems_per_step)
                              for r in range(settings.num_rollouts)])
    with PeakMemory(torch_device) as memory:
        tick = time.perf_counter()
        result = generate(
            model, [prompts[p] for p, _ in mine], strategy=settings.strategy,
            batch_size=settings.batch_size,
            max_new_tokens=settings.max_new_tokens, eos_token_id=tokenizer.end_token_ids,
            pad_token_id=tokenizer.pad_token_id, sampler=context.sampler,
            keys=[(step * settings.problems_per_step + p, r) for p, r in mine],
            compile=settings.compile,
        )
        gen_seconds = time.perf_counter() - tick
        rewards = torch.zeros(settings.problems_per_step, settings.num_rollouts)
        scored = [(p, r, reward(tokenizer.decode(t), problems[p]["answer"]), t, m, d)
                  for (p, r), t, m, d in zip(mine, result.tokens, result.margins, result.draws)]
        everyone = sorted(sum(distributed.all_gather(scored), []))
        for p, r, value, *_ in everyone:
            rewards[p, r] = value
        digest = recorded_rollouts(everyone, rollouts)
        skipped = settings.skip_zero_advantage and bool((rewards == rewards[:, :1]).all())
        update_start = time.perf_counter()
        if skipped:
            loss, grad_norm = 0.0, float("nan")
        else:
            advantages = torch.stack([group_advantages(group) for group in rewards])
            completions = [scored_completion(t, stop)
                           for t, stop in zip(result.tokens, result.stop_tokens)]
            loss, grad_norm = policy_update(
                model, optimizer, [prompts[p] for p, _ in mine], completions,
                torch.stack([advantages[p, r] for p, r in mine]),
                tokenizer.pad_token_id, settings.grad_clip, torch_device, step_rollouts,
            )
            synchronize(torch_device)
        update_seconds = time.perf_counter() - update_start
        step_seconds = time.perf_counter() - tick
    generated, prefills = distributed.all_reduce([result.generated_tokens, result.prefills])
    gen_seconds, update_seconds, step_seconds, peak_mb = distributed.all_reduce(
        [gen_seconds, update_seconds, step_seconds, memory.peak_mb], op="max")
    return {
        "step": step + 1, "loss": loss, "reward_avg": rewards.mean().item(),
        "reward_std": rewards.flatten().std().item(), "skipped": skipped,
        "grad_norm": grad_norm, "tokens_per_sec": generated / gen_seconds,
        "avg_response_len": generated / step_rollouts,
        # the step's rollout tokens, so runs can show that they trained on the same ones
        "rollouts_digest": digest[:16],
        "prefills": int(prefills),  # prompts prefilled: a problem's rollouts share one prefill
        "gen_seconds": gen_seconds, "update_seconds": update_seconds,
        "step_seconds": step_seconds, "peak_mem_mb": peak_mb,
    }


@dataclass(frozen=True)
class HeldOut:
    """The held-out problems whose greedy accuracy a run measures before and after training."""

    tokenizer: TextTokenizer
    prompts: list[list[int]]
    answers: list[str]
    max_new_tokens: int
    compile: str

    def evaluate_into(self, model, row: dict) -> dict:
        """`row` with the accuracy, each problem's correctness and the time it took."""
        tick = time.perf_counter()
        correct = eval_correct(model, self.tokenizer, self.prompts, self.answers,
                               self.max_new_tokens, self.compile)
        row["eval_acc"] = sum(correct) / len(correct)
        row["eval_correct"] = correct
        row["eval_seconds"] = time.perf_counter() - tick
        if distributed.is_main():
            print(f"step {row['step']}: eval accuracy {row['eval_acc']:.3f}", flush=True)
        return row


def train_grpo(model_dir: str, train_path: str, test_path: str, files: TrainingFiles,
               settings: GRPOSettings, params: dict, labels: dict) -> dict | None:
    """Train for `settings.steps` GRPO steps; resumes from the latest checkpoint in
    `files.work_dir`.

    Step s (0-based) trains on train records s*P .. s*P + P - 1 (P = `problems_per_step`, 1 as
    in the book), modulo n: `train_problems` (the first records, revisited) or the whole train
    split. Log row `step` k is the state after k steps; row 0 holds only the accuracy before
    training. Response lengths and rollout tokens/s count generated tokens without the end
    token, as `generate` reports them. In a multi-rank run rank 0 writes everything and
    returns the metrics; the other ranks return None. A checkpoint in `files.work_dir` is resumed
    only if the same run wrote it.
    """
    identity = run_identity(__name__, settings.as_dict(), [train_path, test_path], model_dir)
    step_rollouts = settings.problems_per_step * settings.num_rollouts
    if distributed.world_size() > step_rollouts:
        raise ValueError(f"world size {distributed.world_size()} exceeds the {step_rollouts} "
                         "rollouts of a step (problems_per_step x num_rollouts): ranks would idle")
    torch_device = distributed.device(settings.device)
    torch.set_num_threads(distributed.threads_per_rank(settings.threads))
    main = distributed.is_main()
    tokenizer = TextTokenizer.from_model_dir(model_dir, settings.prompt_style)
    train = read_jsonl(train_path)[:settings.train_problems]
    test = read_jsonl(test_path)[:settings.eval_problems]
    held_out = HeldOut(tokenizer, [tokenizer.encode(format_prompt(r["problem"],
                                                                settings.prompt_style))
                                   for r in test], [r["answer"] for r in test],
                       settings.max_new_tokens, settings.compile)
    context = StepContext(settings, tokenizer, train, TopP(settings.temperature, settings.top_p,
                                                           settings.seed), torch_device)

    def take_step(model, optimizer, step: int) -> dict:
        row = grpo_step(model, optimizer, step, context)
        if main:
            print(f"step {step + 1}/{settings.steps} loss {row['loss']:.4f} reward "
                  f"{row['reward_avg']:.3f}{' (skipped: all rewards equal)' if row['skipped'] else ''}",
                  flush=True)
        if (step + 1) % settings.eval_every == 0 or step + 1 == settings.steps:
            held_out.evaluate_into(model, row)
        return row

    trained = train_loop(
        identity=identity, start_dir=model_dir, work_dir=files.work_dir, device=torch_device,
        dtype=settings.dtype, seed=settings.seed, steps=settings.steps,
        checkpoint_every=settings.checkpoint_every,
        make_optimizer=lambda model: torch.optim.AdamW(model.parameters(), lr=settings.lr),
        first_rows=lambda model: [held_out.evaluate_into(model, {"step": 0})],
        take_step=take_step)
    if not main:
        return None
    return write_outputs(trained, model_dir, files, settings, params, labels, torch_device)


def write_outputs(trained, model_dir: str, files: TrainingFiles, settings: GRPOSettings,
                  params: dict, labels: dict, torch_device) -> dict:
    """The trained policy, its log, learning curve and metrics; the work folder removed."""
    save_model(trained.model, files.model, source=model_dir)
    log = pd.DataFrame(trained.rows)
    with atomic_path(files.log_csv) as tmp:
        log.reindex(columns=LOG_COLUMNS).to_csv(tmp, index=False)
    world_size = distributed.world_size()
    plot_curve(log, files.curve_png,
               f"GRPO {labels['model']} on {labels['dataset']} ({settings.strategy}, "
               f"bs {settings.batch_size}, {settings.device} x {world_size})")
    metrics = labels | summarize(log) | {
        "steps": settings.steps, "num_rollouts": settings.num_rollouts,
        "problems_per_step": settings.problems_per_step,
        "world_size": world_size, "resumed_from_step": trained.resumed_from,
        "wall_seconds_this_run": trained.seconds,
        "strategy": settings.strategy, "batch_size": settings.batch_size, "dtype": settings.dtype,
    } | run_info(params, torch_device, __name__)
    write_json(metrics, files.metrics_json)
    finish_run(files.work_dir)
    return metrics


def summarize(log: pd.DataFrame) -> dict:
    """A run's totals from its per-step log (row 0, before training, only gives eval_acc)."""
    steps = log[log["step"] > 0]
    quarter = max(1, len(steps) // 4)
    evals = log.dropna(subset=["eval_acc"])
    return {
        "train_seconds": float(steps["step_seconds"].sum()),
        "gen_seconds_per_step": float(steps["gen_seconds"].mean()),
        "update_seconds_per_step": float(steps["update_seconds"].mean()),
        "rollout_tokens": float((steps["tokens_per_sec"] * steps["gen_seconds"]).sum()),
        "rollout_tokens_per_second": float(
            (steps["tokens_per_sec"] * steps["gen_seconds"]).sum() / steps["gen_seconds"].sum()),
        "peak_memory_mb": float(steps["peak_mem_mb"].max()),
        "reward_first_quarter": float(steps["reward_avg"].head(quarter).mean()),
        "reward_last_quarter": float(steps["reward_avg"].tail(quarter).mean()),
        "skipped_updates": int(steps["skipped"].astype(bool).sum()),
        "eval_acc_before": float(evals["eval_acc"].iloc[0]),
        "eval_acc_after": float(evals["eval_acc"].iloc[-1]),
        # each held-out problem's greedy correctness (1/0 in test order), for paired effects
        "eval_correct_before": list(evals["eval_correct"].iloc[0]),
        "eval_correct_after": list(evals["eval_correct"].iloc[-1]),
    }


def plot_curve(log: pd.DataFrame, png: str, title: str) -> None:
    """One run's learning curve: reward per step with its moving average, and eval accuracy."""
    steps = log[log["step"] > 0]
    evals = log.dropna(subset=["eval_acc"])
    fig, ax = subplots(figsize=(7, 4))
    ax.plot(steps["step"], steps["reward_avg"], ".", alpha=0.4, label="reward (group mean)")
    ax.plot(steps["step"], moving_average(steps["reward_avg"]), label="moving average (10)")
    ax.plot(evals["step"], evals["eval_acc"], "o-", label="eval accuracy (greedy)")
    ax.set_xlabel("step")
    ax.set_ylabel("reward / accuracy")
    ax.set_ylim(-0.05, 1.05)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(title)
    save_figure(fig, png)
