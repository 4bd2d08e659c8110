"""DeepSpeed's monitors (the DeepSpeed config's ``tensorboard``, ``csv_monitor``, ``wandb`` and
``comet`` sections) fed from the run's metric records, on rank 0.

The engines never see these sections (``without_monitors``): an engine's own monitor counts
samples from zero at every rebuild and reads the loss to the host every step. Instead every
step and eval record becomes events at x = the global step: ``Train/loss``, ``Train/lr``,
``Train/level``, ``Train/tokens``, ``Train/flops``, ``Eval/val_loss`` (``Eval/val_top1`` for
images), so the curves continue across transitions and resumes. Events reach the monitors
when the metrics log flushes, after its lines are on disk; a resumed run passes the position
of the last record it had logged (``skip_through``) and the records it redoes up to there are
not sent again, so no point appears twice. A section without ``output_path`` writes inside
the run directory, under its section name unless it names a ``job_name``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

SECTIONS = ("tensorboard", "csv_monitor", "wandb", "comet")
TRAIN_FIELDS = {"loss": "Train/loss", "lr": "Train/lr", "level": "Train/level",
                "tokens": "Train/tokens", "flops": "Train/flops"}
EVAL_FIELDS = {"val_loss": "Eval/val_loss", "val_top1": "Eval/val_top1"}
DEFAULT_JOB = "DeepSpeedJobName"


def without_monitors(ds_config: dict[str, Any]) -> dict[str, Any]:
    """``ds_config`` without its monitor sections (what an engine is built with)."""
    return {k: v for k, v in ds_config.items() if k not in SECTIONS}


def monitor_sections(ds_config: dict[str, Any], run_root: Path) -> dict[str, dict[str, Any]]:
    """The enabled monitor sections, output paths resolved into ``run_root`` where unset."""
    out = {}
    for name in SECTIONS:
        section = dict(ds_config.get(name) or {})
        if not section.get("enabled"):
            continue
        if name in ("tensorboard", "csv_monitor"):
            if not section.get("output_path"):
                section["output_path"] = str(run_root)
                if section.get("job_name", DEFAULT_JOB) == DEFAULT_JOB:
                    section["job_name"] = name
        out[name] = section
    return out


def events_of(record: dict[str, Any]) -> list[tuple[str, float, int]]:
    """The monitor events of one metrics record (none for other events)."""
    fields = {"step": TRAIN_FIELDS, "eval": EVAL_FIELDS}.get(record.get("event"), {})
    return [(label, float(record[key]), int(record["step"]))
            for key, label in fields.items() if record.get(key) is not None]


class RunMonitor:
    """The DeepSpeed ``MonitorMaster`` of a run's enabled sections (rank 0 only; a no-op when
    none is enabled). ``add`` queues a record's events; ``flush`` sends them."""

    def __init__(self, ds_config: dict[str, Any], run_root: Path,
                 skip_through: tuple[int, int] | None = None) -> None:
        self.sections = monitor_sections(ds_config, run_root)
        self.skip_through = skip_through
        self.pending: list[tuple[str, float, int]] = []
        self.master = None
        if self.sections:
            from deepspeed.monitor.config import get_monitor_config
            from deepspeed.monitor.monitor import MonitorMaster

            self.master = MonitorMaster(get_monitor_config(self.sections))
            csv = self.master.csv_monitor
            if csv is not None:  # files already there have their header: append below it
                csv.filenames = [f.removesuffix(".csv") for f in os.listdir(csv.log_dir)]

    @property
    def enabled(self) -> bool:
        return self.master is not None

    def add(self, record: dict[str, Any]) -> None:
        if self.master is None:
            return
        if self.skip_through is not None:
            if (record.get("step", 0), record.get("phase", 0)) <= self.skip_through:
                return  # already sent before the resume
            self.skip_through = None
        self.pending += events_of(record)

    def flush(self) -> None:
        if self.master is not None and self.pending:
            self.master.write_events(self.pending)
            self.pending = []
