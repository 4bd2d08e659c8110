"""Running a benchmark: every run of a profile as a real training run (``launch.train`` on the
profile's local ranks), forks branched from their source's checkpoints, then the report; and
the transitions check (a tiny model cycled down and up under ZeRO-3, memory per rebuild)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from mlsys.atomic import write_json, write_text
from mlsys.bench.profile import load_profile, run_configs
from mlsys.bench.report import compare, markdown, plot, table
from mlsys.config import parse_run_config
from mlsys.dist.spawn import run_ranks
from mlsys.train.checkpoint import fork_run
from mlsys.train.metrics import read_metrics
from mlsys.train.rundir import RunDir


def train(cfg: dict[str, Any], ds_config: str, ranks: int, out: Path, root: Path) -> None:
    """Train one run to completion. A run with ``fork: {from: NAME, step: S}`` starts from run
    NAME's checkpoint at global step S (NAME must keep it: ``train.checkpoint_every``) and
    trains on with its own config: runs that differ only after that share it exactly."""
    cfg = dict(cfg)
    fork = cfg.pop("fork", None)
    parse_run_config(cfg, source=cfg["name"])  # fail before starting anything
    path = write_text(out / f"{cfg['name']}.yaml", yaml.safe_dump(cfg, sort_keys=False))
    if fork:
        tag = fork_run(out / fork["from"], cfg["run_dir"], int(fork["step"]))
        print(f"   forked from {fork['from']} at {tag}", flush=True)
    start = [] if fork else ["--fresh"]
    env = dict(os.environ, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"))
    code = run_ranks("launch.train", ["--config", str(path), "--ds_config", ds_config, *start],
                     ranks, env=env, cwd=str(root))
    if code:
        raise RuntimeError(f"{cfg['name']}: training exited with {code}")


def benchmark(profile_name: str, family: str, out: Path, root: Path, runs: list[str] | None,
              scale: float = 1.0, analyse_only: bool = False) -> dict[str, Any]:
    """Train the profile's runs for ``family`` (only ``runs`` if given), then analyse every
    finished one: ``results.json``, ``val_loss_vs_flops.png`` and the tables, printed."""
    profile = load_profile(profile_name, root)
    out.mkdir(parents=True, exist_ok=True)
    configs = run_configs(profile, family, out, scale)
    if not analyse_only:
        for name, cfg in configs.items():
            if runs and name not in runs:
                continue
            print(f"== {cfg['name']}", flush=True)
            train(cfg, profile.ds_config, profile.ranks, out, root)
    configs = {n: c for n, c in configs.items() if RunDir(c["run_dir"]).is_done()}
    rows = compare(configs, profile.window)
    result = {"family": family, "profile": profile_name, "ranks": profile.ranks,
              "ds_config": profile.ds_config, "runs": rows}
    write_json(out / "results.json", result)
    plot(configs, rows, out / "val_loss_vs_flops.png", f"{profile_name} / {family}")
    print(table(rows))
    print(markdown(rows))
    print(f"wrote {out / 'results.json'} and {out / 'val_loss_vs_flops.png'}")
    return result


def transitions_check(transitions: int, out: Path, root: Path) -> dict[str, Any]:
    """Cycle a tiny model down and up ``transitions`` times under ZeRO-3 on 2 ranks; resident
    memory after every rebuild and seconds per transition."""
    out.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load((root / "configs" / "bench" / "transitions.yaml").read_text())
    cfg["phases"] = [{"level": 1 + (i % 2), "steps": 1, "lr": 1e-3}
                     for i in range(transitions + 1)]
    cfg["run_dir"] = str(out / "run")
    train(cfg, "configs/ds/zero3.json", 2, out, root)
    rows = [r for r in read_metrics(RunDir(out / "run").metrics) if r["event"] == "transition"]
    rss = [r["rss_bytes"] for r in rows]
    result = {"transitions": len(rows), "rss_bytes": rss,
              "transition_seconds": [r["transition_seconds"] for r in rows],
              "rss_growth_vs_first": rss[-1] / rss[0] - 1.0}
    for i, r in enumerate(rows):
        print(f"transition {i + 1:>2} L{r['from_level']}→L{r['to_level']}: "
              f"rss {r['rss_bytes'] / 2**20:8.1f} MiB, {r['transition_seconds']:.2f} s")
    print(f"resident memory after the last rebuild vs the first: "
          f"{result['rss_growth_vs_first']:+.1%} (target: within 5 %)")
    write_json(out / "transitions.json", result)
    return result
