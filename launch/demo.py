"""``make demo``: the tiny BERT V-cycle against the same model trained from scratch, 2 CPU ranks.

Validates both configs, prepares the default corpus once (Python standard library prose ->
sentencepiece -> megatron shards under data/default), trains the baseline and the V-cycle on
the same data and token order (2 ranks of launch/train.py each), then compares them:
``runs/demo/comparison.png`` (both validation curves against FLOPs), ``runs/demo/results.json``
and the FLOPs the V-cycle needed to reach the baseline's final loss, as measured. Each run
leaves ``runs/demo/<name>/`` with metrics.jsonl, TensorBoard events, checkpoints, final/ and
(the V-cycle) levels/. The baseline here has one lr, not a tuned grid: the tuned comparison
is the benchmark's (``python -m launch.benchmark``). Interrupted demos resume; ``make clean``
starts over.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from launch.train import validate


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default="configs/tiny-bert-baseline.yaml")
    p.add_argument("--vcycle", "--config", dest="vcycle", default="configs/tiny-bert-vcycle.yaml")
    p.add_argument("--ds_config", default="configs/ds/zero1.json")
    p.add_argument("--run-dir", default="runs/demo", help="runs go to RUN_DIR/<name>")
    p.add_argument("--nproc", type=int, default=2)
    args = p.parse_args(argv)
    from mlsys.config import ConfigError

    out = Path(args.run_dir)
    runs = {}
    try:  # before any rank starts
        for role in ("baseline", "vcycle"):
            path = getattr(args, role)
            cfg, _ = validate(path, args.ds_config, args.nproc, str(out / role))
            runs[role] = (path, cfg)
    except ConfigError as err:
        print(f"config error: {err}", file=sys.stderr)
        return 2
    if runs["baseline"][1].data != runs["vcycle"][1].data or len(
            {c.train.seed for _, c in runs.values()}) != 1:
        print("config error: the baseline and the V-cycle must read the same data (data and "
              "train.seed equal)", file=sys.stderr)
        return 2
    from mlsys.data.run_data import prepare_default_data

    first = runs["baseline"][1]
    print(f"preparing the default data under {first.data.prepare_dir} (once) ...", flush=True)
    prepare_default_data(first)  # once here, not racing in the ranks
    from mlsys.bench.report import compare_pair
    from mlsys.distributed.spawn import run_ranks

    for role, (path, cfg) in runs.items():
        print(f"== {role}: {path} -> {cfg.run_dir}", flush=True)
        code = run_ranks("launch.train", ["--config", path, "--ds_config", args.ds_config,
                                          "--run-dir", cfg.run_dir], args.nproc)
        if code != 0:
            return code
    summary = compare_pair({role: cfg.model_dump() for role, (_, cfg) in runs.items()}, out)
    print(summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
