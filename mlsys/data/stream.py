"""The training data stream: one ordered pass over a dataset, shared out by rank and micro-step.

Global step ``s`` consumes samples ``[c, c + G)`` with ``c`` the samples consumed before it
(``G`` the global batch); within it, micro-step ``m`` of rank ``r`` takes the ``micro`` samples
starting at ``c + (m * world + r) * micro``. The position is just ``consumed_samples``, so the
stream continues across phases and resumes exactly; no index repeats until the dataset ends
(megatron-core datasets are themselves a shuffled multi-epoch sequence).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any


def micro_indices(consumed: int, micro: int, world: int, rank: int, accum: int
                  ) -> list[list[int]]:
    """Sample indices of each micro-batch this rank trains in the step after ``consumed``."""
    return [[consumed + (m * world + rank) * micro + i for i in range(micro)]
            for m in range(accum)]


def eval_indices(count: int, micro: int, world: int, rank: int) -> list[list[int]]:
    """This rank's micro-batches of the first ``count`` samples (round-robin by micro-batch)."""
    chunks = [list(range(s, min(s + micro, count))) for s in range(0, count, micro)]
    return chunks[rank::world]


def batches(dataset: Sequence[Any], index_lists: list[list[int]],
            collate: Callable[[list[Any]], dict]) -> Iterator[dict]:
    for idx in index_lists:
        yield collate([dataset[i] for i in idx])
