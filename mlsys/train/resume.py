"""Where a run starts: fresh (an earlier run's outputs wiped) or at its newest checkpoint (the
metrics log cut back to that checkpoint, so the resumed run appends exactly what it redoes)."""

from __future__ import annotations

from dataclasses import dataclass

from mlsys.dist.process import barrier, from_main, is_main
from mlsys.train.checkpoint import complete_tags, latest_good_tag, read_state
from mlsys.train.metrics import last_position, truncate_after
from mlsys.train.rundir import RunDir


@dataclass(frozen=True)
class Start:
    tag: str | None  # the checkpoint to load; None: a fresh start
    already_done: bool = False  # the run finished earlier: nothing to do
    # rank 0, resuming: (step, phase) of the last record logged before, what monitors have
    logged_through: tuple[int, int] | None = None


def start_tag(run: RunDir, resume: bool | str) -> str | None:
    """The checkpoint a run starts from, None for a fresh start: ``resume`` False starts
    fresh, True insists on a checkpoint, "auto" takes the newest good one if any (complete
    and matching its manifest; rank 0 checks and reports, every rank gets its answer)."""
    if resume is False:
        return None
    tag = from_main(lambda: latest_good_tag(
        run.checkpoints, report=lambda msg: print(f"resume: {msg}", flush=True)))
    if tag is None and complete_tags(run.checkpoints):
        raise RuntimeError(f"{run.checkpoints}: every checkpoint is damaged (see above); "
                           "nothing was changed. --fresh starts the run over")
    if resume is True and tag is None:
        raise FileNotFoundError(f"{run.checkpoints}: --resume given but no checkpoint found")
    return tag


def open_run(run: RunDir, resume: bool | str) -> Start:
    """Decide how the run starts and make the run directory agree (collective)."""
    tag = start_tag(run, resume)
    if tag is None:
        if is_main():
            run.wipe()
        barrier()
        return Start(None)
    if run.is_done() and resume == "auto":
        return Start(tag, already_done=True)
    logged_through = None
    if is_main():  # drop what the resumed run will redo, before appending
        logged_through = last_position(run.metrics)
        at = read_state(run.checkpoints, tag)
        dropped = truncate_after(run.metrics, at.global_step, at.phase)
        print(f"resuming from {tag} (phase {at.phase}, step {at.step_in_phase}; dropped "
              f"{dropped} later records)", flush=True)
    return Start(tag, logged_through=logged_through)
