"""Carrying Adam's moments through coalesce / de-coalesce (``vcycle.optimizer: map``).

Derivation (the contract the tests pin). De-coalescing is linear, ``θ_l = D θ_s`` with, per
resized axis, ``D = c · T`` (c = 1 on averaged axes, ½ on summed input axes; the norm before a
tied head carries one more ½). The de-coalesced model computes the same function, so
``L_s(θ_s) = L_l(D θ_s)`` and ``g_s = Dᵀ g_l``. At a duplicated point the two copies of a unit
are interchangeable, so their gradients are equal and ``g_l = k · T g_s`` with
``k = Π 1/(2c)`` (``mlsys.operators.plan.gradient_scale``): ½ per averaged axis, 1 per summed one.
Adam's moments are running means of ``g`` and ``g²``, hence

    m_l = k  · T m_s        v_l = k² · T v_s        step_l = step_s

is exactly the state a fresh Adam reaches on the duplicated model after the same steps
(``tests/test_optimizer_state.py`` checks it after one identical step), and bias correction
stays consistent because the step count is carried. Coalescing applies the inverse:
``m_s = k⁻¹ · F m_l``, ``v_s = k⁻² · F v_l`` (averaging the pair, which is exact when the copies
agree), so ``coalesce(decoalesce(state)) == state`` exactly. Depth: moments follow the
parameters' depth mapping (copied / averaged; ``identity`` zeroes the moments of the zeroed
projections, and sums them back). Adam being invariant to gradient scale, the next *update*
of each duplicated entry equals the small model's update for that entry (up to ε).
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import nn

from mlsys.distributed.zero import full_shape, has_master, is_partitioned, local_partition
from mlsys.operators.api import moment_plans

MOMENTS = {"exp_avg": 1, "exp_avg_sq": 2}


class AdamState(Protocol):
    """Read and write the full (unpartitioned) Adam state of one parameter."""

    def get(self, param: nn.Parameter, key: str) -> torch.Tensor: ...
    def set(self, param: nn.Parameter, key: str, value: torch.Tensor) -> None: ...
    def step(self) -> int: ...
    def set_step(self, step: int) -> None: ...


class TorchAdamState:
    """A plain ``torch.optim.Adam``/``AdamW`` (state is created if the optimizer never stepped)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer

    def _state(self, param):
        state = self.optimizer.state[param]
        if "exp_avg" not in state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(param, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(param, memory_format=torch.preserve_format)
        return state

    def get(self, param, key):
        return self._state(param)[key]

    def set(self, param, key, value):
        self._state(param)[key].copy_(value)

    def step(self) -> int:
        steps = [int(s["step"]) for s in self.optimizer.state.values() if "step" in s]
        return max(steps, default=0)

    def set_step(self, step: int) -> None:
        for group in self.optimizer.param_groups:
            for p in group["params"]:
                self._state(p)["step"] = torch.tensor(float(step))


# Where DeepSpeed's optimizers (ZeRO-3, ZeRO-1/2, bf16) keep their fp32 master partitions.
_FP32_FLATS = ("fp32_partitioned_groups_flat", "single_partition_of_fp32_groups",
               "fp32_groups_flat_partition")


class DeepSpeedAdamState:
    """The state inside a DeepSpeed engine (ZeRO 1–3), through DeepSpeed's safe accessors;
    every call is collective: all ranks must make the same calls in the same order."""

    def __init__(self, engine) -> None:
        self.engine = engine
        self._ready = False

    def _prepare(self) -> None:
        """Create missing state (a new engine has none before its first step) and (re)link it
        to the parameters' fragments: ZeRO-1/2 and the bf16 optimizer link after the first
        param group's first step only, so later groups (no-decay parameters) stay unlinked."""
        if self._ready:
            return
        self._ensure_state()
        wrapper = self.engine.optimizer
        if hasattr(wrapper, "_lazy_init_hp_params_optimizer_state"):
            wrapper._hp_optimizer_states_linked = False
            wrapper._lazy_init_hp_params_optimizer_state()
        self._ready = True

    def get(self, param, key):
        from deepspeed.utils import safe_get_full_optimizer_state

        self._prepare()
        return safe_get_full_optimizer_state(param, key).reshape(full_shape(param))

    def set(self, param, key, value):
        from deepspeed.utils import safe_set_full_optimizer_state, safe_set_local_optimizer_state

        self._prepare()
        if not is_partitioned(param):
            safe_set_full_optimizer_state(param, value.reshape(full_shape(param)), key)
            return
        # ZeRO-3: this rank's (padded) partition (``local_partition`` says why)
        safe_set_local_optimizer_state(param, local_partition(param, value), key)

    def _base(self) -> torch.optim.Optimizer:
        return getattr(self.engine.optimizer, "optimizer", self.engine.optimizer)

    def _ensure_state(self) -> None:
        """A new engine's Adam has no state until its first step: create it (zeros, step 0)."""
        base, wrapper = self._base(), self.engine.optimizer
        flats = [p for g in base.param_groups for p in g["params"]]
        for attr in _FP32_FLATS:  # ZeRO keeps the fp32 partitions outside param_groups
            flats += list(getattr(wrapper, attr, None) or [])
        integer_step = type(base).__name__ == "DeepSpeedCPUAdam"  # ZeRO-Offload: an int
        for p in flats:
            if p is not None:
                state = base.state[p]
                if "exp_avg" not in state:
                    state["step"] = 0 if integer_step else torch.tensor(0.0)
                    state["exp_avg"] = torch.zeros_like(p)
                    state["exp_avg_sq"] = torch.zeros_like(p)

    def _base_states(self) -> list[dict]:
        return [s for s in self._base().state.values() if "step" in s]

    def step(self) -> int:
        return max((int(s["step"]) for s in self._base_states()), default=0)

    def set_step(self, step: int) -> None:
        for state in self._base_states():
            old = state["step"]
            state["step"] = torch.tensor(float(step), dtype=old.dtype, device=old.device) \
                if torch.is_tensor(old) else step


def adam_state_of(engine) -> AdamState:
    """The Adam state accessor for a DeepSpeed engine: DeepSpeed's own accessors where ZeRO or
    the bf16 optimizer hold fp32 masters, else the plain torch optimizer it wraps."""
    params = list(engine.module.parameters())
    if any(is_partitioned(p) or has_master(p) for p in params):
        return DeepSpeedAdamState(engine)
    return TorchAdamState(engine.optimizer)


def map_adam_state(source: nn.Module, source_state: AdamState, target: nn.Module,
                   target_state: AdamState, scheme: str = "stride",
                   depth_mapping: str = "copy") -> None:
    """Write ``target``'s Adam moments and step count from ``source``'s, through the same
    coalesce / de-coalesce map that took ``source``'s parameters to ``target``'s."""
    src = dict(source.named_parameters())
    tgt = dict(target.named_parameters())
    for key, power in MOMENTS.items():
        for group in moment_plans(source, target, scheme, depth_mapping, power):
            values = {n: source_state.get(src[n], key).detach().clone() for n in group.sources}
            for m in group.maps:
                target_state.set(tgt[m.target], key, m.fn([values[s] for s in m.sources]))
    target_state.set_step(source_state.step())
