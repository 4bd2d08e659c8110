"""Full model weights to and from one safetensors file, from any ZeRO stage, any world size.

``gather_weights`` walks the parameters one submodule at a time and assembles each full fp32
tensor: the optimizer's fp32 master when the module belongs to a DeepSpeed engine
(``safe_get_full_fp32_param``; collective: every rank calls it in the same order), a
``GatheredParameters`` view for a partitioned module outside an engine, the tensor itself for a
plain module. Only rank 0 keeps them. ``save_weights`` writes them (rank 0, temp name, rename).
``load_weights`` copies a file into a module (``copy_full`` per parameter: partitioned ones
through ``GatheredParameters(modifier_rank=0)`` so the new values are re-partitioned, plain
ones directly).
Tied parameters appear once (``named_parameters`` de-duplicates them).
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mlsys.atomic import atomic_path
from mlsys.distributed.process import barrier, rank
from mlsys.distributed.zero import full_shape, is_partitioned, read_full, write_full


def _full(name: str, param: torch.nn.Parameter) -> torch.Tensor:
    """The full fp32 value of one parameter (collective for partitioned / engine parameters)."""
    with read_full({name: param}) as values:
        return values[name].detach().float().cpu().clone()


def gather_weights(module: torch.nn.Module) -> dict[str, torch.Tensor] | None:
    """{name: full fp32 tensor} on rank 0, None on other ranks. Every rank must call it."""
    out: dict[str, torch.Tensor] = {}
    for name, param in module.named_parameters():
        value = _full(name, param)
        if rank() == 0:
            out[name] = value
    return out if rank() == 0 else None


def save_weights(module: torch.nn.Module, path: str | Path) -> Path:
    """Gather ``module``'s weights and write them to ``path`` (safetensors) from rank 0.
    Collective; returns when the file is complete on every rank's view of the filesystem."""
    path = Path(path)
    weights = gather_weights(module)
    if weights is not None:
        with atomic_path(path) as tmp:
            save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp))
    barrier()
    return path


def load_weights(module: torch.nn.Module, path: str | Path) -> None:
    """Copy the tensors in ``path`` into ``module``'s parameters (names must match exactly;
    ``ValueError`` names the first missing or mis-shaped one). Collective for partitioned
    modules. Values are cast to each parameter's dtype."""
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
            shape = tuple(full_shape(param))
            if tuple(value.shape) != shape:
                raise ValueError(f"{path}: {name}: shape {tuple(value.shape)} != model {shape}")
            copy_full(param, value)


def copy_full(param: torch.nn.Parameter, value: torch.Tensor | None) -> None:
    """Set ``param`` to the full tensor ``value`` (cast to its dtype): a partitioned parameter
    through ``GatheredParameters(modifier_rank=0)``, so rank 0's value is re-partitioned
    (collective; ``value`` is only read on rank 0 there, other ranks may pass None), a plain
    one directly."""
    with write_full([param]), torch.no_grad():
        if rank() == 0 or not is_partitioned(param):  # rank 0's is re-partitioned
            assert value is not None
            param.data.copy_(value.to(param.dtype))
