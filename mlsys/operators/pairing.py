"""Unit pairing and the per-axis maps F (average pairs) and T (duplicate).

A space of size ``D`` is made of ``D / unit`` units (``unit`` = head_dim in the qk and v spaces,
1 elsewhere; under grouped-query attention a key/value head in ``kv`` and a whole group of
query heads in ``qk`` and ``v``, see ``Sizes.unit``). Scheme ``stride`` pairs unit i with
unit i + n/2; ``adjacent`` pairs 2i with 2i+1.
Pair k of the large space becomes unit k of the small one.
"""

from __future__ import annotations

import torch

SCHEMES = ("stride", "adjacent")


def _expand(units: torch.Tensor, unit: int) -> torch.Tensor:
    """Element indices of the given units."""
    return (units[:, None] * unit + torch.arange(unit)[None, :]).reshape(-1)


def pair_members(large: int, unit: int, scheme: str) -> tuple[torch.Tensor, torch.Tensor]:
    """Element indices (first, second) of each pair in a space of ``large`` elements."""
    n = large // unit
    if scheme == "stride":
        first, second = torch.arange(n // 2), torch.arange(n // 2, n)
    elif scheme == "adjacent":
        first, second = torch.arange(0, n, 2), torch.arange(1, n, 2)
    else:
        raise ValueError(f"scheme: {scheme!r} is not one of {SCHEMES}")
    return _expand(first, unit), _expand(second, unit)


def small_index(large: int, unit: int, scheme: str) -> torch.Tensor:
    """For each element of the large space, the element of the small space it comes from (T)."""
    first, second = pair_members(large, unit, scheme)
    index = torch.empty(large, dtype=torch.long)
    small = torch.arange(large // 2)
    index[first] = small
    index[second] = small
    return index


def coalesce_axis(x: torch.Tensor, dim: int, large: int, unit: int, scheme: str,
                  summed: bool) -> torch.Tensor:
    """Halve ``dim``: average each pair (``F``), or sum it for a summed (input) axis (``T``ᵀ)."""
    first, second = pair_members(large, unit, scheme)
    total = x.index_select(dim, first.to(x.device)) + x.index_select(dim, second.to(x.device))
    return total if summed else total * 0.5


def decoalesce_axis(x: torch.Tensor, dim: int, large: int, unit: int, scheme: str,
                    summed: bool) -> torch.Tensor:
    """Double ``dim``: duplicate each unit (``T``), halved for a summed (input) axis (``F``ᵀ)."""
    y = x.index_select(dim, small_index(large, unit, scheme).to(x.device))
    return y * 0.5 if summed else y
