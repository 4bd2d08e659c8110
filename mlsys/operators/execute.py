"""Executing operator plans over modules whose parameters may be ZeRO-3 partitioned.

One group (one target layer) at a time: gather the source parameters it reads (fp32 masters
through ``safe_get_full_fp32_param`` when the module belongs to a DeepSpeed engine), gather the
target layer, write it on rank 0 (``GatheredParameters(modifier_rank=0)``), and let DeepSpeed
re-partition it. Peak extra memory is the largest group, never the whole model. On plain
(unpartitioned) modules the same code runs with every gather a no-op, so ZeRO stages 0–2 and
single-process use share this path.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import ExitStack

import torch
from torch import nn

from mlsys.distributed.zero import full_shape, is_partitioned, read_full, write_full
from mlsys.operators.plan import Group


def apply_plan(groups: Sequence[Group], source: nn.Module, target: nn.Module) -> None:
    """Write every target parameter of the plan from the source model, one group at a time."""
    src = dict(source.named_parameters())
    tgt = dict(target.named_parameters())
    for group in groups:
        with read_full({n: src[n] for n in group.sources}) as values:
            params = [tgt[m.target] for m in group.maps]
            with write_full(params), torch.no_grad():
                for m, param in zip(group.maps, params, strict=True):
                    value = m.fn([values[s] for s in m.sources])
                    if value.shape != param.shape:
                        raise ValueError(f"{m.target}: mapped shape {tuple(value.shape)} does not "
                                         f"match the target's {tuple(param.shape)}")
                    param.data.copy_(value)


def interpolate_params(target: nn.Module, source: nn.Module, alpha: float) -> None:
    """``target = (1 - alpha) * target + alpha * source`` for every parameter, in place.

    Identically partitioned parameters are combined shard by shard with no communication;
    mixed placements are gathered one parameter at a time. Acts on module parameters: call it
    before the target is wrapped in a DeepSpeed engine (an engine's fp32 masters would win)."""
    tgt = dict(target.named_parameters())
    src = dict(source.named_parameters())
    if tgt.keys() != src.keys():
        missing = sorted(tgt.keys() ^ src.keys())
        raise ValueError(f"parameter {missing[0]!r} is not in both models")
    for name, t in tgt.items():
        s = src[name]
        if full_shape(t) != full_shape(s):
            raise ValueError(f"{name}: shapes differ, {tuple(full_shape(t))} vs "
                             f"{tuple(full_shape(s))}")
    with torch.no_grad():
        for name, t in tgt.items():
            s = src[name]
            if is_partitioned(t) and is_partitioned(s) and t.ds_tensor.shape == s.ds_tensor.shape:
                _lerp_exact(t.ds_tensor.data, s.ds_tensor.data, alpha)
                continue
            with ExitStack() as stack:
                stack.enter_context(write_full([t]))
                values = stack.enter_context(read_full({name: s}))
                _lerp_exact(t.data, values[name], alpha)


def _lerp_exact(t: torch.Tensor, s: torch.Tensor, alpha: float) -> None:
    """``t ← (1-α)·t + α·s``; exact at α = 0 (t) and α = 1 (s), unlike ``torch.lerp``."""
    t.mul_(1.0 - alpha).add_(s.to(t.dtype), alpha=alpha)
