"""The saving against the budget (mlsys/bench/budget_curve.py): which V-cycles belong to a
budget, the best of each measure with its seed spread, and a line merged into the file
beside the others."""

from __future__ import annotations

import json

from mlsys.bench.budget_curve import (
    _partial,
    _value,
    curve_point,
    markdown_curves,
    update_curves,
)


def _row(name: str, levels: int, flops: float, a: float | None, b: float | None) -> dict:
    return {"name": name, "levels": levels, "flops_total": flops, "saving_flops": a,
            "saving_frontier": b}


COMPARED = {
    "target": "wsd-s2000", "target_val_loss": 3.1,
    "runs": [_row("wsd-s2000", 1, 100.0, 0.0, 0.0), _row("wsd-s6500", 1, 325.0, -1.0, 0.0),
             _row("cycle-b500", 2, 25.0, 0.9, 0.5),    # a smaller budget's cycle: out
             _row("cycle-b2000-x", 2, 87.0, 0.13, 0.10),
             _row("cycle-b2000-y", 2, 75.0, None, 0.15),  # never reaches the target
             _row("cycle-b6500", 2, 290.0, 0.3, 0.2)],    # a larger budget's: out
    "seeds": {"seeds": [None, 1235, 1236],
              "runs": [{"name": "cycle-b2000-x", "counts": False,
                        "spread_flops": {"n": 2, "mean": 0.148, "std": 0.023},
                        "spread_frontier": {"n": 3, "mean": 0.111, "std": 0.03}}]},
}


def test_a_budget_takes_its_own_cycles_and_the_best_of_each_measure():
    p = curve_point(COMPARED, 2000, 3.09)
    assert p["cycles"] == ["cycle-b2000-x", "cycle-b2000-y"]
    assert p["saving_flops"]["run"] == "cycle-b2000-x" and p["saving_flops"]["value"] == 0.13
    assert p["saving_flops"]["spread"] == {"n": 2, "mean": 0.148, "std": 0.023}
    assert p["saving_frontier"]["run"] == "cycle-b2000-y"
    assert p["saving_frontier"]["spread"] is None  # no seed variants: a single run
    assert "over the 2 of 3 seeds with a value, does not count" in markdown_curves({"l": [p]})
    # plotted: the own-seed run where a seed has no value (a mean of the others flatters)
    assert _value(p["saving_flops"]) == (0.13, 0.0)
    full = {**p["saving_flops"], "spread": {"n": 3, "mean": 0.12, "std": 0.02}}
    assert _value(full) == (0.12, 0.02)
    assert _partial(p["saving_flops"]) and not _partial(full)
    assert not _partial(p["saving_frontier"])  # a single run


def test_a_value_at_one_seed_of_three_is_said_as_such():
    """The own seed reached the target, the two others did not: no mean, and the table says
    how many seeds have a value."""
    seeds = {**COMPARED["seeds"], "runs": [{**COMPARED["seeds"]["runs"][0],
                                             "spread_flops": {"n": 1, "mean": 0.13,
                                                              "std": None}}]}
    p = curve_point({**COMPARED, "seeds": seeds}, 2000, 3.09)
    assert "+13.0 % (`cycle-b2000-x`; a value at 1 of 3 seeds, does not count)" in \
        markdown_curves({"l": [p]})
    assert _partial(p["saving_flops"]) and _value(p["saving_flops"]) == (0.13, 0.0)


def test_a_budget_with_no_cycle_of_its_own_says_so():
    compared = {**COMPARED, "runs": COMPARED["runs"][:3]}
    p = curve_point(compared, 2000, 3.09)
    assert p["cycles"] == [] and p["saving_flops"] is None and p["saving_frontier"] is None
    assert "no V-cycle run yet" in markdown_curves({"l": [p]})


def test_a_line_replaces_only_itself(tmp_path):
    path = tmp_path / "budget-curves.json"
    update_curves(path, "cpu-budget-bert/bert", [{"tokens_per_param": 3.0, "budget": 2000}])
    update_curves(path, "cpu-budget-gpt/gpt", [{"tokens_per_param": 20.0, "budget": 13500},
                                               {"tokens_per_param": 3.0, "budget": 2000}])
    update_curves(path, "cpu-budget-gpt/gpt", [{"tokens_per_param": 10.0, "budget": 6500}])
    curves = json.loads(path.read_text())
    assert list(curves) == ["cpu-budget-bert/bert", "cpu-budget-gpt/gpt"]
    assert curves["cpu-budget-gpt/gpt"] == [{"tokens_per_param": 10.0, "budget": 6500}]
    assert curves["cpu-budget-bert/bert"] == [{"tokens_per_param": 3.0, "budget": 2000}]


def test_a_cycle_below_the_whole_frontier_counts_with_its_lower_bound():
    """(b) of a run that ends below the frontier's last point is no number but a lower bound;
    it is that run's (b) where the bound beats the others', said as "≥"; a run below it with
    no bound (more FLOPs than the frontier spans) is no value."""
    below = {**_row("cycle-b2000-z", 2, 99.0, 0.2, None), "saving_frontier_at_least": 0.5}
    no_bound = {**_row("cycle-b2000-w", 2, 98.0, 0.1, None), "saving_frontier_at_least": -0.1}
    p = curve_point({**COMPARED, "runs": COMPARED["runs"] + [below, no_bound]}, 2000, 3.05)
    assert p["saving_frontier"]["run"] == "cycle-b2000-z" and p["saving_frontier"]["value"] == 0.5
    assert p["saving_frontier"]["at_least"] and "at_least" not in p["saving_flops"]
    assert "≥ +50.0 % (`cycle-b2000-z`)" in markdown_curves({"l": [p]})


def test_a_seed_mean_of_lower_bounds_is_said_as_one():
    """The best (b)'s run is a number at its own seed, but another seed ended below the whole
    frontier: the seed mean is a mean of bounds, said with "≥", and does not count."""
    seeds = {**COMPARED["seeds"], "runs": [{**COMPARED["seeds"]["runs"][0], "counts": False,
                                             "spread_frontier": {"n": 3, "mean": 0.2,
                                                                 "std": 0.05,
                                                                 "at_least": True}}]}
    p = curve_point({**COMPARED, "runs": COMPARED["runs"][:5], "seeds": seeds}, 2000, 3.09)
    assert p["saving_frontier"]["run"] == "cycle-b2000-y"  # 0.15, a single run: no bound
    x = curve_point({**COMPARED, "runs": [r for r in COMPARED["runs"] if r["name"] !=
                                          "cycle-b2000-y"], "seeds": seeds}, 2000, 3.09)
    assert x["saving_frontier"]["run"] == "cycle-b2000-x"
    assert "at_least" not in x["saving_frontier"]  # its own seed's value is a number
    assert "| +10.0 % (`cycle-b2000-x`; ≥ +20.0 % ± 5.0 over the 3 of 3 seeds with a value, " \
           "does not count)" in markdown_curves({"l": [x]})


def test_a_saving_that_counts_over_seeds_is_preferred_to_a_better_single_seed():
    """cycle-b2000-x saves more at its own seed, but only cycle-b2000-z's saving holds at
    every seed: the point is z's, with its spread; without z's seeds it would be x's."""
    z = _row("cycle-b2000-z", 2, 100.0, 0.11, 0.08)
    seeds = {**COMPARED["seeds"], "runs": COMPARED["seeds"]["runs"] + [
        {"name": "cycle-b2000-z", "counts": True,
         "spread_flops": {"n": 3, "mean": 0.10, "std": 0.02},
         "spread_frontier": {"n": 3, "mean": 0.09, "std": 0.03}}]}
    p = curve_point({**COMPARED, "runs": COMPARED["runs"] + [z], "seeds": seeds}, 2000, 3.09)
    assert p["saving_flops"]["run"] == "cycle-b2000-z" and p["saving_flops"]["counts"]
    assert p["saving_frontier"]["run"] == "cycle-b2000-z"
    assert _value(p["saving_flops"]) == (0.10, 0.02)
    alone = curve_point({**COMPARED, "runs": COMPARED["runs"] + [z]}, 2000, 3.09)
    assert alone["saving_flops"]["run"] == "cycle-b2000-x"


def test_each_measure_says_whether_it_counts():
    """(a) holds over three seeds while (b) is a mean of lower bounds: the (a) cell counts,
    the (b) cell does not, though the cycle as a whole does not count."""
    v = {**_row("cycle-b2000-v", 2, 100.0, 0.5, None), "saving_frontier_at_least": 0.5}
    seeds = {**COMPARED["seeds"], "runs": [
        {"name": "cycle-b2000-v", "counts": False,
         "spread_flops": {"n": 3, "mean": 0.52, "std": 0.004},
         "spread_frontier": {"n": 3, "mean": 0.5, "std": 0.0, "at_least": True}}]}
    p = curve_point({**COMPARED, "runs": COMPARED["runs"] + [v], "seeds": seeds}, 2000, 3.09)
    assert p["saving_flops"]["run"] == p["saving_frontier"]["run"] == "cycle-b2000-v"
    assert p["saving_flops"]["counts"] and not p["saving_frontier"]["counts"]
    table = markdown_curves({"l": [p]})
    assert "+52.0 % ± 0.4 over the 3 of 3 seeds with a value, counts)" in table
    assert "≥ +50.0 % ± 0.0 over the 3 of 3 seeds with a value, does not count)" in table
