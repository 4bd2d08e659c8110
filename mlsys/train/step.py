"""One optimizer step on a DeepSpeed engine over its micro-batches (gradient accumulation),
and the guard that stops a run whose loss or gradients stop being finite numbers."""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import torch
import torch.distributed as dist

from mlsys.dist.process import world_size


def train_step(engine: Any, micro_batches: Iterable[dict[str, torch.Tensor]],
               device: torch.device) -> float:
    """Forward, backward and ``engine.step()`` per micro-batch (DeepSpeed steps the optimizer
    at the accumulation boundary); returns the mean micro-batch loss over all ranks."""
    total = torch.zeros((), dtype=torch.float64)
    count = 0
    for batch in micro_batches:
        out = engine(**{k: v.to(device) for k, v in batch.items()})
        engine.backward(out.loss)
        engine.step()
        total += out.loss.detach().double().cpu()
        count += 1
    if world_size() > 1:
        dist.all_reduce(total)
    return float(total) / (count * world_size())


class NonFiniteError(RuntimeError):
    """The loss or the gradient norm is not a finite number: the run stops (exit 3) before
    anything is written over the last good checkpoint."""


def check_finite(what: str, value: float | None, step: int, phase: int, level: int) -> None:
    """Raise ``NonFiniteError`` naming the step, phase and level if ``value`` is NaN or ±inf
    (None: not measured, nothing to check)."""
    if value is not None and not math.isfinite(value):
        raise NonFiniteError(f"{what} is {value} at step {step} (phase {phase}, level {level}); "
                             "stopped before writing a checkpoint: the newest checkpoint is "
                             "the last good one. Lower the learning rate or check the data.")


def grad_norm(engine: Any) -> float | None:
    """The global gradient norm of the last step, where DeepSpeed measured it (clipping on)."""
    norm = engine.get_global_grad_norm()
    return None if norm is None else float(norm)
