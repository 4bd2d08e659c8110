"""The saving against the budget: measures (a) and (b) of the best V-cycle at each budget, in
tokens per parameter, one line per profile and family (issue 25's plot).

``curve_point`` reads one budget's analysis (``mlsys.bench.report.compare`` at that budget):
the V-cycles **of that budget** are those whose training FLOPs are between ``LOW`` and 100 %
of the target baseline's (a cycle of a smaller budget spends far less, one of a larger budget
more); of those it takes the best by (a) and the best by (b), each with its seed spread where
the run has seed variants (``mlsys.bench.seeds``: mean ± sample sd, and whether that
measure's saving counts). A cycle whose savings count over its seeds is preferred to any
that does not (the best of those by its seed mean); only where none counts is the best taken
by the own-seed run, so a lucky single seed does not stand in for a saving that held at every
seed.
``update_curves`` merges one line into ``budget-curves.json`` (other lines kept), and
``plot_curves`` draws every line: (a) and (b) against tokens per parameter, the spread as
error bars. Pure functions except the two writers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from mlsys.atomic import write_json, write_text
from mlsys.bench.seeds import counts
from mlsys.train.metrics import save_figure

LOW = 0.5  # a cycle of budget B spends 50-100 % of B's baseline FLOPs
MEASURES = (("saving_flops", "spread_flops", "(a) to the target"),
            ("saving_frontier", "spread_frontier", "(b) on the frontier"))


def _measure_counts(s: dict[str, Any]) -> bool:
    """Whether one measure's saving counts over its seeds (a mean of lower bounds never does);
    a cycle is preferred where both of its measures count (``seed_table``'s ``counts``)."""
    return counts(s) and not s.get("at_least")


def _seeded(compared: dict[str, Any], name: str) -> dict[str, Any] | None:
    seeds = compared.get("seeds") or {}
    return next((r for r in seeds.get("runs", []) if r["name"] == name), None)


def _measure(row: dict[str, Any], key: str) -> float | None:
    """The run's value of a measure; for (b) of a run that ends below the whole frontier, its
    lower bound (``saving_frontier_at_least``, the frontier's last point) where one exists."""
    if row[key] is None and key == "saving_frontier":
        bound = row.get("saving_frontier_at_least")
        return bound if bound is not None and bound >= 0 else None
    return row[key]


def curve_point(compared: dict[str, Any], budget: int, tokens_per_param: float
                ) -> dict[str, Any]:
    """One budget's point: the target, and per measure the best V-cycle of the budget (one
    whose saving counts over its seeds first, by its seed mean; else by the own-seed run): its
    name, single-run value, and seed spread if it has seed variants; a measure with no
    V-cycle value is None."""
    rows = {r["name"]: r for r in compared["runs"]}
    full = rows[compared["target"]]["flops_total"]
    cycles = [r for r in compared["runs"]
              if r["levels"] > 1 and LOW * full < r["flops_total"] <= full * (1 + 1e-9)]
    point: dict[str, Any] = {"budget": budget, "tokens_per_param": tokens_per_param,
                             "target": compared["target"],
                             "target_val_loss": compared["target_val_loss"],
                             "cycles": sorted(r["name"] for r in cycles)}
    if compared.get("grid_edge"):
        point["grid_edge"] = compared["grid_edge"]
    for key, spread_key, _ in MEASURES:
        valued = [(r, v) for r in cycles if (v := _measure(r, key)) is not None]
        if not valued:
            point[key] = None
            continue
        seeds_of = {r["name"]: _seeded(compared, r["name"]) for r, _ in valued}
        counting = [(r, v) for r, v in valued if (seeds_of[r["name"]] or {}).get("counts")]
        if counting:
            best, value = max(counting, key=lambda rv: seeds_of[rv[0]["name"]][spread_key]["mean"])
        else:
            best, value = max(valued, key=lambda rv: rv[1])
        seeded = seeds_of[best["name"]]
        point[key] = {"run": best["name"], "value": value,
                      **({"at_least": True} if best[key] is None else {}),
                      "spread": seeded[spread_key] if seeded else None,
                      "seeds": len(compared["seeds"]["seeds"]) if seeded else 1,
                      "counts": _measure_counts(seeded[spread_key]) if seeded else False}
    return point


def update_curves(path: Path, line: str, points: list[dict[str, Any]]) -> dict[str, Any]:
    """``path`` (JSON: line name -> points by budget) with ``line`` replaced by ``points``;
    written atomically, the other lines as they were."""
    curves = json.loads(path.read_text()) if path.exists() else {}
    curves[line] = sorted(points, key=lambda p: p["tokens_per_param"])
    curves = dict(sorted(curves.items()))
    write_json(path, curves)
    return curves


def _partial(m: dict[str, Any] | None) -> bool:
    """True where the run has seed variants and not every seed has a value (plotted
    hollow: the value shown is the own seed's)."""
    s = (m or {}).get("spread")
    return bool(s) and s["n"] < m.get("seeds", s["n"])


def _value(m: dict[str, Any] | None) -> tuple[float | None, float]:
    """(the mean over seeds where every seed has a value, else the run's own; the sd or 0):
    a mean over the seeds that reached the target alone would flatter the saving."""
    if m is None:
        return None, 0.0
    s = m.get("spread")
    if s and s["n"] >= 2 and s["n"] == m.get("seeds") and s["mean"] is not None:
        return s["mean"], s["std"] or 0.0
    return m["value"], 0.0


def plot_curves(curves: dict[str, Any], png: Path) -> Path:
    """(a) and (b) against tokens per parameter (log), one line per entry of ``curves``,
    seed spreads as error bars (single runs without), a lower bound (a cycle below the whole
    frontier) as an upward triangle."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5), sharey=True, sharex=True)
    for ax, (key, _, label) in zip(axes, MEASURES, strict=True):
        for i, (line, points) in enumerate(curves.items()):  # one colour a line, both panels
            xs, ys, es, hollow, bound = [], [], [], [], []
            for p in points:
                y, e = _value(p[key])
                if y is not None:
                    xs.append(p["tokens_per_param"]), ys.append(100 * y), es.append(100 * e)
                    hollow.append(_partial(p[key]))
                    bound.append(bool(p[key].get("at_least")))
            if xs:
                bar = ax.errorbar(xs, ys, yerr=es, marker="o", capsize=3, label=line,
                                  color=f"C{i}")
                open_xy = [(x, y) for x, y, h in zip(xs, ys, hollow, strict=True) if h]
                if open_xy:  # not every seed has a value: a ring over the marker
                    ax.scatter(*zip(*open_xy, strict=True), s=90, facecolors="white",
                               edgecolors=bar[0].get_color(), zorder=3)
                up_xy = [(x, y) for x, y, u in zip(xs, ys, bound, strict=True) if u]
                if up_xy:  # below the whole frontier: a lower bound, an arrow up
                    ax.scatter(*zip(*up_xy, strict=True), s=110, marker="^",
                               color=bar[0].get_color(), zorder=3)
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xscale("log")
        ax.set_xlabel("budget: tokens per parameter")
        ax.set_title(f"saved {label}\n(hollow: not every seed has a value, the own seed's; "
                     "▲: a lower bound)", fontsize=10)
    axes[0].set_ylabel("FLOPs saved by the best V-cycle (%)")
    for ax in axes:  # each panel names its own lines (a line may have no point in one)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8)
    fig.tight_layout()
    return save_figure(fig, png, dpi=110)


def markdown_curves(curves: dict[str, Any]) -> str:
    """The table under the plot: per line and budget, the target and each measure's best."""
    def cell(p: dict[str, Any], key: str) -> str:
        m = p[key]
        if m is None:
            return "not reached" if p["cycles"] else "no V-cycle run yet"
        s = m.get("spread")
        if s and s["n"] >= 2 and s["mean"] is not None:
            low = "≥ " if s.get("at_least") else ""  # a mean of lower bounds
            seeds = (f"; {low}{100 * s['mean']:+.1f} % ± {100 * (s['std'] or 0):.1f} over the "
                     f"{s['n']} of {m.get('seeds', s['n'])} seeds with a value"
                     f"{', counts' if m['counts'] else ', does not count'}")
        elif s:  # seed variants, but at most this one seed has a value
            seeds = f"; a value at {s['n']} of {m.get('seeds', s['n'])} seeds, does not count"
        else:
            seeds = ""
        bound = "≥ " if m.get("at_least") else ""  # below the frontier's last point
        return f"{bound}{100 * m['value']:+.1f} % (`{m['run']}`{seeds})"

    lines = ["| line | budget (steps) | tokens/param | target | (a) best | (b) best |",
             "|---|---|---|---|---|---|"]
    for line, points in curves.items():
        for p in points:
            edge = " (lr grid: " + p["grid_edge"] + ")" if p.get("grid_edge") else ""
            lines.append(f"| {line} | {p['budget']} | {p['tokens_per_param']:.3g} | "
                         f"`{p['target']}` {p['target_val_loss']:.4f}{edge} | "
                         f"{cell(p, 'saving_flops')} | {cell(p, 'saving_frontier')} |")
    return "\n".join(lines)


def write_curves_page(folder: Path, curves: dict[str, Any], cmd: str) -> Path:
    """``budget-curves.md`` beside ``budget-curves.png``: the plot and its table."""
    text = "\n".join([
        f"<!-- Written by the benchmark (mlsys/bench/budget_curve.py). Do not edit: run {cmd} "
        "for each line -->", "", "# The saving against the budget", "",
        "The best V-cycle of each budget (training FLOPs 50–100 % of the target baseline's) by "
        "measure (a) and by measure (b) ([docs/benchmark.md](../benchmark.md)): one whose saving "
        "counts over its seeds first (the best by its seed mean), else the best by its "
        "own-seed run; plotted: the mean and sample sd over its seeds where every seed has a "
        "value, else the own-seed run (no bar). A saving "
        "counts where its mean exceeds its sd over ≥ 3 seeds, each measure on its own (a "
        "mean of lower bounds, ≥, never counts); a cycle counts where both do. Tokens per "
        "parameter as `vcycle.recipe: auto` reads them (`mlsys/recipe.py`: biases and norms "
        "left out, 0.5 % fewer than the exported model card's count), so this axis is the "
        "recipe rule's.", "",
        "![saving against tokens per parameter](budget-curves.png)", "",
        markdown_curves(curves), ""])
    return write_text(folder / "budget-curves.md", text)


def analyse_budgets(profile_name: str, family: str, out: Path, root: Path, budgets: list[int],
                    results_dir: Path | None = None, docs_dir: Path | None = None
                    ) -> dict[str, Any]:
    """Analyse the profile's finished (or committed) runs of ``family`` at each budget, and
    write its line into ``<docs_dir>/budget-curves.{json,png,md}`` (default
    ``<root>/docs/results``). A budget without a finished baseline of its length is left out,
    said on stdout."""
    from mlsys.bench.profile import load_profile, run_configs
    from mlsys.bench.report import NoTarget, compare
    from mlsys.bench.results import RESULTS
    from mlsys.bench.runner import Results, finished_records
    from mlsys.config import ConfigError, parse_run_config
    from mlsys.recipe import budget_tokens_per_param  # the recipe rule's axis

    profile = load_profile(profile_name, root)
    configs = run_configs(profile, family, out)
    results = Results(results_dir or root / RESULTS, profile_name, family, root)
    records = finished_records(configs, results)
    configs = {n: c for n, c in configs.items() if n in records}
    if not configs:
        raise ConfigError(f"--budget-curve: no finished or committed run of {profile_name} / "
                          f"{family}")
    first = parse_run_config({k: v for k, v in next(iter(configs.values())).items()
                              if k != "fork"}).model_dump()
    points = []
    for budget in budgets:
        try:
            compared = compare(configs, profile.window, budget, records)
        except NoTarget as err:
            print(f"budget {budget}: left out ({err})", flush=True)
            continue
        points.append(curve_point(compared, budget, budget_tokens_per_param(first, budget)[0]))
    if not points:
        raise ConfigError(f"--budget-curve: no budget of {budgets} has a finished baseline of "
                          "its length (the committed line is left as it was)")
    folder = docs_dir or root / "docs" / "results"
    curves = update_curves(folder / "budget-curves.json", f"{profile_name}/{family}", points)
    plot_curves(curves, folder / "budget-curves.png")
    cmd = (f"`python -m launch.benchmark --profile {profile_name} --family {family} "
           f"--budget-curve {' '.join(map(str, budgets))} "
           f"--out runs/bench/{profile_name}-{family}`")
    page = write_curves_page(folder, curves, cmd)
    print(markdown_curves(curves))
    print(f"wrote {page}")
    return curves
