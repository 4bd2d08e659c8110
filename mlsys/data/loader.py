"""The micro-batches of the coming steps, prepared ahead of the step that needs them.

A ``torch.utils.data.DataLoader`` over exactly the sample indices ``mlsys.data.stream`` gives
this rank for every step from ``consumed`` on (``micro_indices``), so the data and its order do
not depend on how many workers read ahead: resuming at any ``consumed_samples`` reads what an
uninterrupted run would have read. ``workers`` processes collate batches while the step runs
(0: in this process, when asked); pinned memory where a GPU is present.

The training controller makes one ``StepBatches`` for the rest of a run (every phase reads the
same stream), so its workers are forked once, at the start, and never right after a V-cycle
transition. A fork copies every lock another thread holds at that instant into the child, where
nothing will ever release it; a transition is when this process's threads churn (the engine is
rebuilt, the export starts tqdm's monitor thread, a closing loader's queue threads exit), and a
worker forked then hung before its first instruction on CPython's thread-state lock
(``PyOS_AfterFork_Child``, seen once under load). glibc's ``atexit`` lock, taken by a thread
initialising a static, can hang a worker the same way (pytorch/pytorch#130610).
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
from torch.utils.data import DataLoader

from mlsys.data.stream import micro_indices

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


def ignore_stop_signals(_worker_id: int) -> None:
    """A worker's init: the stop signals are the training process's to act on. A signal sent
    to the whole process group (``kill -- -PGID``, ``timeout``, a terminal's Ctrl-C, a
    scheduler that signals every process of a job) reaches the workers too; a worker that died
    of it would make the DataLoader raise in the training process before it could checkpoint.
    The training process shuts its workers down itself (``StepBatches.close``), and a worker
    whose parent is gone exits on its own (torch's watchdog)."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_IGN)


def step_indices(consumed: int, steps: int, micro: int, world: int, rank: int, accum: int,
                 global_batch: int) -> Iterator[list[int]]:
    """This rank's micro-batch index lists for ``steps`` steps from ``consumed`` on."""
    for s in range(steps):
        yield from micro_indices(consumed + s * global_batch, micro, world, rank, accum)


class StepBatches:
    """``next_step()``: the ``accum`` collated micro-batches of the next step."""

    def __init__(self, dataset: Sequence[Any], collate: Callable[[list[Any]], dict],
                 consumed: int, steps: int, micro: int, world: int, rank: int, accum: int,
                 global_batch: int, workers: int) -> None:
        self.accum = accum
        sampler = list(step_indices(consumed, steps, micro, world, rank, accum, global_batch))
        # Its own generator: a DataLoader draws its workers' base seed from the one it is
        # given, and drawing from the global one would shift the dropout masks of a resume.
        self.loader = DataLoader(dataset, batch_sampler=sampler, collate_fn=collate,
                                 num_workers=workers, prefetch_factor=4 if workers else None,
                                 pin_memory=torch.cuda.is_available(),
                                 worker_init_fn=ignore_stop_signals if workers else None,
                                 generator=torch.Generator().manual_seed(0))
        self._it = iter(self.loader)

    def next_step(self) -> list[dict[str, torch.Tensor]]:
        return [next(self._it) for _ in range(self.accum)]

    def close(self, timeout: float = 30.0) -> None:
        """Stop the workers and wait until the threads feeding their queues have exited (a
        later fork in this process, another run's loader, then copies none of their locks).
        Idempotent."""
        it, self._it = self._it, None
        if it is None or not hasattr(it, "_shutdown_workers"):
            return
        queues = [*getattr(it, "_index_queues", []), getattr(it, "_worker_result_queue", None)]
        it._shutdown_workers()
        for queue in queues:
            feeder = getattr(queue, "_thread", None)
            if feeder is not None and feeder is not threading.current_thread():
                feeder.join(timeout)
