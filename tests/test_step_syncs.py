"""The training step waits for nothing: no host sync per micro-step (losses stay on the device
until a step record), a stop signal agreed inside the record's own all-reduce (honoured at the
next record, within ``log_every`` steps, even when only one rank got it), and records every
``log_every`` steps that average exactly what per-step records would have shown."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from mlsys.distributed.process import end_process_group
from mlsys.train.metrics import read_metrics
from tests.tiny_models import make
from tests.tiny_run import REPO, run_config, start, train, write_yaml

SYNCS = ("item", "cpu", "tolist", "__float__", "numpy")


@pytest.fixture
def one_rank_group():
    import torch.distributed as dist

    from mlsys.distributed.spawn import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    dist.init_process_group("gloo", rank=0, world_size=1)
    yield
    end_process_group()
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(key, None)


def test_no_host_sync_inside_the_step(one_rank_group, monkeypatch):
    from mlsys.config import TrainConfig
    from mlsys.train.engine import build_engine, destroy_engine
    from mlsys.train.step import LossWindow, train_step

    model = make("gpt2")
    ds = {"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
          "gradient_accumulation_steps": 4, "zero_optimization": {"stage": 1}}
    engine = build_engine(model, ds, TrainConfig(), 1e-3, lambda s: 1.0)
    batches = [{"input_ids": torch.randint(0, 61, (2, 16)), "labels": torch.randint(0, 61, (2, 16))}
               for _ in range(4)]
    calls = []  # (sync, the file that asked for it)

    def counting(name, original):
        def sync(self, *args, **kwargs):
            calls.append((name, sys._getframe(1).f_code.co_filename))
            return original(self, *args, **kwargs)
        return sync

    for name in SYNCS:
        monkeypatch.setattr(torch.Tensor, name, counting(name, getattr(torch.Tensor, name)))
    window = LossWindow()
    for length in (1, 2, 4):  # a length level (mlsys/length.py) asks for none either
        window.add(train_step(engine, batches, torch.device("cpu"), length), 1e-3)
    ours = [(n, f) for n, f in calls if "/mlsys/" in f]
    assert ours == [], ours  # 3 steps x 4 micro-batches: not one sync asked by mlsys
    # (torch's AdamW reads its step count, as it does in any loop: not ours, not counted)
    means = window.close()
    step_py = str(REPO / "mlsys" / "train" / "step.py")
    assert [(n, f) for n, f in calls if "/mlsys/" in f] == [("tolist", step_py)]
    assert torch.isfinite(torch.tensor(means.loss)) and not means.stop
    monkeypatch.undo()
    # At a length level too the engine finds the output's tensors and hooks its backward
    # prologue on them (what it attaches to the first one; a plain object would get none).
    from mlsys.length import length_forward

    with length_forward(engine.module, 2):
        out = engine(**batches[0])
    assert out.loss._backward_hook_managers
    del out
    destroy_engine(engine)


WORKER = r"""
import json, torch
import torch.distributed as dist
from mlsys.train.step import LossWindow
dist.init_process_group("gloo")
rank, seen = dist.get_rank(), []
for record in range(1, 5):
    window = LossWindow()
    for step in range(3):  # losses 1..3 on rank 0, 11..13 on rank 1
        window.add(torch.tensor(10.0 * rank + step + 1), 1e-3)
    means = window.close(stop=rank == 1 and record >= 3)  # only rank 1 is signalled
    seen.append([means.loss, means.stop])
print(json.dumps(seen), flush=True)
"""


def test_records_agree_on_the_mean_loss_and_the_stop_flag():
    from mlsys.distributed.spawn import free_port

    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", WORKER], cwd=REPO, text=True,
                              stdout=subprocess.PIPE, env=dict(
                                  os.environ, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                  MASTER_PORT=port, PYTHONPATH=str(REPO)))
             for r in range(2)]
    outs = [json.loads(p.communicate(timeout=120)[0].strip().splitlines()[-1]) for p in procs]
    # mean of 1, 2, 3, 11, 12, 13 on both ranks; the stop seen by both from the third record
    assert outs == [[[7.0, False], [7.0, False], [7.0, True], [7.0, True]]] * 2


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_both_at_the_next_record(gpt_data, tmp_path: Path):
    """SIGTERM to rank 1 only, records every 3 steps: both ranks checkpoint and exit 0 at a
    record step (the agreement rides on the record), and the resume ends where an
    uninterrupted run ends, with its losses."""
    phases = [{"level": 1, "steps": 60, "lr": 1e-3, "warmup": 2}]

    def config(name: str) -> Path:
        cfg = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                         tmp_path / name, phases, log_every=3, eval_every=30)
        cfg["model"]["dropout"] = 0.0
        return write_yaml(tmp_path / f"{name}.yaml", cfg)

    cut = config("cut")
    procs = start(cut, "zero1.json", nproc=2, log=tmp_path / "cut.log")
    metrics = tmp_path / "cut" / "metrics.jsonl"
    deadline = time.monotonic() + 600
    while not (metrics.exists() and any(r["event"] == "step" and r["step"] >= 6
                                        for r in read_metrics(metrics))):
        assert time.monotonic() < deadline and all(p.poll() is None for p in procs), \
            (tmp_path / "cut.log").read_text()[-3000:]
        time.sleep(0.05)
    procs[1].send_signal(signal.SIGTERM)
    assert [p.wait(timeout=300) for p in procs] == [0, 0], (tmp_path / "cut.log").read_text()
    records = read_metrics(metrics)
    stop = [r for r in records if r["event"] == "preempted"]
    assert len(stop) == 1 and stop[0]["step"] % 3 == 0 and stop[0]["step"] < 60, stop
    steps = [r["step"] for r in records if r["event"] == "step"]
    assert steps == list(range(3, stop[0]["step"] + 1, 3))  # a record every 3 steps, no other

    train(cut, "zero1.json", nproc=2, log=tmp_path / "resume.log")
    train(config("ref"), "zero1.json", nproc=2, log=tmp_path / "ref.log")
    ref = {r["step"]: r["loss"] for r in read_metrics(tmp_path / "ref" / "metrics.jsonl")
           if r["event"] == "step"}
    resumed = {r["step"]: r["loss"] for r in read_metrics(metrics) if r["event"] == "step"}
    assert resumed.keys() == ref.keys()
    assert all(abs(resumed[k] - ref[k]) < 1e-5 for k in ref), (resumed, ref)


@pytest.mark.slow
def test_log_every_averages_the_per_step_losses(gpt_data, tmp_path: Path):
    phases = [{"level": 1, "steps": 12, "lr": 1e-3, "warmup": 2}]

    def run(name: str, log_every: int) -> list[dict]:
        cfg = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                         tmp_path / name, phases, log_every=log_every, eval_every=6)
        cfg["model"]["dropout"] = 0.0
        train(write_yaml(tmp_path / f"{name}.yaml", cfg), "zero1.json", nproc=1,
              log=tmp_path / f"{name}.log")
        return read_metrics(tmp_path / name / "metrics.jsonl")

    every, fours = run("every", 1), run("fours", 4)
    per_step = {r["step"]: r for r in every if r["event"] == "step"}
    logged = [r for r in fours if r["event"] == "step"]
    assert [r["step"] for r in logged] == [4, 6, 8, 12]  # every 4, and before each eval
    last = 0
    for r in logged:
        window = range(last + 1, r["step"] + 1)
        mean = sum(per_step[s]["loss"] for s in window) / len(window)
        assert r["loss"] == pytest.approx(mean, abs=1e-6)
        assert (r["flops"], r["tokens"]) == (per_step[r["step"]]["flops"],
                                             per_step[r["step"]]["tokens"])
        last = r["step"]
