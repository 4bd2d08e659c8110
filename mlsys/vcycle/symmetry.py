"""Symmetry breaking after an exact de-coalescing.

Exactly duplicated units receive identical gradients and identical Adam updates, so a widened
model would never use more than the small model's width. The breakers here:

- ``add_relative_noise`` perturbs each parameter tensor by Gaussian noise of standard deviation
  ``scale × RMS(tensor)`` (zero tensors stay zero: an identity block's zeroed projections learn
  from their gradients instead). Deterministic for a seed.
- ``dropout_after_up`` / ``set_dropout``: dropout at a given rate for the first steps after an
  up-transition (different masks for paired units make their gradients differ).
- ``add_width_detail`` ("interpolation only in width") adds back the part of the saved large
  model that width-coalescing cannot see: ``θ += β · (W_old − T_w F_w W_old)``. Since
  ``F_w T_w = I`` that detail coalesces to zero, so the coalesced model, and with it everything
  the small level learned, is unchanged exactly; it only makes paired units differ (the
  function moves at second order in the detail for averaged axes, not at all for summed ones).
  ``add_detail`` does the same for width and depth together: with the identity depth mapping
  it also gives each identity block the saved layer's detail (a first-order change).

Noise and detail work on ZeRO-3 partitioned models one parameter at a time.
"""

from __future__ import annotations

from contextlib import ExitStack

import torch
from torch import nn

from mlsys.distributed.zero import read_full, write_full
from mlsys.operators import coalesce, decoalesce


def add_relative_noise(model: nn.Module, scale: float, seed: int) -> None:
    """In place: ``θ += scale · RMS(θ) · N(0, 1)`` for every parameter tensor."""
    if scale < 0:
        raise ValueError(f"noise: scale must be >= 0, got {scale}")
    if scale == 0:
        return
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _, p in model.named_parameters():
            with write_full([p]):
                noise = torch.randn(p.shape, generator=gen, dtype=torch.float32)
                rms = p.data.float().pow(2).mean().sqrt()
                p.data.add_((noise * (scale * rms)).to(p.dtype).to(p.device))


def common_part(old: nn.Module, width: int, depth: int, scheme: str,
                depth_mapping: str = "copy") -> nn.Module:
    """``T F W_old``: ``old`` coalesced by ``width``/``depth`` and de-coalesced back (a new
    model): the part of ``old`` a model ``width``/``depth`` times smaller can represent."""
    small = coalesce(old, width=width, depth=depth, scheme=scheme, depth_mapping=depth_mapping)
    return decoalesce(small, old.config, scheme=scheme, depth_mapping=depth_mapping)


def add_detail(model: nn.Module, old: nn.Module, weight: float, width: int, depth: int,
               scheme: str, depth_mapping: str = "copy") -> None:
    """In place: ``θ += weight · (W_old − T F W_old)`` for every parameter of ``model``, with
    ``F``/``T`` coalescing by ``width`` and ``depth`` (``depth = 1``: width detail only).

    ``old`` is the saved model of the same size (the one the paper interpolates with); with
    ``weight = 1 − α`` this is the paper's interpolation restricted to what coalescing cannot
    see. Since ``F T = I``, ``F`` of the detail is zero: coalescing ``model`` gives the same
    small model before and after, exactly."""
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"weight: must be in [0, 1], got {weight}")
    if weight == 0.0 or (width == 1 and depth == 1):
        return
    common = common_part(old, width, depth, scheme, depth_mapping)
    params = dict(model.named_parameters())
    olds, commons = dict(old.named_parameters()), dict(common.named_parameters())
    if params.keys() != olds.keys():
        missing = sorted(params.keys() ^ olds.keys())
        raise ValueError(f"parameter {missing[0]!r} is not in both models")
    with torch.no_grad():
        for name, p in params.items():
            with ExitStack() as stack:
                stack.enter_context(write_full([p]))
                o = stack.enter_context(read_full({name: olds[name]}))[name]
                c = stack.enter_context(read_full({name: commons[name]}))[name]
                p.data.add_((o.float() - c.float()).to(p.dtype), alpha=weight)
    del common


def add_width_detail(model: nn.Module, old: nn.Module, weight: float, width: int,
                     scheme: str) -> None:
    """``add_detail`` in width only ("interpolation only in width"): paired units differ by
    the saved model's differences; the function moves at second order in the detail."""
    add_detail(model, old, weight, width, 1, scheme)


def dropout_after_up(after_up: bool, step_in_phase: int, rate: float,
                     steps: int) -> float | None:
    """The dropout rate for a step: ``rate`` during the first ``steps`` steps of a phase that an
    up-transition started, else None (each module's own rate)."""
    return rate if after_up and step_in_phase < steps and rate > 0 else None


def set_dropout(model: nn.Module, rate: float | None) -> None:
    """Set every ``nn.Dropout``'s rate (HF attention reads ``.p`` too); None restores each
    module's rate from when it was first seen here."""
    for m in model.modules():
        if isinstance(m, nn.Dropout):
            if not hasattr(m, "mlsys_base_p"):
                m.mlsys_base_p = m.p
            m.p = m.mlsys_base_p if rate is None else rate


class DropoutWindow:
    """The dropout of one phase's model: ``rate`` for its first ``steps`` steps when an
    up-transition started the phase, the modules' own rates otherwise; ``at(step)`` sets the
    rate for a step only when it changes and returns it (None: the modules' own)."""

    def __init__(self, model: nn.Module, after_up: bool, rate: float, steps: int) -> None:
        self.model, self.after_up, self.rate, self.steps = model, after_up, rate, steps
        self.applied: float | None = None  # a new model runs at its modules' own rates

    def at(self, step_in_phase: int) -> float | None:
        rate = dropout_after_up(self.after_up, step_in_phase, self.rate, self.steps)
        if rate != self.applied:
            set_dropout(self.model, rate)
            self.applied = rate
        return rate
