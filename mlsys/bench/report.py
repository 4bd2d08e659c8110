"""The benchmark's report: every finished run against the baseline, as rows for
``results.json``, a text table, a Markdown table (the results pages') and a loss-vs-FLOPs plot."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsys.atomic import write_json
from mlsys.bench.compare import (
    eval_curve,
    first_reach,
    frontier_flops,
    lower_envelope,
    summarize,
)
from mlsys.bench.lead import cycle_leads, decay_kept
from mlsys.bench.profile import seed_of
from mlsys.bench.seeds import seed_table
from mlsys.train.metrics import read_metrics, save_figure
from mlsys.train.rundir import RunDir


class NoTarget(RuntimeError):
    """No finished baseline to take the target from (at the budget asked for)."""


def compare(configs: dict[str, dict[str, Any]], window: int, budget: int | None = None,
            records: dict[str, list[dict[str, Any]]] | None = None) -> dict[str, Any]:
    """Every finished run against the tuned baselines.

    Baselines are the one-level runs. The **target** is the best of those that train the
    full budget, by smoothed final validation loss: ``budget`` level-1 steps (as declared,
    before any ``schedule.scale``), or else the most FLOPs. The **frontier** is the lower
    envelope of every baseline's (FLOPs, smoothed final loss), longer ones included: the best
    a baseline does at each budget (WSD runs decayed at several budgets fill it in). Per run
    (``summarize``):
    FLOPs to reach the target and the saving against the target baseline's own FLOPs to it
    (measure a); and ``frontier_flops``, the baseline FLOPs the frontier needs for this run's
    smoothed final loss, with ``saving_frontier = 1 - flops_total / frontier_flops``
    (measure b; None where the run ends below the whole frontier); for a V-cycle,
    ``phase_leads``: what each phase is worth against the constant-lr baselines before its
    decay (``mlsys.bench.lead``; None without them). ``saving_frontier_last_eval``
    is measure b with every final loss taken from the last evaluation alone (the exported
    model's), frontier included. ``records``: each run's metrics records (default: read from
    its ``run_dir``; a committed result's for a run not on this machine).

    Seed variants (``<run>-seed<k>``) are left out of all of this (the target, the frontier
    and the rows are the family's own seed's); ``seeds`` compares them seed by seed
    (``mlsys.bench.seeds.seed_table``; None without variants of the target)."""
    records = _records(configs, records)
    levels = {n: max(p["level"] for p in c["phases"]) for n, c in configs.items()}
    variants = {n: summarize(n, levels[n], records[n], None, None, window)
                for n in configs if seed_of(n) is not None}
    configs = {n: c for n, c in configs.items() if n not in variants}
    curves = {n: eval_curve(records[n]) for n in configs}
    finals = {n: (curves[n].flops[-1], curves[n].smoothed(window)[-1]) for n in configs
              if levels[n] == 1}
    if not finals:
        raise NoTarget("runs: no finished baseline (a one-level run) to compare against")
    if budget is None:
        full = max(f for f, _ in finals.values())
        eligible = [n for n, (f, _) in finals.items() if f >= 0.999 * full]
    else:
        eligible = [n for n in finals if sum(p["steps"] for p in configs[n]["phases"]) == budget]
        if not eligible:
            raise NoTarget(f"budget: no finished baseline of {budget} steps to take the "
                               f"target from (baselines: {', '.join(finals)})")
    best = min(eligible, key=lambda n: finals[n][1])
    curve, smooth = curves[best], curves[best].smoothed(window)
    target = smooth[-1]
    base_to = (first_reach(curve.flops, smooth, target), first_reach(curve.wall, smooth, target))
    envelope = lower_envelope(list(finals.values()))
    # the same frontier from the last evaluation alone (a decayed run's exported model): the
    # trailing mean penalises a run whose loss still falls steeply at its end
    last_envelope = lower_envelope([(curves[n].flops[-1], curves[n].val[-1]) for n in finals])
    trunks = [(curves[n].flops, curves[n].smoothed(window)) for n in finals
              if configs[n].get("train", {}).get("decay") == "constant"]
    rows = []
    for n, cfg in configs.items():
        row = summarize(n, levels[n], records[n], target, base_to, window,
                        (curve.flops, smooth))
        row.update(target_val_loss=target, peak_lr=cfg["phases"][0]["lr"],
                   decay=cfg.get("train", {}).get("decay", "linear"),
                   schedule_span=cfg.get("schedule", {}).get("span", "phase"),
                   chosen=cfg.get("vcycle", {}).get("chosen"))  # vcycle.recipe: auto's choice
        need = frontier_flops(envelope, row["final_val_loss_smoothed"])
        row["frontier_flops"] = need
        row["saving_frontier"] = None if need is None else 1.0 - row["flops_total"] / need
        need = frontier_flops(last_envelope, row["final_val_loss"])
        row["saving_frontier_last_eval"] = None if need is None else \
            1.0 - row["flops_total"] / need
        # below the whole frontier: the saving is at least this (negative: the run used more
        # FLOPs than the frontier's largest budget, so (b) says nothing)
        row["saving_frontier_at_least"] = 1.0 - row["flops_total"] / envelope[-1][0]
        row["phase_leads"] = cycle_leads(cfg, records[n], trunks, window) \
            if levels[n] > 1 else None
        row["decay_kept"] = decay_kept(row["phase_leads"], row["frontier_flops"],
                                       row["flops_total"])
        rows.append(row)
    return {"target": best, "target_val_loss": target, "frontier": envelope,
            "frontier_last_eval": last_envelope,
            "baselines": [r for r in rows if r["levels"] == 1],
            "grid_edge": _grid_edge(rows, best), "runs": rows,
            "seeds": seed_table({**{r["name"]: r for r in rows}, **variants}, records, best,
                                envelope, window)}


def _records(configs: dict[str, dict[str, Any]],
             records: dict[str, list[dict[str, Any]]] | None) -> dict[str, list[dict[str, Any]]]:
    if records is not None:
        return {n: records[n] for n in configs}
    return {n: read_metrics(RunDir(c["run_dir"]).metrics) for n, c in configs.items()}


def _grid_edge(rows: list[dict[str, Any]], best: str) -> str | None:
    """Whether the target's lr sits at an edge of its schedule's lr grid (then the grid
    must be extended before the target is trusted); None if it is inside."""
    by_name = {r["name"]: r for r in rows}
    b = by_name[best]
    grid = sorted({r["peak_lr"] for r in rows if r["levels"] == 1 and r["decay"] == b["decay"]
                   and r["flops_total"] == b["flops_total"]})
    if len(grid) < 3:
        return f"{b['decay']}: only {len(grid)} lr values at the full budget"
    if b["peak_lr"] in (grid[0], grid[-1]):
        return f"{b['decay']}: best lr {b['peak_lr']:g} is at the edge of {grid}"
    return None


def plot(configs: dict[str, dict[str, Any]], result: dict[str, Any], png: Path,
         title: str, records: dict[str, list[dict[str, Any]]] | None = None) -> None:
    """Validation loss against FLOPs: baselines thin and grey (the target in black), the
    frontier as a dashed line through its points, every V-cycle in colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = _records(configs, records)
    levels = {r["name"]: r["levels"] for r in result["runs"]}
    # tab20 without its two greys (the baselines' colour); line styles beyond 18 V-cycles
    palette = [c for i, c in enumerate(plt.get_cmap("tab20").colors) if i not in (14, 15)]
    fig, ax = plt.subplots(figsize=(12, 6))
    n_cycles = 0
    for name in configs:
        if name not in levels:  # a seed variant: its figures are in the seed table
            continue
        c = eval_curve(records[name])
        if levels[name] > 1:
            style = ("-", "--", ":")[n_cycles // len(palette) % 3]
            ax.plot(c.flops, c.val, lw=1.2, ls=style, color=palette[n_cycles % len(palette)],
                    label=name)
            n_cycles += 1
        elif name == result["target"]:
            ax.plot(c.flops, c.val, color="black", lw=1.4, zorder=3, label=f"{name} (target)")
        else:
            ax.plot(c.flops, c.val, color="0.75", lw=0.7)
    front = result["frontier"]
    ax.plot([f for f, _ in front], [v for _, v in front], "k--o", ms=3, lw=1,
            label="baseline frontier")
    ax.axhline(result["target_val_loss"], color="grey", ls=":", lw=0.8)
    low = min(v for _, v in front)
    ax.set_ylim(low - 0.15, low + 1.2)
    ax.set_xlabel("cumulative training FLOPs")
    ax.set_ylabel("validation loss")
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the curves
    fig.tight_layout()
    save_figure(fig, png, dpi=120)


def _fmt(x: float | None, spec: str, missing: str = "n/a") -> str:
    return missing if x is None else format(x, spec)


def table(rows: list[dict[str, Any]]) -> str:
    """A fixed-width text table for the terminal."""
    f = _fmt
    lines = [f"{'run':<28} {'levels':>6} {'val loss':>9} {'FLOPs':>10} {'FLOPs→tgt':>11} "
             f"{'saved(a)':>8} {'saved(b)':>8} {'wall→tgt':>9} {'trans s':>8} {'step s':>7}"]
    for r in rows:
        lines.append(
            f"{r['name']:<28} {r['levels']:>6} {f(r['final_val_loss'], '.4f'):>9} "
            f"{r['flops_total']:>10.3e} {f(r['flops_to_target'], '.3e', 'not reached'):>11} "
            f"{f(r['saving_flops'], '+.1%'):>8} {f(r['saving_frontier'], '+.1%'):>8} "
            f"{f(r['wall_to_target'], '.0f'):>9} {f(sum(r['transition_seconds']), '.1f'):>8} "
            f"{f(r['median_step_seconds'], '.3f'):>7}")
        if r.get("final_val_top1") is not None:
            lines.append(f"{'':<28} top-1 accuracy at the end: {r['final_val_top1']:.3f}")
        for j in r["transition_jump"]:
            lines.append(f"{'':<28} up {j['from_level']}→{j['to_level']} at step {j['step']}: "
                         f"before {f(j['before'], '.4f')}, after {f(j['after'], '.4f')} "
                         f"({f(j['jump'], '+.4f')}), 150 steps later "
                         f"{f(j['after_150'], '.4f')} ({f(j['jump_150'], '+.4f')})")
    return "\n".join(lines)


def markdown(rows: list[dict[str, Any]]) -> str:
    """The same figures as a Markdown table (for the results pages, docs/results/)."""
    def f(x, spec):
        return _fmt(x, spec, "not reached")

    out = ["| run | levels | peak lr | final val loss: smoothed / last eval | FLOPs | "
           "Δ at equal FLOPs | FLOPs to target | saved (a): to the target | saved (b): on the "
           "frontier, smoothed / last eval | up-jump: right after / +150 steps |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        jumps = "; ".join(f"{f(j['jump'], '+.3f')} / {f(j['jump_150'], '+.3f')}"
                          for j in r["transition_jump"]) or "–"
        gap = "–" if r.get("gap_at_equal_flops") is None else f"{r['gap_at_equal_flops']:+.3f}"
        out.append(f"| {r['name']} | {r['levels']} | {r['peak_lr']:g} | "
                   f"{f(r['final_val_loss_smoothed'], '.4f')} / {f(r['final_val_loss'], '.4f')} | "
                   f"{r['flops_total']:.3g} | {gap} | "
                   f"{f(r['flops_to_target'], '.3g')} | {f(r['saving_flops'], '+.1%')} | "
                   f"{_fmt(r['saving_frontier'], '+.1%', _below(r))} / "
                   f"{_fmt(r.get('saving_frontier_last_eval'), '+.1%', _below(r))} | {jumps} |")
    return "\n".join(out)


def _below(row: dict[str, Any]) -> str:
    """(b) for a run that ends below the whole frontier: a lower bound, or why there is none."""
    bound = row.get("saving_frontier_at_least")
    if bound is None or bound < 0:
        return "below the frontier, with more FLOPs than it spans"
    return f"below the frontier: ≥ {bound:+.1%}"


def compare_pair(configs: dict[str, dict[str, Any]], out: Path, window: int = 3) -> str:
    """A baseline (one level) against a V-cycle, both finished: ``out/results.json``,
    ``out/comparison.png`` and a sentence with the FLOPs the V-cycle needed to reach the
    baseline's smoothed final validation loss (or that it did not), as measured."""
    result = compare(configs, window)
    write_json(out / "results.json", result)
    plot(configs, result, out / "comparison.png", "validation loss: V-cycle vs from scratch")
    rows = {r["name"]: r for r in result["runs"]}
    base = rows[result["target"]]
    lines = [f"{base['name']}: final validation loss {result['target_val_loss']:.4f} "
             f"(smoothed over {window} evaluations), reached after "
             f"{base['flops_to_target']:.3e} FLOPs"]
    for row in result["runs"]:
        if row["levels"] == 1:
            continue
        if row["flops_to_target"] is None:
            lines.append(f"{row['name']}: did not reach it (final "
                         f"{row['final_val_loss_smoothed']:.4f} after "
                         f"{row['flops_total']:.3e} FLOPs)")
        else:
            saving = row["saving_flops"]
            lines.append(f"{row['name']}: reached it after {row['flops_to_target']:.3e} FLOPs, "
                         f"{100 * abs(saving):.1f} % {'fewer' if saving >= 0 else 'more'} "
                         "than the baseline")
    lines.append(f"wrote {out / 'results.json'} and {out / 'comparison.png'}")
    return "\n".join(lines)
