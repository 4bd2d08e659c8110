"""Preemption: SIGTERM / SIGUSR1 (what SLURM sends before it kills a job) and SIGINT set a flag
on the rank that gets them. While training, the ranks agree on it at the next step record,
inside the all-reduce that record makes anyway (``mlsys.train.step.LossWindow.close``): no
collective of its own, nothing waited for between records; the controller then checkpoints
and exits. Outside the training loop (while configs, data and engines are prepared, before
the first step) there is nothing to save and no record to wait for: with ``immediate`` set the
handler raises ``Interrupted`` at once, so a long or stuck data build ends at the signal, and
the atomic writers remove their temp files on the way out."""

from __future__ import annotations

import signal

SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)


class Interrupted(BaseException):
    """A stop signal arrived where there is nothing to checkpoint (``StopFlag.immediate``).
    A BaseException, so ``except Exception`` on the way does not swallow it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"stopped by {signal.Signals(signum).name}")
        self.signum = signum


class StopFlag:
    """Set by the signal handlers (or by code): ``local`` is this rank's flag, ``signal`` the
    signal that set it; ``immediate`` makes the handler raise ``Interrupted`` instead."""

    def __init__(self) -> None:
        self.local = False
        self.signal: int | None = None
        self.immediate = False

    def install(self, signals: tuple[int, ...] = SIGNALS) -> StopFlag:
        """Handle ``signals``; until the controller says otherwise, immediately."""
        self.immediate = True
        for sig in signals:
            signal.signal(sig, self._handle)
        return self

    def _handle(self, signum: int, frame: object) -> None:
        self.local = True
        self.signal = signum
        if self.immediate:
            raise Interrupted(signum)
