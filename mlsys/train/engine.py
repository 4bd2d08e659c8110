"""One DeepSpeed engine per phase: built with AdamW and the phase's LR schedule
(``mlsys.train.schedule``), destroyed whole. Biases and norm weights (1-D parameters) get no
weight decay. Under ZeRO-Offload (``offload_optimizer: {device: cpu}``) the AdamW is
DeepSpeed's CPU Adam (``adamw_mode``, the same update, its state and step on the CPU; a JIT
build of the ``cpu_adam`` op the first time), which DeepSpeed requires there. Every engine
the controller builds (the first, each level's after a transition, one resumed from a
checkpoint) comes from ``build_engine``, so ``train.activation_checkpointing`` (Hugging Face
gradient checkpointing, non-reentrant) and ``train.compile`` (DeepSpeed's
``engine.compile()``, torch.compile of the module) hold for every level and across resumes.
``destroy_engine`` frees an engine for good, working around what DeepSpeed keeps behind.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import deepspeed
import torch
from deepspeed.runtime.zero import parameter_offload
from deepspeed.runtime.zero.partitioned_param_coordinator import PartitionedParameterCoordinator

from mlsys.config import TrainConfig
from mlsys.distributed.zero import full_shape
from mlsys.ds_config import offloads_optimizer
from mlsys.train.memory import release_free_memory


def build_engine(model: torch.nn.Module, ds_config: dict[str, Any], train: TrainConfig,
                 lr: float, schedule: Callable[[int], float]) -> Any:
    """A fresh ``deepspeed.initialize`` engine training ``model`` for one phase: AdamW at peak
    ``lr`` times ``schedule(step)``, with ``train``'s activation checkpointing and compile
    switches."""
    if train.activation_checkpointing:
        enable_activation_checkpointing(model)
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in params if len(full_shape(p)) >= 2],
               "weight_decay": train.weight_decay},
              {"params": [p for p in params if len(full_shape(p)) < 2], "weight_decay": 0.0}]
    if offloads_optimizer(ds_config):
        from deepspeed.ops.adam import DeepSpeedCPUAdam

        optimizer = DeepSpeedCPUAdam(groups, lr=lr, betas=train.betas, eps=train.eps,
                                     adamw_mode=True)
    else:
        optimizer = torch.optim.AdamW(groups, lr=lr, betas=train.betas, eps=train.eps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer,
                                           lr_scheduler=scheduler, config=ds_config,
                                           dist_init_required=False)
    if train.compile:
        engine.compile()
    return engine


def enable_activation_checkpointing(model: torch.nn.Module) -> None:
    """Hugging Face activation (gradient) checkpointing on every layer, non-reentrant
    (``torch.utils.checkpoint``, RNG replayed: dropout masks are the same in the recompute).
    Transformers 5 calls it ``activation_checkpointing_enable``; older versions
    ``gradient_checkpointing_enable``."""
    kwargs = {"use_reentrant": False}
    if hasattr(model, "activation_checkpointing_enable"):
        model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
    else:  # pragma: no cover - transformers < 5
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)


def destroy_engine(engine: Any) -> None:
    """``engine.destroy()``, then drop what DeepSpeed 0.19.8 keeps behind and would keep every
    old engine (model, optimizer, hooks) alive across transitions: ZeRO-3 pushes the model
    onto the module-level ``FWD_MODULE_STACK`` and never pops it, and the parameter
    coordinator's ``lru_cache``d method holds its modules."""
    engine.destroy()
    mods = {id(m) for m in engine.module.modules()}
    parameter_offload.FWD_MODULE_STACK[:] = [
        m for m in parameter_offload.FWD_MODULE_STACK if id(m) not in mods]
    _clear_method_caches(PartitionedParameterCoordinator)
    release_free_memory()


def _clear_method_caches(cls: type) -> None:
    """Clear ``functools.lru_cache``s on ``cls``'s methods (also under a decorator): they are
    class-wide and keyed by ``self``, so they keep every instance alive."""
    for fn in vars(cls).values():
        seen = [fn]
        while seen:
            f = seen.pop()
            if hasattr(f, "cache_clear"):
                f.cache_clear()
            seen += [c.cell_contents for c in (getattr(f, "__closure__", None) or ())
                     if callable(getattr(c, "cell_contents", None))]
            if hasattr(f, "__wrapped__"):
                seen.append(f.__wrapped__)
