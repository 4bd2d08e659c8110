"""ZeRO-Offload (``offload_optimizer: {device: cpu}``, ZeRO-2 and ZeRO-3): the engine trains
with DeepSpeed's CPU Adam, and a V-cycle with mapped Adam moments (``vcycle.optimizer: map``)
gives the losses of the same run without offload (torch's AdamW on the same fp32 numbers), step
by step through both transitions; a resume inside the small phase continues it exactly (both
stages)."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsys.config import ConfigError, parse_run_config
from mlsys.ds_config import load_ds_config, resolve_ds_config
from mlsys.train.metrics import read_metrics
from tests.test_resume import assert_same, losses
from tests.tiny_run import REPO, keep_only_checkpoint, run_config, train, write_yaml

PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 2, "lr": 2e-3, "warmup": 1}]
# CPU Adam and torch's AdamW round differently (SIMD): the losses differed by at most 1.1e-6
# here over the whole cycle, both stages
TOLERANCE = 1e-5


def _run(data: dict, tmp_path: Path, name: str, ds: str) -> list[dict]:
    raw = run_config("gpt", data["tokenizer_dir"], data["data_prefix"], tmp_path / name, PHASES,
                     checkpoint_every=4, keep_checkpoints=5, eval_every=2)
    raw["model"]["dropout"] = 0.0
    raw["vcycle"] = {"alpha": 0.5, "optimizer": "map"}
    config = write_yaml(tmp_path / f"{name}.yaml", raw)
    train(config, ds, nproc=1, log=tmp_path / f"{name}.log")
    return read_metrics(tmp_path / name / "metrics.jsonl")


@pytest.mark.slow
@pytest.mark.parametrize("stage", [2, 3])
def test_offload_trains_a_vcycle_as_without_it(gpt_data, tmp_path, stage):
    plain = _run(gpt_data, tmp_path, "plain", f"zero{stage}.json")
    offload = _run(gpt_data, tmp_path, "offload", f"zero{stage}-offload.json")
    assert [(r["from_level"], r["to_level"]) for r in offload if r["event"] == "transition"] \
        == [(1, 2), (2, 1)]
    # (DeepSpeed refuses a torch optimizer under offload: zero_force_ds_cpu_optimizer, on by
    # default, so the run having trained means CPU Adam built every engine)
    a, b = losses(plain), losses(offload)
    assert a.keys() == b.keys() and len(a) >= 12
    bad = {k: (a[k], b[k]) for k in a if abs(a[k] - b[k]) > TOLERANCE}
    assert not bad, bad
    # resume inside the small phase (global step 4): CPU Adam's state restored from the
    # checkpoint continues the run exactly
    keep_only_checkpoint(tmp_path / "offload", phase=1, step_in_phase=2)
    train(tmp_path / "offload.yaml", f"zero{stage}-offload.json", nproc=1, extra=("--resume",),
          log=tmp_path / "resume.log")
    again = read_metrics(tmp_path / "offload" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in again) == 1
    assert_same(offload, again)


@pytest.mark.parametrize("zero, match", [
    ({"stage": 1, "offload_optimizer": {"device": "cpu"}}, "needs stage 2 or 3"),
    ({"stage": 3, "offload_optimizer": {"device": "nvme"}}, "only cpu"),
])
def test_an_offload_it_cannot_run_names_the_field(gpt_data, tmp_path, zero, match):
    cfg = parse_run_config(run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                                      tmp_path / "run", PHASES))
    ds = {**load_ds_config(REPO / "configs/ds/zero2.json"), "zero_optimization": zero}
    with pytest.raises(ConfigError, match=f"zero_optimization.offload_optimizer.*{match}"):
        resolve_ds_config(ds, cfg, 1, "ds.json")
