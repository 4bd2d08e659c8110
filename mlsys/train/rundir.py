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
"""

from __future__ import annotations

import shutil
from pathlib import Path


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

    def is_done(self) -> bool:
        return self.done.is_file()

    def wipe(self) -> None:
        """Remove an earlier run's outputs (a fresh start); the configs are rewritten anyway."""
        for p in (self.checkpoints, self.vcycle, self.final, self.metrics, self.done, self.plot,
                  self.root / "levels", self.root / "tensorboard", self.root / "csv_monitor"):
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
