"""Committed results: a finished benchmark run, compact, in the repository, so that it survives
the machine it ran on (every session of a long sweep starts on a fresh one, without ``runs/``).

One gzip'd JSON file per run, ``bench/results/<profile>/<family>/<run>.json.gz``, where
``<profile>`` is the profile that *declares* the run (``cpu-budget``'s frontier runs are stored
under ``cpu-budget/`` whichever profile that ``extends`` it ran them), so the file does not
depend on ``--out``::

    {"format": "mlsys-bench-result-1", "profile", "family", "run",
     "run_config": <run_config.json>, "fork": {"from", "step"} or null,
     "done": <done.json>, "metrics": [<records>]}

``metrics`` keeps what the analysis (``mlsys.bench.compare``, ``mlsys.bench.report``) reads:
every ``eval``, ``transition`` and ``end`` record whole, one ``step`` record in
``STEP_EVERY`` (global step a multiple of it: the training-loss curve, thinned), and one
``steps`` record in place of the step records left out: their count and the median of their
``seconds`` (the report's ``median_step_seconds``, exact). ``checkpoint``, ``resume`` and
``preempted`` records are dropped. The gzip header carries no time stamp, so writing the same
result again gives the same bytes (no change for git).

A committed result stands for its run when its config is the one the profile asks for now:
``runner._same_config``'s rule (``BOOKKEEPING`` fields ignored), ``run_dir`` ignored too (a
location, not a number), and the same fork point.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from mlsys.atomic import atomic_path
from mlsys.bench.compare import median_step_seconds

FORMAT = "mlsys-bench-result-1"
RESULTS = Path("bench") / "results"  # under the repository root
STEP_EVERY = 50
KEPT = ("eval", "transition", "end")

Record = dict[str, Any]


def result_path(results: Path, profile: str, family: str, run: str) -> Path:
    return Path(results) / profile / family / f"{run}.json.gz"


def compact(records: list[Record], every: int = STEP_EVERY) -> list[Record]:
    """The records the analysis reads (see the module docstring), in order, after a ``steps``
    summary record."""
    steps = [r for r in records if r.get("event") == "step"]
    out: list[Record] = [{"event": "steps", "step": steps[-1]["step"] if steps else 0,
                          "count": len(steps), "median_seconds": median_step_seconds(records),
                          "kept_every": every}]
    for r in records:
        event = r.get("event")
        if event in KEPT or (event == "step" and r["step"] % every == 0):
            out.append(r)
    return out


def encode(result: dict[str, Any]) -> bytes:
    return gzip.compress(json.dumps(result, separators=(",", ":")).encode(), mtime=0)


def write_result(path: Path, result: dict[str, Any]) -> bool:
    """Write ``result`` to ``path`` atomically (``mlsys.atomic``), unless the file already holds
    exactly these bytes; True if it wrote."""
    data = encode({"format": FORMAT, **result})
    if path.is_file() and path.read_bytes() == data:
        return False
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return True


def read_result(path: Path) -> dict[str, Any] | None:
    """The committed result at ``path``; None if there is none. An unreadable one is an error
    naming the file (a committed result is never silently replaced by a re-run)."""
    if not path.is_file():
        return None
    try:
        result = json.loads(gzip.decompress(path.read_bytes()))
    except (OSError, ValueError) as err:
        raise RuntimeError(f"{path}: unreadable committed result ({err}); restore it from git "
                           "or remove it to re-run the run") from None
    if not isinstance(result, dict) or result.get("format") != FORMAT:
        raise RuntimeError(f"{path}: not a committed result of format {FORMAT}")
    return result
