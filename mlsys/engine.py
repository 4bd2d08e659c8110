"""One DeepSpeed engine per phase: AdamW over the model's parameters and the phase's LR schedule.

The schedule is linear warmup to the phase's lr over ``warmup`` steps (first step at
lr/warmup), then ``decay`` (linear, cosine or constant) to ``min_lr_ratio * lr`` at the
phase's last step. Biases and norm weights (1-D parameters) get no weight decay.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from mlsys.config import TrainConfig


def lr_factor(step: int, steps: int, warmup: int, decay: str, min_ratio: float) -> float:
    """Multiplier of the phase lr at 0-based ``step`` of a phase of ``steps`` steps (pure)."""
    if step < warmup:
        return (step + 1) / warmup
    if decay == "constant":
        return 1.0
    span = max(1, steps - warmup - 1)
    progress = min(1.0, (step - warmup) / span)
    shape = 1.0 - progress if decay == "linear" else 0.5 * (1.0 + math.cos(math.pi * progress))
    return min_ratio + (1.0 - min_ratio) * shape


def _shape(p: torch.nn.Parameter) -> tuple[int, ...]:
    return tuple(getattr(p, "ds_shape", p.shape))


def build_engine(model: torch.nn.Module, ds_config: dict[str, Any], train: TrainConfig,
                 lr: float, steps: int, warmup: int) -> Any:
    """A fresh ``deepspeed.initialize`` engine training ``model`` for one phase."""
    import deepspeed

    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if len(_shape(p)) >= 2],
               "weight_decay": train.weight_decay},
              {"params": [p for p in params if len(_shape(p)) < 2], "weight_decay": 0.0}]
    optimizer = torch.optim.AdamW(groups, lr=lr, betas=train.betas, eps=train.eps)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: lr_factor(s, steps, warmup, train.decay, train.min_lr_ratio))
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           lr_scheduler=schedule, config=ds_config,
                                           dist_init_required=False)
    return engine
