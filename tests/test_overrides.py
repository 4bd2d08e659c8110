"""Command-line overrides (``launch/train.py --set PATH=VALUE``): dotted paths into the run
config, YAML values, the same schema; errors name the path; the run saves the resolved config."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from launch.train import parse_args, validate
from mlsys.config import ConfigError, apply_overrides, parse_run_config
from tests.test_config import GOOD
from tests.tiny_run import REPO, env, run_config, train, write_yaml

ZERO1 = str(REPO / "configs" / "ds" / "zero1.json")


def resolved(*overrides: str):
    return parse_run_config(apply_overrides(parse_run_config(GOOD).model_dump(), overrides))


def test_good_overrides_land_in_the_resolved_config() -> None:
    cfg = resolved("train.seed=3", "phases.1.steps=500", "train.betas=[0.9, 0.95]",
                   "model.extra.attn_implementation=eager", "train.peak_tflops=1e-3",
                   "vcycle.alpha=0.5", "train.export_levels=false", "model.ffn_size=null",
                   "name=other")
    assert cfg.train.seed == 3 and cfg.phases[1].steps == 500
    assert cfg.train.betas == (0.9, 0.95) and cfg.model.extra == {"attn_implementation": "eager"}
    assert cfg.train.peak_tflops == 1e-3 and cfg.vcycle.alpha == 0.5
    assert cfg.train.export_levels is False and cfg.model.ffn_size is None
    assert cfg.name == "other"
    assert cfg.phases[0] == parse_run_config(GOOD).phases[0]  # the rest is untouched
    later = resolved("train.seed=3", "train.seed=4")  # in order: the last one wins
    assert later.train.seed == 4


def test_overrides_do_not_change_their_input() -> None:
    data = parse_run_config(GOOD).model_dump()
    apply_overrides(data, ["phases.1.steps=7"])
    assert data["phases"][1]["steps"] == 20


@pytest.mark.parametrize("override,message", [
    ("train.sed=3", r"train\.sed: unknown field train\.sed \(the fields of train: .*seed"),
    ("trian.seed=3", r"trian\.seed: unknown field trian \(the fields of the run config: .*train"),
    ("model.extra.a.b=1", r"model\.extra\.a\.b: unknown field model\.extra\.a"),
    ("phases.3.steps=500", r"phases\.3\.steps: index 3 out of range \(phases has 3 items: 0\.\.2"),
    ("phases.-1.steps=500", r"phases\.-1\.steps: index -1 out of range"),
    ("phases.one.steps=5", r"phases\.one\.steps: phases is a list; 'one' is not an index"),
    ("train.seed.x=1", r"train\.seed\.x: train\.seed is a value \(1234\)"),
    ("train.seed", r"'train\.seed': expected PATH=VALUE"),
    ("=3", r"'=3': expected PATH=VALUE"),
    ("train.seed=[1,", r"train\.seed: value '\[1,' is not YAML"),
])
def test_bad_paths_are_errors_naming_them(override: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        resolved(override)


@pytest.mark.parametrize("override,field", [
    ("train.seed=abc", "train.seed"), ("phases.1.level=3", "phases.1.level"),
    ("phases.2.lr=-1", "phases.2.lr"), ("train.decay=step", "train.decay"),
    ("train.peak_tflops=0", "train.peak_tflops")])
def test_overridden_values_meet_the_schema(tmp_path: Path, override: str, field: str) -> None:
    config = write_yaml(tmp_path / "run.yaml", GOOD)
    with pytest.raises(ConfigError) as err:
        validate(str(config), ZERO1, 1, overrides=[override])
    assert f"  {field}:" in str(err.value) and "run.yaml (--set " in str(err.value)


def test_launch_parses_set_and_validates_with_it(tmp_path: Path) -> None:
    config = write_yaml(tmp_path / "run.yaml", GOOD)
    args = parse_args(["--config", str(config), "--ds_config", ZERO1, "--set", "train.seed=3",
                       "phases.1.steps=500", "--no-progress", "--set", "train.log_every=5"])
    assert args.overrides == ["train.seed=3", "phases.1.steps=500", "train.log_every=5"]
    assert args.no_progress
    cfg, ds = validate(args.config, args.ds_config, 1, str(tmp_path / "elsewhere"),
                       args.overrides)
    assert (cfg.train.seed, cfg.phases[1].steps, cfg.train.log_every) == (3, 500, 5)
    assert cfg.run_dir == str(tmp_path / "elsewhere")
    assert parse_args(["--config", "c", "--ds_config", "d"]).overrides == []


def test_a_bad_override_exits_2_before_anything(tmp_path: Path) -> None:
    config = write_yaml(tmp_path / "run.yaml", {**GOOD, "run_dir": str(tmp_path / "run")})
    res = subprocess.run([sys.executable, "-m", "launch.train", "--config", str(config),
                          "--ds_config", ZERO1, "--set", "phases.5.steps=1"], cwd=REPO,
                         env=env(), capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "phases.5.steps: index 5 out of range" in res.stderr
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_run_saves_its_overridden_config(gpt_data: dict, tmp_path: Path) -> None:
    """1 process: the overrides change the run (its step count) and are in run_config.json."""
    from mlsys.train.metrics import read_metrics

    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                     tmp_path / "run", [{"level": 1, "steps": 5, "lr": 1e-3}],
                     export_levels=False)
    config = write_yaml(tmp_path / "run.yaml", raw)
    train(config, "zero1.json", nproc=1, log=tmp_path / "log.txt",
          extra=("--set", "train.seed=3", "phases.0.steps=2", "train.peak_tflops=0.5"))
    saved = json.loads((tmp_path / "run" / "run_config.json").read_text())
    assert saved["train"]["seed"] == 3 and saved["phases"][0]["steps"] == 2
    assert saved["train"]["peak_tflops"] == 0.5
    steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl") if r["event"] == "step"]
    assert [r["step"] for r in steps] == [1, 2] and all(r["mfu"] is not None for r in steps)
