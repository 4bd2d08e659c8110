"""Learning-rate schedules (mlsys.train.schedule): WSD, and one schedule over a whole V-cycle."""

from __future__ import annotations

import pytest

from mlsys.config import parse_run_config
from mlsys.train.schedule import decay_steps, lr_factor, phase_schedule
from tests.test_config import GOOD


def test_wsd_is_warmup_stable_then_linear_decay_over_the_last_fraction():
    f = [lr_factor(s, 10, 2, "wsd", 0.1, decay_fraction=0.3) for s in range(10)]
    assert decay_steps(10, 0.3) == 3
    assert f[:7] == [0.5, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0]
    assert f[7:] == pytest.approx([0.7, 0.4, 0.1])
    # a WSD run is a constant run up to its decay: what a fork before the decay relies on
    assert [lr_factor(s, 10, 2, "constant", 0.1) for s in range(7)] == f[:7]


def _cfg(span: str, decay: str):
    cfg = dict(GOOD, schedule={"span": span}, train={"decay": decay, "min_lr_ratio": 0.0},
               phases=[{"level": 1, "steps": 4, "lr": 1e-3, "warmup": 2},
                       {"level": 2, "steps": 4, "lr": 2e-3, "warmup": 0},
                       {"level": 1, "steps": 2, "lr": 1e-3, "warmup": 0}])
    return parse_run_config(cfg)


def test_phase_span_restarts_every_phase():
    cfg = _cfg("phase", "linear")
    assert [phase_schedule(cfg, 1)(s) for s in range(4)] == pytest.approx([1, 2 / 3, 1 / 3, 0])


def test_run_span_decays_once_over_the_run_without_re_warming():
    cfg = _cfg("run", "linear")
    steps = [phase_schedule(cfg, p)(s) for p, n in ((0, 4), (1, 4), (2, 2)) for s in range(n)]
    assert steps[:2] == [0.5, 1.0]  # phase 0's warmup is the run's
    assert steps[2:] == pytest.approx([1 - k / 7 for k in range(8)])  # 10 steps, warmup 2
    wsd = _cfg("run", "wsd")  # decay_fraction 0.2: only the last 2 of 10 steps decay
    flat = [phase_schedule(wsd, p)(s) for p, n in ((0, 4), (1, 4), (2, 2)) for s in range(n)]
    assert flat == pytest.approx([0.5, 1, 1, 1, 1, 1, 1, 1, 0.5, 0.0])
