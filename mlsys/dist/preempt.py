"""Preemption: SIGTERM / SIGUSR1 (what SLURM sends before it kills a job) set a flag; the
controller polls it at every step boundary, agreeing across ranks without waiting for it,
then checkpoints and exits."""

from __future__ import annotations

import signal
from typing import Any

import torch
import torch.distributed as dist

from mlsys.dist.process import initialized


class StopFlag:
    """Set by the signal handlers (or by code). ``poll()`` is collective and non-blocking:
    each call starts an all-reduce of this rank's flag (on a CPU gloo group, so it never
    waits for an accelerator) and reads the one the previous call started, which has had a
    whole step to finish. So once any rank is signalled before call ``k``, every rank gets True
    from call ``k + 1``: a signal is honoured within two step boundaries."""

    def __init__(self) -> None:
        self.local = False
        self.signal: int | None = None
        self._group: Any = None
        self._pending: tuple[Any, torch.Tensor] | None = None

    def install(self, signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGUSR1)) -> StopFlag:
        for sig in signals:
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.local = True
        self.signal = signum

    def poll(self) -> bool:
        if not initialized():
            return self.local
        if self._group is None:
            self._group = dist.new_group(backend="gloo")
        agreed = False
        if self._pending is not None:
            work, flag = self._pending
            work.wait()
            agreed = bool(flag.item())  # a CPU tensor: no device sync
        flag = torch.tensor([1 if self.local else 0], dtype=torch.int32)
        work = dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self._group, async_op=True)
        self._pending = (work, flag)
        return agreed
