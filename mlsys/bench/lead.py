"""What each phase of a V-cycle is worth: its lead on the constant-lr trunks.

Until its final decay, a V-cycle with one schedule over the run (``schedule.span: run``, WSD)
trains at a constant peak lr, as the frontier's constant trunks do. So at each of its
evaluations before the decay, the FLOPs a trunk needs to reach the same smoothed validation
loss (the fewest over the trunks, first reach) say what the cycle has gained so far:
``lead = 1 − FLOPs / trunk FLOPs``, the saving were the cycle to stop there (positive: ahead
of every trunk). The small model's own loss counts in the small phase (it is what the
up-transition carries over), except on pooled positions (a length level: its loss is another
task's).

Per phase: the lead at its last evaluation; how far ahead the cycle was in FLOPs
(``trunk FLOPs − FLOPs``) at its last evaluation and at its most, and where that was (steps
into the phase): a cycle that went on as fast as a trunk would keep that many FLOPs to the
end, so the small phase's best length is where it is most ahead. And the **pace**: trunk
FLOPs gained per FLOP spent, from the first evaluation whose trailing mean is past the
transition's jump to the last (1: as fast as a trunk from the same loss; a recovery from the
jump still under way raises it). Below 1 in the last phase, the de-coalesced model gives back
what the small phase gained, the more the longer that phase.

Pure functions over metrics records (``mlsys.bench.compare``); smoothing is a trailing mean
over ``window`` evaluations within each phase, so a transition's jump is not averaged into
its neighbours.
"""

from __future__ import annotations

from typing import Any

from mlsys.bench.compare import Record, eval_curve, first_reach
from mlsys.train.schedule import decay_steps

Trunk = tuple[list[float], list[float]]  # a constant trunk's (FLOPs, smoothed val loss)


def constant_until(cfg: dict[str, Any], records: list[Record]) -> int | None:
    """The global step where the run's lr starts to decay: its last step for
    ``train.decay: constant``, the WSD decay's start for ``schedule.span: run``; None for any
    other schedule (each phase decays on its own: no stretch is at one constant lr)."""
    train = cfg.get("train", {})
    decay = train.get("decay", "linear")
    end = next((r for r in reversed(records) if r.get("event") == "end"), None)
    total = end["step"] if end else max((r["step"] for r in records if r.get("event") == "step"),
                                        default=0)
    if decay == "constant":
        return total
    if decay != "wsd" or cfg.get("schedule", {}).get("span", "phase") != "run":
        return None
    return total - decay_steps(total, train.get("decay_fraction", 0.2))


def trunk_flops(trunks: list[Trunk], loss: float) -> float | None:
    """The fewest FLOPs any trunk needs to reach ``loss`` (None: none reaches it)."""
    reach = [f for f in (first_reach(flops, val, loss) for flops, val in trunks)
             if f is not None]
    return min(reach, default=None)


def lead_rows(records: list[Record], trunks: list[Trunk], window: int,
              until: int) -> list[dict[str, Any]]:
    """One row per evaluation up to global step ``until``: its step, phase, level,
    ``phase_step``, ``index`` (its place among its phase's evaluations), FLOPs, smoothed loss
    (within its phase), the trunk FLOPs to that loss and the lead."""
    evals = [r for r in records if r.get("event") == "eval" and r["step"] <= until]
    rows: list[dict[str, Any]] = []
    for phase in sorted({e["phase"] for e in evals}):
        group = [e for e in evals if e["phase"] == phase]
        for index, (e, loss) in enumerate(zip(group, eval_curve(group).smoothed(window),
                                              strict=True)):
            need = trunk_flops(trunks, loss)
            flops = float(e["flops"])
            rows.append({"step": e["step"], "phase": phase, "level": e["level"],
                         "phase_step": e.get("phase_step", e["step"] - group[0]["step"]),
                         "index": index, "flops": flops, "val_smoothed": loss,
                         "trunk_flops": need,
                         "lead": None if not need else 1.0 - flops / need})
    return rows


def phase_leads(rows: list[dict[str, Any]], window: int) -> list[dict[str, Any]]:
    """Per phase, from ``lead_rows``: at its last evaluation the lead and ``ahead_last``
    (trunk FLOPs minus FLOPs: what the cycle has gained, in FLOPs); the most it was ahead
    (``ahead_peak``) and where (``peak_step``, steps into the phase); and ``pace`` from the
    first evaluation whose trailing mean no longer holds the phase's first one (None where the
    phase has too few evaluations with a trunk to compare)."""
    out = []
    for phase in sorted({r["phase"] for r in rows}):
        part = [r for r in rows if r["phase"] == phase and r["lead"] is not None]
        if not part:
            continue
        peak = max(part, key=lambda r: r["trunk_flops"] - r["flops"])
        settled = [r for r in part if r["index"] >= window]
        pace = None
        if len(settled) >= 2 and settled[-1]["flops"] > settled[0]["flops"]:
            pace = (settled[-1]["trunk_flops"] - settled[0]["trunk_flops"]) / \
                (settled[-1]["flops"] - settled[0]["flops"])
        last = part[-1]
        out.append({"phase": phase, "level": last["level"], "last_step": last["step"],
                    "lead_last": last["lead"], "ahead_last": last["trunk_flops"] - last["flops"],
                    "ahead_peak": peak["trunk_flops"] - peak["flops"],
                    "peak_step": peak["phase_step"], "pace": pace})
    return out


def cycle_leads(cfg: dict[str, Any], records: list[Record], trunks: list[Trunk],
                window: int) -> list[dict[str, Any]] | None:
    """``phase_leads`` of one run before its decay; None without a constant stretch or a
    trunk to compare with. A level run on pooled positions (``vcycle.length`` > 1, every
    level above 1) is left out: its loss is the next-k-tokens loss of the pooled model, not
    one a baseline has."""
    until = constant_until(cfg, records)
    if until is None or not trunks:
        return None
    if (cfg.get("vcycle") or {}).get("length", 1) > 1:
        records = [r for r in records if r.get("event") != "eval" or r["level"] == 1]
    return phase_leads(lead_rows(records, trunks, window, until), window)


def decay_kept(phase_leads: list[dict[str, Any]] | None, frontier_flops: float | None,
               flops_total: float) -> dict[str, Any] | None:
    """What the final decay made of a cycle's lead. ``ahead_start``: how far ahead of the
    constant trunks the cycle was when its decay began (its last phase's ``ahead_last``);
    ``ahead_end``: how far ahead of the decayed frontier it ends (the frontier's FLOPs to its
    final loss minus its own: measure (b) in FLOPs); ``kept``: end / start, None unless it was
    ahead at the start. A trunk's decay turns its constant-lr loss into the frontier's, so a
    cycle whose decay gains what a trunk's gains from the same loss keeps about all of its
    lead (kept ≈ 1). None without phase leads or a frontier value."""
    if not phase_leads or frontier_flops is None:
        return None
    start = phase_leads[-1]["ahead_last"]
    end = frontier_flops - flops_total
    return {"ahead_start": start, "ahead_end": end,
            "kept": end / start if start > 0 else None}
