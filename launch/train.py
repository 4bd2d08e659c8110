"""The DeepSpeed entry point: one process per rank.

    deepspeed --num_gpus 2 launch/train.py --ds_config configs/ds/zero3.json \\
        --config configs/tiny-bert-vcycle.yaml

(or ``python -m launch.train`` under torchrun / srun / mlsys.distributed.spawn). Validates both
configs before anything else (exit 2, message naming file and field), picks the CPU accelerator
and gloo when no GPU is present, maps SLURM's variables to torch.distributed's, then runs
``mlsys.train.controller.run_training``, which checks the data against the config and claims
and locks the run directory before it changes anything there. Resumes at the newest checkpoint
by default (a changed config is an error listing the changes; ``--accept-change FIELD`` accepts
one that changes no number of the run). ``--set PATH=VALUE ...`` overrides run config fields
(``train.seed=3 phases.1.steps=500``; ``mlsys.config.apply_overrides``): the resolved config,
overrides included, is what the run saves (run_config.json) and what a resume compares with,
so a resume passes the same ``--set``. A finished run is not retrained; ``--resume`` insists
on a checkpoint, ``--fresh`` discards an earlier run's outputs (only files mlsys wrote, in a
directory it created). SIGTERM / SIGUSR1 / SIGINT: checkpoint and exit 0 (before the first
step: exit 0 at once, nothing to save). Exit 2: a bad config, data that does not fit it, or a
run directory that cannot be used as asked (nothing was changed); 3: a non-finite loss or
gradient, or a checkpoint that could not be written (the message says which and what is still
there). SIGUSR2 prints every thread's Python stack to stderr and training goes on (a run that
seems stuck: ``kill -USR2 PID``, its data workers too).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", required=True, help="run config (YAML)")
    p.add_argument("--ds_config", "--deepspeed_config", dest="ds_config", required=True,
                   help="DeepSpeed config (JSON)")
    p.add_argument("--local_rank", type=int, default=None, help="set by the deepspeed launcher")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--resume", action="store_true", help="require a checkpoint to resume from")
    g.add_argument("--fresh", action="store_true", help="start over, discarding earlier outputs")
    p.add_argument("--run-dir", default=None, help="override the run config's run_dir")
    p.add_argument("--set", nargs="+", action="extend", default=[], metavar="PATH=VALUE",
                   dest="overrides",
                   help="override run config fields by dotted path, values as YAML (e.g. "
                        "--set train.seed=3 phases.1.steps=500); checked by the same schema "
                        "and recorded in the run's run_config.json")
    p.add_argument("--accept-change", action="append", default=[], metavar="FIELD",
                   help="on resume, accept a changed config field that changes no number of "
                        "the run (e.g. train.eval_every); repeatable")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p.parse_args(argv)


def validate(config: str, ds_config: str, world_size: int, run_dir: str | None = None,
             overrides: list[str] | tuple[str, ...] = ()):
    """(run config, resolved DeepSpeed config) or ConfigError. Touches nothing. ``overrides``:
    ``--set PATH=VALUE`` items (``mlsys.config.apply_overrides``), before ``run_dir``."""
    from mlsys.config import ConfigError, apply_overrides, load_run_config, parse_run_config
    from mlsys.ds_config import load_ds_config, resolve_ds_config

    cfg = load_run_config(config, expand=not overrides)  # --set edits the config as written
    if overrides:
        given = cfg.model_dump(exclude_unset=True)  # what the config sets, and the overrides
        cfg = parse_run_config(apply_overrides(given, overrides, fields=cfg.model_dump()),
                               f"{config} (--set {' '.join(overrides)})")
    if run_dir is not None:
        if not run_dir.strip():
            raise ConfigError("--run-dir: empty; give a directory")
        cfg = parse_run_config({**cfg.model_dump(), "run_dir": run_dir}, f"{config} (--run-dir)")
    ds = resolve_ds_config(load_ds_config(ds_config), cfg, world_size, source=ds_config)
    return cfg, ds


def _distributed_env(local_rank: int | None) -> None:
    """Fill RANK/WORLD_SIZE/... from SLURM when launched by srun without a launcher."""
    if "SLURM_PROCID" in os.environ and "RANK" not in os.environ:
        try:
            from mlsys.distributed.slurm_env import slurm_dist_env
        except ImportError:  # pragma: no cover - slurm helper not installed
            return
        os.environ.update(slurm_dist_env(os.environ))
    if local_rank is not None and "LOCAL_RANK" not in os.environ:
        os.environ["LOCAL_RANK"] = str(local_rank)


def main(argv: list[str] | None = None) -> int:
    # Imports stay inside: configs are validated before torch loads, and DS_ACCELERATOR must be
    # set before deepspeed is imported.
    args = parse_args(argv)
    faulthandler.register(signal.SIGUSR2, all_threads=True)  # inherited by the data workers
    _distributed_env(args.local_rank)
    from mlsys.config import ConfigError

    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        cfg, ds = validate(args.config, args.ds_config, world, args.run_dir, args.overrides)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2

    import torch

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import deepspeed

    from mlsys.distributed.preempt import Interrupted, StopFlag
    from mlsys.distributed.process import end_process_group
    from mlsys.distributed.spawn import free_port
    from mlsys.train.checkpoint import CheckpointError
    from mlsys.train.controller import run_training
    from mlsys.train.rundir import RunDirError
    from mlsys.train.step import NonFiniteError

    stop = StopFlag().install()
    if "RANK" not in os.environ:  # a single process without a launcher: a free local port, so
        # that two such runs on one machine do not both ask for the same one (EADDRINUSE)
        os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                          MASTER_PORT=os.environ.get("MASTER_PORT") or str(free_port()))
    backend = "nccl" if torch.cuda.is_available() else "gloo"
    if torch.cuda.is_available():
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    resume: bool | str = True if args.resume else (False if args.fresh else "auto")
    code = 0
    try:
        deepspeed.init_distributed(dist_backend=backend)
        result = run_training(cfg, ds, resume=resume, stop=stop, progress=not args.no_progress,
                              accept_changes=tuple(args.accept_change))
    except (ConfigError, RunDirError) as err:  # refused before anything was changed
        print(f"{cfg.name}: error: {err}", file=sys.stderr, flush=True)
        code = 2
    except (NonFiniteError, CheckpointError) as err:  # a clear message, no traceback
        print(f"{cfg.name}: {type(err).__name__}: {err}", file=sys.stderr, flush=True)
        code = 3
    except Interrupted as err:
        print(f"{cfg.name}: {err} before training started; nothing to save", file=sys.stderr,
              flush=True)
    else:
        if int(os.environ["RANK"]) == 0:
            print(f"{cfg.name}: {result['status']}" + (
                f", val loss {result['val_loss']:.4f}, final model in {result['final_dir']}"
                if result["status"] == "done" and result.get("val_loss") is not None else ""),
                flush=True)
    if code == 0 or backend == "gloo":  # gloo's is local; NCCL's can wait on a peer that is
        end_process_group()             # still inside a collective, after a failure of its own
    return code


if __name__ == "__main__":
    sys.exit(main())
