import json
import os
from pathlib import Path

import pytest
import torch
from filelock import FileLock

from batched_reasoning.model import kernels
from batched_reasoning.model.checkpoint import save_model
from batched_reasoning.model.config import Qwen3Config
from batched_reasoning.model.qwen3 import Qwen3

SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"

# Under `-n auto` (pyproject) every CPU runs a test process: each computes on one thread, its
# child processes too, since an OpenMP team of two whose second thread waits for a CPU that
# another worker holds stalls at every parallel step (a benchmark test took 9x as long).
# A test that wants more threads asks for them (`torch.set_num_threads`, a job's `threads`).
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
    os.environ["OMP_NUM_THREADS"] = "1"
    torch.set_num_threads(1)
EOS = 3
PAD = 0

TINY = dict(
    vocab_size=97, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
    num_key_value_heads=2, head_dim=8, intermediate_size=64, max_position_embeddings=512,
)



def needs_cuda(reason: str = "needs a CUDA GPU"):
    """A CUDA-only test: skipped without CUDA, selected by `-m cuda` (the tests that the GPU
    check, `python -m batched_reasoning.gpu_check`, runs on a GPU machine)."""
    skip = pytest.mark.skipif(not torch.cuda.is_available(), reason=reason)
    return lambda test: pytest.mark.cuda(skip(test))

@pytest.fixture(autouse=True, scope="session")
def wisdom_of_this_test_session(tmp_path_factory):
    """Kernel choices the tests measure (`calibration`) go to a file of their own, not the
    user's cache, and child processes (workflow runs, ranks) inherit it."""
    path = tmp_path_factory.mktemp("wisdom") / "wisdom.json"
    patch = pytest.MonkeyPatch()
    patch.setenv("BATCHED_REASONING_WISDOM", str(path))
    yield path
    patch.undo()


@pytest.fixture(scope="session")
def tiny_run(tmp_path_factory):
    """One complete run of the tiny workflow config for the whole session, and the jobs it ran:
    the modules that check a finished run (its tables, its reruns, a cluster's records) copy
    it (`workflow_helpers.copy_run`) or read it, instead of each running it again. Made once
    for all of a session's workers: the first to ask makes it, the others wait for it."""
    from workflow_helpers import complete_tiny_run

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    made = shared / "tiny_run.json"
    with FileLock(str(shared / "tiny_run.lock")):
        if not made.exists():
            workdir, ran = complete_tiny_run(shared / "tiny_run" / "run")
            made.write_text(json.dumps({"workdir": str(workdir), "ran": ran}))
    record = json.loads(made.read_text())
    return Path(record["workdir"]), record["ran"]


@pytest.fixture
def packs_from_4_rows(monkeypatch):
    """Packing from 4 rows on, whatever this CPU measured for a tiny model (it may never pack
    one): for the tests of what packed weights compute."""
    monkeypatch.setattr(kernels, "pack_from_rows", lambda dtype, layer_shape, layers: 4)


def training_files(out) -> dict:
    """Where a training run into folder `out` writes, as `TrainingFiles` fields (JSON, so a run
    in another process can be handed them)."""
    return {"model": str(out / "model"), "log_csv": str(out / "log.csv"),
            "curve_png": str(out / "curve.png"), "metrics_json": str(out / "metrics.json"),
            "work_dir": str(out / "checkpoints")}


def random_model(seed: int = 0, **overrides) -> Qwen3:
    """A randomly initialised Qwen3 whose norms are not all ones (so they are tested too)."""
    torch.manual_seed(seed)
    model = Qwen3(Qwen3Config(**(TINY | overrides)))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.uniform_(0.5, 1.5)
            else:
                p.normal_(0, 0.5 if "embed" in name else 0.2)
    return model.eval()


@pytest.fixture
def tiny_checkpoint(tmp_path):
    directory = tmp_path / "tiny"
    save_model(random_model(), directory)
    return directory


def shared_file(name: str) -> Path:
    path = SHARED_DATA / name
    if not path.is_file():
        pytest.skip(f"{path} not available")
    return path


@pytest.fixture(scope="module")
def eos_model():
    """A tiny model whose boosted end-token logit ends rows after very different step counts."""
    model = random_model(seed=7)
    with torch.no_grad():
        model.lm_head.weight[EOS] *= 2.5
    return model
