"""What each phase of a V-cycle is worth (``mlsys.bench.lead``): on records built so that the
answer is known, the lead on a constant trunk, how far ahead the cycle is and where it peaks,
the pace of each phase, the stretch before the decay, and the report's wiring."""

from __future__ import annotations

import pytest

from mlsys.bench.lead import constant_until, cycle_leads, decay_kept, trunk_flops
from mlsys.bench.report import compare

# a constant trunk that loses 0.01 per FLOP: it needs 100 × (10 − loss) FLOPs for a loss
TRUNK = [{"event": "eval", "step": s, "phase": 0, "level": 1, "phase_step": s,
          "flops": float(s), "val_loss": 10.0 - s / 100} for s in range(0, 1001, 10)]
TRUNK_CFG = {"train": {"decay": "constant"}, "phases": [{"level": 1, "steps": 1000, "lr": 1e-3}]}


def _cycle(after_decay: float = 0.0) -> list[dict]:
    """Phase 0 as the trunk (3 evaluations); phase 1 (level 2) 10 evaluations at twice the
    trunk's pace, 4 at 1.2 times it, then 5 with no progress; phase 2 (level 1) at 0.8 of it;
    every evaluation 10 steps apart. Then ``after_decay``: how much lower the evaluations
    after step 280 are (where a 350-step WSD run over 20 % decays)."""
    out, step, flops, loss = [], 0, 0.0, 10.0

    def ev(phase: int, level: int, start: int) -> None:
        out.append({"event": "eval", "step": step, "phase": phase, "level": level,
                    "phase_step": step - start, "flops": flops,
                    "val_loss": loss - (after_decay if step > 280 else 0.0)})

    for _ in range(3):
        ev(0, 1, 0)
        step, flops, loss = step + 10, flops + 10, loss - 0.1
    step, flops, loss = step - 10, flops - 10, loss + 0.1  # the transition at step 20
    out.append({"event": "transition", "step": step, "phase": 1, "level": 2, "flops": flops,
                "from_level": 1, "to_level": 2, "transition_seconds": 1.0})
    ev(1, 2, 20)
    for i in range(19):
        step, flops = step + 10, flops + 5
        loss -= 0.1 if i < 10 else 0.06 if i < 14 else 0.0
        ev(1, 2, 20)
    start = step  # 210
    out.append({"event": "transition", "step": step, "phase": 2, "level": 1, "flops": flops,
                "from_level": 2, "to_level": 1, "transition_seconds": 1.0})
    ev(2, 1, start)
    while step < 350:
        step, flops, loss = step + 10, flops + 10, loss - 0.08
        ev(2, 1, start)
    out.append({"event": "end", "step": 350, "phase": 2, "level": 1, "flops": flops})
    return out


CYCLE_CFG = {"train": {"decay": "wsd", "decay_fraction": 0.2}, "schedule": {"span": "run"},
             "phases": [{"level": 1, "steps": 20, "lr": 1e-3}, {"level": 2, "steps": 150,
                                                                  "lr": 2e-3},
                        {"level": 1, "steps": 180, "lr": 1e-3}]}


def _trunks() -> list[tuple[list[float], list[float]]]:
    return [([r["flops"] for r in TRUNK], [r["val_loss"] for r in TRUNK])]


def test_trunk_flops_is_the_cheapest_trunk_to_reach_a_loss():
    slower = ([r["flops"] * 2 for r in TRUNK], [r["val_loss"] for r in TRUNK])
    assert trunk_flops([slower, *_trunks()], 9.0) == pytest.approx(100.0)
    assert trunk_flops(_trunks(), 9.955) == pytest.approx(4.5)  # between two evaluations
    assert trunk_flops(_trunks(), -1.0) is None  # lower than any trunk goes


def test_the_stretch_at_constant_lr_ends_where_the_decay_starts():
    records = _cycle()
    assert constant_until(CYCLE_CFG, records) == 350 - 70  # 20 % of 350 steps decay
    assert constant_until(TRUNK_CFG, [{"event": "end", "step": 1000}]) == 1000
    per_phase = {**CYCLE_CFG, "schedule": {"span": "phase"}}  # each phase decays alone
    assert constant_until(per_phase, records) is None
    assert constant_until({**CYCLE_CFG, "train": {"decay": "cosine"}}, records) is None


def test_each_phase_its_lead_peak_and_pace():
    leads = cycle_leads(CYCLE_CFG, _cycle(after_decay=5.0), _trunks(), window=1)
    by_phase = {p["phase"]: p for p in leads}
    small, last = by_phase[1], by_phase[2]
    # the small phase: 5 FLOPs ahead per evaluation for 10, 1 for 4 (the lead as a share
    # peaks before that: 50 / 120 at step 120 against 54 / 144), then 5 behind for 5
    assert small["level"] == 2
    assert small["ahead_peak"] == pytest.approx(54.0) and small["peak_step"] == 140
    assert small["ahead_last"] == pytest.approx(29.0) and small["last_step"] == 210
    assert small["lead_last"] == pytest.approx(1 - 115.0 / 144.0)
    # the last phase: 8 trunk FLOPs per 10 spent, counted only to step 280 (the decay's
    # evaluations, 5 lower, would make it look far ahead)
    assert last["pace"] == pytest.approx(0.8)
    assert last["last_step"] == 280 and last["ahead_last"] == pytest.approx(29.0 - 2 * 7)
    assert last["ahead_peak"] == pytest.approx(29.0) and last["peak_step"] == 0
    assert by_phase[0]["ahead_peak"] == pytest.approx(0.0)


def test_smoothing_stays_inside_a_phase():
    """A jump at the up-transition (the de-coalesced model 1.0 worse at its first evaluation)
    is not averaged into the small phase, and the pace starts past it."""
    records = _cycle()
    first = next(r for r in records if r["event"] == "eval" and r["phase"] == 2)
    first["val_loss"] += 1.0
    leads = {p["phase"]: p for p in cycle_leads(CYCLE_CFG, records, _trunks(), window=2)}
    plain = {p["phase"]: p for p in cycle_leads(CYCLE_CFG, _cycle(), _trunks(), window=2)}
    assert leads[1] == plain[1]
    assert leads[2]["pace"] == pytest.approx(0.8) and plain[2]["pace"] == pytest.approx(0.8)
    assert leads[2]["ahead_peak"] < plain[2]["ahead_peak"]


def test_a_level_on_pooled_positions_is_not_compared():
    cfg = {**CYCLE_CFG, "vcycle": {"length": 2}}
    leads = cycle_leads(cfg, _cycle(), _trunks(), window=1)
    assert [p["phase"] for p in leads] == [0, 2]


def test_the_report_gives_each_cycle_its_leads_against_the_constant_baselines_only():
    wsd = {"train": {"decay": "wsd", "decay_fraction": 0.2},
           "phases": [{"level": 1, "steps": 350, "lr": 1e-3}]}
    wsd_records = [{**r, "val_loss": r["val_loss"] - 3.0} for r in TRUNK if r["step"] <= 350]
    wsd_records.append({"event": "end", "step": 350, "phase": 0, "level": 1, "flops": 350.0})
    trunk_records = [*TRUNK, {"event": "end", "step": 1000, "phase": 0, "level": 1,
                              "flops": 1000.0}]
    configs = {"stable": TRUNK_CFG, "wsd": wsd, "cycle": CYCLE_CFG}
    records = {"stable": trunk_records, "wsd": wsd_records, "cycle": _cycle()}
    rows = {r["name"]: r for r in compare(configs, 1, records=records)["runs"]}
    assert rows["stable"]["phase_leads"] is None and rows["wsd"]["phase_leads"] is None
    # the WSD baseline (3 lower everywhere) is no trunk: the cycle is compared with stable
    assert rows["cycle"]["phase_leads"] == cycle_leads(CYCLE_CFG, _cycle(), _trunks(), 1)
    no_trunk = compare({"wsd": wsd, "cycle": CYCLE_CFG}, 1,
                       records={"wsd": wsd_records, "cycle": _cycle()})
    assert {r["name"]: r["phase_leads"] for r in no_trunk["runs"]}["cycle"] is None


def test_decay_kept_compares_the_lead_at_the_decay_with_the_frontier_at_the_end():
    """The cycle is 15 trunk FLOPs ahead when its decay begins (step 280, ``_cycle``); the
    frontier needs 350 FLOPs for a loss the cycle reaches with 320: 30 ahead at the end, twice
    its lead; with a frontier at 327.5 it kept half."""
    leads = cycle_leads(CYCLE_CFG, _cycle(), _trunks(), window=1)
    assert leads[-1]["ahead_last"] == pytest.approx(15.0)
    kept = decay_kept(leads, 350.0, 320.0)
    assert kept == pytest.approx({"ahead_start": 15.0, "ahead_end": 30.0, "kept": 2.0})
    assert decay_kept(leads, 327.5, 320.0)["kept"] == pytest.approx(0.5)
    assert decay_kept(leads, 300.0, 320.0)["kept"] == pytest.approx(-20.0 / 15.0)  # behind
    behind = [{**leads[-1], "ahead_last": -4.0}]
    assert decay_kept(behind, 350.0, 320.0)["kept"] is None  # no lead to keep
    assert decay_kept(leads, None, 320.0) is None and decay_kept(None, 350.0, 320.0) is None


def test_the_report_gives_each_cycle_what_its_decay_kept():
    wsd = {"train": {"decay": "wsd", "decay_fraction": 0.2},
           "phases": [{"level": 1, "steps": 350, "lr": 1e-3}]}
    # a WSD baseline 3 lower than the trunk: its frontier point (350 FLOPs, 3.5 + ...)
    wsd_records = [{**r, "val_loss": r["val_loss"] - 3.0} for r in TRUNK if r["step"] <= 350]
    wsd_records.append({"event": "end", "step": 350, "phase": 0, "level": 1, "flops": 350.0})
    trunk_records = [*TRUNK, {"event": "end", "step": 1000, "phase": 0, "level": 1,
                              "flops": 1000.0}]
    configs = {"stable": TRUNK_CFG, "wsd": wsd, "cycle": CYCLE_CFG}
    records = {"stable": trunk_records, "wsd": wsd_records, "cycle": _cycle(after_decay=5.0)}
    rows = {r["name"]: r for r in compare(configs, 1, records=records)["runs"]}
    cycle = rows["cycle"]
    assert rows["stable"]["decay_kept"] is None and rows["wsd"]["decay_kept"] is None
    assert cycle["decay_kept"] == decay_kept(cycle["phase_leads"], cycle["frontier_flops"],
                                             cycle["flops_total"])
    assert cycle["decay_kept"]["ahead_end"] == pytest.approx(
        cycle["frontier_flops"] - cycle["flops_total"])
