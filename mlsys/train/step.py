"""One optimizer step on a DeepSpeed engine over its micro-batches (gradient accumulation),
and the guard that stops a run whose loss or gradients stop being finite numbers."""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from mlsys.distributed.process import world_size
from mlsys.length import length_forward


def train_step(engine: Any, micro_batches: Iterable[dict[str, torch.Tensor]],
               device: torch.device, length: int = 1) -> torch.Tensor:
    """Forward, backward and ``engine.step()`` per micro-batch (DeepSpeed steps the optimizer
    at the accumulation boundary), the forward at length factor ``length`` (``mlsys.length``:
    the same samples of S tokens, on S / length pooled positions). Returns this rank's mean
    micro-batch loss as a tensor on the device: nothing here waits for the device (no
    ``.item()``, no ``.cpu()``)."""
    total: torch.Tensor | None = None
    count = 0
    for batch in micro_batches:
        # Only the loss is kept: holding the whole output (the logits) through backward and
        # step keeps a vocabulary-sized tensor alive that the allocator could reuse.
        with length_forward(engine.module, length):
            loss = engine(**{k: v.to(device, non_blocking=True)
                             for k, v in batch.items()}).loss
        engine.backward(loss)
        engine.step()
        loss = loss.detach().float()
        total = loss if total is None else total + loss
        count += 1
    assert total is not None, "a step needs at least one micro-batch"
    return total / count


class LossWindow:
    """The steps since the last step record: their losses summed on the device, their count,
    the lr of the last one, and the time since the window opened. ``close()`` is the one host
    sync (and, with several ranks, the one all-reduce) per record; the ranks' stop flags ride
    on that all-reduce."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.total: torch.Tensor | None = None
        self.steps = 0
        self.lr = 0.0
        self.opened = time.perf_counter()

    def begin(self) -> None:
        """A step starts: the window's clock starts with its first step (evaluations and
        checkpoints between records are not step time)."""
        if self.steps == 0:
            self.opened = time.perf_counter()

    def add(self, loss: torch.Tensor, lr: float) -> None:
        self.total = loss if self.total is None else self.total + loss
        self.steps += 1
        self.lr = lr

    def close(self, stop: bool = False) -> WindowMeans:
        """The window's means over its steps and every rank, and whether any rank asked to
        ``stop``; starts the next window. Collective: every rank calls it at the same step."""
        sums = torch.stack([self.total.detach().double().reshape(()),
                            torch.tensor(float(stop), dtype=torch.float64,
                                         device=self.total.device)])
        if world_size() > 1:
            dist.all_reduce(sums)
        loss_sum, stops = sums.tolist()
        means = WindowMeans(loss=loss_sum / (self.steps * world_size()), lr=self.lr,
                            seconds=(time.perf_counter() - self.opened) / self.steps,
                            stop=stops > 0, steps=self.steps)
        self.reset()
        return means


@dataclass(frozen=True)
class WindowMeans:
    """What a step record reports: the mean loss of the window's steps over every rank, the
    lr of its last step, seconds per step, whether any rank was asked to stop, and how many
    steps the window had."""

    loss: float
    lr: float
    seconds: float
    stop: bool
    steps: int = 1


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
