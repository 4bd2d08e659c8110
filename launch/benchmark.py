"""Compute saved by the V-cycle, measured side by side against training from scratch.

    python -m launch.benchmark --profile cpu-small --family bert --out runs/bench/bert
    python -m launch.benchmark --transitions 10 --out runs/bench/transitions

A profile (``configs/bench/<profile>.yaml``) fixes the model, data, seed and token order of one
family and lists the runs: the baseline (one level) and the V-cycles. Each run is a real
training run (``launch.train`` on ``ranks`` local processes); the baseline's final validation
loss (smoothed over ``window`` evaluations) is the target, and every run reports the FLOPs and
wall seconds it needed to reach it. Writes ``results.json``, ``val_loss_vs_flops.png`` and
prints a table. ``--transitions N`` instead cycles a tiny model down and up N times under
ZeRO-3 and reports resident memory after every rebuild and seconds per transition.

A profile may ``extends: <profile>`` (its families and runs first, then this one's runs); a run
may ``fork: {from: <run>, after_phase: P}`` to start from that run's checkpoint at the end of
phase P (ablations of the up-transition share everything before it).
"""

from __future__ import annotations

import argparse
import copy
import json
import math
import os
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]


def load_profile(name: str) -> dict[str, Any]:
    path = ROOT / "configs" / "bench" / f"{name}.yaml"
    if not path.exists():
        known = sorted(p.stem for p in path.parent.glob("*.yaml"))
        raise SystemExit(f"--profile: no {path} (known: {', '.join(known)})")
    profile = yaml.safe_load(path.read_text())
    base = profile.pop("extends", None)
    if base:  # the base profile's families and runs, then this one's runs
        parent = load_profile(base)
        profile = {**parent, **profile, "runs": {**parent["runs"], **profile.get("runs", {})}}
    return profile


def _scaled_steps(phases: list[dict[str, Any]], scale: float) -> list[int]:
    """Each phase's steps after ``schedule.scale``, as ``RunConfig.phase_steps`` counts them."""
    return [max(1, math.ceil(p["steps"] * scale - 1e-9)) for p in phases]


def run_configs(profile: dict[str, Any], family: str, out: Path, only: list[str] | None = None,
                scale: float = 1.0) -> dict[str, dict[str, Any]]:
    """Run config per run name: the family's shared sections plus the run's own ones."""
    if family not in profile["families"]:
        raise SystemExit(f"--family: {family!r} is not in this profile "
                         f"({', '.join(profile['families'])})")
    shared = profile["families"][family]
    configs = {}
    for name, run in profile["runs"].items():
        if only and name not in only:
            continue
        cfg = copy.deepcopy(shared)
        for section, value in run.items():
            if isinstance(value, dict) and isinstance(cfg.get(section), dict):
                cfg[section] = {**cfg[section], **value}
            else:
                cfg[section] = value
        cfg["schedule"] = {"scale": scale}
        if "fork" in cfg:  # the global step at the end of phase ``after_phase``, scaled
            steps = _scaled_steps(cfg["phases"], scale)
            cfg["fork"] = {"from": cfg["fork"]["from"],
                           "step": sum(steps[:cfg["fork"]["after_phase"] + 1])}
        cfg["name"] = f"{family}-{name}"
        cfg["run_dir"] = str(out / name)
        configs[name] = cfg
    for cfg in list(configs.values()):  # a fork source keeps a checkpoint at every fork step
        if "fork" in cfg and cfg["fork"]["from"] in configs:
            train = configs[cfg["fork"]["from"]].setdefault("train", {})
            every = math.gcd(train.get("checkpoint_every", 0), cfg["fork"]["step"])
            total = sum(_scaled_steps(cfg["phases"], scale))
            train.update(checkpoint_every=every, keep_checkpoints=total // every + 2 * len(
                cfg["phases"]))
    return configs


def train(cfg: dict[str, Any], ds_config: str, ranks: int, out: Path) -> None:
    """Train one run to completion. A run with ``fork: {from: NAME, after_phase: P}`` starts
    from run NAME's checkpoint at the end of phase P (NAME must keep it: ``train.checkpoint_every``)
    and trains on with its own config: runs that differ only after that share it exactly."""
    from mlsys.checkpoint import fork_run
    from mlsys.config import parse_run_config
    from mlsys.spawn import run_ranks

    cfg = dict(cfg)
    fork = cfg.pop("fork", None)
    parse_run_config(cfg, source=cfg["name"])  # fail before starting anything
    path = out / f"{cfg['name']}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    if fork:
        tag = fork_run(out / fork["from"], cfg["run_dir"], int(fork["step"]))
        print(f"   forked from {fork['from']} at {tag}", flush=True)
    start = [] if fork else ["--fresh"]
    env = dict(os.environ, DS_ACCELERATOR=os.environ.get("DS_ACCELERATOR", "cpu"))
    code = run_ranks("launch.train", ["--config", str(path), "--ds_config", ds_config, *start],
                     ranks, env=env, cwd=str(ROOT))
    if code:
        raise SystemExit(f"{cfg['name']}: training exited with {code}")


def compare(configs: dict[str, dict[str, Any]], window: int) -> list[dict[str, Any]]:
    from mlsys.compare import eval_curve, first_reach, summarize
    from mlsys.metrics import read_metrics

    records = {n: read_metrics(Path(c["run_dir"]) / "metrics.jsonl") for n, c in configs.items()}
    levels = {n: max(p["level"] for p in c["phases"]) for n, c in configs.items()}
    base = next((n for n in configs if levels[n] == 1), None)
    if base is None:
        raise SystemExit("no finished baseline (a one-level run) to compare against")
    curve = eval_curve(records[base])
    smooth = curve.smoothed(window)
    target = smooth[-1]
    base_to = (first_reach(curve.flops, smooth, target), first_reach(curve.wall, smooth, target))
    rows = [summarize(n, levels[n], records[n], target, base_to, window, (curve.flops, smooth))
            for n in configs]
    for row in rows:
        row["target_val_loss"] = target
    return rows


def plot(configs: dict[str, dict[str, Any]], rows: list[dict[str, Any]], png: Path,
         title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mlsys.compare import eval_curve
    from mlsys.metrics import read_metrics

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, cfg in configs.items():
        c = eval_curve(read_metrics(Path(cfg["run_dir"]) / "metrics.jsonl"))
        ax.plot(c.flops, c.val, marker=".", label=name)
    ax.axhline(rows[0]["target_val_loss"], color="grey", ls="--", lw=0.8, label="target")
    ax.set_xlabel("cumulative training FLOPs")
    ax.set_ylabel("validation loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    tmp = png.with_suffix(".tmp.png")
    fig.savefig(tmp, dpi=120)
    plt.close(fig)
    os.replace(tmp, png)


def table(rows: list[dict[str, Any]]) -> str:
    def f(x, spec):
        return "n/a" if x is None else format(x, spec)

    lines = [f"{'run':<15} {'levels':>6} {'val loss':>9} {'FLOPs':>10} {'FLOPs→tgt':>10} "
             f"{'saving':>7} {'wall→tgt':>9} {'saving':>7} {'trans s':>8} {'step s':>7}"]
    for r in rows:
        reached = r["flops_to_target"] is not None
        lines.append(
            f"{r['name']:<15} {r['levels']:>6} {f(r['final_val_loss'], '.4f'):>9} "
            f"{r['flops_total']:>10.3e} "
            f"{(format(r['flops_to_target'], '.3e') if reached else 'not reached'):>10} "
            f"{f(r['saving_flops'], '+.1%'):>7} {f(r['wall_to_target'], '.0f'):>9} "
            f"{f(r['saving_wall'], '+.1%'):>7} {f(sum(r['transition_seconds']), '.1f'):>8} "
            f"{f(r['median_step_seconds'], '.3f'):>7}")
        if r.get("final_val_top1") is not None:
            lines.append(f"{'':<15} top-1 accuracy at the end: {r['final_val_top1']:.3f}")
        for j in r["transition_jump"]:
            lines.append(f"{'':<15} up {j['from_level']}→{j['to_level']} at step {j['step']}: "
                         f"before {f(j['before'], '.4f')}, after {f(j['after'], '.4f')} "
                         f"({f(j['jump'], '+.4f')}), 150 steps later "
                         f"{f(j['after_150'], '.4f')} ({f(j['jump_150'], '+.4f')})")
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The same figures as a Markdown table (for the README's results section)."""
    def f(x, spec):
        return "not reached" if x is None else format(x, spec)

    out = ["| run | levels | final val loss | FLOPs | Δ at equal FLOPs | FLOPs to target | "
           "FLOPs saved | wall saved | up-jump: right after / +150 steps |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        jumps = "; ".join(f"{f(j['jump'], '+.3f')} / {f(j['jump_150'], '+.3f')}"
                          for j in r["transition_jump"]) or "–"
        gap = "–" if r.get("gap_at_equal_flops") is None else f"{r['gap_at_equal_flops']:+.3f}"
        out.append(f"| {r['name']} | {r['levels']} | {f(r['final_val_loss'], '.4f')} | "
                   f"{r['flops_total']:.3g} | {gap} | {f(r['flops_to_target'], '.3g')} | "
                   f"{f(r['saving_flops'], '+.1%')} | {f(r['saving_wall'], '+.1%')} | {jumps} |")
    return "\n".join(out)


def write_json(path: Path, data: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, path)


def benchmark(args: argparse.Namespace) -> dict[str, Any]:
    profile = load_profile(args.profile)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    configs = run_configs(profile, args.family, out, None, args.scale)
    if not args.analyse_only:
        for name, cfg in configs.items():
            if args.runs and name not in args.runs:
                continue
            print(f"== {cfg['name']}", flush=True)
            train(cfg, profile["ds_config"], profile.get("ranks", 1), out)
    configs = {n: c for n, c in configs.items()  # analyse every run that has finished
               if (Path(c["run_dir"]) / "done.json").exists()}
    rows = compare(configs, profile.get("window", 3))
    result = {"family": args.family, "profile": args.profile, "ranks": profile.get("ranks", 1),
              "ds_config": profile["ds_config"], "runs": rows}
    write_json(out / "results.json", result)
    plot(configs, rows, out / "val_loss_vs_flops.png", f"{args.profile} / {args.family}")
    print(table(rows))
    print(markdown(rows))
    print(f"wrote {out / 'results.json'} and {out / 'val_loss_vs_flops.png'}")
    return result


def transitions_check(args: argparse.Namespace) -> dict[str, Any]:
    """Cycle a tiny model down and up ``args.transitions`` times under ZeRO-3 on 2 ranks."""
    from mlsys.metrics import read_metrics

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    cfg = yaml.safe_load((ROOT / "configs" / "bench" / "transitions.yaml").read_text())
    cfg["phases"] = [{"level": 1 + (i % 2), "steps": 1, "lr": 1e-3}
                     for i in range(args.transitions + 1)]
    cfg["run_dir"] = str(out / "run")
    train(cfg, "configs/ds/zero3.json", 2, out)
    rows = [r for r in read_metrics(out / "run" / "metrics.jsonl") if r["event"] == "transition"]
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


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--profile", default="cpu-small", help="configs/bench/<profile>.yaml")
    p.add_argument("--family", default="bert", help="bert | gpt (as the profile lists)")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--runs", nargs="*",
                   help="train only these runs (the analysis covers every finished run)")
    p.add_argument("--scale", type=float, default=1.0,
                   help="multiply every phase's steps (a quick smoke run: 0.05)")
    p.add_argument("--analyse-only", action="store_true", help="re-read finished runs")
    p.add_argument("--transitions", type=int, default=0,
                   help="instead: cycle a tiny ZeRO-3 model down and up N times")
    args = p.parse_args(argv)
    if args.transitions:
        transitions_check(args)
    else:
        benchmark(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
