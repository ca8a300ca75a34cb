from pathlib import Path

from snakemake.exceptions import IncompleteCheckpointException, WorkflowError
from snakemake.utils import validate

from batched_reasoning.workflow.autotune import chosen_batch_size
from batched_reasoning.workflow.names import dataset_path, download_path, teacher_path
from batched_reasoning.workflow.paths import (
    CurvePoint,
    GenerationRun,
    Pretraining,
    Probe,
    TimedTraining,
    ToyTokenizer,
    TrainingRun,
)
from batched_reasoning.workflow.plan import Plan, PlanError, split_source
from batched_reasoning.workflow.wiring import Wiring
from batched_reasoning.core.provenance import script_code_hash

if "seed" in config:
    raise WorkflowError(
        "config: `seed` is now `seeds`, a list of replicates, each under results/seed<N>/; "
        f"write seeds: [{config['seed']}] (or --config seeds=[{config['seed']}])"
    )
# `--config seeds=[0,1]` arrives as a list of strings
config["seeds"] = [int(s) if str(s).isdigit() else s for s in config.get("seeds", [0])]
validate(config, "../schemas/config.schema.yaml")
# where this configuration's results go: a configuration of its own keeps them apart
RESULTS = config["results_dir"]


def out(path):
    """`path` under this configuration's results folder."""
    return f"{RESULTS}/{path}"


def chosen_size(probe):
    """The batch size `probe` chose (`auto`), or None before it has run. Whatever depends on
    a choice names the probe's output as an input (`Plan.table_inputs`), so Snakemake runs the
    probe first and plans again. Raising Snakemake's exception instead would leave a table
    that exists in place: "Nothing to be done" (issue 43)."""
    try:
        return chosen_batch_size(
            checkpoints.autotune.get(**probe.wildcards()).output.json
        )
    except IncompleteCheckpointException:
        return None


# Threads a timed job gets: the config's, or fewer where `--cores` allows fewer. They are part of
# a curve point's path, so a run at another `--cores` times new points instead of mixing its
# timings into the old ones.
CORES = workflow._cores
THREADS = min(config["threads"], CORES) if isinstance(CORES, int) else config["threads"]

try:
    # what runs, what is skipped and why, what each job asks for
    PLAN = Plan(config, choice=chosen_size, threads=THREADS)
except PlanError as error:
    raise WorkflowError(str(error)) from None

EVAL = config["evaluate"]
DISTILL = config["distill"]

# Library code behind each script: editing a module's code reruns exactly the jobs whose script
# imports it, directly or not (comments, docstrings and layout do not count).
CODE = {
    script.stem: script_code_hash(script)
    for script in Path(workflow.basedir, "workflow", "scripts").glob("*.py")
}


wildcard_constraints:
    seed=r"[0-9]+",
    model=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    dataset=r"[A-Za-z0-9][A-Za-z0-9._-]*",
    strategy=r"sequential|batched|batched_stop|continuous",
    stage=r"evaluate|self_consistency|grpo|distill",
    threads=r"[1-9][0-9]*",
    batch_size=r"[1-9][0-9]*",
    device=r"cpu|cuda|mps",
    world_size=r"[1-9][0-9]*",


# Input functions, params and resources of the rules (src/batched_reasoning/workflow/wiring.py).
WIRE = Wiring(PLAN)
PARTITION = WIRE.partition()
