"""ZeRO primitives: is a parameter partitioned, its full shape, and full-value read / write
access to parameters that may be ZeRO-3 partitioned or owned by a DeepSpeed engine.

Reads prefer the optimizer's fp32 master (``safe_get_full_fp32_param``) where an engine owns
the parameter: edits to gathered low-precision parameters would be overwritten by the
optimizer. Writes gather with ``GatheredParameters(modifier_rank=0)``: rank 0's values are
re-partitioned on exit. On plain modules every gather is a no-op, so ZeRO stages 0–2 and
single-process code share these paths. All calls on partitioned parameters are collective.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn


def is_partitioned(param: torch.Tensor) -> bool:
    """True for a ZeRO-3 parameter (it carries ``ds_id``)."""
    return hasattr(param, "ds_id")


def has_master(param: torch.Tensor) -> bool:
    """True where a DeepSpeed optimizer keeps an fp32 master of ``param`` (ZeRO-3, or ZeRO-1/2
    and bf16 through ``_hp_mapping``)."""
    return hasattr(param, "_z3_optimizer") or hasattr(param, "_hp_mapping")


def full_shape(param: torch.Tensor) -> torch.Size:
    return param.ds_shape if is_partitioned(param) else param.shape


def model_is_partitioned(model: nn.Module) -> bool:
    return any(is_partitioned(p) for p in model.parameters())


@contextmanager
def read_full(params: dict[str, torch.Tensor]) -> Iterator[dict[str, torch.Tensor]]:
    """Full values of ``params`` by name: fp32 masters where an engine owns them, else the
    gathered module parameters. Every rank must enter with the same names in the same order."""
    from deepspeed import zero
    from deepspeed.utils import safe_get_full_fp32_param

    masters = {n: safe_get_full_fp32_param(p) for n, p in params.items() if has_master(p)}
    values = {n: v.reshape(full_shape(params[n])) for n, v in masters.items() if v is not None}
    rest = {n: p for n, p in params.items() if n not in values}
    with zero.GatheredParameters(list(rest.values())):
        values.update({n: p.data for n, p in rest.items()})
        yield values


def local_partition(param: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """This rank's slice of the full ``value`` of a ZeRO-3 ``param``, zero-padded at the end
    as ZeRO-3 pads its partitions (DeepSpeed 0.19.8's full setters slice past the end on the
    last rank when the size does not divide by the world size: set partitions instead)."""
    import torch.distributed as dist

    n = param.ds_tensor.numel()
    rank = dist.get_rank(group=param.ds_process_group)
    flat = value.detach().flatten()
    flat = torch.cat([flat, flat.new_zeros(max(0, n * (rank + 1) - flat.numel()))])
    return flat[n * rank: n * (rank + 1)]


def write_master(param: torch.Tensor, value: torch.Tensor) -> None:
    """Set the optimizer's fp32 master of ``param`` (owned by a DeepSpeed engine) to the full
    tensor ``value``; the module parameter itself is not changed (``write_full`` does that).
    Collective for ZeRO-3 parameters."""
    from deepspeed.utils import safe_set_full_fp32_param, safe_set_local_fp32_param

    value = value.to(torch.float32)
    if is_partitioned(param):
        safe_set_local_fp32_param(param, local_partition(param, value))
    else:
        safe_set_full_fp32_param(param, value.reshape(full_shape(param)))


@contextmanager
def write_full(params: Sequence[torch.Tensor]) -> Iterator[None]:
    """Gather ``params`` for writing; rank 0's values are kept and re-partitioned on exit."""
    from deepspeed import zero

    with zero.GatheredParameters(list(params), modifier_rank=0):
        yield
