"""A mapping plan: for every target parameter, its source parameters and a pure function.

Plans are grouped by target layer so an executor can hold one target layer (and the one or two
source layers it reads) in memory at a time; that is what makes the ZeRO-3 path cheap.

Depth mappings:
- ``copy`` (the paper, the default): coalesce averages a pair of layers; decoalesce copies each
  small layer into both positions of its pair.
- ``identity``: decoalesce makes the second copy of each pair an identity block (its
  residual-branch output projections zero; exactly function-preserving for pre-LN models);
  coalesce sums those projections over the pair and averages the rest, so
  ``coalesce(decoalesce(s)) == s`` still holds exactly. Post-LN blocks renormalise even with
  zero branches, so there (``family.identity_norms``) the copy's LayerNorms take the output
  LayerNorm of the last real layer before it: with that norm's (γ, β), ``LN(LN(x)) = x`` up to
  how far ``normalize(γ n + β)`` is from ``n`` (exact when γ and β are uniform). Coalesce takes
  those norms from the first (real) member of the pair, keeping the round trip exact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial

import torch

from mlsys.families import Axis, Family
from mlsys.operators.configs import Sizes
from mlsys.operators.pairing import pair_members, small_index
from mlsys.operators.tensor import coalesce_tensor, decoalesce_tensor

DEPTH_MAPPINGS = ("copy", "identity")


@dataclass(frozen=True)
class ParamMap:
    target: str
    sources: tuple[str, ...]
    fn: Callable[[list[torch.Tensor]], torch.Tensor]


@dataclass(frozen=True)
class Group:
    """The maps that write one target layer (``layer`` None: everything outside the layers)."""

    layer: int | None
    maps: tuple[ParamMap, ...]

    @property
    def sources(self) -> list[str]:
        return list(dict.fromkeys(s for m in self.maps for s in m.sources))


def check_depth_mapping(depth_mapping: str) -> None:
    if depth_mapping not in DEPTH_MAPPINGS:
        raise ValueError(f"depth_mapping: {depth_mapping!r} is not one of {DEPTH_MAPPINGS}")


def _group(maps: list[tuple[int | None, ParamMap]]) -> list[Group]:
    layers: dict[int | None, list[ParamMap]] = {}
    for layer, m in maps:
        layers.setdefault(layer, []).append(m)
    order = sorted(layers, key=lambda k: -1 if k is None else k)
    return [Group(k, tuple(layers[k])) for k in order]


def gradient_scale(axes: tuple[Axis, ...], head_scaled: bool) -> float:
    """``k``: at a de-coalesced (duplicated) point the large model's gradient is ``k · T g_s``.

    De-coalescing is ``θ_l = c · T θ_s`` per axis (c = 1 averaged, ½ summed; the tied-head
    norm adds a factor ½). The large model then computes the same function, so
    ``g_s = Dᵀ g_l = c · (g_l,1 + g_l,2)`` and, the two copies being symmetric,
    ``g_l = g_s / (2c)`` per axis: ½ on averaged axes, 1 on summed ones, ×2 for the head norm.
    """
    k = 1.0
    for axis in axes:
        if axis.resized and not axis.summed:
            k *= 0.5
    return k * 2.0 if head_scaled else k


def _as_moment(axes: tuple[Axis, ...]) -> tuple[Axis, ...]:
    """Moments are maps of gradients: every axis is averaged/duplicated, scaled by ``k^power``."""
    return tuple(Axis(a.spaces, summed=False) for a in axes)


def _coalesce_fn(xs, *, axes, large, scheme, width, summed_pair, scale):
    x = xs[0] if len(xs) == 1 else (xs[0] + xs[1] if summed_pair else (xs[0] + xs[1]) * 0.5)
    if width == 2:
        x = coalesce_tensor(x, axes, large, scheme)
    return x * scale if scale != 1 else x


def _decoalesce_fn(xs, *, axes, large, scheme, width, zero, scale):
    x = xs[0]
    if width == 2:
        x = decoalesce_tensor(x, axes, large, scheme)
    if zero:
        return torch.zeros_like(x)
    return x * scale if scale != 1 else x


def _scales(axes, head_scaled: bool, power: int) -> tuple[tuple[Axis, ...], float]:
    """(axes, de-coalescing scale) for parameters (power 0) or Adam moments (power 1, 2)."""
    if power == 0:
        return axes, 0.5 if head_scaled else 1.0
    return _as_moment(axes), gradient_scale(axes, head_scaled) ** power


def coalesce_plan(family: Family, targets: Sequence[str], large: Sizes, width: int, depth: int,
                  scheme: str, depth_mapping: str, tied: bool, power: int = 0) -> list[Group]:
    """Plan for ``coalesce``: ``targets`` are the small model's parameter names. ``power`` 0 maps
    parameters, 1 and 2 map Adam's first and second moments (see ``gradient_scale``)."""
    first, second = pair_members(large.layers, 1, scheme) if depth == 2 else (None, None)
    identity = depth_mapping == "identity"
    maps = []
    for name in targets:
        axes, layer, rel = family.axes_of(name)
        sources: tuple[str, ...] = (name,)
        if layer is not None and depth == 2:
            members = (first,) if identity and rel in family.identity_norms else (first, second)
            sources = tuple(f"{family.layer_prefix}{int(i[layer])}.{rel}" for i in members)
        axes, scale = _scales(axes, tied and width == 2 and name in family.head_norm, power)
        if width == 1:
            scale = 1.0
        fn = partial(
            _coalesce_fn, axes=axes, large=large, scheme=scheme, width=width,
            summed_pair=identity and rel in family.residual_out,
            scale=1.0 / scale,
        )
        maps.append((layer, ParamMap(name, sources, fn)))
    return _group(maps)


def decoalesce_plan(family: Family, targets: Sequence[str], large: Sizes, width: int, depth: int,
                    scheme: str, depth_mapping: str, tied: bool, power: int = 0) -> list[Group]:
    """Plan for ``decoalesce``: ``targets`` are the large model's parameter names; ``power`` as
    in ``coalesce_plan``."""
    if depth == 2:
        origin = small_index(large.layers, 1, scheme)
        second = set(pair_members(large.layers, 1, scheme)[1].tolist())
    identity = depth_mapping == "identity"
    maps = []
    for name in targets:
        axes, layer, rel = family.axes_of(name)
        source, zero = name, False
        if layer is not None and depth == 2:
            source = f"{family.layer_prefix}{int(origin[layer])}.{rel}"
            copy2 = identity and layer in second
            zero = copy2 and rel in family.residual_out
            if copy2 and rel in family.identity_norms:
                before = layer - 1
                while before in second:  # identity copies pass the last real layer's output on
                    before -= 1
                source = f"{family.layer_prefix}{int(origin[before])}.{family.identity_norms[rel]}"
        axes, scale = _scales(axes, tied and width == 2 and name in family.head_norm, power)
        fn = partial(
            _decoalesce_fn, axes=axes, large=large, scheme=scheme, width=width, zero=zero,
            scale=scale if width == 2 else 1.0,
        )
        maps.append((layer, ParamMap(name, (source,), fn)))
    return _group(maps)
