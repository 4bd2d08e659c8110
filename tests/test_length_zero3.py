"""A length level on 2 gloo ranks under ZeRO-3 with the Adam state mapped across transitions
(GPT-2, width 2 and length 2 per coalescing step): no sample is read twice across the changes
of k (the indices the loaders were asked for, over both ranks and all three phases, are
exactly the first steps x global-batch samples, each once), and a resume from the checkpoint
inside the length level logs the uninterrupted run's losses (fp32, within 1e-5)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from mlsys.distributed.spawn import start_ranks
from mlsys.train.checkpoint import complete_tags
from mlsys.train.metrics import read_metrics
from tests.test_resume import assert_same
from tests.tiny_run import REPO, _wait, run_config, write_yaml

PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 3, "lr": 2e-3, "warmup": 1}]
HOOK = REPO / "tests" / "workers" / "record_reads"


def _train(config: Path, ds: str, ranks: int, reads: Path, log: Path,
           extra: tuple[str, ...] = ()) -> None:
    reads.mkdir()
    env = dict(os.environ, DS_ACCELERATOR="cpu", OMP_NUM_THREADS="1",
               PYTHONPATH=f"{HOOK}{os.pathsep}{REPO}", MLSYS_TEST_READS=str(reads))
    with open(log, "w") as out:
        procs = start_ranks("launch.train", ["--config", str(config), "--ds_config",
                                             str(REPO / "configs" / "ds" / ds), "--no-progress",
                                             *extra],
                            ranks, env=env, cwd=str(REPO), stdout=out,
                            stderr=subprocess.STDOUT)
        code = _wait(procs, time.time() + 900)
    assert code == 0, log.read_text()[-4000:]


@pytest.mark.slow
def test_length_level_on_two_ranks_zero3_with_mapped_adam(gpt_data: dict, tmp_path: Path):
    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                     tmp_path / "run", PHASES, eval_every=100, checkpoint_every=4,
                     keep_checkpoints=5)
    raw["model"]["dropout"] = 0.0
    raw["vcycle"] = {"alpha": 0.8, "width": 2, "depth": 1, "length": 2, "optimizer": "map"}
    config = write_yaml(tmp_path / "run.yaml", raw)
    _train(config, "zero3.json", 2, tmp_path / "reads", tmp_path / "run.log")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    steps = [r for r in records if r["event"] == "step"]
    assert [(r["level"], r.get("length", 1)) for r in steps] == \
        [(1, 1)] * 2 + [(2, 2)] * 4 + [(1, 1)] * 3
    assert [(r["from_level"], r["to_level"]) for r in records if r["event"] == "transition"] \
        == [(1, 2), (2, 1)]

    g, total = 8, len(steps)  # run_config's global batch; the loaders' requests, both ranks
    read = [i for r in range(2) for line in (tmp_path / "reads" / f"rank{r}").read_text()
            .splitlines() for i in json.loads(line)]
    assert sorted(read) == list(range(total * g))  # each sample once, k = 1, 2, 1

    # Resume inside the length level (global step 4, its 2nd step): the same losses.
    (tmp_path / "run" / "done.json").unlink()
    shutil.rmtree(tmp_path / "run" / "final")
    root = tmp_path / "run" / "checkpoints"
    inside = [t for t in complete_tags(root)
              if json.loads((root / t / "controller.json").read_text())["phase"] == 1
              and json.loads((root / t / "controller.json").read_text())["step_in_phase"] == 2]
    assert inside, complete_tags(root)
    for t in complete_tags(root):
        if t != inside[-1]:
            shutil.rmtree(root / t)
    _train(config, "zero3.json", 2, tmp_path / "reads-resume", tmp_path / "resume.log",
           ("--resume",))
    again = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in again) == 1
    assert_same(records, again)
