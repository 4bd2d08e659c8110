"""The benchmark's report: every finished run against the baseline, as rows for
``results.json``, a text table, a Markdown table (the README's) and a loss-vs-FLOPs plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsys.bench.compare import eval_curve, first_reach, summarize
from mlsys.train.metrics import read_metrics, save_figure
from mlsys.train.rundir import RunDir


def compare(configs: dict[str, dict[str, Any]], window: int) -> list[dict[str, Any]]:
    """One row per run (``mlsys.bench.compare.summarize``); the target is the smoothed final
    validation loss of the first one-level run (the baseline)."""
    records = {n: read_metrics(RunDir(c["run_dir"]).metrics) for n, c in configs.items()}
    levels = {n: max(p["level"] for p in c["phases"]) for n, c in configs.items()}
    base = next((n for n in configs if levels[n] == 1), None)
    if base is None:
        raise RuntimeError("runs: no finished baseline (a one-level run) to compare against")
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

    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, cfg in configs.items():
        c = eval_curve(read_metrics(RunDir(cfg["run_dir"]).metrics))
        ax.plot(c.flops, c.val, marker=".", label=name)
    ax.axhline(rows[0]["target_val_loss"], color="grey", ls="--", lw=0.8, label="target")
    ax.set_xlabel("cumulative training FLOPs")
    ax.set_ylabel("validation loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, png, dpi=120)


def _fmt(x: float | None, spec: str, missing: str = "n/a") -> str:
    return missing if x is None else format(x, spec)


def table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table for the terminal."""
    f = _fmt
    lines = [f"{'run':<15} {'levels':>6} {'val loss':>9} {'FLOPs':>10} {'FLOPs→tgt':>10} "
             f"{'saving':>7} {'wall→tgt':>9} {'saving':>7} {'trans s':>8} {'step s':>7}"]
    for r in rows:
        lines.append(
            f"{r['name']:<15} {r['levels']:>6} {f(r['final_val_loss'], '.4f'):>9} "
            f"{r['flops_total']:>10.3e} {f(r['flops_to_target'], '.3e', 'not reached'):>10} "
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
        return _fmt(x, spec, "not reached")

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
