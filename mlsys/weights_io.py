"""Full model weights to and from one safetensors file, from any ZeRO stage, any world size.

``gather_weights`` walks the parameters one submodule at a time and assembles each full fp32
tensor: the optimizer's fp32 master when the module belongs to a DeepSpeed engine
(``safe_get_full_fp32_param``; collective: every rank calls it in the same order), a
``GatheredParameters`` view for a partitioned module outside an engine, the tensor itself for a
plain module. Only rank 0 keeps them. ``save_weights`` writes them (rank 0, temp name, rename).
``load_weights`` copies a file into a module: partitioned parameters through
``GatheredParameters(modifier_rank=0)`` so the new values are re-partitioned, plain ones directly.
Tied parameters appear once (``named_parameters`` de-duplicates them).
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
import torch.distributed as dist
from safetensors import safe_open
from safetensors.torch import save_file


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def barrier() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.barrier()


def _full(param: torch.nn.Parameter) -> torch.Tensor:
    """The full fp32 value of one parameter (collective for partitioned / engine parameters)."""
    from deepspeed.utils import safe_get_full_fp32_param

    if hasattr(param, "_z3_optimizer") or hasattr(param, "_hp_mapping"):
        value = safe_get_full_fp32_param(param)
        if value is not None:
            return value.detach().float().cpu().clone()
    if hasattr(param, "ds_id"):
        import deepspeed

        with deepspeed.zero.GatheredParameters([param]):
            return param.detach().float().cpu().clone()
    return param.detach().float().cpu().clone()


def gather_weights(module: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """{name: full fp32 tensor} on rank 0, None on other ranks. Every rank must call it."""
    out: dict[str, torch.Tensor] = {}
    for name, param in module.named_parameters():
        value = _full(param)
        if rank() == 0:
            out[name] = value
    return out if rank() == 0 else None


def save_weights(module: torch.nn.Module, path: str | Path) -> Path:
    """Gather ``module``'s weights and write them to ``path`` (safetensors) from rank 0.
    Collective; returns when the file is complete on every rank's view of the filesystem."""
    path = Path(path)
    weights = gather_weights(module)
    if weights is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(path.name + f".tmp{os.getpid()}")
        save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp))
        os.replace(tmp, path)
    barrier()
    return path


def load_weights(module: torch.nn.Module, path: str | Path) -> None:
    """Copy the tensors in ``path`` into ``module``'s parameters (names must match exactly;
    ``ValueError`` names the first missing or mis-shaped one). Collective for partitioned
    modules. Values are cast to each parameter's dtype."""
    import deepspeed

    path = Path(path)
    with safe_open(str(path), framework="pt") as f:
        keys = set(f.keys())
        params = dict(module.named_parameters())
        missing, extra = sorted(set(params) - keys), sorted(keys - set(params))
        if missing or extra:
            raise ValueError(f"{path}: parameters do not match the model "
                             f"(missing {missing[:3]}, unexpected {extra[:3]})")
        for name, param in params.items():
            value = f.get_tensor(name)
            shape = tuple(param.ds_shape) if hasattr(param, "ds_id") else tuple(param.shape)
            if tuple(value.shape) != shape:
                raise ValueError(f"{path}: {name}: shape {tuple(value.shape)} != model {shape}")
            if hasattr(param, "ds_id"):
                with deepspeed.zero.GatheredParameters([param], modifier_rank=0):
                    if rank() == 0:
                        param.data.copy_(value.to(param.dtype))
            else:
                with torch.no_grad():
                    param.copy_(value.to(param.dtype))
