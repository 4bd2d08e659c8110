"""A length level on 2 gloo ranks under ZeRO-3 with the Adam state mapped across transitions
(GPT-2, width 2 and length 2 per coalescing step): no sample is read twice across the changes
of k (the indices the loaders were asked for, over both ranks and all three phases, are
exactly the first steps x global-batch samples, each once) and they come from one loader per
process (its data workers forked once, never after a transition: mlsys.data.loader), and a
resume from the checkpoint inside the length level logs the uninterrupted run's losses (fp32,
within 1e-5) from one loader again."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from mlsys.train.metrics import read_metrics
from tests.test_resume import assert_same
from tests.tiny_run import REPO, keep_only_checkpoint, run_config, train, write_yaml

PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 3, "lr": 2e-3, "warmup": 1}]
HOOK = REPO / "tests" / "workers" / "record_reads"


def _reads(directory: Path) -> dict[str, str]:
    """The environment that records the loaders' requests into ``directory``."""
    directory.mkdir()
    return {"PYTHONPATH": f"{HOOK}{os.pathsep}{REPO}", "MLSYS_TEST_READS": str(directory)}


def _loaders(directory: Path) -> list[list[int]]:
    """Each rank's loaders, in rank order (every line of both ranks' ``.loaders`` files)."""
    return [json.loads(line) for r in range(2)
            for line in (directory / f"rank{r}.loaders").read_text().splitlines()]


@pytest.mark.slow
def test_length_level_on_two_ranks_zero3_with_mapped_adam(gpt_data: dict, tmp_path: Path):
    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                     tmp_path / "run", PHASES, eval_every=100, checkpoint_every=4,
                     keep_checkpoints=5)
    raw["model"]["dropout"] = 0.0
    raw["vcycle"] = {"alpha": 0.8, "width": 2, "depth": 1, "length": 2, "optimizer": "map"}
    config = write_yaml(tmp_path / "run.yaml", raw)
    train(config, "zero3.json", 2, log=tmp_path / "run.log", environ=_reads(tmp_path / "reads"))
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
    assert _loaders(tmp_path / "reads") == [[0, total]] * 2  # [consumed, steps], each rank

    # Resume inside the length level (global step 4, its 2nd step): the same losses.
    keep_only_checkpoint(tmp_path / "run", phase=1, step_in_phase=2)
    train(config, "zero3.json", 2, extra=("--resume",), log=tmp_path / "resume.log",
          environ=_reads(tmp_path / "reads-resume"))
    again = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in again) == 1
    assert _loaders(tmp_path / "reads-resume") == [[4 * g, total - 4]] * 2
    assert_same(records, again)
