"""The gentle up-transition options end to end: ZeRO-3 on 2 gloo ranks, real data (GPT-2)."""

from __future__ import annotations

import pytest

from mlsys.bench.compare import transition_jumps
from mlsys.train.metrics import read_metrics
from tests.tiny_run import run_config, train, write_yaml

PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 6, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 4, "lr": 1e-3, "warmup": 1}]


@pytest.mark.slow
@pytest.mark.parametrize("ds_config", ["zero1.json", "zero3.json"])
def test_identity_mapping_with_mapped_adam_keeps_the_function(gpt_data, tmp_path, ds_config):
    """Pre-LN GPT-2, identity depth mapping, exact width de-coalescing, α = 1: the model right
    after the up-transition has the small model's validation loss; Adam state is mapped."""
    cfg = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                     tmp_path / "run", PHASES)
    cfg["model"]["dropout"] = 0.0
    cfg["vcycle"] = {"alpha": 1.0, "depth_mapping": "identity", "optimizer": "map",
                     "noise": 0.0}
    train(write_yaml(tmp_path / "run.yaml", cfg), ds_config, log=tmp_path / "log.txt")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    (jump,) = transition_jumps(records)
    assert abs(jump["jump"]) <= 1e-4, jump
    steps = [r for r in records if r["event"] == "step" and r["phase"] == 2]
    assert len(steps) == 4 and all(r["loss"] == r["loss"] for r in steps)  # trains on, no NaN
    assert [r["rss_bytes"] > 0 for r in records if r["event"] == "transition"] == [True, True]


@pytest.mark.slow
def test_paper_copy_mapping_jumps(gpt_data, tmp_path):
    """The same run with the paper's layer copy: the up-transition changes the function, so
    the test above is not vacuous."""
    cfg = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                     tmp_path / "run", PHASES)
    cfg["model"]["dropout"] = 0.0
    cfg["vcycle"] = {"alpha": 1.0, "depth_mapping": "copy", "optimizer": "reset"}
    train(write_yaml(tmp_path / "run.yaml", cfg), "zero1.json", log=tmp_path / "log.txt")
    (jump,) = transition_jumps(read_metrics(tmp_path / "run" / "metrics.jsonl"))
    assert abs(jump["jump"]) > 1e-3, jump


@pytest.mark.slow
def test_width_interpolation_and_dropout_window_under_zero3(gpt_data, tmp_path):
    """Interpolation only in width (α 0.5) and dropout in the first steps after the
    up-transition, identity mapping, mapped Adam, ZeRO-3 on 2 ranks: the dropout window covers
    exactly ``dropout_steps`` steps and the width detail keeps the jump far below the paper's
    full interpolation of the same models."""
    jumps = {}
    for interpolation in ("width", "all"):
        run = tmp_path / interpolation
        cfg = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], run, PHASES)
        cfg["model"]["dropout"] = 0.0
        cfg["vcycle"] = {"alpha": 0.5, "depth_mapping": "identity", "optimizer": "map",
                         "interpolation": interpolation, "dropout": 0.1, "dropout_steps": 2}
        train(write_yaml(tmp_path / f"{interpolation}.yaml", cfg), "zero3.json",
              log=tmp_path / f"{interpolation}.txt")
        records = read_metrics(run / "metrics.jsonl")
        steps = [r for r in records if r["event"] == "step"]
        assert [r.get("dropout") for r in steps] == [None] * 8 + [0.1, 0.1, None, None]
        assert all(r["loss"] == r["loss"] for r in steps)
        (jumps[interpolation],) = transition_jumps(records)
    assert abs(jumps["width"]["jump"]) < 0.5 * abs(jumps["all"]["jump"]), jumps
