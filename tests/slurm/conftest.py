"""The real-SLURM tests: collected only by `make test-slurm` (MLSYS_TEST_SLURM=1), which needs
root to start a one-node cluster on localhost (launch/slurm/local_cluster.sh)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = ROOT / "launch" / "slurm" / "local_cluster.sh"

if os.environ.get("MLSYS_TEST_SLURM") != "1":
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def slurm_env() -> Iterator[dict[str, str]]:
    """Start the local cluster (installing slurm-wlm/munge if missing), yield the environment
    for sbatch/scontrol, stop the cluster afterwards whatever happened."""
    out = subprocess.run(["bash", str(CLUSTER), "start"], capture_output=True, text=True)
    if out.returncode != 0:
        subprocess.run(["bash", str(CLUSTER), "stop"], capture_output=True)
        pytest.fail(f"local SLURM cluster did not start:\n{out.stdout}\n{out.stderr}")
    print(out.stdout.strip())
    conf = subprocess.run(["bash", str(CLUSTER), "env"], capture_output=True, text=True,
                          check=True).stdout.strip().removeprefix("export SLURM_CONF=")
    env = {k: v for k, v in os.environ.items()
           if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
           and not k.startswith("SLURM_")}
    env["SLURM_CONF"] = conf
    try:
        yield env
    finally:
        subprocess.run(["bash", str(CLUSTER), "stop"], capture_output=True)
