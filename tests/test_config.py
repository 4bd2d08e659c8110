"""Run / DeepSpeed config validation: every shipped config loads; every error names its field;
errors are reported before any rank starts (no process group, no files)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlsys.config import ConfigError, load_run_config, parse_run_config
from mlsys.ds_config import load_ds_config, resolve_ds_config
from tests.tiny_run import REPO, env, write_yaml

GOOD = {"name": "t", "model": {"family": "bert", "hidden_size": 64, "num_layers": 4,
                               "num_heads": 4, "max_position": 64},
        "data": {"seq_length": 32},
        "phases": [{"level": 1, "steps": 10, "lr": 1e-3},
                   {"level": 2, "steps": 20, "lr": 2e-3, "warmup": 3},
                   {"level": 1, "steps": 20, "lr": 1e-3}]}


def with_(path: str, value) -> dict:
    """GOOD with one dotted field replaced (lists indexed by number)."""
    data = json.loads(json.dumps(GOOD))
    *head, last = path.split(".")
    node = data
    for key in head:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return data


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_run_configs_load(path: Path) -> None:
    cfg = load_run_config(path)
    assert cfg.total_steps > 0


@pytest.mark.parametrize("path", sorted((REPO / "configs" / "ds").glob("*.json")),
                         ids=lambda p: p.name)
def test_shipped_ds_configs_resolve(path: Path) -> None:
    cfg = parse_run_config(GOOD)
    ds = resolve_ds_config(load_ds_config(path), cfg, world_size=2)
    assert ds["train_batch_size"] == 16 and ds["train_micro_batch_size_per_gpu"] == 8
    assert ds["gradient_accumulation_steps"] == 1


@pytest.mark.parametrize("path,value,field", [
    ("phases.1.level", 3, "phases.1.level"),
    ("phases.0.level", 2, "phases.0.level"),
    ("phases.2.lr", -1.0, "phases.2.lr"),
    ("model.num_heads", 6, "model.num_heads"),
    ("model.hiden_size", 64, "model.hiden_size"),
    ("model.family", "t5", "model.family"),
    ("model.num_layers", 3, "model.num_layers"),
    ("data.seq_length", 128, "data.seq_length"),
    ("vcycle.width", 3, "vcycle.width"),
    ("vcycle.alpha", 1.5, "vcycle.alpha"),
    ("train.decay", "exp", "train.decay"),
])
def test_errors_name_the_field(path: str, value, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        parse_run_config(with_(path, value), "run.yaml")
    assert "run.yaml" in str(err.value) and field in str(err.value)


def test_all_errors_reported_at_once() -> None:
    data = with_("phases.2.lr", 0)
    data["train"] = {"micro_batch_size": 0}
    with pytest.raises(ConfigError) as err:
        parse_run_config(data)
    assert "phases.2.lr" in str(err.value) and "train.micro_batch_size" in str(err.value)


def test_yaml_syntax_error_names_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nmodel: {family: bert\nphases: []\n")
    with pytest.raises(ConfigError, match=r"bad\.yaml:\d+:\d+: YAML error"):
        load_run_config(bad)


def test_schedule_scale() -> None:
    cfg = parse_run_config({**GOOD, "schedule": {"scale": 0.5}})
    assert [cfg.phase_steps(i) for i in range(3)] == [(5, 0), (10, 2), (10, 0)]
    assert cfg.total_steps == 25


@pytest.mark.parametrize("ds,field", [
    ({"train_batch_size": 32}, "train_batch_size"),
    ({"train_micro_batch_size_per_gpu": 4}, "train_micro_batch_size_per_gpu"),
    ({"optimizer": {"type": "Adam"}}, "optimizer"),
    ({"scheduler": {"type": "WarmupLR"}}, "scheduler"),
    ({"fp16": {"enabled": True}}, "fp16.enabled"),
    ({"zero_optimization": {"stage": 4}}, "zero_optimization.stage"),
])
def test_ds_config_errors_name_the_field(ds: dict, field: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve_ds_config(ds, parse_run_config(GOOD), world_size=2, source="ds.json")
    assert f"ds.json: {field}" in str(err.value)


def test_batch_not_divisible_by_ranks() -> None:
    cfg = parse_run_config(with_("train", {"micro_batch_size": 8, "global_batch_size": 16}))
    with pytest.raises(ConfigError, match="global_batch_size"):
        resolve_ds_config({}, cfg, world_size=3)


def test_train_rejects_bad_config_before_any_rank_starts(tmp_path: Path) -> None:
    """A rank of a 2-rank job alone, with a bad config: it must fail with the field's name at
    once. Were the config read after the process group, it would wait for rank 1 forever."""
    bad = write_yaml(tmp_path / "bad.yaml", with_("phases.1.level", 3) | {
        "run_dir": str(tmp_path / "run")})
    e = env() | {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
                 "MASTER_PORT": "29533"}
    t0 = time.time()
    res = subprocess.run([sys.executable, "-m", "launch.train", "--config", str(bad),
                          "--ds_config", "configs/ds/zero3.json"], cwd=REPO, env=e,
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr[-2000:]
    assert "phases.1.level" in res.stderr and "bad.yaml" in res.stderr
    assert not (tmp_path / "run").exists()
    assert time.time() - t0 < 120


def test_demo_rejects_bad_config_without_starting_ranks(tmp_path: Path) -> None:
    bad = write_yaml(tmp_path / "bad.yaml", with_("model.num_heads", 6))
    res = subprocess.run([sys.executable, "-m", "launch.demo", "--config", str(bad),
                          "--run-dir", str(tmp_path / "run")], cwd=REPO, env=env(),
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "model.num_heads" in res.stderr
    assert "deepspeed" not in res.stderr.lower() and not (tmp_path / "run").exists()


def test_packages_mixed_is_for_masked_lms() -> None:
    assert parse_run_config(with_("data.prepare_source", "packages-mixed")).data \
        .prepare_source == "packages-mixed"  # BERT
    gpt = with_("data.prepare_source", "packages-mixed")
    gpt["model"]["family"] = "gpt"
    with pytest.raises(ConfigError, match=r"data\.prepare_source: packages-mixed is a masked"):
        parse_run_config(gpt, "run.yaml")
