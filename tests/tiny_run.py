"""Helpers for the training tests: tiny run configs over the conftest corpora (``bert_data``,
``gpt_data``: real stdlib excerpts, sentencepiece 512, megatron shards) and 2-rank launches of
launch/train.py on gloo through mlsys.distributed.spawn."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]


def run_config(kind: str, tok: str, prefix: str, run_dir: Path, phases: list[dict],
               **train: Any) -> dict:
    """A tiny fp32 run config (2 layers, hidden 64) as a dict."""
    return {"name": f"test-{kind}", "run_dir": str(run_dir),
            "model": {"family": kind, "hidden_size": 64, "num_layers": 2, "num_heads": 4,
                      "ffn_size": 128, "max_position": 64, "dropout": 0.1},
            "data": {"tokenizer_dir": tok, "data_prefix": prefix, "seq_length": 64,
                     "split": "90,10,0"},
            "train": {"micro_batch_size": 4, "global_batch_size": 8, "eval_every": 4,
                      "eval_batches": 2, **train},
            "vcycle": {"alpha": 0.8}, "phases": phases}


def write_yaml(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def env() -> dict[str, str]:
    return dict(os.environ, DS_ACCELERATOR="cpu", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")


def start(config: Path, ds: str, nproc: int = 2, extra: tuple[str, ...] = (),
          log: Path | None = None, environ: dict[str, str] | None = None
          ) -> list[subprocess.Popen]:
    """Start launch/train.py on ``nproc`` ranks; ``environ`` overrides ``env()``'s variables."""
    from mlsys.distributed.spawn import start_ranks

    out = open(log, "w") if log is not None else subprocess.DEVNULL
    return start_ranks("launch.train", ["--config", str(config), "--ds_config",
                                        str(REPO / "configs" / "ds" / ds), "--no-progress",
                                        *extra], nproc, env={**env(), **(environ or {})},
                       cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT)


def train(config: Path, ds: str, nproc: int = 2, extra: tuple[str, ...] = (),
          log: Path | None = None, timeout: float | None = 900,
          environ: dict[str, str] | None = None) -> None:
    """Run launch/train.py on ``nproc`` ranks to completion; AssertionError with the log tail.
    A rank still running ``timeout`` seconds after the start, or after a peer failed (blocked
    in a collective with it; ``wait_ranks``), prints its threads' stacks into the log first."""
    from mlsys.distributed.spawn import wait_ranks

    procs = start(config, ds, nproc, extra, log, environ)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        code = wait_ranks(procs, deadline=deadline, end=_stop_with_stacks)
        what = f"exited {code}"
    except TimeoutError as stuck:
        code, what = -1, f"did not end in time ({stuck}); the stacks of every thread then:"
    if code != 0:
        tail = log.read_text()[-12000:] if log is not None else ""
        raise AssertionError(f"training {what}\n{tail}")


def keep_only_checkpoint(run_dir: Path, phase: int, step_in_phase: int) -> str:
    """Make a finished run one that stopped at its checkpoint of (``phase``,
    ``step_in_phase``): ``done.json``, ``final/`` and every other tag removed (a finished run is
    never retrained); returns the tag kept."""
    import json
    import shutil

    from mlsys.train.checkpoint import complete_tags

    (run_dir / "done.json").unlink()
    shutil.rmtree(run_dir / "final")
    root = run_dir / "checkpoints"
    states = {t: json.loads((root / t / "controller.json").read_text())
              for t in complete_tags(root)}
    inside = [t for t, st in states.items()
              if (st["phase"], st["step_in_phase"]) == (phase, step_in_phase)]
    assert inside, list(states)
    for t in states:
        if t != inside[-1]:
            shutil.rmtree(root / t)
    return inside[-1]


def _stop_with_stacks(procs: list[subprocess.Popen]) -> None:
    """SIGUSR2 (every thread's stack to the log, launch/train.py) to every live rank and its
    children (the data workers), SIGKILL 3 s later."""
    stuck = [pid for q in procs if q.poll() is None for pid in (q.pid, *_children(q.pid))]
    for pid in stuck:
        _signal(pid, signal.SIGUSR2)
    time.sleep(3.0)
    for pid in stuck:
        _signal(pid, signal.SIGKILL)
    for q in procs:
        q.wait()


def _children(pid: int) -> list[int]:
    """Direct children of ``pid`` (from /proc)."""
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            kids.append(int(stat.parent.name))
    return kids


def _signal(pid: int, sig: int) -> None:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        pass


def exported_val_loss(config_path: Path, final_dir: Path, auto_class: type) -> float:
    """Validation loss of an exported model, in this process, on the run's validation samples."""
    from mlsys.config import load_run_config
    from mlsys.data.run_data import build_run_data
    from mlsys.data.stream import batches, eval_indices
    from mlsys.train.evaluate import validation_loss

    cfg = load_run_config(config_path)
    g = cfg.train.global_batch_size
    data = build_run_data(cfg, cfg.train_samples, cfg.train.eval_batches * g)
    model = auto_class.from_pretrained(final_dir)
    idx = eval_indices(cfg.train.eval_batches * g, cfg.train.micro_batch_size, 1, 0)
    return validation_loss(model, batches(data.valid, idx, data.collate), cfg.kind)


def wait_for_small_phase(metrics: Path, procs, phase_step: int, timeout: float = 600) -> None:
    """Wait until the run logs step ``phase_step`` of a level-2 phase."""
    from mlsys.train.metrics import read_metrics

    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            raise AssertionError("a rank exited before the small phase")
        if metrics.exists() and any(r["event"] == "step" and r["level"] == 2
                                    and r["phase_step"] >= phase_step
                                    for r in read_metrics(metrics)):
            return
        time.sleep(0.2)
    raise AssertionError("no small-phase step in time")
