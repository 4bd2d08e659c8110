"""Symmetry breaking after an exact de-coalescing.

Exactly duplicated units receive identical gradients and identical Adam updates, so a widened
model would never use more than the small model's width. ``add_relative_noise`` perturbs each
parameter tensor by Gaussian noise of standard deviation ``scale × RMS(tensor)`` (zero tensors
stay zero: an identity block's zeroed projections learn from their gradients instead). It is
deterministic for a seed, and works on ZeRO-3 partitioned models one parameter at a time.
"""

from __future__ import annotations

import torch
from torch import nn

from mlsys.sharded import write_full


def add_relative_noise(model: nn.Module, scale: float, seed: int) -> None:
    """In place: ``θ += scale · RMS(θ) · N(0, 1)`` for every parameter tensor."""
    if scale < 0:
        raise ValueError(f"noise: scale must be >= 0, got {scale}")
    if scale == 0:
        return
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            with write_full([p]):
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
                rms = p.data.float().pow(2).mean().sqrt()
                p.data.add_((noise * (scale * rms)).to(p.dtype).to(p.device))
