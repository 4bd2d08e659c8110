"""Preemption: SIGTERM / SIGUSR1 (what SLURM sends before it kills a job) set a flag on the
rank that gets them. The ranks agree on it at the next step record, inside the all-reduce that
record makes anyway (``mlsys.train.step.LossWindow.close``): no collective of its own, nothing
waited for between records. The controller then checkpoints and exits."""

from __future__ import annotations

import signal


class StopFlag:
    """Set by the signal handlers (or by code): ``local`` is this rank's flag, ``signal`` the
    signal that set it."""

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
