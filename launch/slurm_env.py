"""``python -m launch.slurm_env [--] CMD ARGS...``: run ``CMD`` as one rank of a SLURM step.

Run by ``srun`` in launch/slurm/run.sh, once per task: maps the task's SLURM variables to
torch.distributed's ``env://`` ones (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT;
``mlsys.distributed.slurm_env``), prints them once (rank 0, on stderr) and execs ``CMD`` with
them. Without ``CMD`` it prints ``export`` lines. Exit 2, naming the variable, when SLURM's
variables are missing or malformed (not inside an srun step).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from mlsys.distributed.slurm_env import slurm_task_env

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--"]:
        argv = argv[1:]
    try:
        env = slurm_task_env(os.environ)
    except ValueError as err:
        print(f"launch.slurm_env: {err}", file=sys.stderr)
        return 2
    if not argv:
        for key, value in env.items():
            print(f"export {key}={value}")
        return 0
    if env["RANK"] == "0":
        print("slurm_env: " + " ".join(f"{k}={v}" for k, v in env.items()), file=sys.stderr,
              flush=True)
    os.execvpe(argv[0], argv, {**os.environ, **env})
    return 127  # not reached


if __name__ == "__main__":
    sys.exit(main())
