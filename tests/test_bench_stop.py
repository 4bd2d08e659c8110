"""A stop signal to the benchmark runner (SLURM's SIGTERM before a time limit, Ctrl-C): every run
it is training gets it, checkpoints and exits; no run starts after it; the runner exits 0
without an analysis, and leaves no training process behind. Real runs, a real runner process."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import yaml

from mlsys.train.checkpoint import complete_tags, step_of
from mlsys.train.metrics import read_metrics
from mlsys.train.rundir import RunDir

REPO = Path(__file__).resolve().parents[1]
LONG = 20000  # steps: far more than a run trains before the signal (tiny model, ~ms a step)


def _profile(root: Path, data: dict) -> None:
    """Three independent long constant-lr runs of a tiny GPT-2: a, b, c."""
    run = {"train": {"decay": "constant"}, "phases": [{"level": 1, "steps": LONG, "lr": 1e-3}]}
    profile = {
        "ds_config": str(REPO / "configs" / "ds" / "zero1.json"), "ranks": 1, "budget": LONG,
        "families": {"gpt": {
            "model": {"family": "gpt", "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                      "ffn_size": 64, "max_position": 32, "dropout": 0.0},
            "data": {"tokenizer_dir": data["tokenizer_dir"], "data_prefix": data["data_prefix"],
                     "seq_length": 32, "split": "90,10,0"},
            "train": {"seed": 1, "micro_batch_size": 2, "global_batch_size": 2,
                      "eval_every": 1000, "eval_batches": 1, "checkpoint_every": 0}}},
        "runs": {name: run for name in ("a", "b", "c")}}
    (root / "configs" / "bench").mkdir(parents=True)
    (root / "configs" / "bench" / "tiny.yaml").write_text(yaml.safe_dump(profile))


def _stepped(run: Path) -> bool:
    """True once the run has recorded a training step."""
    path = run / "metrics.jsonl"
    return path.is_file() and any(r["event"] == "step" for r in read_metrics(path))


def _training_processes(out: Path) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if "launch.train" in cmd and str(out) in cmd:
            found.append(p)
    return found


@pytest.mark.parametrize("jobs, signum", [(1, signal.SIGTERM), (2, signal.SIGINT)])
def test_a_stop_signal_to_the_runner_checkpoints_its_runs_and_starts_no_other(
        gpt_data, tmp_path, jobs, signum):
    root, out = tmp_path / "repo", tmp_path / "runs" / "tiny"
    _profile(root, gpt_data)
    code = ("import sys; from pathlib import Path; from mlsys.bench.runner import benchmark; "
            f"r = benchmark('tiny', 'gpt', Path({str(out)!r}), Path({str(root)!r}), None, "
            f"jobs={jobs}); print('RESULT', r, flush=True)")
    env = dict(os.environ, PYTHONPATH=str(REPO), DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1")
    log_path = tmp_path / "runner.log"  # a file, not a pipe: nobody reads it until the end
    with open(log_path, "w") as log_file:
        runner = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=str(root),
                                  stdout=log_file, stderr=subprocess.STDOUT)
    started = ["a", "b"][:jobs]  # in profile order, `jobs` at a time
    deadline = time.monotonic() + 300
    while not all(_stepped(out / name) for name in started):
        assert runner.poll() is None, log_path.read_text()
        assert time.monotonic() < deadline, "the runs did not start training"
        time.sleep(0.5)
    runner.send_signal(signum)
    runner.wait(timeout=180)
    log = log_path.read_text()

    assert runner.returncode == 0, log
    assert f"stopped by {signal.Signals(signum).name}" in log
    assert "RESULT {}" in log  # no analysis after a stop
    for name in started:
        run = RunDir(out / name)
        records = read_metrics(run.root / "metrics.jsonl")
        preempted = [r for r in records if r["event"] == "preempted"]
        assert len(preempted) == 1 and preempted[0]["signal"] == signum, name
        tags = complete_tags(run.checkpoints)
        assert tags and not run.is_done(), name
        steps = [r["step"] for r in records if r["event"] == "step"]
        assert 0 < steps[-1] < LONG
        assert step_of(tags[-1]) == steps[-1]  # checkpointed where it stopped
    for name in {"a", "b", "c"} - set(started):
        assert not (out / name).exists(), f"{name} started after the stop signal"
    assert _training_processes(out) == []
