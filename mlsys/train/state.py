"""Where a run stands: the part of a checkpoint the controller owns (``controller.json``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class ControllerState:
    """The phase, steps done in it, data position, cost counters, the number of ranks, and the
    saved weights (level -> safetensors path) that up-transitions interpolate with."""

    phase: int = 0
    step_in_phase: int = 0
    global_step: int = 0
    consumed_samples: int = 0
    tokens: int = 0
    flops: int = 0
    wall_seconds: float = 0.0
    world_size: int = 0  # the ranks that trained it (0: a checkpoint that did not record it)
    saved: dict[int, str] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ControllerState:
        d = dict(d)
        d["saved"] = {int(k): v for k, v in d.get("saved", {}).items()}
        return cls(**d)

    def advance(self, samples: int, tokens: int, flops: int) -> None:
        """Count one optimizer step over ``samples`` samples of ``tokens`` tokens."""
        self.consumed_samples += samples
        self.tokens += tokens
        self.flops += flops
        self.global_step += 1
        self.step_in_phase += 1

    def next_phase(self) -> None:
        self.phase += 1
        self.step_in_phase = 0
