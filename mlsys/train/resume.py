"""Where a run starts, decided by rank 0 holding the run directory's lock, before anything in
the directory is changed:

- ``--fresh``: the project's own outputs of an earlier run are removed (``RunDir.wipe``).
- a config that differs from the one the directory's run was started with: an error listing
  every changed field (``train.eval_every: 20 -> 50``); fields that change no number of the
  run (``SAFE_CHANGES``) can be accepted one by one with ``--accept-change FIELD``.
- ``done.json``: the run finished; nothing to do (never retrained without ``--fresh``).
- the newest good checkpoint: resumed, the metrics log cut back to it.
- an earlier run's outputs without any checkpoint: an error (``--fresh`` starts it over).
- otherwise a fresh start in a new (or empty) directory.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from mlsys.config import ConfigError, RunConfig, parse_run_config
from mlsys.distributed.process import from_main, is_main
from mlsys.train.checkpoint import latest_good_tag, read_state, tags
from mlsys.train.metrics import last_position, truncate_after
from mlsys.train.portable import has_portable
from mlsys.train.rundir import RunDir, RunDirError
from mlsys.train.runlock import RunLock

# Fields whose change on resume alters no number the run computes (how often it logs,
# evaluates, checkpoints, exports levels; its name; where megatron caches its indices; the
# peak MFU is reported against).
SAFE_CHANGES = ("name", "train.eval_every", "train.log_every", "train.checkpoint_every",
                "train.keep_checkpoints", "train.portable_checkpoints", "train.data_workers",
                "train.export_levels", "train.peak_tflops", "data.cache_dir")
IGNORED = ("run_dir",  # a run directory may be moved or named differently
           "vcycle.chosen")  # what recipe: auto chose, in words: the numbers are compared


@dataclass(frozen=True)
class Start:
    tag: str | None  # the checkpoint to load; None: a fresh start
    already_done: bool = False  # the run finished earlier: nothing to do
    # rank 0, resuming: (step, phase) of the last record logged before, what monitors have
    logged_through: tuple[int, int] | None = None


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}{k}."))
        return out or {prefix.rstrip("."): {}}
    if isinstance(value, list | tuple):
        out = {}
        for i, v in enumerate(value):
            out.update(_flatten(v, f"{prefix}{i}."))
        return out or {prefix.rstrip("."): []}
    return {prefix.rstrip("."): value}


def config_changes(stored: dict[str, Any], cfg: RunConfig, source: str) -> dict[str, tuple]:
    """Dotted field -> (stored value, new value) for every field that differs (the stored
    config validated again, so a field added since with its default is unchanged)."""
    old = _flatten(json.loads(json.dumps(parse_run_config(stored, source).model_dump())))
    new = _flatten(json.loads(json.dumps(cfg.model_dump())))
    missing = "<absent>"
    return {k: (old.get(k, missing), new.get(k, missing)) for k in sorted(set(old) | set(new))
            if old.get(k, missing) != new.get(k, missing)
            and k not in IGNORED and k.split(".")[0] not in IGNORED}


def check_same_config(run: RunDir, cfg: RunConfig, accept: Iterable[str] = ()) -> None:
    """ConfigError unless ``cfg`` equals the run's stored config up to accepted changes."""
    stored = run.stored_config()
    if stored is None:
        return
    accept = set(accept)
    bad = sorted(accept - set(SAFE_CHANGES))
    if bad:
        raise ConfigError(f"--accept-change {bad[0]}: only fields that change no number of "
                          f"the run can be accepted on resume: {', '.join(SAFE_CHANGES)}")
    changes = {k: v for k, v in config_changes(stored, cfg, str(run.run_config)).items()
               if k not in accept}
    if not changes:
        return
    lines = "\n".join(f"  {k}: {a!r} -> {b!r}" for k, (a, b) in changes.items())
    safe = [k for k in changes if k in SAFE_CHANGES]
    hint = (f" Accept {', '.join(safe)} with --accept-change FIELD;" if safe else "")
    raise ConfigError(f"{run.root}: the config differs from the one this run was started "
                      f"with ({run.run_config}):\n{lines}\nNothing was changed.{hint} other "
                      "changes need a new run_dir, or --fresh to discard this run")


def _decide(run: RunDir, cfg: RunConfig, resume: bool | str, accept: Iterable[str],
            world: int | None = None) -> Start:
    """Rank 0, lock held: see the module docstring."""
    if resume is False:
        run.wipe()
        return Start(None)
    check_same_config(run, cfg, accept)
    if run.is_done():
        return Start(None, already_done=True)
    tag = latest_good_tag(run.checkpoints, report=lambda msg: print(f"resume: {msg}",
                                                                    flush=True))
    if tag is None and tags(run.checkpoints):
        raise RunDirError(f"{run.checkpoints}: no checkpoint can be resumed (see above); "
                          "nothing was changed. --fresh starts the run over")
    if tag is None and resume is True:
        raise RunDirError(f"{run.checkpoints}: --resume given but no checkpoint found")
    if tag is None:
        if run.holds_run():
            raise RunDirError(f"{run.root}: holds an unfinished run without a checkpoint to "
                              "resume from; nothing was changed. --fresh starts it over "
                              "(removing its outputs)")
        return Start(None)
    logged_through = last_position(run.metrics) if run.metrics.exists() else None
    at = read_state(run.checkpoints, tag)
    moved = world is not None and at.world_size and at.world_size != world
    if moved and not has_portable(run.checkpoints / tag):
        raise RunDirError(f"{run.checkpoints / tag}: written by {at.world_size} ranks, and this "
                          f"start has {world}: the checkpoint has no portable/ state "
                          f"(train.portable_checkpoints was false when it was written), and "
                          f"DeepSpeed's optimizer and RNG state are per rank; nothing was "
                          f"changed. Start with {at.world_size} ranks")
    dropped = truncate_after(run.metrics, at.global_step, at.phase) if run.metrics.exists() else 0
    ranks = f"; written by {at.world_size} ranks, resumed on {world} from its portable " \
        "state" if moved else ""
    print(f"resuming from {tag} (phase {at.phase}, step {at.step_in_phase}; dropped "
          f"{dropped} later records{ranks})", flush=True)
    return Start(tag, logged_through=logged_through)


_ERRORS = (RunDirError, ConfigError)


def open_run(run: RunDir, cfg: RunConfig, resume: bool | str,
             accept: Iterable[str] = (), world: int | None = None
             ) -> tuple[Start, RunLock | None]:
    """Claim the run directory, lock it and decide how the run starts (collective: rank 0
    decides, every rank gets the answer or raises the same error). Returns the start and,
    on rank 0, the held lock (keep it for the run's life). ``world``: this start's ranks; a
    checkpoint written by another number of ranks is refused."""
    lock: RunLock | None = None

    def decide() -> tuple[Start | None, tuple[str, str] | None]:
        nonlocal lock
        try:
            run.claim(cfg.name)
            lock = RunLock(run.lock).acquire()
            return _decide(run, cfg, resume, accept, world), None
        except _ERRORS as err:
            if lock is not None:
                lock.release()
                lock = None
            return None, (type(err).__name__, str(err))

    start, error = from_main(decide)
    if error is not None:
        kind = next(e for e in _ERRORS if e.__name__ == error[0])
        raise kind(error[1])
    assert start is not None
    return start, (lock if is_main() else None)
