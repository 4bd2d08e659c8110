"""The benchmark's arithmetic: reaching a target, savings, transition jumps."""

from __future__ import annotations

import pytest

from mlsys.bench.compare import Curve, first_reach, summarize, transition_jumps, value_at


def test_first_reach_interpolates_between_evaluations():
    assert first_reach([0, 10, 20], [5.0, 4.0, 3.0], 3.5) == pytest.approx(15.0)
    assert first_reach([0, 10, 20], [5.0, 4.0, 3.0], 5.0) == 0
    assert first_reach([0, 10, 20], [5.0, 4.0, 3.0], 2.9) is None


def test_smoothing_is_a_trailing_mean():
    c = Curve([1, 2, 3], [1, 2, 3], [1, 2, 3], [6.0, 3.0, 0.0])
    assert c.smoothed(2) == [6.0, 4.5, 1.5]


def _records():
    def ev(step, phase, level, flops, val):
        return {"event": "eval", "step": step, "phase": phase, "level": level, "flops": flops,
                "wall": flops / 10, "val_loss": val}

    return [
        {"event": "step", "step": 1, "phase": 0, "level": 1, "flops": 1, "seconds": 0.5},
        ev(100, 0, 2, 100.0, 4.0),
        {"event": "transition", "step": 100, "phase": 1, "level": 1, "flops": 100.0,
         "from_level": 2, "to_level": 1, "transition_seconds": 2.0},
        ev(100, 1, 1, 100.0, 4.5),
        ev(200, 1, 1, 200.0, 4.1),
        ev(250, 1, 1, 250.0, 3.9),
        {"event": "end", "step": 250, "phase": 1, "level": 1, "flops": 250.0, "wall": 25.0},
    ]


def test_transition_jump_before_after_and_later():
    (jump,) = transition_jumps(_records(), after_steps=100)
    assert jump["before"] == 4.0 and jump["after"] == 4.5 and jump["after_100"] == 4.1
    assert jump["jump"] == pytest.approx(0.5) and jump["jump_100"] == pytest.approx(0.1)


def test_summary_saving_against_the_baseline():
    row = summarize("v", 2, _records(), target=4.0, baseline_to_target=(400.0, 40.0), window=1)
    # the small level's 4.0 does not count; level 1 reaches 4.0 between steps 200 and 250
    assert row["flops_to_target"] == pytest.approx(225.0)
    assert row["saving_flops"] == pytest.approx(1 - 225.0 / 400.0)
    assert row["saving_wall"] == pytest.approx(1 - 22.5 / 40.0)
    assert row["transition_seconds"] == [2.0]
    none = summarize("v", 2, _records(), target=3.0, baseline_to_target=(400.0, 40.0), window=1)
    assert none["flops_to_target"] is None and none["saving_flops"] is None


def test_value_at_interpolates_and_is_none_outside():
    assert value_at([0, 10, 20], [5.0, 4.0, 3.0], 15) == pytest.approx(3.5)
    assert value_at([0, 10, 20], [5.0, 4.0, 3.0], 0) == 5.0
    assert value_at([0, 10, 20], [5.0, 4.0, 3.0], 25) is None


def test_gap_at_equal_flops_against_the_baseline_curve():
    row = summarize("v", 2, _records(), target=4.0, baseline_to_target=(400.0, 40.0), window=1,
                    baseline=([0.0, 200.0, 300.0], [6.0, 4.0, 3.0]))
    # the run ends at 250 FLOPs with 3.9; the baseline is at 3.5 there
    assert row["gap_at_equal_flops"] == pytest.approx(0.4)
    assert summarize("v", 2, _records(), 4.0, None, 1)["gap_at_equal_flops"] is None


def test_frontier_from_smoothed_and_from_last_evaluations(tmp_path):
    """Measure (b) twice: on the frontier of smoothed final losses and on the frontier of
    last evaluations (a steep decay at a run's end is penalised by the trailing mean only)."""
    import json

    from mlsys.bench.report import compare

    def run(name: str, levels: list[int], evals: list[tuple[float, float]]) -> dict:
        root = tmp_path / name
        root.mkdir()
        lines = [{"event": "eval", "step": i, "phase": 0, "level": 1, "flops": f, "wall": 0.0,
                  "val_loss": v} for i, (f, v) in enumerate(evals, 1)]
        lines.append({"event": "end", "step": len(evals), "flops": evals[-1][0], "wall": 1.0})
        (root / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        return {"run_dir": str(root), "phases": [{"level": lv, "lr": 1e-3} for lv in levels]}

    configs = {"short": run("short", [1], [(50.0, 6.0), (100.0, 4.0)]),
               "long": run("long", [1], [(100.0, 5.0), (200.0, 3.0)]),
               "vcycle": run("vcycle", [1, 2, 1], [(75.0, 5.0), (150.0, 3.5)])}
    result = compare(configs, window=2)
    assert result["target"] == "long" and result["target_val_loss"] == pytest.approx(4.0)
    assert result["frontier"] == [(100.0, 5.0), (200.0, 4.0)]
    assert result["frontier_last_eval"] == [(100.0, 4.0), (200.0, 3.0)]
    row = {r["name"]: r for r in result["runs"]}["vcycle"]
    # smoothed 4.25: a quarter of the way from 5.0 to 4.0 in log-FLOPs between 100 and 200
    assert row["saving_frontier"] == pytest.approx(1 - 150.0 / (100.0 * 2 ** 0.75))
    # last eval 3.5: half way from 4.0 to 3.0
    assert row["saving_frontier_last_eval"] == pytest.approx(1 - 150.0 / (100.0 * 2 ** 0.5))
    assert row["saving_frontier_at_least"] == pytest.approx(1 - 150.0 / 200.0)


def test_a_longer_baseline_extends_the_frontier_but_is_not_the_target(tmp_path):
    """With ``budget``, the target is the best baseline of that many steps; a longer one
    (better, more FLOPs) only extends the frontier, so (b) is a number for a run that ends
    below the budget's best."""
    import json

    from mlsys.bench.report import compare

    def run(name: str, steps: list[int], evals: list[tuple[float, float]]) -> dict:
        root = tmp_path / name
        root.mkdir()
        lines = [{"event": "eval", "step": i, "phase": 0, "level": 1, "flops": f, "wall": 0.0,
                  "val_loss": v} for i, (f, v) in enumerate(evals, 1)]
        lines.append({"event": "end", "step": len(evals), "flops": evals[-1][0], "wall": 1.0})
        (root / "metrics.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
        return {"run_dir": str(root), "phases": [{"level": 1 + (i % 2), "steps": n, "lr": 1e-3}
                                                 for i, n in enumerate(steps)]}

    configs = {"budget": run("budget", [20], [(100.0, 5.0), (200.0, 4.0)]),
               "longer": run("longer", [40], [(200.0, 4.5), (400.0, 2.0)]),
               "vcycle": run("vcycle", [5, 5, 10], [(100.0, 4.0), (150.0, 3.0)])}
    assert compare(configs, window=1)["target"] == "longer"  # no budget: the most FLOPs
    result = compare(configs, window=1, budget=20)
    assert result["target"] == "budget" and result["target_val_loss"] == 4.0
    assert result["frontier"] == [(200.0, 4.0), (400.0, 2.0)]
    row = {r["name"]: r for r in result["runs"]}["vcycle"]
    assert row["flops_to_target"] == 100.0 and row["saving_flops"] == pytest.approx(0.5)
    # 3.0: half way from 4.0 to 2.0 in log-FLOPs between 200 and 400
    assert row["saving_frontier"] == pytest.approx(1 - 150.0 / (200.0 * 2 ** 0.5))
    with pytest.raises(RuntimeError, match="budget: no finished baseline of 30 steps"):
        compare(configs, window=1, budget=30)
