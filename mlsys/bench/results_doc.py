"""The benchmark's results page: ``docs/results/<profile>-<family>.md`` beside its plot,
written by the benchmark at the end of every full-scale analysis and never edited by hand.
The page is a pure function of the analysis (no dates, no paths of this machine), so running
the analysis again on the same runs writes the same bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsys.atomic import write_text
from mlsys.bench.report import markdown

GENERATED = "<!-- Written by the benchmark (mlsys/bench/results_doc.py). Do not edit: run {cmd} -->"


def page_name(profile: str, family: str, budget: int | None, profile_budget: int | None) -> str:
    """``<profile>-<family>``, with ``-b<budget>`` when the analysis is at another budget than
    the profile's own."""
    base = f"{profile}-{family}"
    return base if budget == profile_budget else f"{base}-b{budget}"


def command(profile: str, family: str, budget: int | None, profile_budget: int | None) -> str:
    """The command that regenerates the page from the finished and committed runs."""
    cmd = f"python -m launch.benchmark --profile {profile} --family {family} --analyse-only"
    if budget != profile_budget:
        cmd += f" --budget {budget}"
    return f"`{cmd} --out runs/bench/{profile}-{family}`"


def render(result: dict[str, Any], png_name: str, cmd: str) -> str:
    """The page: what was compared, the target, the table of every run, the frontier, the
    plot."""
    runs = result["runs"]
    cycles = [r for r in runs if r["levels"] > 1]
    lines = [GENERATED.format(cmd=cmd), "",
             f"# Benchmark: profile `{result['profile']}`, family `{result['family']}`", "",
             f"Profile `configs/bench/{result['profile']}.yaml`; {result['ranks']} rank(s), "
             f"`{result['ds_config']}`. Budget: {_budget(result)}. FLOPs are training FLOPs "
             "(`mlsys/flops.py`); wall-clock time is left out (the runs shared their cores).",
             "",
             f"**Target** (the best baseline of the budget, smoothed final validation loss): "
             f"`{result['target']}`, {result['target_val_loss']:.4f}."]
    if result.get("grid_edge"):
        lines.append(f"\n**Warning**: {result['grid_edge']}: the grid does not bracket the "
                     "target's lr, so the target may not be the best baseline.")
    lines += ["", f"{len(runs)} finished runs: {len(runs) - len(cycles)} baselines, "
              f"{len(cycles)} V-cycles (their records: `bench/results/<profile>/"
              f"{result['family']}/`, under the profile that declares each run).",
              "", "Saved (a): the FLOPs to reach the target against the target baseline's own "
              "FLOPs to it. Saved (b): `1 − FLOPs / frontier FLOPs`, the frontier being the "
              "lower envelope of every baseline's (FLOPs, smoothed final loss); "
              "[docs/benchmark.md](../benchmark.md) defines both.", "",
              markdown(runs), "", "## The baseline frontier", "",
              "| FLOPs | smoothed final val loss |", "|---|---|"]
    lines += [f"| {f:.4g} | {v:.4f} |" for f, v in result["frontier"]]
    lines += lead_section(cycles)
    chosen = [r for r in runs if r.get("chosen")]
    if chosen:
        lines += ["", "## Chosen by `vcycle.recipe: auto`", "",
                  *(f"- `{r['name']}`: {r['chosen']}" for r in chosen)]
    if result.get("seeds"):
        lines += ["", *seed_section(result["seeds"], result["target"])]
    lines += ["", f"![{result['profile']} / {result['family']}: every run against the "
              f"baseline frontier]({png_name})", ""]
    return "\n".join(lines)


def lead_section(cycles: list[dict[str, Any]]) -> list[str]:
    """What each phase of each V-cycle is worth against the constant-lr baselines
    (``mlsys.bench.lead``); nothing where no cycle has a constant stretch to compare."""
    with_leads = [r for r in cycles if r.get("phase_leads")]
    if not with_leads:
        return []
    lines = ["", "## What each phase is worth", "",
             "Before its decay a V-cycle trains at a constant lr, as the constant baselines "
             "(`decay: constant`) do: at each evaluation, the FLOPs the best of them needs to "
             "reach the cycle's smoothed loss, minus the FLOPs the cycle spent, is how far "
             "ahead it is (here as a share of the cycle's total FLOPs: what a cycle that went "
             "on as fast as a baseline would keep). Most ahead: the peak and the step into the "
             "phase where it was. Pace: baseline FLOPs gained per FLOP over the phase (1: as "
             "fast as a baseline from the same loss). "
             "[mlsys/bench/lead.py](../../mlsys/bench/lead.py) defines them.", "",
             "| run | phase (level) | most ahead (at step) | ahead at its last evaluation "
             "(step) | pace |", "|---|---|---|---|---|"]
    for r in with_leads:
        total = r["flops_total"]
        for p in r["phase_leads"]:
            pace = "–" if p["pace"] is None else f"{p['pace']:.2f}"
            lines.append(f"| {r['name']} | {p['phase']} (L{p['level']}) | "
                         f"{p['ahead_peak'] / total:+.1%} ({p['peak_step']}) | "
                         f"{p['ahead_last'] / total:+.1%} ({p['last_step']}) | {pace} |")
    kept = [r for r in with_leads if r.get("decay_kept")]
    if kept:
        lines += ["", "What the final decay made of the lead: ahead of the constant baselines "
                  "when the decay began, and ahead of the decayed frontier at the end "
                  "(measure (b), in FLOPs), both as a share of the cycle's FLOPs. A decay that "
                  "gains what a baseline's gains from the same loss keeps about all of the "
                  "lead (kept ≈ 100 %).", "",
                  "| run | ahead when its decay began | ahead at its end | kept |",
                  "|---|---|---|---|"]
        for r in kept:
            d, total = r["decay_kept"], r["flops_total"]
            share = "–" if d["kept"] is None else f"{d['kept']:.0%}"
            lines.append(f"| {r['name']} | {d['ahead_start'] / total:+.1%} | "
                         f"{d['ahead_end'] / total:+.1%} | {share} |")
    return lines


def seed_section(seeds: dict[str, Any], target: str) -> list[str]:
    """The seed table (``mlsys.bench.seeds``): per seed the target's loss and each V-cycle's
    loss and savings, then mean ± standard deviation, and whether the saving counts."""
    keys = ["own" if k is None else str(k) for k in seeds["seeds"]]

    def cells(values: list[float | None], spec: str, missing: str = "–",
              ran: list[float | None] | None = None) -> str:
        """``missing`` where a run that ran has no value; "–" where there is no run."""
        ran = ran or values
        return " / ".join(format(v, spec) if v is not None else "–" if r is None else missing
                          for v, r in zip(values, ran, strict=True))

    def mean_std(s: dict[str, Any], spec: str) -> str:
        if s["mean"] is None:
            return "–"
        std = "" if s["std"] is None else f" ± {format(s['std'], spec.lstrip('+'))}"
        at_least = "≥ " if s.get("at_least") else ""
        return f"{at_least}{format(s['mean'], spec)}{std} (n = {s['n']} of {len(keys)})"

    def frontier_cells(r: dict[str, Any]) -> str:
        bounds = r.get("frontier_at_least") or [False] * len(keys)
        return " / ".join("–" if loss is None else "below the frontier, with more FLOPs"
                          if v is None else f"{'≥ ' if at_least else ''}{v:+.1%}"
                          for v, at_least, loss in zip(r["saving_frontier"], bounds,
                                                       r["final_val_loss_smoothed"], strict=True))

    t = seeds["target"]
    lines = ["## Seeds", "",
             f"Seeds: {' / '.join(keys)} (`own`: the family's `train.seed`; the others are the "
             f"runs named `-seed<k>`). Target `{target}` at each seed, smoothed final "
             f"validation loss: {cells(t['final_val_loss_smoothed'], '.4f')}; "
             f"{mean_std(t['spread'], '.4f')}. Saved (a) is paired (each seed's V-cycle "
             "against the same seed's target baseline); (b) reads the one frontier above. A "
             "saving counts where its mean exceeds its standard deviation, over ≥ 3 seeds "
             "(`mlsys/bench/seeds.py`); a seed whose V-cycle does not reach its target has no "
             "(a) and is left out of the mean (n says how many count); one that ends below "
             "the whole frontier has (b)'s lower bound (≥, against the frontier's last "
             "point), and a (b) with a bound does not count until a longer frontier makes it "
             "a number.", "",
             "| run | val loss per seed | saved (a) per seed | saved (a): mean ± sd | "
             "saved (b) per seed | saved (b): mean ± sd | counts |",
             "|---|---|---|---|---|---|---|"]
    for r in seeds["runs"]:
        loss = r["final_val_loss_smoothed"]
        lines.append(f"| {r['name']} | {cells(r['final_val_loss_smoothed'], '.4f')} | "
                     f"{cells(r['saving_flops'], '+.1%', 'not reached', loss)} | "
                     f"{mean_std(r['spread_flops'], '+.1%')} | "
                     f"{frontier_cells(r)} | "
                     f"{mean_std(r['spread_frontier'], '+.1%')} | "
                     f"{'yes' if r['counts'] else 'no'} |")
    return lines


def _budget(result: dict[str, Any]) -> str:
    budget = result.get("budget")
    return "the most FLOPs of any baseline" if budget is None else f"{budget} level-1 steps"


def write_page(folder: Path, name: str, result: dict[str, Any], cmd: str) -> Path:
    """Write ``<folder>/<name>.md`` (the plot is ``<name>.png``, written by the caller)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.md"
    write_text(path, render(result, f"{name}.png", cmd))
    return path
