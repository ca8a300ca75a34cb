"""Data parallelism for the training stages: torchrun, averaged gradients, rank-0 output.

A stage run with `world_size` N > 1 executes its training function in N processes started by
`torchrun` (one node, standalone rendezvous on a free local port). Each process joins the process
group (NCCL on CUDA, gloo on CPU), takes its own share of every step's examples, and the ranks
average their gradients (`average_gradients`), so all ranks keep identical weights. Rank 0
alone prints, checkpoints and writes outputs; every rank resumes from the same checkpoint.

The global batch is a setting of the run, not of the world size: N ranks split each step's
examples, so a run trains the same model whatever N is and only the time per step changes.
"""

from __future__ import annotations

import ctypes
import datetime
import os
import pickle
import signal
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.distributed as dist
from torch.distributed.elastic.multiprocessing.errors import record

from ..core.devices import resolve_device

# How long a rank waits in a collective for the others. Evaluation is shared among the ranks, so
# what only rank 0 does (writing checkpoints and outputs) is short; an hour leaves room for a
# slow shared file system without letting a hung job hold its nodes for long.
COLLECTIVE_TIMEOUT = datetime.timedelta(hours=1)


def launch(fn, world_size: int, *args, **kwargs):
    """`fn(*args, **kwargs)` on `world_size` ranks started by torchrun; returns rank 0's result.

    World size 1 runs in this process without a process group, so nothing changes for it. The
    call travels to the ranks pickled (`fn` by its module and name); the ranks import what this
    process can (its `sys.path`) and write to its stdout and stderr.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if world_size == 1:
        return fn(*args, **kwargs)
    with tempfile.TemporaryDirectory(prefix="ranks-") as exchange:
        call, result = Path(exchange) / "call.pkl", Path(exchange) / "result.pkl"
        call.write_bytes(pickle.dumps((fn, args, kwargs)))
        sys.stdout.flush()
        sys.stderr.flush()
        torchrun = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone",
             f"--nproc-per-node={world_size}", "--max-restarts=0",
             "-m", __name__, str(call), str(result)],
            env=os.environ | {"PYTHONPATH": os.pathsep.join(p for p in sys.path if p)},
            preexec_fn=_die_with_parent,
        )
        if torchrun.returncode != 0:
            raise RuntimeError(f"{getattr(fn, '__name__', fn)} failed on {world_size} ranks "
                               f"(torchrun exit status {torchrun.returncode}); see the ranks' "
                               "errors above")
        return pickle.loads(result.read_bytes())


def _die_with_parent() -> None:
    """Ranks must not outlive a killed job: orphans would go on writing checkpoints."""
    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass  # not Linux: torchrun's own signal handling has to do


@record  # torchrun's failure summary then names the failing rank's exception, not only its exit
def _rank_main(call: str, result: str) -> None:
    """One rank, as torchrun starts it: join the group, run the call, rank 0 keeps the result."""
    _die_with_parent()
    fn, args, kwargs = pickle.loads(Path(call).read_bytes())
    dist.init_process_group("nccl" if kwargs.get("device") == "cuda" else "gloo",
                            timeout=COLLECTIVE_TIMEOUT)
    try:
        value = fn(*args, **kwargs)
        if is_main():
            Path(result).write_bytes(pickle.dumps(value))
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()
    # Done and saved: leave without the interpreter's teardown. Threads of torch's libraries
    # torn down in C++ static destruction still aborted a rank at exit now and then ("terminate
    # called without an active exception", once in about a hundred two-rank runs), failing a
    # job whose work was complete.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def rank() -> int:
    return dist.get_rank() if dist.is_initialized() else 0


def world_size() -> int:
    return dist.get_world_size() if dist.is_initialized() else 1


def is_main() -> bool:
    return rank() == 0


def device(name: str) -> torch.device:
    """This rank's device: its own GPU (by local rank) on CUDA."""
    resolved = resolve_device(name)
    if resolved.type == "cuda" and dist.is_initialized():
        resolved = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
        torch.cuda.set_device(resolved)
    return resolved


def threads_per_rank(threads: int) -> int:
    """The job's CPU threads shared among its ranks."""
    return max(1, threads // world_size())


def share(items: Sequence, rank: int, world_size: int) -> list:
    """Rank `rank`'s contiguous block of `items`; the first `len % world_size` ranks get one
    more. A step's rollouts are ordered by problem, so with as many problems as ranks (or a
    multiple) each rank gets whole problems, as in the book's multi-GPU script."""
    size, extra = divmod(len(items), world_size)
    start = rank * size + min(rank, extra)
    return list(items[start:start + size + (rank < extra)])


def shard(items: Sequence) -> list:
    """This rank's share of `items` (`share`)."""
    return share(items, rank(), world_size())


def average_gradients(model: torch.nn.Module) -> None:
    """Replace each gradient by its mean over ranks, as DDP would, in one flat all-reduce.

    Not DDP itself: once DDP is constructed, the gloo group's threads (`gloo_tcp_loop`,
    `pt_gloo_runloop`) outlive `destroy_process_group` and are torn down only as the
    interpreter exits, where a rank now and then aborted ("terminate called without an active
    exception"). A plain all-reduce leaves nothing running. A rank without a gradient (no
    examples in a short last step) adds zeros."""
    if not dist.is_initialized():
        return
    params = [p for p in model.parameters() if p.requires_grad]
    grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= world_size()
    for param, chunk in zip(params, flat.split([g.numel() for g in grads])):
        param.grad = chunk.view_as(param).clone()


def all_reduce(values: Sequence[float], op: str = "sum") -> list[float]:
    """Elementwise sum or max of `values` over ranks (float64, on the CPU for gloo)."""
    if not dist.is_initialized():
        return list(values)
    backend_device = "cuda" if dist.get_backend() == "nccl" else "cpu"
    tensor = torch.tensor(list(values), dtype=torch.float64, device=backend_device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)
    return tensor.tolist()


def all_gather(obj) -> list:
    """Every rank's `obj`, in rank order."""
    if not dist.is_initialized():
        return [obj]
    gathered = [None] * world_size()
    dist.all_gather_object(gathered, obj)
    return gathered


def barrier() -> None:
    if dist.is_initialized():
        dist.barrier()


if __name__ == "__main__":
    _rank_main(*sys.argv[1:])
