"""One optimizer step on a DeepSpeed engine over its micro-batches (gradient accumulation)."""

from __future__ import annotations

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
