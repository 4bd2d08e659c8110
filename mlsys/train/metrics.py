"""metrics.jsonl: one JSON record per line, written by rank 0, and the loss-vs-FLOPs plot.

Records (every one has ``event``, ``step`` = global optimizer steps so far, and ``flops`` =
cumulative training FLOPs):

- ``step``: phase, level, phase_step, tokens (cumulative), flops, loss, lr, seconds (per
  step, the mean over the record's steps), window (how many steps the record covers: its
  loss and seconds are their means), tokens_per_s, tflops_per_device (model FLOPs per second
  per device, in 1e12) and mfu (tflops_per_device / peak, a fraction; null without a peak)
  over the record's steps (``mlsys.train.throughput``), peak_memory_bytes (peak accelerator
  memory so far, or peak resident memory on a CPU; rank 0), wall (cumulative seconds of
  training, transitions and validation, across resumes); dropout while a dropout window runs
- ``eval``: phase, level, phase_step, tokens, flops, val_loss, wall
- ``transition``: phase (the new one), from_level, to_level, transition_seconds,
  peak_memory_bytes
- ``checkpoint``, ``resume``, ``preempted``: phase, phase_step, tag
- ``end``: val_loss, flops, wall, peak_memory_bytes, final_dir
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from mlsys.atomic import atomic_path, write_text


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """All records of a metrics.jsonl file, in order. A last line cut short (a process killed
    while writing it) is left out; a bad line anywhere else is an error naming the line."""
    with open(path) as f:
        lines = [(i, line) for i, line in enumerate(f, 1) if line.strip()]
    records = []
    for i, line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            if i == lines[-1][0] and not line.endswith("\n"):
                break
            raise ValueError(f"{path}:{i}: not a JSON record: {line[:80]!r}") from None
    return records


class MetricsLog:
    """Append-only JSONL writer; a no-op on ranks other than 0. Buffered: lines reach the file
    at least every ``flush_seconds`` and on ``flush()`` (before every checkpoint) and
    ``close()``, so a resume never misses a record its checkpoint covers. A ``monitor``
    (``mlsys.train.monitor.RunMonitor``) gets every record and sends it on each flush."""

    def __init__(self, path: str | Path, enabled: bool, flush_seconds: float = 0.1,
                 monitor: Any = None) -> None:
        self.path = Path(path)
        self.enabled = enabled
        self.monitor = monitor  # a RunMonitor: gets every record, sent on flush
        self.flush_seconds = flush_seconds
        self._file = None
        self._flushed = time.monotonic()
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = open(self.path, "a")

    def write(self, record: dict[str, Any]) -> None:
        if self._file is not None:
            self._file.write(json.dumps(record, allow_nan=False) + "\n")
            if self.monitor is not None:
                self.monitor.add(record)
            if time.monotonic() - self._flushed >= self.flush_seconds:
                self.flush()

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            self._flushed = time.monotonic()
            if self.monitor is not None:  # after the lines are on disk (see RunMonitor)
                self.monitor.flush()

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None


def last_position(path: str | Path) -> tuple[int, int] | None:
    """(step, phase) of the furthest record in a metrics file; None if it has none."""
    path = Path(path)
    records = read_metrics(path) if path.exists() else []
    return max(((r.get("step", 0), r.get("phase", 0)) for r in records), default=None)


def truncate_after(path: str | Path, step: int, phase: int | None = None) -> int:
    """Drop records logged after global step ``step`` (and, given ``phase``, those of a later
    phase at that step: the transition of a checkpoint taken before it) and any ``end``
    record (a run forked from a finished one goes on): what a resumed run will redo. Returns
    how many were dropped. Atomic (temp file, rename)."""
    path = Path(path)
    if not path.exists():
        return 0
    records = read_metrics(path)
    last = (step, float("inf") if phase is None else phase)
    keep = [r for r in records if (r.get("step", 0), r.get("phase", 0)) <= last
            and r.get("event") != "end"]  # a resumed run ends anew
    write_text(path, "".join(json.dumps(r) + "\n" for r in keep))
    return len(records) - len(keep)


def save_figure(fig: Any, png: str | Path, dpi: int) -> Path:
    """Write a matplotlib figure to ``png`` atomically and close it."""
    import matplotlib.pyplot as plt

    with atomic_path(png) as tmp:
        fig.savefig(tmp, dpi=dpi)
    plt.close(fig)
    return Path(png)


def plot_val_loss(records: list[dict[str, Any]], png: str | Path, title: str = "") -> Path:
    """Validation loss against cumulative FLOPs, one colour per level, transitions marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    png = Path(png)
    evals = [r for r in records if r["event"] == "eval"]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot([r["flops"] for r in evals], [r["val_loss"] for r in evals], color="0.7", lw=1)
    for level in sorted({r["level"] for r in evals}):
        pts = [r for r in evals if r["level"] == level]
        ax.scatter([r["flops"] for r in pts], [r["val_loss"] for r in pts], s=14,
                   label=f"level {level}")
    for r in records:
        if r["event"] == "transition":
            ax.axvline(r["flops"], color="0.85", ls="--", lw=1)
    ax.set_xlabel("cumulative training FLOPs")
    ax.set_ylabel("validation loss")
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, png, dpi=110)
    return png
