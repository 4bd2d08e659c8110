"""The part of a checkpoint that resumes on any number of ranks (``<tag>/portable/``).

DeepSpeed's own checkpoint files are per data-parallel rank (each rank's optimizer partition)
and so are the RNG files; a job requeued onto another node count cannot load them. Every
checkpoint therefore also holds the run's state in a layout without ranks:

- ``state.safetensors``: for every parameter (by name, tied ones once, as
  ``named_parameters`` lists them) its fp32 master ``fp32/<name>`` and Adam's moments
  ``exp_avg/<name>`` and ``exp_avg_sq/<name>``, full tensors;
- ``state.json``: Adam's step count, the LR scheduler's ``state_dict``, DeepSpeed's step
  counters and the rank count that wrote it.

Rank 0 writes both from full tensors gathered collectively (``gather_portable``, then
``write_portable``: the gathering has no I/O, so a failed write cannot leave ranks waiting in
a collective) through the accessors the V-cycle's ``optimizer: map`` carries moments with
(``mlsys.vcycle.optimizer_state``): ZeRO-1/2/3 and ZeRO-Offload (tested in
``tests/test_portable_checkpoint.py``), bf16 through the same accessors. ``load_portable``
writes the state into an engine built as for a fresh start of the checkpoint's phase (on any
rank count): the module's weights and the fp32 masters, the moments into the new partitions,
the step count, the scheduler and the optimizer's current lrs. What an uninterrupted run on
the new rank count would compute differs from the resumed one only in the order of the
gradient reductions.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from mlsys.atomic import write_json
from mlsys.distributed.process import rank
from mlsys.distributed.weights_io import copy_full
from mlsys.distributed.zero import has_master, read_full, write_master
from mlsys.vcycle.optimizer_state import MOMENTS, adam_state_of

PORTABLE = "portable"
TENSORS = "state.safetensors"
META = "state.json"
FP32 = "fp32"


def has_portable(tag_dir: str | Path) -> bool:
    """Whether the checkpoint ``tag_dir`` holds a rank-independent state."""
    return (Path(tag_dir) / PORTABLE / META).is_file()


def gather_portable(engine: Any, world_size: int) -> dict[str, Any] | None:
    """The rank-independent state of ``engine``: ``{"tensors", "meta"}`` on rank 0, None on
    the others (collective: every rank gathers every full tensor; only rank 0 copies them to
    host memory). No I/O, so a full disk cannot leave the ranks out of step here."""
    adam = adam_state_of(engine)
    keep = rank() == 0
    tensors: dict[str, torch.Tensor] = {}
    for name, param in engine.module.named_parameters():
        with read_full({name: param}) as full:
            if keep:
                tensors[f"{FP32}/{name}"] = full[name].detach().float().cpu().clone()
        for key in MOMENTS:
            value = adam.get(param, key)
            if keep:
                tensors[f"{key}/{name}"] = value.detach().float().cpu().clone()
    step = adam.step()
    if not keep:
        return None
    meta = {"world_size": world_size, "adam_step": step,
            "scheduler": engine.lr_scheduler.state_dict(),
            "engine": {"global_steps": engine.global_steps,
                       "global_samples": engine.global_samples,
                       "skipped_steps": engine.skipped_steps}}
    return {"tensors": tensors, "meta": meta}


def write_portable(tag_dir: str | Path, state: dict[str, Any]) -> None:
    """Write ``gather_portable``'s state to ``tag_dir/portable/`` (rank 0; safetensors writes
    to a temp name and renames). The caller fsyncs the tag and lists it in the manifest."""
    out = Path(tag_dir) / PORTABLE
    out.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in state["tensors"].items()}, str(out / TENSORS))
    write_json(out / META, state["meta"])


def load_portable(engine: Any, tag_dir: str | Path) -> None:
    """Write ``tag_dir/portable/``'s state into ``engine``, a fresh engine of the checkpoint's
    level on any rank count (collective: every rank reads the file and makes the same calls).
    ``ValueError`` names the file where its parameters do not match the engine's model."""
    folder = Path(tag_dir) / PORTABLE
    meta = json.loads((folder / META).read_text())
    adam = adam_state_of(engine)
    params = dict(engine.module.named_parameters())
    with safe_open(str(folder / TENSORS), framework="pt") as f:
        names = {k.split("/", 1)[1] for k in f.keys() if k.startswith(f"{FP32}/")}
        if names != set(params):
            missing, extra = sorted(set(params) - names), sorted(names - set(params))
            raise ValueError(f"{folder / TENSORS}: parameters do not match the model "
                             f"(missing {missing[:3]}, unexpected {extra[:3]})")
        for name, param in params.items():
            value = f.get_tensor(f"{FP32}/{name}")
            copy_full(param, value)
            if has_master(param):
                write_master(param, value)
            for key in MOMENTS:
                adam.set(param, key, f.get_tensor(f"{key}/{name}"))
    adam.set_step(meta["adam_step"])
    scheduler = engine.lr_scheduler
    scheduler.load_state_dict(meta["scheduler"])
    for group, lr in zip(scheduler.optimizer.param_groups, scheduler.get_last_lr(), strict=True):
        group["lr"] = lr
    for key, value in meta["engine"].items():
        setattr(engine, key, value)
