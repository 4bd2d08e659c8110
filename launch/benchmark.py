"""Compute saved by the V-cycle, measured side by side against training from scratch.

    python -m launch.benchmark --profile cpu-small --family bert --out runs/bench/bert
    python -m launch.benchmark --transitions 10 --out runs/bench/transitions
    python -m launch.benchmark --overhead --ranks 2 --ds_config configs/ds/zero3.json --out ...

A profile (``configs/bench/<profile>.yaml``, schema in ``mlsys/bench/profile.py``) fixes the
model, data, seed and token order of each family and lists the runs: the baseline (one level)
and the V-cycles. Each run is a real training run (``launch.train`` on ``ranks`` local
processes); the baseline's final validation loss (smoothed over ``window`` evaluations) is the
target, and every run reports the FLOPs and wall seconds it needed to reach it. Writes
``results.json``, ``val_loss_vs_flops.png`` and prints a table. ``--transitions N`` instead
cycles a tiny model down and up N times under ZeRO-3 and reports resident memory after every
rebuild and seconds per transition; ``--overhead`` measures the controller's step time against
a plain DeepSpeed loop (``mlsys/bench/overhead.py``). A run already finished with the same
config is skipped and an interrupted one resumes, so a long sweep may be stopped and started
again. Every finished run leaves a compact committed result under ``bench/results/`` (its
config, done record and the metrics the analysis reads; ``mlsys/bench/results.py``): on a
fresh machine a run with a matching result is not trained again and the analysis reads it, so
a sweep may span sessions that keep nothing but the repository.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="cpu-small", help="configs/bench/<profile>.yaml")
    p.add_argument("--family", default="bert", help="a family the profile lists (bert, gpt, ...)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--runs", nargs="*",
                   help="train only these runs (the analysis covers every finished run)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply every phase's steps (a quick smoke run: 0.05)")
    p.add_argument("--analyse-only", action="store_true", help="re-read finished runs")
    p.add_argument("--jobs", type=int, default=1,
                   help="runs at a time (one thread per rank each; a fork waits for its source)")
    p.add_argument("--results", default=None,
                   help="committed results folder (default: bench/results in the repository): "
                        "a run with a result there is not re-run, and the analysis reads it")
    p.add_argument("--rerun-sources", action="store_true",
                   help="retrain a fork source that has only a committed result (no "
                        "checkpoints here) before its forks, instead of stopping (and its own "
                        "source in turn, up the chain)")
    p.add_argument("--stop-trunks", action="store_true",
                   help="a selected run that other selected runs fork from is trained only to "
                        "their fork points, then stopped with a checkpoint (it resumes if "
                        "started again; needs --jobs 2)")
    p.add_argument("--budget", type=int, default=None,
                   help="take the target at this many level-1 steps instead of the profile's "
                        "budget (its results page gets the suffix -b<steps>)")
    p.add_argument("--budget-curve", type=int, nargs="+", default=None, metavar="STEPS",
                   help="instead: analyse the finished runs at each budget and write this "
                        "family's line of docs/results/budget-curves.{json,png,md}")
    p.add_argument("--transitions", type=int, default=0,
                   help="instead: cycle a tiny ZeRO-3 model down and up N times")
    p.add_argument("--overhead", action="store_true",
                   help="instead: the controller's step time against a plain DeepSpeed loop")
    p.add_argument("--ranks", type=int, default=1, help="--overhead: ranks")
    p.add_argument("--ds_config", default="configs/ds/zero1.json", help="--overhead: ZeRO")
    p.add_argument("--steps", type=int, default=60, help="--overhead: steps a run")
    p.add_argument("--repeats", type=int, default=3, help="--overhead: A B pairs")
    p.add_argument("--log-every", type=int, default=1, help="--overhead: steps per record")
    p.add_argument("--data-workers", type=int, default=1,
                   help="--overhead: data loader processes per rank")
    args = p.parse_args(argv)
    from mlsys.bench.overhead import measure
    from mlsys.bench.runner import benchmark, transitions_check
    from mlsys.config import ConfigError

    try:
        if args.budget_curve:
            from mlsys.bench.budget_curve import analyse_budgets

            analyse_budgets(args.profile, args.family, Path(args.out), ROOT, args.budget_curve,
                            Path(args.results) if args.results else None)
        elif args.overhead:
            measure(ROOT, Path(args.out), args.profile, args.family, args.ds_config, args.ranks,
                    args.steps, args.repeats, log_every=args.log_every,
                    data_workers=args.data_workers)
        elif args.transitions:
            transitions_check(args.transitions, Path(args.out), ROOT)
        else:
            benchmark(args.profile, args.family, Path(args.out), ROOT, args.runs, args.scale,
                      args.analyse_only, args.jobs,
                      Path(args.results) if args.results else None, args.rerun_sources,
                      budget=args.budget, stop_trunks=args.stop_trunks)
    except (ConfigError, RuntimeError) as err:
        print(f"benchmark: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
