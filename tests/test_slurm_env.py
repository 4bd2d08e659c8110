"""The SLURM -> torch.distributed mapping (mlsys.distributed.slurm_env, and the srun-side
command launch.slurm_env), with no scheduler involved."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from mlsys.distributed.slurm_env import PORT_BASE, expand_hostlist, slurm_dist_env

REPO = Path(__file__).resolve().parents[1]


def task_env(procid: int, localid: int, ntasks: int, nodelist: str, job: int = 4242,
             **extra: str) -> dict[str, str]:
    """What srun exports to one task (the subset the mapping reads)."""
    return {"SLURM_PROCID": str(procid), "SLURM_LOCALID": str(localid),
            "SLURM_NTASKS": str(ntasks), "SLURM_JOB_ID": str(job),
            "SLURM_JOB_NODELIST": nodelist, "SLURM_STEP_NODELIST": nodelist, **extra}


def test_two_nodes_by_four_gpus_block_layout():
    # srun --nodes=2 --ntasks-per-node=4: tasks 0-3 on gpu07, 4-7 on gpu08.
    hosts = ["gpu07", "gpu08"]
    envs = [slurm_dist_env(task_env(r, r % 4, 8, "gpu[07-08]"), hosts) for r in range(8)]
    assert [e["RANK"] for e in envs] == [str(r) for r in range(8)]
    assert [e["LOCAL_RANK"] for e in envs] == ["0", "1", "2", "3"] * 2
    assert {e["WORLD_SIZE"] for e in envs} == {"8"}
    assert {e["MASTER_ADDR"] for e in envs} == {"gpu07"}
    assert {e["MASTER_PORT"] for e in envs} == {str(PORT_BASE + 4242)}
    assert set(envs[0]) == {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}


def test_master_from_nodelist_without_scontrol_matches_scontrol_order():
    # No hostnames given: the node list is expanded here, first host wins.
    env = slurm_dist_env(task_env(5, 1, 8, "node[003-004]"))
    assert env["MASTER_ADDR"] == "node003"
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"]) == ("5", "1", "8")


def test_four_nodes_by_eight_gpus_last_rank():
    env = slurm_dist_env(task_env(31, 7, 32, "a[1-4]", job=123456), ["a1", "a2", "a3", "a4"])
    assert env == {"RANK": "31", "LOCAL_RANK": "7", "WORLD_SIZE": "32", "MASTER_ADDR": "a1",
                   "MASTER_PORT": str(PORT_BASE + 123456 % 10000)}


def test_step_nodelist_preferred_over_job_nodelist():
    # A step on a subset of the allocation: its rank 0 runs on the step's first node.
    env = task_env(0, 0, 2, "n[1-4]")
    env["SLURM_STEP_NODELIST"] = "n[3-4]"
    assert slurm_dist_env(env)["MASTER_ADDR"] == "n3"


def test_explicit_master_and_port_win():
    env = task_env(1, 1, 2, "n1", MASTER_ADDR="10.0.0.9", MASTER_PORT="29999")
    out = slurm_dist_env(env, ["n1"])
    assert (out["MASTER_ADDR"], out["MASTER_PORT"]) == ("10.0.0.9", "29999")
    assert slurm_dist_env(env, ["n1"], port=31000)["MASTER_PORT"] == "31000"


def test_port_is_same_on_all_ranks_and_differs_between_jobs():
    a = {slurm_dist_env(task_env(r, r, 4, "n1", job=77))["MASTER_PORT"] for r in range(4)}
    b = slurm_dist_env(task_env(0, 0, 4, "n1", job=78))["MASTER_PORT"]
    assert len(a) == 1 and b not in a


def test_nprocs_fallback_for_world_size():
    env = task_env(2, 0, 3, "n1")
    del env["SLURM_NTASKS"]
    env["SLURM_NPROCS"] = "3"
    assert slurm_dist_env(env, ["n1"])["WORLD_SIZE"] == "3"


@pytest.mark.parametrize("missing", ["SLURM_PROCID", "SLURM_LOCALID", "SLURM_NTASKS",
                                     "SLURM_JOB_ID"])
def test_missing_variable_is_named(missing):
    env = task_env(0, 0, 2, "n1")
    del env[missing]
    with pytest.raises(ValueError, match=missing):
        slurm_dist_env(env, ["n1"])


def test_missing_nodelist_is_named():
    env = task_env(0, 0, 2, "n1")
    del env["SLURM_JOB_NODELIST"], env["SLURM_STEP_NODELIST"]
    with pytest.raises(ValueError, match="SLURM_JOB_NODELIST"):
        slurm_dist_env(env)


@pytest.mark.parametrize("env, field", [
    (task_env(4, 0, 4, "n1"), "SLURM_PROCID"),
    (task_env(0, 4, 4, "n1"), "SLURM_LOCALID"),
    (task_env(0, 0, 4, "n1", SLURM_PROCID="x"), "SLURM_PROCID"),
    (task_env(0, 0, 4, "n1", MASTER_PORT="http"), "MASTER_PORT"),
])
def test_malformed_values_are_named(env, field):
    with pytest.raises(ValueError, match=field):
        slurm_dist_env(env, ["n1"])


@pytest.mark.parametrize("hostlist, hosts", [
    ("vm", ["vm"]),
    ("gpu[07-08]", ["gpu07", "gpu08"]),
    ("gpu[01-03,07],login", ["gpu01", "gpu02", "gpu03", "gpu07", "login"]),
    ("r[1-2]-n[09-10]", ["r1-n09", "r1-n10", "r2-n09", "r2-n10"]),
    ("a[8-10]b", ["a8b", "a9b", "a10b"]),
])
def test_expand_hostlist(hostlist, hosts):
    assert expand_hostlist(hostlist) == hosts


@pytest.mark.parametrize("bad", ["n[1-2", "n1-2]", "n[a-b]"])
def test_expand_hostlist_rejects_malformed(bad):
    with pytest.raises(ValueError, match="host list"):
        expand_hostlist(bad)


def test_cli_exports_mapping_and_execs_command(tmp_path):
    # The srun-side entry: env mapped, then exec of the command with it.
    env = {**os.environ, **task_env(3, 1, 4, "h[5-6]", job=9)}
    env.pop("MASTER_ADDR", None), env.pop("MASTER_PORT", None)
    env["PATH"] = str(tmp_path)  # no scontrol: the in-process expansion is used
    code = "import os; print(*(os.environ[k] for k in ('RANK','LOCAL_RANK','WORLD_SIZE',"
    code += "'MASTER_ADDR','MASTER_PORT')))"
    out = subprocess.run([sys.executable, "-m", "launch.slurm_env", sys.executable, "-c", code],
                         cwd=REPO, env=env, capture_output=True, text=True, check=True).stdout
    assert out.split() == ["3", "1", "4", "h5", str(PORT_BASE + 9)]


def test_cli_names_missing_variable():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    res = subprocess.run([sys.executable, "-m", "launch.slurm_env", "true"], cwd=REPO, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 2 and "SLURM_" in res.stderr
