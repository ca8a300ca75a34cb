"""Whether a timed job had its node to itself. A timing on a node that other jobs share is
slowed by them; SLURM says which it was (`OverSubscribe=NO` for a job that owns its node)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping


def slurm_allocation(environ: Mapping[str, str] = os.environ) -> dict | None:
    """The SLURM job this process runs in (id, node, CPUs, and whether no other job may share
    the node: None where `scontrol` cannot tell), or None outside SLURM."""
    job = environ.get("SLURM_JOB_ID")
    if not job:
        return None
    record = {"scheduler": "slurm", "job_id": job, "node": environ.get("SLURMD_NODENAME"),
              "cpus_on_node": environ.get("SLURM_CPUS_ON_NODE"), "exclusive": None}
    try:
        shown = subprocess.run(["scontrol", "show", "job", "--oneliner", job],
                               capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return record
    fields = dict(part.split("=", 1) for part in shown.split() if "=" in part)
    if "OverSubscribe" in fields:
        record["exclusive"] = fields["OverSubscribe"] == "NO"
    return record
