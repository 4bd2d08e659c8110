"""The public operators: ``coalesce``, ``decoalesce``, ``interpolate`` (see docs/design.md)."""

from __future__ import annotations

import math

from torch import nn

from mlsys.distributed.zero import model_is_partitioned
from mlsys.families import Family, family_of, family_of_config
from mlsys.operators import configs
from mlsys.operators.execute import apply_plan, interpolate_params
from mlsys.operators.pairing import SCHEMES
from mlsys.operators.plan import check_depth_mapping, coalesce_plan, decoalesce_plan


def _check_scheme(scheme: str) -> None:
    if scheme not in SCHEMES:
        raise ValueError(f"scheme: {scheme!r} is not one of {SCHEMES}")


def _is_tied(model: nn.Module) -> bool:
    head = model.get_output_embeddings()
    return head is not None and head.weight is model.get_input_embeddings().weight


def _check_known(model: nn.Module, family: Family) -> None:
    """Every parameter of ``model`` must be in the family table: nothing is silently dropped."""
    for name, _ in model.named_parameters():
        family.axes_of(name)


def _build_like(model: nn.Module, config) -> nn.Module:
    """A new model of the same class; partitioned when a ZeRO-3 HfDeepSpeedConfig is alive."""
    new = type(model)._from_config(config)
    if not model_is_partitioned(new):
        first = next(model.parameters())
        new.to(dtype=first.dtype, device=first.device)
    new.train(model.training)
    return new


def derive_config(config, width: int = 2, depth: int = 2):
    """The config ``coalesce`` gives for a model with ``config``."""
    return configs.derive_config(config, family_of_config(config), width, depth)


def coalesce(model: nn.Module, width: int = 2, depth: int = 2, scheme: str = "stride",
             depth_mapping: str = "copy") -> nn.Module:
    """A new, smaller model of the same class: width halved (``width=2``: hidden, heads, ffn)
    and/or depth halved (``depth=2``). ``W_s = F_out · W · T_in``; layer pairs averaged."""
    family = family_of(model)
    _check_known(model, family)
    _check_scheme(scheme)
    check_depth_mapping(depth_mapping)
    small_config = configs.derive_config(model.config, family, width, depth)
    small = _build_like(model, small_config)
    plan = coalesce_plan(family, [n for n, _ in small.named_parameters()],
                         configs.sizes_of(model.config, family), width, depth, scheme,
                         depth_mapping, _is_tied(model))
    apply_plan(plan, model, small)
    return small


def decoalesce(small: nn.Module, target_config, scheme: str = "stride",
               depth_mapping: str = "copy") -> nn.Module:
    """A new model of ``target_config``'s size: ``W_l = T_out · W_s · F_in``; each small layer
    copied into both positions of its pair. Width-only de-coalescing preserves the function."""
    family = family_of(small)
    _check_known(small, family)
    _check_scheme(scheme)
    check_depth_mapping(depth_mapping)
    width, depth = configs.factors_between(small.config, target_config, family)
    large = _build_like(small, target_config)
    plan = decoalesce_plan(family, [n for n, _ in large.named_parameters()],
                           configs.sizes_of(target_config, family), width, depth, scheme,
                           depth_mapping, _is_tied(small))
    apply_plan(plan, small, large)
    return large


def moment_plans(source: nn.Module, target: nn.Module, scheme: str, depth_mapping: str,
                 power: int) -> list:
    """The plan that maps Adam moments (``power`` 1: first, 2: second) of ``source``'s
    parameters to ``target``'s, in whichever direction their configs differ."""
    family = family_of(source)
    _check_scheme(scheme)
    check_depth_mapping(depth_mapping)
    names = [n for n, _ in target.named_parameters()]
    s, t = configs.sizes_of(source.config, family), configs.sizes_of(target.config, family)
    if (t.hidden, t.layers) <= (s.hidden, s.layers):
        width, depth = configs.factors_between(target.config, source.config, family)
        return coalesce_plan(family, names, s, width, depth, scheme, depth_mapping,
                             _is_tied(source), power)
    width, depth = configs.factors_between(source.config, target.config, family)
    return decoalesce_plan(family, names, t, width, depth, scheme, depth_mapping,
                           _is_tied(source), power)


def interpolate(target: nn.Module, source: nn.Module, alpha: float) -> None:
    """In place: ``target = (1 - alpha) * target + alpha * source``; α = 0 / 1 give either end
    exactly. Both models must have the same parameter names and shapes."""
    if not (isinstance(alpha, int | float) and math.isfinite(alpha) and 0.0 <= alpha <= 1.0):
        raise ValueError(f"alpha: must be a number in [0, 1], got {alpha!r}")
    if type(target) is not type(source):
        raise ValueError(f"source: class {type(source).__name__} differs from the target's "
                         f"{type(target).__name__}")
    interpolate_params(target, source, float(alpha))
