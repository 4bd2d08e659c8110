"""Launch a real multi-process job (DeepSpeed launcher, CPU ranks, gloo) from a test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from mlsys.distributed.spawn import free_port

ROOT = Path(__file__).resolve().parents[1]


def cpu_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1",
               TOKENIZERS_PARALLELISM="false", **extra)
    env.pop("RANK", None)
    env.pop("WORLD_SIZE", None)
    return env


def launch(script: str | Path, *args: str, ranks: int = 2, timeout: float = 600,
           env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """Run ``script`` on ``ranks`` CPU ranks with the ``deepspeed`` launcher; raise with its
    output if it fails."""
    deepspeed = Path(sys.executable).with_name("deepspeed")
    cmd = [str(deepspeed), "--num_gpus", str(ranks), "--master_port", str(free_port()),
           str(script), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env or cpu_env(), capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} exited {proc.returncode}\n"
                             f"{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
    return proc
