"""A stop signal sent to the whole process group (``kill -- -PGID``, ``timeout``, Ctrl-C in a
terminal, a scheduler signalling every process of a job) reaches the DataLoader workers as well
as the training process: the run must still checkpoint at the next record and exit 0, not die
of a worker killed by the signal."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlsys.train.checkpoint import complete_tags
from mlsys.train.metrics import read_metrics
from tests.tiny_run import REPO, env, run_config, write_yaml


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_process_group_checkpoints(gpt_data: dict, tmp_path: Path,
                                                   sig: signal.Signals) -> None:
    run = tmp_path / "run"
    cfg = write_yaml(tmp_path / "run.yaml", run_config(
        "gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], run,
        [{"level": 1, "steps": 400, "lr": 1e-3, "warmup": 1}], data_workers=2))
    log = tmp_path / "run.log"
    e = dict(env(), RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", LOCAL_WORLD_SIZE="1",
             MASTER_ADDR="127.0.0.1", MASTER_PORT=str(29700 + os.getpid() % 200))
    with open(log, "w") as out:  # its own session: the signal goes to its group only
        proc = subprocess.Popen([sys.executable, "-m", "launch.train", "--config", str(cfg),
                                 "--ds_config", str(REPO / "configs" / "ds" / "zero1.json"),
                                 "--no-progress"], env=e, cwd=str(REPO), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 300
    metrics = run / "metrics.jsonl"
    while not (metrics.exists() and sum(r["event"] == "step" for r in read_metrics(metrics)) >= 3):
        assert proc.poll() is None and time.time() < deadline, log.read_text()[-3000:]
        time.sleep(0.2)
    workers = subprocess.run(["pgrep", "-g", str(proc.pid)], capture_output=True,
                             text=True).stdout.split()
    assert len(workers) >= 3, workers  # the trainer and its two DataLoader workers
    os.killpg(proc.pid, sig)
    assert proc.wait(timeout=120) == 0, log.read_text()[-3000:]
    records = read_metrics(metrics)
    stop = [r for r in records if r["event"] == "preempted"]
    assert len(stop) == 1 and stop[0]["signal"] == sig
    assert complete_tags(run / "checkpoints"), "no complete checkpoint after the signal"
    assert not (run / "done.json").exists()
