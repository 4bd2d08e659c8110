"""The seed table: seed variants never take the target or shape the frontier; measure (a) is
paired seed by seed; mean, spread and "counts" follow their definitions."""

from __future__ import annotations

import math
import statistics

import pytest

from mlsys.bench.report import compare
from mlsys.bench.results_doc import render
from mlsys.bench.seeds import counts, spread

# (seed suffix, the target baseline's final loss, the V-cycle's speed-up over it at that seed)
SEEDS = [("", 1.0, 2.0), ("-seed11", 1.1, 2.5), ("-seed12", 0.95, 4.0)]


def _curve(flops: list[float], loss: list[float]) -> list[dict]:
    records = [{"event": "eval", "step": i, "phase": 0, "level": 1, "flops": f, "val_loss": v}
               for i, (f, v) in enumerate(zip(flops, loss, strict=True))]
    return records + [{"event": "end", "step": len(flops), "phase": 0, "level": 1,
                       "flops": flops[-1]}]


def _runs() -> tuple[dict, dict]:
    """A target baseline (``base``: loss 10 + offset - FLOPs over FLOPs 1..10), a shorter one
    (``short``), a V-cycle falling ``speed`` times as fast to the same seed's target, each
    (but ``short``) at three seeds."""
    one = [{"level": 1, "steps": 10, "lr": 1e-3}]
    cycle = [{"level": 2, "steps": 5, "lr": 2e-3}, {"level": 1, "steps": 5, "lr": 1e-3}]
    configs, records = {"short": {"phases": one}}, {}
    records["short"] = _curve([1.0, 3.0, 5.0], [8.0, 7.5, 7.0])
    for suffix, offset, speed in SEEDS:
        flops = [float(f) for f in range(1, 11)]
        configs[f"base{suffix}"] = {"phases": one}
        records[f"base{suffix}"] = _curve(flops, [10 + offset - f for f in flops])
        cycle_flops = [f / speed for f in flops]
        configs[f"cycle{suffix}"] = {"phases": cycle}
        records[f"cycle{suffix}"] = _curve(cycle_flops, [10 + offset - speed * f
                                                         for f in cycle_flops])
    return configs, records


def test_seed_variants_are_compared_seed_by_seed_and_only_there():
    configs, records = _runs()
    result = compare(configs, window=1, records=records)
    # seed 12's baseline ends lower (0.95) than the own seed's (1.0): it is not the target
    assert result["target"] == "base" and result["target_val_loss"] == 1.0
    assert [r["name"] for r in result["runs"]] == ["short", "base", "cycle"]
    assert result["frontier"] == [(5.0, 7.0), (10.0, 1.0)]
    seeds = result["seeds"]
    assert seeds["seeds"] == [None, 11, 12]
    assert seeds["target"]["final_val_loss_smoothed"] == pytest.approx([1.0, 1.1, 0.95])
    row, = seeds["runs"]
    assert row["name"] == "cycle"
    # (a) paired: each seed's cycle reaches its own baseline's loss at 10 / speed FLOPs
    assert row["saving_flops"] == pytest.approx([1 - 1 / s for _, _, s in SEEDS])
    # (b) on the one frontier: log-linear between (5, 7) and (10, 1); seed 12's 0.95 lies
    # below it: its lower bound, against the frontier's last point (10 FLOPs), flagged
    frac = (7.0 - 1.1) / (7.0 - 1.0)
    need = math.exp(math.log(5.0) + frac * (math.log(10.0) - math.log(5.0)))
    b = [1 - 5.0 / 10.0, 1 - 4.0 / need, 1 - 2.5 / 10.0]
    assert row["saving_frontier"] == pytest.approx(b)
    assert row["frontier_at_least"] == [False, False, True]
    assert row["spread_flops"]["mean"] == pytest.approx(statistics.fmean([0.5, 0.6, 0.75]))
    assert row["spread_flops"]["std"] == pytest.approx(statistics.stdev([0.5, 0.6, 0.75]))
    sb = row["spread_frontier"]
    assert sb["n"] == 3 and sb["at_least"] and sb["mean"] == pytest.approx(statistics.fmean(b))
    assert counts(row["spread_flops"]) and counts(sb)  # both means exceed their spreads ...
    assert not row["counts"]  # ... but (b)'s mean is a bound: not known to count
    page = render({"profile": "p", "family": "gpt", "ranks": 1, "ds_config": "z.json",
                   "budget": None, **result}, "p.png", "`cmd`")
    assert "## Seeds" in page and "| cycle | 1.0000 / 1.1000 / 0.9500 |" in page
    assert "| +50.0% / +60.0% / +75.0% |" in page  # (a) per seed
    assert (f"| +50.0% / {b[1]:+.1%} / ≥ +75.0% | ≥ {statistics.fmean(b):+.1%} ± "
            f"{statistics.stdev(b):.1%} (n = 3 of 3) | no |") in page


def test_a_saving_counts_when_its_mean_exceeds_its_spread_over_three_seeds():
    assert counts(spread([0.2, 0.25, 0.3]))
    assert not counts(spread([0.2, 0.25]))                 # two seeds
    assert not counts(spread([0.3, -0.1, 0.1]))            # mean 0.1 < sd 0.2
    assert not counts(spread([0.2, None, 0.3, None]))      # two that exist
    s = spread([0.1, None, 0.3])
    assert (s["n"], s["min"], s["max"]) == (2, 0.1, 0.3) and s["mean"] == pytest.approx(0.2)
