"""The controller's step time against a plain DeepSpeed loop (``mlsys.bench.plain_loop``, run as
``python -m launch.plain_loop``) on the same model, data, batch and ZeRO stage, alternating A B
A B in one invocation so both see the same machine. The controller's step time is the wall time
between consecutive step records (everything it does per step: data, step, stop flag, record,
progress); the plain loop's is measured over the *same* windows of steps (its per-step times
summed between the controller's record steps: a median of single steps would leave out the slow
steps a window mean includes). Medians after ``warmup`` steps; the ratio of medians minus 1 is
the overhead."""

from __future__ import annotations

import json
import os
import statistics
from itertools import accumulate
from pathlib import Path
from typing import Any

import yaml

from mlsys.atomic import write_json, write_text
from mlsys.bench.profile import load_profile
from mlsys.distributed.spawn import run_ranks
from mlsys.train.metrics import read_metrics
from mlsys.train.rundir import RunDir


def run_config(root: Path, out: Path, profile: str, family: str, steps: int,
               log_every: int, ranks: int = 1, data_workers: int = 1) -> dict[str, Any]:
    """One phase of ``steps`` steps at level 1 of a profile family's shape (the issue measured
    cpu-small's GPT-2), the global batch shared out over ``ranks``; evaluation only at the
    end, no checkpoints; a step record every ``log_every`` steps, ``data_workers`` loader
    processes per rank."""
    family = dict(load_profile(profile, root).families[family])
    family.pop("lr_grid", None)
    cfg = {**family, "name": "overhead", "run_dir": str(out / "run"),
           "phases": [{"level": 1, "steps": steps, "lr": 1e-3, "warmup": 5}]}
    cfg["data"] = {k: v for k, v in cfg["data"].items() if k != "train_samples"}
    train = cfg["train"]
    micro = min(train["micro_batch_size"], train["global_batch_size"] // ranks)
    cfg["train"] = {**train, "micro_batch_size": micro, "eval_every": 10 * steps,
                    "checkpoint_every": 0, "log_every": log_every,
                    "data_workers": data_workers}
    return cfg


def window_seconds(walls: list[tuple[int, float]], warmup: int) -> list[float]:
    """Seconds per step in each window between consecutive (step, wall) points from step
    ``warmup`` on, leaving out the last window (the controller's holds the final
    evaluation)."""
    per_step = [(w1 - w0) / (s1 - s0) for (s0, w0), (s1, w1)
                in zip(walls, walls[1:], strict=False) if s0 >= warmup]
    return per_step[:-1]


def record_walls(run_dir: Path) -> list[tuple[int, float]]:
    """(global step, wall seconds) of every step record of a run."""
    return [(r["step"], r["wall"]) for r in read_metrics(RunDir(run_dir).metrics)
            if r["event"] == "step"]


def plain_walls(seconds: list[float], steps: list[int]) -> list[tuple[int, float]]:
    """The plain loop's cumulative wall time at each of ``steps`` (global steps, 1-based) from
    the seconds of its every step."""
    cumulative = list(accumulate(seconds, initial=0.0))
    return [(k, cumulative[k]) for k in steps]


def measure(root: Path, out: Path, profile: str, family: str, ds_config: str, ranks: int,
            steps: int, repeats: int, warmup: int = 10, log_every: int = 1,
            data_workers: int = 1) -> dict[str, Any]:
    """A B A B ...: the controller (``launch.train``) and the plain loop, ``repeats`` each."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = run_config(root, out, profile, family, steps, log_every, ranks, data_workers)
    path = write_text(out / "overhead.yaml", yaml.safe_dump(cfg, sort_keys=False))
    env = dict(os.environ, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"))
    ours, plain = [], []
    for i in range(repeats):
        code = run_ranks("launch.train", ["--config", str(path), "--ds_config", ds_config,
                                          "--fresh", "--no-progress"], ranks, env=env,
                         cwd=str(root))
        if code:
            raise RuntimeError(f"controller run {i} exited {code}")
        walls = record_walls(Path(cfg["run_dir"]))
        ours.append(statistics.median(window_seconds(walls, warmup)))
        times = out / f"plain{i}.json"
        code = run_ranks("launch.plain_loop", ["--config", str(path), "--ds_config",
                                               ds_config, "--steps", str(steps),
                                               "--out", str(times)], ranks, env=env,
                         cwd=str(root))
        if code:
            raise RuntimeError(f"plain loop run {i} exited {code}")
        plain_seconds = json.loads(times.read_text())["seconds"]
        same = plain_walls(plain_seconds, [k for k, _ in walls])
        plain.append(statistics.median(window_seconds(same, warmup)))
        print(f"pair {i + 1}: controller {ours[-1]:.4f} s/step, plain {plain[-1]:.4f} s/step "
              f"({ours[-1] / plain[-1] - 1:+.1%})", flush=True)
    result = {"profile": profile, "family": family, "ranks": ranks, "ds_config": ds_config,
              "steps": steps, "warmup": warmup, "log_every": log_every,
              "data_workers": data_workers, "controller_seconds": ours, "plain_seconds": plain,
              "controller_median": statistics.median(ours),
              "plain_median": statistics.median(plain)}
    result["overhead"] = result["controller_median"] / result["plain_median"] - 1.0
    result["pair_overheads"] = [a / b - 1.0 for a, b in zip(ours, plain, strict=True)]
    write_json(out / "overhead.json", result)
    print(f"overhead: {result['overhead']:+.1%} (median of {repeats} pairs; "
          f"pairs {', '.join(f'{x:+.1%}' for x in result['pair_overheads'])})")
    return result
