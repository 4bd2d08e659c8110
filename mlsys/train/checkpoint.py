"""Checkpoints: DeepSpeed engine state plus the controller's state, resumable at any step.

``<run_dir>/checkpoints/<tag>/`` holds DeepSpeed's files (model, optimizer, LR schedule; the
controller state also goes into DeepSpeed's client state), ``rng/rank<r>.pt`` (each rank's
torch / numpy / python RNG), ``manifest.json`` (size and SHA-256 of every file, and of the
saved weights the state refers to) and ``controller.json``, written last by rank 0: a tag
without it is incomplete and ignored. Tags are ``step<global step>-phase<phase>``; a resume
loads the newest complete tag whose files match its manifest, reporting any newer damaged
one. The saved interpolation weights live outside the tags (``<run_dir>/vcycle/``),
referenced by path from the state.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mlsys.atomic import atomic_path, write_json
from mlsys.dist.process import barrier, rank
from mlsys.train.manifest import manifest_problem, relocate_external, write_manifest
from mlsys.train.rundir import RunDir
from mlsys.train.state import ControllerState

STATE_FILE = "controller.json"


def _tag(state: ControllerState) -> str:
    return f"step{state.global_step:07d}-phase{state.phase}"


def _rng_state() -> dict[str, Any]:
    return {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
            "python": random.getstate()}


def _set_rng_state(s: dict[str, Any]) -> None:
    torch.set_rng_state(s["torch"])
    np.random.set_state(s["numpy"])
    random.setstate(s["python"])


def complete_tags(root: str | Path) -> list[str]:
    """Tags with a controller.json, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    tags = [p.name for p in root.iterdir() if (p / STATE_FILE).is_file()]
    return sorted(tags, key=lambda t: (int(t[4:11]), t))


def latest_good_tag(root: str | Path, report: Callable[[str], None] = print) -> str | None:
    """The newest complete tag whose files match its manifest; each newer damaged tag is
    reported (tag and file) and skipped."""
    for tag in reversed(complete_tags(root)):
        problem = manifest_problem(Path(root) / tag)
        if problem is None:
            return tag
        report(f"checkpoint {tag} is damaged ({problem}); trying the one before it")
    return None


def read_state(root: str | Path, tag: str) -> ControllerState:
    return ControllerState.from_dict(json.loads((Path(root) / tag / STATE_FILE).read_text()))


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (a full disk, say); its partial files are gone and
    the previous checkpoint is untouched."""


def save_checkpoint(engine: Any, root: str | Path, state: ControllerState, keep: int) -> str:
    """Save engine + RNG + manifest + state under a new tag (collective); keep the newest
    ``keep`` tags, never pruning when the new one does not check out. On a write error the
    partial tag is removed and ``CheckpointError`` names the tag, the cause and the
    checkpoint that is still there."""
    root = Path(root)
    tag = _tag(state)
    if rank() == 0 and (root / tag).exists():  # a stale tag of this name: the run went back
        shutil.rmtree(root / tag)
    barrier()
    try:
        engine.save_checkpoint(str(root), tag=tag, client_state={"controller": asdict(state)},
                               save_latest=False)
        rng_dir = root / tag / "rng"
        rng_dir.mkdir(parents=True, exist_ok=True)
        torch.save(_rng_state(), rng_dir / f"rank{rank()}.pt")
        barrier()
        if rank() == 0:
            write_manifest(root / tag, extra=state.saved.values(), exclude=[STATE_FILE])
            write_json(root / tag / STATE_FILE, asdict(state))
    except (OSError, RuntimeError) as err:
        shutil.rmtree(root / tag, ignore_errors=True)
        previous = [t for t in complete_tags(root) if t != tag]
        raise CheckpointError(
            f"checkpoint {tag} could not be written under {root}: {err}. Its partial files "
            f"were removed; the newest checkpoint is still {previous[-1] if previous else 'none'}"
            ". Free space and run the same command to resume.") from err
    if rank() == 0 and manifest_problem(root / tag, checksums=False) is None:
        for old in complete_tags(root)[:-keep]:  # never prune when the new tag is bad
            shutil.rmtree(root / old, ignore_errors=True)
    barrier()
    return tag


def load_checkpoint(engine: Any, root: str | Path, tag: str) -> ControllerState:
    """Load engine state and this rank's RNG from ``tag`` (collective); returns the state."""
    path, client = engine.load_checkpoint(str(root), tag=tag, load_optimizer_states=True,
                                          load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"{Path(root) / tag}: DeepSpeed could not load this checkpoint")
    rng_file = Path(root) / tag / "rng" / f"rank{rank()}.pt"
    if rng_file.is_file():
        _set_rng_state(torch.load(rng_file, weights_only=False))
    return read_state(root, tag)


def fork_run(source_dir: str | Path, target_dir: str | Path, step: int) -> str:
    """Start ``target_dir`` as a copy of ``source_dir`` at its checkpoint of global ``step``
    (the one taken before a transition at that step): the tag, the saved interpolation weights
    (``vcycle/``, paths in the state rewritten) and ``metrics.jsonl``. Resuming the target with
    another config branches the run there; with the same config it reproduces the source.
    Replaces whatever ``target_dir`` held; returns the tag."""
    src, dst = RunDir(source_dir), RunDir(target_dir)
    tags = [t for t in complete_tags(src.checkpoints) if int(t[4:11]) == step]
    if not tags:
        have = ", ".join(complete_tags(src.checkpoints)) or "none"
        raise FileNotFoundError(f"{src.checkpoints}: no complete checkpoint at step {step} "
                                f"(have: {have})")
    tag = min(tags, key=lambda t: int(t.rsplit("phase", 1)[1]))
    with atomic_path(dst.root) as tmp_root:
        tmp = RunDir(tmp_root)
        shutil.copytree(src.checkpoints / tag, tmp.checkpoints / tag)
        if src.vcycle.is_dir():
            shutil.copytree(src.vcycle, tmp.vcycle)
        shutil.copy2(src.metrics, tmp.metrics)
        state = read_state(tmp.checkpoints, tag)
        moved = {path: str(dst.vcycle / Path(path).name) for path in state.saved.values()}
        state.saved = {level: moved[path] for level, path in state.saved.items()}
        (tmp.checkpoints / tag / STATE_FILE).write_text(json.dumps(asdict(state), indent=1))
        relocate_external(tmp.checkpoints / tag, moved)
    return tag
