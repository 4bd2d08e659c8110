"""A process that trained ends its process group before it exits: a gloo group left to the
interpreter's teardown aborts the process at random ("terminate called without an active
exception", exit -6, pytorch/pytorch#190489), which the launcher reports as a failed run."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.tiny_run import REPO, env, run_config, write_yaml

pytestmark = pytest.mark.slow

_MAIN_THEN_ASK = """
import sys
import torch.distributed as dist
from launch.train import main
code = main(sys.argv[1:])
print("GROUP_LEFT", dist.is_available() and dist.is_initialized(), flush=True)
sys.exit(code)
"""


@pytest.mark.parametrize("lr, code", [(1e-3, 0), (1e30, 3)])  # done; NonFiniteError
def test_launch_train_ends_its_process_group(gpt_data, tmp_path, lr, code) -> None:
    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], tmp_path / "run",
                     [{"level": 1, "steps": 2, "lr": lr, "warmup": 0}])
    config = write_yaml(tmp_path / "run.yaml", raw)
    proc = subprocess.run([sys.executable, "-c", _MAIN_THEN_ASK, "--config", str(config),
                           "--ds_config", str(REPO / "configs/ds/zero1.json"), "--no-progress"],
                          env=env(), cwd=str(REPO), capture_output=True, text=True, timeout=600)
    assert proc.returncode == code, proc.stderr[-3000:]
    assert (tmp_path / "run" / "done.json").is_file() == (code == 0)
    assert "GROUP_LEFT False" in proc.stdout, proc.stdout[-2000:]
