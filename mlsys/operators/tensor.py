"""Width maps of one whole tensor, axis by axis, from the family table's axis spaces."""

from __future__ import annotations

import torch

from mlsys.families import Axis
from mlsys.operators.configs import Sizes
from mlsys.operators.pairing import coalesce_axis, decoalesce_axis


def _segments(axis: Axis, sizes: Sizes, halved: bool) -> list[int]:
    return [sizes.size(s) // (2 if halved else 1) for s in axis.spaces]


def _map_axis(x: torch.Tensor, dim: int, axis: Axis, large: Sizes, scheme: str,
              down: bool) -> torch.Tensor:
    op = coalesce_axis if down else decoalesce_axis
    parts = torch.split(x, _segments(axis, large, halved=not down), dim=dim)
    return torch.cat([op(part, dim, large.size(space), large.unit(space), scheme, axis.summed)
                      for part, space in zip(parts, axis.spaces, strict=True)], dim=dim)


def _map_tensor(x: torch.Tensor, axes: tuple[Axis, ...], large: Sizes, scheme: str,
                down: bool) -> torch.Tensor:
    for dim, axis in enumerate(axes):
        if axis.resized:
            x = _map_axis(x, dim, axis, large, scheme, down)
    return x


def coalesce_tensor(x: torch.Tensor, axes: tuple[Axis, ...], large: Sizes,
                    scheme: str) -> torch.Tensor:
    """``F_out · W · T_in`` on every resized axis of ``x`` (``large``: the large sizes)."""
    return _map_tensor(x, axes, large, scheme, down=True)


def decoalesce_tensor(x: torch.Tensor, axes: tuple[Axis, ...], large: Sizes,
                      scheme: str) -> torch.Tensor:
    """``T_out · W_s · F_in`` on every resized axis of ``x`` (``large``: the large sizes)."""
    return _map_tensor(x, axes, large, scheme, down=False)
