"""Smoke test for the real single-node SLURM cluster started by .ci/slurm/up.sh.

Skipped unless a SLURM controller answers (``sinfo -h`` succeeds), so it is a
no-op on machines without the cluster.
"""

from __future__ import annotations

import functools
import re
import shutil
import subprocess
import time

import pytest


@functools.lru_cache(maxsize=1)
def _slurm_available() -> bool:
    if shutil.which("sinfo") is None or shutil.which("sbatch") is None:
        return False
    try:
        # with the controller down sinfo retries for ~10 s before failing
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=20).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


pytestmark = [pytest.mark.slurm, pytest.mark.slow]  # sbatch round trips


@pytest.fixture(autouse=True)
def _require_slurm():
    # checked lazily (not via skipif at import) so `-m "not slurm"` runs never call sinfo
    if not _slurm_available():
        pytest.skip("no running SLURM cluster (sinfo -h fails); start one with .ci/slurm/up.sh")


def _sacct_state(job_id: str) -> str | None:
    out = subprocess.run(
        ["sacct", "-j", job_id, "-n", "-X", "-P", "-o", "JobID,State"],
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    for line in out.splitlines():
        jid, _, state = line.partition("|")
        if jid.strip() == job_id:
            return state.strip()
    return None


@pytest.mark.parametrize("account", [None, "test"], ids=["default-account", "account-test"])
def test_sbatch_wait_completes_and_is_accounted(tmp_path, account):
    cmd = ["sbatch", "--wait", "--parsable", "--time=2", "--mem=100", "--job-name=br-smoke"]
    if account:
        cmd.append(f"--account={account}")
    cmd += [f"--output={tmp_path}/slurm-%j.out", "--wrap", "hostname"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    # --parsable prints "JOBID" or "JOBID;CLUSTER"
    job_id = re.split(r"[;\s]", proc.stdout.strip())[0]
    assert job_id.isdigit(), proc.stdout

    out_file = tmp_path / f"slurm-{job_id}.out"
    assert out_file.read_text().strip(), "job wrote no hostname"

    # accounting lags the job end by a moment
    state = None
    for _ in range(30):
        state = _sacct_state(job_id)
        if state == "COMPLETED":
            break
        time.sleep(1)
    assert state == "COMPLETED", f"sacct says {state!r} for job {job_id}"


@pytest.mark.parametrize("exclusive", [True, False], ids=["own-node", "shared-node"])
def test_a_job_records_whether_it_had_its_node_to_itself(tmp_path, exclusive):
    """What `core.allocation` reads inside a real job, asked for with and without
    `--exclusive` (the SLURM profile's timed jobs ask with)."""
    import json
    import sys

    from batched_reasoning.core.allocation import slurm_allocation

    assert slurm_allocation({}) is None  # outside SLURM: nothing to record
    probe = "import json; from batched_reasoning.core.allocation import slurm_allocation; " \
            "print(json.dumps(slurm_allocation()))"
    cmd = ["sbatch", "--wait", "--time=2", "--mem=100", f"--output={tmp_path}/out.json",
           *(["--exclusive"] if exclusive else []), "--wrap", f"{sys.executable} -c '{probe}'"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=180, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    record = json.loads((tmp_path / "out.json").read_text())
    assert record["scheduler"] == "slurm" and record["job_id"].isdigit() and record["node"]
    assert record["exclusive"] is exclusive
