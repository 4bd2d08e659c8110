"""``RunDir``: the layout of one run's output directory, ``runs/NAME/``, in one place.

    checkpoints/<tag>/        DeepSpeed state, rng/rank<r>.pt, controller.json (written last)
    vcycle/phase<p>-level<k>.safetensors   weights saved on the way down, for interpolation
    final/                    the exported Hugging Face model and tokenizer
    levels/phase<p>-level<k>/ every phase's model, exported like final/ (``vcycle.export_levels``)
    tensorboard/, csv_monitor/   DeepSpeed monitor output (when the DeepSpeed config enables it)
    metrics.jsonl             one JSON record per event
    val_loss_vs_flops.png     validation loss against cumulative FLOPs
    run_config.json, ds_config.json        the resolved configs the run used
    done.json                 written last at the end of a finished run
    .mlsys-run                the ownership marker, written when mlsys creates the directory
    .lock                     held (flock) by rank 0 while a run uses the directory

mlsys deletes nothing it did not write: ``claim`` takes a directory that does not exist, is
empty or carries the marker, and refuses any other; ``wipe`` (only on ``--fresh``) removes
only the outputs listed above, and only in a directory with the marker.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import time
from pathlib import Path

from mlsys.atomic import write_json

MARKER = ".mlsys-run"
LOCK = ".lock"
# present in a claimed directory that holds no run yet (data_cache: megatron's index cache,
# keyed by its inputs, reused by a fresh start)
OWN_ENTRIES = {MARKER, LOCK, "data_cache"}


class RunDirError(RuntimeError):
    """The run directory cannot be used as asked; nothing in it was changed."""


class RunDir:
    """The paths of one run directory (nothing is created until written)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def vcycle(self) -> Path:
        return self.root / "vcycle"

    @property
    def final(self) -> Path:
        return self.root / "final"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def plot(self) -> Path:
        return self.root / "val_loss_vs_flops.png"

    @property
    def run_config(self) -> Path:
        return self.root / "run_config.json"

    @property
    def ds_config(self) -> Path:
        return self.root / "ds_config.json"

    @property
    def done(self) -> Path:
        return self.root / "done.json"

    @property
    def monitors(self) -> Path:
        """Where DeepSpeed monitor sections without an ``output_path`` write."""
        return self.root

    def level_export(self, phase: int, level: int) -> Path:
        """Where the model at the end of phase ``phase`` (at ``level``) is exported."""
        return self.root / "levels" / f"phase{phase}-level{level}"

    def saved_weights(self, phase: int, level: int) -> Path:
        """Where the level's weights are saved when phase ``phase`` ends by going down."""
        return self.vcycle / f"phase{phase}-level{level}.safetensors"

    @property
    def marker(self) -> Path:
        return self.root / MARKER

    @property
    def lock(self) -> Path:
        return self.root / LOCK

    def is_done(self) -> bool:
        return self.done.is_file()

    def is_ours(self) -> bool:
        return self.marker.is_file()

    def holds_run(self) -> bool:
        """True if an earlier run left outputs here (anything but the marker and lock)."""
        return self.root.is_dir() and any(p.name not in OWN_ENTRIES for p in self.root.iterdir())

    def claim_problem(self) -> str | None:
        """Why mlsys may not use this directory (None: it may). Reads only."""
        root = self.root
        if str(root) in ("", ".") or root.resolve() == Path.cwd().resolve():
            return f"run_dir {str(root)!r}: the current directory is not a run directory"
        if root.exists() and not root.is_dir():
            return f"{root}: exists and is not a directory"
        if root.is_dir() and not self.is_ours() and any(root.iterdir()):
            return (f"{root}: exists, is not empty and was not created by mlsys (no {MARKER}); "
                    "nothing was changed. Choose another run_dir (or --run-dir)")
        return None

    def claim(self, name: str) -> None:
        """Create the directory and its marker if needed (see ``claim_problem``)."""
        problem = self.claim_problem()
        if problem is not None:
            raise RunDirError(problem)
        self.root.mkdir(parents=True, exist_ok=True)
        if not self.is_ours():
            self.write_marker(name)

    def write_marker(self, name: str) -> None:
        write_json(self.marker, {"created_by": "mlsys", "name": name,
                                 "host": socket.gethostname(), "pid": os.getpid(),
                                 "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")})

    def wipe(self) -> None:
        """Remove an earlier run's outputs (``--fresh``): only the entries mlsys writes, and
        only in a directory carrying the marker; anything else in it stays."""
        if not self.is_ours():
            raise RunDirError(f"{self.root}: no {MARKER}: not wiping a directory mlsys did not "
                              "create")
        for p in (self.checkpoints, self.vcycle, self.final, self.metrics, self.done, self.plot,
                  self.run_config, self.ds_config,
                  self.root / "levels", self.root / "tensorboard", self.root / "csv_monitor"):
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink(missing_ok=True)

    def stored_config(self) -> dict | None:
        """The run config an earlier run of this directory saved, or None."""
        try:
            return json.loads(self.run_config.read_text())
        except FileNotFoundError:
            return None
        except ValueError as err:
            raise RunDirError(f"{self.run_config}: unreadable ({err}); nothing was changed") \
                from None
