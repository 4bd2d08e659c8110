"""Checkpoints: DeepSpeed engine state plus the controller's state, resumable at any step.

``<run_dir>/checkpoints/<tag>/`` holds DeepSpeed's files (model, optimizer, LR schedule; the
controller state also goes into DeepSpeed's client state), ``rng/rank<r>.pt`` (each rank's
torch CPU and CUDA / numpy / python RNG as plain tensors and numbers, loaded with
``weights_only=True``), ``controller.json`` and ``manifest.json``: size and SHA-256 of every
file above and of the saved weights the state refers to, written last by rank 0 after every
file was fsync'd. The manifest is the completion marker: a tag without it is incomplete. With
``train.portable_checkpoints`` a tag also holds ``portable/`` (``mlsys.train.portable``): the
same state without a per-rank layout, which ``load_checkpoint`` reads instead of DeepSpeed's
files when the tag was written by another number of ranks. Tags are
``step<global step>-phase<phase>``; a resume loads the newest tag whose files match its
manifest and whose ``controller.json`` is listed there and reads, reporting each newer one
that does not and falling back to the one before. The saved interpolation weights live
outside the tags (``<run_dir>/vcycle/``), referenced by path from the state.
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
from safetensors import SafetensorError

from mlsys.atomic import atomic_path, fsync_tree, write_json
from mlsys.distributed.process import any_rank, barrier, rank
from mlsys.train.manifest import MANIFEST, lists, manifest_problem, write_manifest
from mlsys.train.portable import gather_portable, load_portable, write_portable
from mlsys.train.rundir import RunDir, RunDirError
from mlsys.train.state import ControllerState

STATE_FILE = "controller.json"
# what a failed write raises: the OS's errors, DeepSpeed's and torch's, safetensors' own
WRITE_ERRORS = (OSError, RuntimeError, SafetensorError)


def _tag(state: ControllerState) -> str:
    return f"step{state.global_step:07d}-phase{state.phase}"


def _rng_state() -> dict[str, Any]:
    """This process's RNG states as tensors, ints, floats and None only (no pickle): torch's
    CPU generator and, on a GPU, this device's (dropout draws from it there), numpy's,
    python's."""
    key, keys, pos, has_gauss, gauss = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    cuda = torch.cuda.get_rng_state() if torch.cuda.is_available() else None
    return {"torch": torch.get_rng_state(), "cuda": cuda,
            "numpy": {"key": key, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": pos,
                      "has_gauss": has_gauss, "gauss": gauss},
            "python": {"version": version, "state": torch.tensor(internal, dtype=torch.int64),
                       "gauss_next": gauss_next}}


def _set_rng_state(s: dict[str, Any]) -> None:
    torch.set_rng_state(s["torch"])
    if s.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state(s["cuda"])
    n = s["numpy"]
    np.random.set_state((n["key"], n["keys"].numpy().astype(np.uint32), n["pos"],
                         n["has_gauss"], n["gauss"]))
    p = s["python"]
    random.setstate((p["version"], tuple(int(x) for x in p["state"].tolist()), p["gauss_next"]))


def _step_of(tag: str) -> int:
    return int(tag[4:11])


def step_of(tag: str) -> int:
    """The global step a checkpoint tag was taken at."""
    return _step_of(tag)


def tags(root: str | Path) -> list[str]:
    """Every checkpoint tag directory (finished or not), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p.name for p in root.iterdir()
             if p.is_dir() and p.name.startswith("step") and p.name[4:11].isdigit()]
    return sorted(found, key=lambda t: (_step_of(t), t))


def complete_tags(root: str | Path) -> list[str]:
    """Tags with a manifest (finished writing), oldest first."""
    return [t for t in tags(root) if (Path(root) / t / MANIFEST).is_file()]


def tag_problem(tag_dir: Path, checksums: bool = True) -> str | None:
    """Why the tag cannot be resumed (naming the file), or None."""
    problem = manifest_problem(tag_dir, checksums=checksums)
    if problem is not None:
        return problem
    if not lists(tag_dir, STATE_FILE):
        return f"{tag_dir / MANIFEST}: does not record {STATE_FILE}"
    try:
        ControllerState.from_dict(json.loads((tag_dir / STATE_FILE).read_text()))
    except (OSError, ValueError, TypeError) as err:
        return f"{tag_dir / STATE_FILE}: unreadable ({err})"
    return None


def latest_good_tag(root: str | Path, report: Callable[[str], None] = print) -> str | None:
    """The newest tag that ``tag_problem`` finds nothing wrong with; each newer tag is
    reported (tag and file) and skipped."""
    for tag in reversed(tags(root)):
        problem = tag_problem(Path(root) / tag)
        if problem is None:
            return tag
        report(f"checkpoint {tag} is damaged or incomplete ({problem}); trying the one before")
    return None


def read_state(root: str | Path, tag: str) -> ControllerState:
    return ControllerState.from_dict(json.loads((Path(root) / tag / STATE_FILE).read_text()))


class CheckpointError(RuntimeError):
    """A checkpoint could not be written (a full disk, say); its partial files are gone and
    the previous checkpoint is untouched."""


def save_checkpoint(engine: Any, root: str | Path, state: ControllerState, keep: int,
                    portable: bool = True) -> str:
    """Save engine + RNG (+ the rank-independent state with ``portable``) + manifest + state
    under a new tag (collective); keep the newest ``keep`` tags, never pruning when the new
    one does not check out. On a write error the partial tag is removed and
    ``CheckpointError`` names the tag, the cause and the checkpoint that is still there."""
    root = Path(root)
    tag = _tag(state)
    if rank() == 0 and (root / tag).exists():  # a stale tag of this name: the run went back
        shutil.rmtree(root / tag)
    barrier()
    try:
        engine.save_checkpoint(str(root), tag=tag, client_state={"controller": asdict(state)},
                               save_latest=False)
        gathered = gather_portable(engine, state.world_size) if portable else None
        error: BaseException | None = None
        try:  # this rank's own files; then the ranks agree (and wait for each other)
            rng_dir = root / tag / "rng"
            rng_dir.mkdir(parents=True, exist_ok=True)
            torch.save(_rng_state(), rng_dir / f"rank{rank()}.pt")
            if gathered is not None:  # rank 0
                write_portable(root / tag, gathered)
        except WRITE_ERRORS as err:
            error = err
        del gathered
        if any_rank(error is not None):  # every file is written before any rank walks the tag
            raise error or RuntimeError("another rank could not write its part")
        fsync_tree(root / tag)  # every rank: what it wrote is on disk before the manifest
        barrier()
        if rank() == 0:
            write_json(root / tag / STATE_FILE, asdict(state))
            write_manifest(root / tag, extra=state.saved.values())  # the completion marker
    except WRITE_ERRORS as err:
        shutil.rmtree(root / tag, ignore_errors=True)
        previous = [t for t in complete_tags(root) if t != tag]
        raise CheckpointError(
            f"checkpoint {tag} could not be written under {root}: {err}. Its partial files "
            f"were removed; the newest checkpoint is still {previous[-1] if previous else 'none'}"
            ". Free space and run the same command to resume.") from err
    if rank() == 0 and tag_problem(root / tag, checksums=False) is None:
        for old in complete_tags(root)[:-keep]:  # never prune when the new tag is bad
            shutil.rmtree(root / old, ignore_errors=True)
    barrier()
    return tag


def load_checkpoint(engine: Any, root: str | Path, tag: str, world: int,
                    seed: int) -> ControllerState:
    """Load engine state and this rank's RNG from ``tag`` (collective); returns the state,
    its ``world_size`` set to ``world``. A tag written by another number of ranks than
    ``world`` is loaded from its ``portable/`` state (``mlsys.train.portable``); each rank
    then takes the RNG of the old rank of its number where there was one, else the
    dropout stream a fresh start gives it (``seed`` + 1 + rank)."""
    state = read_state(root, tag)
    if state.world_size and state.world_size != world:
        load_portable(engine, Path(root) / tag)
        if not _load_rng(Path(root) / tag):
            torch.manual_seed(seed + 1 + rank())
        state.world_size = world
        return state
    path, client = engine.load_checkpoint(str(root), tag=tag, load_optimizer_states=True,
                                          load_lr_scheduler_states=True)
    if path is None:
        raise RuntimeError(f"{Path(root) / tag}: DeepSpeed could not load this checkpoint")
    _load_rng(Path(root) / tag)
    return read_state(root, tag)


def _load_rng(tag_dir: Path) -> bool:
    """Set this rank's RNG from ``tag_dir/rng/rank<r>.pt``; False where there is none."""
    rng_file = tag_dir / "rng" / f"rank{rank()}.pt"
    if rng_file.is_file():
        _set_rng_state(torch.load(rng_file, weights_only=True))
    return rng_file.is_file()


def fork_run(source_dir: str | Path, target_dir: str | Path, step: int) -> str:
    """Start ``target_dir`` as a copy of ``source_dir`` at its checkpoint of global ``step``
    (the one taken before a transition at that step): the tag, the saved interpolation weights
    (``vcycle/``, paths in the state rewritten, the manifest rewritten with them) and
    ``metrics.jsonl``, with the run-directory marker. Resuming the target with another config
    branches the run there; with the same config it reproduces the source. ``target_dir``
    must be absent, empty or a run directory of mlsys's (it is replaced); returns the tag."""
    src, dst = RunDir(source_dir), RunDir(target_dir)
    problem = dst.claim_problem()
    if problem is not None:
        raise RunDirError(problem)
    found = [t for t in complete_tags(src.checkpoints) if _step_of(t) == step]
    if not found:
        have = ", ".join(complete_tags(src.checkpoints)) or "none"
        raise FileNotFoundError(f"{src.checkpoints}: no complete checkpoint at step {step} "
                                f"(have: {have})")
    tag = min(found, key=lambda t: int(t.rsplit("phase", 1)[1]))
    problem = tag_problem(src.checkpoints / tag)
    if problem is not None:
        raise RuntimeError(f"cannot fork from {src.checkpoints / tag}: {problem}")
    with atomic_path(dst.root) as tmp_root:
        tmp = RunDir(tmp_root)
        shutil.copytree(src.checkpoints / tag, tmp.checkpoints / tag)
        if src.vcycle.is_dir():
            shutil.copytree(src.vcycle, tmp.vcycle)
        shutil.copy2(src.metrics, tmp.metrics)
        tmp.write_marker(dst.root.name)
        state = read_state(tmp.checkpoints, tag)
        moved = {path: str(dst.vcycle / Path(path).name) for path in state.saved.values()}
        state.saved = {level: moved[path] for level, path in state.saved.items()}
        (tmp.checkpoints / tag / STATE_FILE).write_text(json.dumps(asdict(state), indent=1))
        local = {str(tmp.vcycle / Path(p).name): p for p in moved.values()}
        write_manifest(tmp.checkpoints / tag, extra=local)
        _rename_external(tmp.checkpoints / tag, local)
    return tag


def _rename_external(tag_dir: Path, names: dict[str, str]) -> None:
    """Record the manifest's external files under their final paths (``names``: temp path ->
    final path), after ``fork_run`` hashed them under the temp directory."""
    path = tag_dir / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["external"] = {names.get(k, k): v for k, v in manifest["external"].items()}
    write_json(path, manifest)
