"""A progress bar over a run's global steps (rank 0 only; a no-op elsewhere), and the step
log lines: printed above the bar when there is one, else to stdout, flushed."""

from __future__ import annotations

from typing import Any


class Progress:
    def __init__(self, total: int, completed: int = 0, enabled: bool = True) -> None:
        self.total, self.completed, self.enabled = total, completed, enabled
        self._bar: Any = None

    def __enter__(self) -> Progress:
        if self.enabled:
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            from rich.progress import Progress as RichProgress

            self._bar = RichProgress(TextColumn("{task.description}"), BarColumn(),
                                     MofNCompleteColumn(), TimeElapsedColumn(),
                                     TimeRemainingColumn())
            self._bar.start()
            self._task = self._bar.add_task("training", total=self.total,
                                            completed=self.completed)
        return self

    def update(self, completed: int, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, completed=completed, description=description)

    def log(self, line: str) -> None:
        """Print ``line``: through the bar's console when it runs (the bar stays below),
        else to stdout, flushed (SLURM's .out file, ``--no-progress``)."""
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, flush=True)

    def __exit__(self, *exc: object) -> None:
        if self._bar is not None:
            self._bar.stop()
