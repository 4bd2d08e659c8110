"""Preemption: SIGTERM / SIGUSR1 (what SLURM sends before it kills a job) set a flag; the
controller checks it at every step boundary, agreeing across ranks, then checkpoints and exits."""

from __future__ import annotations

import signal

import torch
import torch.distributed as dist

from mlsys.dist.process import initialized


class StopFlag:
    """Set by the signal handlers (or by code); ``agreed()`` is collective: true on every rank
    as soon as it is set on any rank."""

    def __init__(self) -> None:
        self.local = False
        self.signal: int | None = None

    def install(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1)) -> StopFlag:
        for sig in signals:
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.local = True
        self.signal = signum

    def agreed(self) -> bool:
        flag = torch.tensor([1 if self.local else 0], dtype=torch.int32)
        if initialized():
            dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())
