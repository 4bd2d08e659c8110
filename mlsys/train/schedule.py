"""Learning-rate schedules: the multiplier of a phase's peak lr at each of its steps (pure).

Per phase (``schedule.span: phase``, the default): linear warmup over the phase's ``warmup``
steps (first step at lr/warmup), then ``train.decay``: ``linear`` or ``cosine`` to
``min_lr_ratio`` at the phase's last step, ``constant``, or ``wsd`` (warmup-stable-decay:
constant, then linear to ``min_lr_ratio`` over the last ``decay_fraction`` of the steps).

Over the whole run (``schedule.span: run``): one decay shape over the run's global steps
(after phase 0's warmup), so a transition neither re-warms nor decays by itself; each phase
still scales it by its own peak lr and its own ``warmup`` (0: no re-warm).
"""

from __future__ import annotations

import math
from collections.abc import Callable

from mlsys.config import RunConfig


def decay_steps(steps: int, fraction: float) -> int:
    """How many of ``steps`` steps a WSD schedule spends decaying (at least one)."""
    return max(1, math.ceil(fraction * steps - 1e-9))


def lr_factor(step: int, steps: int, warmup: int, decay: str, min_ratio: float,
              decay_fraction: float = 0.2) -> float:
    """Multiplier of the peak lr at 0-based ``step`` of a schedule ``steps`` steps long."""
    if step < warmup:
        return (step + 1) / warmup
    if decay == "constant":
        return 1.0
    if decay == "wsd":
        n = decay_steps(steps, decay_fraction)
        into = step - (steps - n) + 1
        return 1.0 if into <= 0 else 1.0 - (1.0 - min_ratio) * min(1.0, into / n)
    span = max(1, steps - warmup - 1)
    progress = min(1.0, (step - warmup) / span)
    shape = 1.0 - progress if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_ratio + (1.0 - min_ratio) * shape


def phase_start(cfg: RunConfig, phase: int) -> int:
    """Global steps before phase ``phase``."""
    return sum(cfg.phase_steps(i)[0] for i in range(phase))


def phase_schedule(cfg: RunConfig, phase: int) -> Callable[[int], float]:
    """The lr multiplier of phase ``phase`` as a function of its step (0-based)."""
    t = cfg.train
    steps, warmup = cfg.phase_steps(phase)
    if cfg.schedule.span == "phase":
        return lambda s: lr_factor(s, steps, warmup, t.decay, t.min_lr_ratio, t.decay_fraction)
    start, total, warmup0 = phase_start(cfg, phase), cfg.total_steps, cfg.phase_steps(0)[1]

    def factor(s: int) -> float:
        g = start + s
        shape = 1.0 if g < warmup0 else lr_factor(g, total, warmup0, t.decay, t.min_lr_ratio,
                                                  t.decay_fraction)
        return shape * ((s + 1) / warmup if s < warmup else 1.0)

    return factor
