"""One V-cycle transition: the policy that turns the model of one level into the next level's.

- ``down`` (level a → a+1): save the level-a weights (fp32 masters, one safetensors file) for
  the later interpolation, and ``coalesce`` the model.
- ``up`` (level a → a-1): ``decoalesce`` to the level a-1 config, add ``vcycle.noise``, then
  (unless the run started below that level: ``vcycle.growth``) combine with the saved level
  a-1 weights: ``vcycle.interpolation: all`` is the paper's
  ``interpolate(saved, decoalesced, alpha)``; ``width`` / ``detail`` instead add ``1 - alpha`` of
  the saved model's width detail / width and depth detail to the de-coalesced model
  (``mlsys.vcycle.symmetry.add_detail``).
- ``carry_optimizer`` (``vcycle.optimizer: map``): Adam's moments and step count from the old
  engine to the new one through the same operator. With ``reset`` the new engine starts fresh.

Every function is collective under ZeRO-3 (all ranks call it in the same order) and works in
one process on plain modules too; engines are built and destroyed by the caller.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torch import nn
from transformers import PretrainedConfig

from mlsys.config import VCycleConfig
from mlsys.distributed.weights_io import load_weights, save_weights
from mlsys.models import build_model
from mlsys.operators import coalesce, decoalesce, interpolate
from mlsys.vcycle.optimizer_state import adam_state_of, map_adam_state
from mlsys.vcycle.symmetry import add_detail, add_relative_noise


def down(model: nn.Module, v: VCycleConfig, saved_path: str | Path) -> nn.Module:
    """Save ``model``'s weights to ``saved_path`` and return it coalesced (a new model)."""
    save_weights(model, saved_path)
    return coalesce(model, width=v.width, depth=v.depth, scheme=v.scheme,
                    depth_mapping=v.depth_mapping)


def up(model: nn.Module, target: PretrainedConfig, saved_path: str | Path | None,
       v: VCycleConfig, seed: int, noise_seed: int) -> nn.Module:
    """The model of ``target``'s level, from the smaller ``model`` and the weights that level
    had on the way down (``saved_path``; None in growth mode, where the level was never
    trained: the de-coalesced model is used as it is); a new model. ``seed`` initialises the
    model the saved weights are loaded into (every parameter is then overwritten);
    ``noise_seed`` draws ``vcycle.noise``."""
    large = decoalesce(model, target, scheme=v.scheme, depth_mapping=v.depth_mapping)
    add_relative_noise(large, v.noise, seed=noise_seed)
    if saved_path is None:
        return large
    saved = build_model(target, seed)
    load_weights(saved, saved_path)
    if v.interpolation == "all":
        interpolate(saved, large, v.alpha)
        return saved
    depth = v.depth if v.interpolation == "detail" else 1  # only the saved model's detail
    add_detail(large, saved, 1.0 - v.alpha, v.width, depth, v.scheme, v.depth_mapping)
    return large


def carry_optimizer(old_engine: Any, new_engine: Any, v: VCycleConfig) -> None:
    """Write ``new_engine``'s Adam state from ``old_engine``'s through the operator that took
    the old model to the new one (both engines alive; collective)."""
    map_adam_state(old_engine.module, adam_state_of(old_engine), new_engine.module,
                   adam_state_of(new_engine), scheme=v.scheme, depth_mapping=v.depth_mapping)
