"""DeepSpeed config: load a JSON file and fill in what the run config owns.

The run config owns batch sizes, gradient clipping, the optimizer and the LR schedule (one per
phase, built by the controller). A DeepSpeed config may leave the batch fields out or set them
to ``"auto"``; if it sets them, they must agree with the run config. ``optimizer`` and
``scheduler`` sections are refused (they would silently replace the per-phase ones).
ZeRO-Offload (``zero_optimization.offload_optimizer: {device: cpu}``, stages 2 and 3) keeps
the optimizer on the CPU: the engine is then built with DeepSpeed's CPU Adam
(``mlsys.train.engine``), the same AdamW arithmetic.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

from mlsys.config import ConfigError, RunConfig

_BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu",
               "gradient_accumulation_steps")


def load_ds_config(path: str | Path) -> dict[str, Any]:
    """Read a DeepSpeed JSON config (``ConfigError`` naming the file, line and column)."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except OSError as err:
        raise ConfigError(f"{path}: cannot read DeepSpeed config: {err.strerror}") from None
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}:{err.lineno}:{err.colno}: JSON error: {err.msg}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a JSON object")
    return data


def resolve_ds_config(ds: dict[str, Any], cfg: RunConfig, world_size: int,
                      source: str = "<ds_config>") -> dict[str, Any]:
    """A copy of ``ds`` with batch sizes and clipping filled from ``cfg`` for ``world_size``
    ranks. ``ConfigError`` names the field on any disagreement."""
    t = cfg.train
    per_step = t.micro_batch_size * world_size
    if t.global_batch_size % per_step:
        raise ConfigError(f"{source}: train.global_batch_size {t.global_batch_size} is not a "
                          f"multiple of train.micro_batch_size {t.micro_batch_size} x "
                          f"{world_size} ranks")
    want = {"train_batch_size": t.global_batch_size,
            "train_micro_batch_size_per_gpu": t.micro_batch_size,
            "gradient_accumulation_steps": t.global_batch_size // per_step,
            "gradient_clipping": t.grad_clip}
    out = copy.deepcopy(ds)
    for key in ("optimizer", "scheduler"):
        if key in out:
            raise ConfigError(f"{source}: {key}: not allowed; the run config's phases define "
                              "the optimizer and LR schedule")
    if out.get("fp16", {}).get("enabled") is True:
        raise ConfigError(f"{source}: fp16.enabled: use bf16 or fp32 (fp16 needs loss "
                          "scaling that the V-cycle transitions do not carry)")
    stage = out.get("zero_optimization", {}).get("stage", 0)
    if stage not in (0, 1, 2, 3):
        raise ConfigError(f"{source}: zero_optimization.stage: must be 0-3, got {stage!r}")
    offload = out.get("zero_optimization", {}).get("offload_optimizer") or {}
    device = offload.get("device", "none")
    if device not in ("none", "cpu"):
        raise ConfigError(f"{source}: zero_optimization.offload_optimizer.device: {device!r}; "
                          "only cpu (or none) is supported")
    if device == "cpu" and stage not in (2, 3):
        raise ConfigError(f"{source}: zero_optimization.offload_optimizer: needs stage 2 or 3, "
                          f"got stage {stage}")
    for key, value in want.items():
        have = out.get(key, "auto")
        if have != "auto" and have != value:
            raise ConfigError(f"{source}: {key}: {have!r} disagrees with the run config "
                              f"({value!r} for {world_size} ranks)")
        out[key] = value
    return out


def offloads_optimizer(ds: dict[str, Any]) -> bool:
    """True under ZeRO-Offload: the optimizer state and step live on the CPU."""
    offload = ds.get("zero_optimization", {}).get("offload_optimizer") or {}
    return offload.get("device", "none") == "cpu"


def zero_stage(ds: dict[str, Any]) -> int:
    return int(ds.get("zero_optimization", {}).get("stage", 0))


def uses_bf16(ds: dict[str, Any]) -> bool:
    return bool(ds.get("bf16", {}).get("enabled", False))
