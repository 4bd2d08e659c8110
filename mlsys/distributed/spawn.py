"""Start N local ranks of a Python module on one machine (what ``deepspeed --num_gpus N`` or
``torchrun`` do), forwarding SIGTERM/SIGUSR1/SIGINT to every rank; used by the demo and tests.

Each rank gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from mlsys.distributed.preempt import SIGNALS


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_ranks(module: str, args: Sequence[str], nproc: int, env: dict[str, str] | None = None,
                cwd: str | None = None, stdout=None, stderr=None) -> list[subprocess.Popen]:
    """Popen ``python -m module args`` once per rank (rank 0 first)."""
    port = str(free_port())
    procs = []
    for r in range(nproc):
        e = dict(os.environ if env is None else env)
        e.update(RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(nproc),
                 LOCAL_WORLD_SIZE=str(nproc), MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
        procs.append(subprocess.Popen([sys.executable, "-m", module, *args], env=e, cwd=cwd,
                                      stdout=stdout, stderr=stderr))
    return procs


GRACE_SECONDS = 10.0  # after a rank fails: SIGTERM to the others, SIGKILL this much later
EXIT_GRACE_SECONDS = 300.0  # a StopForwarder left by an exception: SIGTERM, SIGKILL this later


class StopForwarder:
    """While entered, the stop signals this process gets (``SIGNALS``: preemption, a time
    limit, Ctrl-C) are sent on to every process given to ``watch`` that is still alive, also to
    one watched after the signal came; ``signum`` is the first that came (None: none yet).
    The handlers in place before are restored on exit. Left by an exception (the caller
    failed), it stops every watched process still alive as a stop signal would (SIGTERM: a
    training checkpoints and exits) and waits for them, ending those still alive
    ``EXIT_GRACE_SECONDS`` later with SIGKILL: no run trains on unwatched after its caller."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._procs: list[subprocess.Popen] = []
        self._old: dict[int, Any] = {}

    def watch(self, procs: list[subprocess.Popen]) -> None:
        self._procs.extend(procs)
        if self.signum is not None:
            self._send(procs, self.signum)

    @staticmethod
    def _send(procs: list[subprocess.Popen], signum: int) -> None:
        for p in procs:
            if p.poll() is None:
                p.send_signal(signum)

    def _handle(self, signum: int, frame: object) -> None:
        if self.signum is None:
            self.signum = signum
        self._send(self._procs, signum)

    def __enter__(self) -> StopForwarder:
        self._old = {s: signal.signal(s, self._handle) for s in SIGNALS}
        return self

    def __exit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        try:
            if exc_type is not None:
                self._send(self._procs, signal.SIGTERM)
                stop_by = time.monotonic() + EXIT_GRACE_SECONDS
                for p in self._procs:
                    try:
                        p.wait(timeout=max(0.0, stop_by - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        pass
                kill_ranks(self._procs)
        finally:
            for s, h in self._old.items():
                signal.signal(s, h)


def kill_ranks(procs: list[subprocess.Popen]) -> None:
    """SIGKILL every rank still alive and reap it."""
    for p in procs:
        if p.poll() is None:
            p.kill()
    for p in procs:
        p.wait()


def wait_ranks(procs: list[subprocess.Popen], forwarder: StopForwarder | None = None,
               deadline: float | None = None,
               end: Callable[[list[subprocess.Popen]], None] = kill_ranks) -> int:
    """Wait for every rank, forwarding stop signals (through ``forwarder`` if given, which then
    also says whether one came; else through its own); the first non-zero exit code, else 0.
    If a rank fails, the others are terminated (they would wait on it forever), and those still
    alive ``GRACE_SECONDS`` later (a rank blocked in a collective may not get to act on SIGTERM)
    are ended by ``end`` (by default SIGKILL; it must leave them exited): the launcher returns
    within about that bound after the first failure. Past ``deadline`` (``time.monotonic()``),
    ``end`` ends every rank still running and TimeoutError names their pids."""
    if forwarder is None:
        with StopForwarder() as own:
            return wait_ranks(procs, own, deadline, end)
    forwarder.watch(procs)
    codes: dict[int, int] = {}
    failed_at: float | None = None
    while len(codes) < len(procs):
        for i, p in enumerate(procs):
            if i in codes:
                continue
            try:
                codes[i] = p.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                continue
            if codes[i] != 0 and failed_at is None:
                failed_at = time.monotonic()
                for q in procs:
                    if q.poll() is None:
                        q.terminate()
        alive = [q for q in procs if q.poll() is None]
        if alive and failed_at is not None and time.monotonic() - failed_at > GRACE_SECONDS:
            end(alive)
        elif alive and deadline is not None and time.monotonic() > deadline:
            end(alive)
            raise TimeoutError(f"ranks still running at the deadline: pids "
                               f"{[q.pid for q in alive]}")
    return next((c for c in codes.values() if c != 0), 0)


def run_ranks(module: str, args: Sequence[str], nproc: int, **kw) -> int:
    return wait_ranks(start_ranks(module, args, nproc, **kw))
