"""Comparing runs at equal compute: the figures ``launch/benchmark.py`` reports.

Pure functions over the records of ``metrics.jsonl`` (events ``step``, ``eval``,
``transition``, ``end``; every record carries ``step``, ``phase``, ``level``, ``flops``), or of
a committed result (``mlsys.bench.results``: the same records, step records thinned, plus a
``steps`` record with the median step time of all of them).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

Record = dict[str, Any]


@dataclass(frozen=True)
class Curve:
    """Validation loss (smoothed) against cumulative FLOPs and wall seconds."""

    steps: list[int]
    flops: list[float]
    wall: list[float]
    val: list[float]

    def smoothed(self, window: int) -> list[float]:
        """Trailing mean over ``window`` evaluations (fewer at the start)."""
        out = []
        for i in range(len(self.val)):
            part = self.val[max(0, i - window + 1): i + 1]
            out.append(sum(part) / len(part))
        return out


def eval_curve(records: list[Record], level: int | None = None) -> Curve:
    """Evaluations in order; only those of models at ``level`` when given."""
    evals = [r for r in records
             if r.get("event") == "eval" and (level is None or r["level"] == level)]
    return Curve([r["step"] for r in evals], [float(r["flops"]) for r in evals],
                 [float(r.get("wall", 0.0)) for r in evals], [float(r["val_loss"]) for r in evals])


def first_reach(xs: list[float], ys: list[float], target: float) -> float | None:
    """The first ``x`` at which ``y`` falls to ``target``, interpolating linearly between
    evaluations; None if it never does."""
    for i, y in enumerate(ys):
        if y <= target:
            if i == 0 or ys[i - 1] == y:
                return xs[i]
            frac = (ys[i - 1] - target) / (ys[i - 1] - y)
            return xs[i - 1] + frac * (xs[i] - xs[i - 1])
    return None


def value_at(xs: list[float], ys: list[float], x: float) -> float | None:
    """``y`` at ``x`` by linear interpolation between points (xs ascending); None outside."""
    for i in range(1, len(xs)):
        if xs[i - 1] <= x <= xs[i]:
            if xs[i] == xs[i - 1]:
                return ys[i]
            frac = (x - xs[i - 1]) / (xs[i] - xs[i - 1])
            return ys[i - 1] + frac * (ys[i] - ys[i - 1])
    return ys[0] if xs and x == xs[0] else None


def transitions(records: list[Record]) -> list[Record]:
    return [r for r in records if r.get("event") == "transition"]


def transition_jumps(records: list[Record], after_steps: int = 150) -> list[dict[str, Any]]:
    """For each up-transition (to a larger level): validation loss just before it, right
    after it, and ``after_steps`` steps later (the first evaluation at or past that step)."""
    evals = [r for r in records if r.get("event") == "eval"]
    out = []
    for t in transitions(records):
        if t["to_level"] >= t["from_level"]:
            continue
        before = [e for e in evals if e["step"] <= t["step"] and e["phase"] < t["phase"]]
        after = [e for e in evals if e["phase"] == t["phase"] and e["step"] >= t["step"]]
        later = [e for e in after if e["step"] >= t["step"] + after_steps]
        row = {"step": t["step"], "from_level": t["from_level"], "to_level": t["to_level"],
               "before": before[-1]["val_loss"] if before else None,
               "after": after[0]["val_loss"] if after else None,
               f"after_{after_steps}": later[0]["val_loss"] if later else None}
        row["jump"] = _diff(row["after"], row["before"])
        row[f"jump_{after_steps}"] = _diff(row[f"after_{after_steps}"], row["before"])
        out.append(row)
    return out


def _diff(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else a - b


def median_step_seconds(records: list[Record]) -> float | None:
    """The upper median of the step records' ``seconds``; a committed result
    (``mlsys.bench.results``) keeps only some step records and carries the median of all of
    them in its ``steps`` record, which is used when present."""
    summary = next((r for r in records if r.get("event") == "steps"), None)
    if summary is not None:
        return summary["median_seconds"]
    seconds = sorted(r["seconds"] for r in records if r.get("event") == "step")
    return seconds[len(seconds) // 2] if seconds else None


def summarize(name: str, levels: int, records: list[Record], target: float | None,
              baseline_to_target: tuple[float, float] | None, window: int,
              baseline: tuple[list[float], list[float]] | None = None) -> dict[str, Any]:
    """One row of ``results.json``: final loss, FLOPs / seconds to ``target`` and the saving
    against the baseline's (FLOPs, seconds) to the same target. Only the full-size model
    (level 1) counts as reaching the target: a smaller level's loss is not the product.
    Given the ``baseline``'s (FLOPs, smoothed val loss), ``gap_at_equal_flops`` is this run's
    smoothed final loss minus the baseline's at the same FLOPs (negative: ahead)."""
    curve = eval_curve(records, level=1)
    smooth = curve.smoothed(window)
    end = next((r for r in reversed(records) if r.get("event") == "end"), {})
    median_step = median_step_seconds(records)
    flops_to = first_reach(curve.flops, smooth, target) if target is not None else None
    wall_to = first_reach(curve.wall, smooth, target) if target is not None else None
    row: dict[str, Any] = {
        "name": name, "levels": levels,
        "final_val_loss": curve.val[-1] if curve.val else None,
        "final_val_loss_smoothed": smooth[-1] if smooth else None,
        "final_val_top1": next((r["val_top1"] for r in reversed(records)
                                if r.get("event") == "eval" and "val_top1" in r), None),
        "flops_total": float(end.get("flops", curve.flops[-1] if curve.flops else 0.0)),
        "wall_total": float(end.get("wall", curve.wall[-1] if curve.wall else 0.0)),
        "flops_to_target": flops_to, "wall_to_target": wall_to,
        "saving_flops": None, "saving_wall": None,
        "transition_seconds": [t["transition_seconds"] for t in transitions(records)],
        "median_step_seconds": median_step,
        "peak_memory_bytes": end.get("peak_memory_bytes"),
        "transition_jump": transition_jumps(records),
        "gap_at_equal_flops": None,
    }
    if baseline is not None and smooth:
        at = value_at(baseline[0], baseline[1], curve.flops[-1])
        row["gap_at_equal_flops"] = None if at is None else smooth[-1] - at
    if baseline_to_target is not None and flops_to is not None:
        row["saving_flops"] = 1.0 - flops_to / baseline_to_target[0]
        if wall_to is not None and baseline_to_target[1]:
            row["saving_wall"] = 1.0 - wall_to / baseline_to_target[1]
    return row


def lower_envelope(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The baseline frontier: of (FLOPs, final loss) points, those no cheaper point beats;
    sorted by FLOPs, loss strictly decreasing."""
    out: list[tuple[float, float]] = []
    for flops, loss in sorted(points):
        if out and flops == out[-1][0]:
            if loss < out[-1][1]:
                out.pop()
            else:
                continue
        if not out or loss < out[-1][1]:
            out.append((flops, loss))
    return out


def frontier_flops(envelope: list[tuple[float, float]], loss: float) -> float | None:
    """Baseline FLOPs needed to reach ``loss`` on the frontier, interpolating linearly in
    log-FLOPs between its points; None if the frontier never gets that low."""
    for i, (flops, value) in enumerate(envelope):
        if value <= loss:
            if i == 0:
                return flops
            f0, v0 = envelope[i - 1]
            frac = (v0 - loss) / (v0 - value)
            return math.exp(math.log(f0) + frac * (math.log(flops) - math.log(f0)))
    return None
