"""The seed spread of the headline figures: the target baseline and each V-cycle repeated at
other seeds (a profile's ``seeds``: runs named ``<run>-seed<k>``), compared seed by seed.

Pure functions over the rows ``mlsys.bench.compare.summarize`` makes and the runs' records.
Per seed ``k``, measure (a) is paired: the V-cycle at seed ``k`` against the target baseline
at seed ``k`` (its own target loss, its own FLOPs to it), so the seed's initialisation and
data order are the same on both sides. Every variant validates on the family's own seed's
samples (``data.valid_seed``), so measure (b) reads the seed's loss on the one baseline
frontier (tuned at the family's own seed; the frontier's own seed noise is not measured, the
target baseline's spread below shows its size); a seed whose V-cycle ends below the whole
frontier gets (b)'s lower bound, the saving against the frontier's last point (as
``mlsys.bench.report`` gives a single run), flagged in ``frontier_at_least``: leaving it out
would drop the best seeds. A saving **counts** where its mean exceeds its spread (the sample
standard deviation over the seeds, n − 1), and never from fewer than ``MIN_SEEDS`` seeds; a (b)
with a bound among its values is not known to count (a mean of bounds is a bound, their
spread is not), so it does not, until a longer frontier makes every value a number.
"""

from __future__ import annotations

import statistics
from typing import Any

from mlsys.bench.compare import eval_curve, first_reach, frontier_flops
from mlsys.bench.profile import seed_of, without_seed

MIN_SEEDS = 3


def spread(values: list[float | None]) -> dict[str, Any]:
    """Mean, sample standard deviation (None below two values), min and max of the values
    that exist; ``n`` counts them."""
    xs = [v for v in values if v is not None]
    return {"n": len(xs), "mean": statistics.fmean(xs) if xs else None,
            "std": statistics.stdev(xs) if len(xs) >= 2 else None,
            "min": min(xs, default=None), "max": max(xs, default=None)}


def counts(s: dict[str, Any]) -> bool:
    """True if a saving's mean exceeds its spread, over at least ``MIN_SEEDS`` seeds."""
    return s["n"] >= MIN_SEEDS and s["std"] is not None and s["mean"] > s["std"]


def seed_table(rows: dict[str, dict[str, Any]], records: dict[str, list[dict[str, Any]]],
               target: str, envelope: list[tuple[float, float]], window: int
               ) -> dict[str, Any] | None:
    """The target baseline and every V-cycle that has seed variants, seed by seed (the
    family's own seed first, then the variants' in ascending order); None where the target
    has no seed variant. ``rows``: name -> summary row of every finished run."""
    seeds = sorted({seed_of(n) for n in rows if without_seed(n) == target} - {None})
    if not seeds:
        return None
    keys: list[int | None] = [None, *seeds]
    name = {k: target if k is None else f"{target}-seed{k}" for k in keys}
    losses = {k: rows[name[k]]["final_val_loss_smoothed"] for k in keys if name[k] in rows}
    out: dict[str, Any] = {"seeds": keys, "target": {
        "final_val_loss_smoothed": [losses.get(k) for k in keys],
        "spread": spread(list(losses.values()))}, "runs": []}
    cycles = [n for n, r in rows.items() if r["levels"] > 1 and seed_of(n) is None
              and any(f"{n}-seed{k}" in rows for k in seeds)]
    for cycle in cycles:
        a, b, bound, loss = [], [], [], []
        for k in keys:
            run = cycle if k is None else f"{cycle}-seed{k}"
            if run not in rows or losses.get(k) is None \
                    or rows[run]["final_val_loss_smoothed"] is None:  # missing, or no eval
                a.append(None), b.append(None), bound.append(False), loss.append(None)
                continue
            a.append(_paired_saving(records[run], records[name[k]], losses[k], window))
            value, at_least = frontier_saving(rows[run], envelope)
            b.append(value), bound.append(at_least)
            loss.append(rows[run]["final_val_loss_smoothed"])
        sa, sb = spread(a), {**spread(b), "at_least": any(bound)}
        out["runs"].append({"name": cycle, "final_val_loss_smoothed": loss,
                            "saving_flops": a, "saving_frontier": b,
                            "frontier_at_least": bound,
                            "spread_flops": sa, "spread_frontier": sb,
                            "counts": counts(sa) and counts(sb) and not sb["at_least"]})
    return out


def frontier_saving(row: dict[str, Any], envelope: list[tuple[float, float]]
                    ) -> tuple[float | None, bool]:
    """(b) of one run: (1 − its FLOPs / the frontier's FLOPs to its smoothed final loss,
    False); below the whole frontier (its lower bound against the frontier's last point, True),
    or (None, False) where the run spent more FLOPs than the frontier spans."""
    need = frontier_flops(envelope, row["final_val_loss_smoothed"])
    if need is not None:
        return 1.0 - row["flops_total"] / need, False
    at_least = 1.0 - row["flops_total"] / envelope[-1][0]
    return (at_least, True) if at_least >= 0 else (None, False)


def _paired_saving(cycle: list[dict[str, Any]], baseline: list[dict[str, Any]], target: float,
                   window: int) -> float | None:
    """1 − (FLOPs the V-cycle's level-1 model needs to reach ``target``) / (the baseline's);
    None where the V-cycle does not reach it."""
    def flops_to(records: list[dict[str, Any]]) -> float | None:
        curve = eval_curve(records, level=1)
        return first_reach(curve.flops, curve.smoothed(window), target)

    base, run = flops_to(baseline), flops_to(cycle)
    return None if base is None or run is None else 1.0 - run / base
