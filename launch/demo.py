"""``make demo``: the tiny BERT 2-level V-cycle on the default corpus, 2 CPU ranks.

Validates the configs, prepares the default corpus once (Python standard library prose ->
sentencepiece -> megatron shards under data/default), then starts 2 ranks of launch/train.py
and leaves ``runs/demo/`` with metrics.jsonl, val_loss_vs_flops.png, checkpoints and final/.
ZeRO-1 by default: on 2 CPU cores ZeRO-3's per-layer gathers cost ~10x per step for a model
this small; ``--ds_config configs/ds/zero3.json`` runs the same V-cycle fully sharded.
Interrupted demos resume; ``make clean`` starts over.
"""

from __future__ import annotations

import argparse
import sys

from launch.train import validate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--config", default="configs/tiny-bert-vcycle.yaml")
    p.add_argument("--ds_config", default="configs/ds/zero1.json")
    p.add_argument("--run-dir", default="runs/demo")
    p.add_argument("--nproc", type=int, default=2)
    args = p.parse_args(argv)
    from mlsys.config import ConfigError

    try:  # before any rank starts
        cfg, _ = validate(args.config, args.ds_config, args.nproc, args.run_dir)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    from mlsys.data.run_data import prepare_default_data

    print(f"preparing the default data under {cfg.data.prepare_dir} (once) ...", flush=True)
    prepare_default_data(cfg)  # once here, not racing in the ranks
    from mlsys.dist.spawn import run_ranks
    from mlsys.train.rundir import RunDir

    code = run_ranks("launch.train", ["--config", args.config, "--ds_config", args.ds_config,
                                      "--run-dir", args.run_dir], args.nproc)
    if code == 0:
        run = RunDir(args.run_dir)
        print(f"outputs: {run.metrics}, {run.plot}, {run.final}/")
    return code


if __name__ == "__main__":
    sys.exit(main())
