"""Running a benchmark: every run of a profile as a real training run (``launch.train`` on the
profile's local ranks), forks branched from their source's checkpoints, then the report; and
the transitions check (a tiny model cycled down and up under ZeRO-3, memory per rebuild)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

from mlsys.atomic import write_json, write_text
from mlsys.bench.profile import is_variant, load_profile, run_configs
from mlsys.bench.report import compare, markdown, plot, table
from mlsys.config import ConfigError, parse_run_config
from mlsys.data.run_data import prepare_default_data
from mlsys.dist.spawn import start_ranks, wait_ranks
from mlsys.train.checkpoint import complete_tags, fork_run
from mlsys.train.metrics import read_metrics
from mlsys.train.rundir import RunDir

BOOKKEEPING = ("checkpoint_every", "keep_checkpoints")  # train fields that change no number


def _same_config(cfg: dict[str, Any], run: RunDir) -> bool:
    """True if ``run`` was started with this run config (so it may be resumed). The stored
    config is validated again, so a field added since with its default counts as unchanged;
    how often checkpoints are kept (``BOOKKEEPING``, which ``run_configs`` raises for a run
    that gains a fork) is not a different run: a fork then finds its checkpoint or says which
    ones exist."""
    if not run.run_config.is_file():
        return False

    def canonical(raw: dict[str, Any], source: str) -> Any:
        data = json.loads(json.dumps(parse_run_config(raw, source=source).model_dump()))
        for key in BOOKKEEPING:
            data["train"].pop(key)
        return data

    wanted = canonical(cfg, cfg["name"])
    try:
        stored = canonical(json.loads(run.run_config.read_text()), str(run.run_config))
    except (ValueError, ConfigError):
        return False
    return wanted == stored


def start(cfg: dict[str, Any], ds_config: str, ranks: int, out: Path, root: Path,
          threads: int | None = None, log: Path | None = None) -> list[subprocess.Popen] | None:
    """Start one run's ranks (None: it already finished with this config). A run started
    earlier with the same config resumes where it stopped; otherwise it starts over. A run
    with ``fork: {from: NAME, step: S}`` starts from run NAME's checkpoint at global step S
    (NAME must keep it: ``train.checkpoint_every``) and trains on with its own config: runs
    that differ only after that share it exactly."""
    cfg = dict(cfg)
    fork = cfg.pop("fork", None)
    run = RunDir(cfg["run_dir"])
    same = _same_config(cfg, run)  # also fails early on a bad config
    if same and run.is_done():
        return None
    path = write_text(out / f"{cfg['name']}.yaml", yaml.safe_dump(cfg, sort_keys=False))
    if fork and not same:
        tag = fork_run(out / fork["from"], run.root, int(fork["step"]))
        print(f"   {cfg['name']}: forked from {fork['from']} at {tag}", flush=True)
    args = ["--config", str(path), "--ds_config", ds_config]
    for key in BOOKKEEPING:
        args += ["--accept-change", f"train.{key}"]
    if not fork and not (same and complete_tags(run.checkpoints)):
        args.append("--fresh")  # another config, or nothing to resume: start over
    if log is not None:
        args.append("--no-progress")
    env = dict(os.environ, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"))
    if threads:
        env["OMP_NUM_THREADS"] = str(threads)
    stream = open(log, "a") if log is not None else None
    return start_ranks("launch.train", args, ranks, env=env, cwd=str(root), stdout=stream,
                       stderr=subprocess.STDOUT if stream else None)


def train(cfg: dict[str, Any], ds_config: str, ranks: int, out: Path, root: Path) -> None:
    """Train one run to completion (see ``start``)."""
    procs = start(cfg, ds_config, ranks, out, root)
    if procs is not None and wait_ranks(procs):
        raise RuntimeError(f"{cfg['name']}: training exited non-zero")


def train_all(configs: dict[str, dict[str, Any]], ds_config: str, ranks: int, out: Path,
              root: Path, jobs: int) -> None:
    """Train ``configs`` in order, ``jobs`` at a time (one thread per rank when ``jobs`` > 1,
    output to ``<out>/<name>.log``); a fork waits for its source."""
    if jobs <= 1:
        for cfg in configs.values():
            print(f"== {cfg['name']}", flush=True)
            train(cfg, ds_config, ranks, out, root)
        return
    first = next(iter(configs.values()))  # the default data, once, before runs race for it
    prepare_default_data(parse_run_config({k: v for k, v in first.items() if k != "fork"}))
    pending, running, finished = list(configs), {}, set()
    while pending or running:
        for name in list(pending):
            if len(running) >= jobs:
                break
            source = configs[name].get("fork", {}).get("from")
            if source in configs and source not in finished:
                continue
            pending.remove(name)
            print(f"== {configs[name]['name']} (log: {out / (name + '.log')})", flush=True)
            procs = start(configs[name], ds_config, ranks, out, root, threads=1,
                          log=out / f"{name}.log")
            if procs is None:
                finished.add(name)
            else:
                running[name] = procs
        time.sleep(2)
        for name, procs in list(running.items()):
            if all(p.poll() is not None for p in procs):
                del running[name]
                if any(p.returncode for p in procs):
                    for others in running.values():
                        for p in others:
                            p.terminate()
                    raise RuntimeError(f"{name}: training exited non-zero (see {name}.log)")
                finished.add(name)
                print(f"   {name}: done", flush=True)


def select_runs(configs: dict[str, dict[str, Any]], runs: list[str]
                ) -> dict[str, dict[str, Any]]:
    """The configs named by ``runs``: a run's full name (``wsd-lr2e-3-s500``) or a profile
    entry's name (``wsd``: all its sweep points). A name that matches nothing is an error."""
    unknown = [r for r in runs if not any(is_variant(n, r) for n in configs)]
    if unknown:
        raise ConfigError(f"--runs: {', '.join(unknown)} matches no run of this profile "
                          f"(runs: {', '.join(configs)})")
    return {n: c for n, c in configs.items() if any(is_variant(n, r) for r in runs)}


def benchmark(profile_name: str, family: str, out: Path, root: Path, runs: list[str] | None,
              scale: float = 1.0, analyse_only: bool = False, jobs: int = 1) -> dict[str, Any]:
    """Train the profile's runs for ``family`` (only ``runs`` if given), then analyse every
    finished one: ``results.json``, ``val_loss_vs_flops.png`` and the tables, printed."""
    profile = load_profile(profile_name, root)
    out.mkdir(parents=True, exist_ok=True)
    configs = run_configs(profile, family, out, scale)
    if not analyse_only:
        chosen = select_runs(configs, runs) if runs else configs
        train_all(chosen, profile.ds_config, profile.ranks, out, root, jobs)
    configs = {n: c for n, c in configs.items() if RunDir(c["run_dir"]).is_done()}
    result = {"family": family, "profile": profile_name, "ranks": profile.ranks,
              "ds_config": profile.ds_config,
              **compare(configs, profile.window, profile.budget)}
    write_json(out / "results.json", result)
    plot(configs, result, out / "val_loss_vs_flops.png", f"{profile_name} / {family}")
    print(table(result["runs"]))
    print(markdown(result["runs"]))
    print(f"target: {result['target']} ({result['target_val_loss']:.4f})"
          + (f"; WARNING {result['grid_edge']}" if result["grid_edge"] else ""))
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
