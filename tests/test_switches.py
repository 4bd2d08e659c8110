"""Memory and speed switches: ``model.extra.attn_implementation`` (sdpa and eager give equal
losses, and the choice holds at every level), ``train.activation_checkpointing`` (on for every
engine the controller builds, through both transitions and a resume, with the losses of a run
without it) and ``train.compile``."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mlsys.config import ConfigError, ModelConfig, VCycleConfig, parse_run_config
from mlsys.distributed.process import end_process_group
from mlsys.models import build_model, hf_config, level_config
from tests.test_config import GOOD
from tests.tiny_run import REPO, run_config, write_yaml


@pytest.fixture(scope="module")
def one_rank_group():
    """A 1-rank gloo group, DeepSpeed's comm on it (what launch/train.py sets up); one for the
    module (DeepSpeed keeps groups of a destroyed process group)."""
    import os

    import deepspeed

    from mlsys.distributed.spawn import free_port

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), RANK="0",
                      WORLD_SIZE="1", LOCAL_RANK="0")
    deepspeed.init_distributed(dist_backend="gloo")
    yield
    end_process_group()
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "WORLD_SIZE", "LOCAL_RANK"):
        os.environ.pop(key, None)


def tiny(family: str, impl: str) -> ModelConfig:
    return ModelConfig(family=family, hidden_size=32, num_layers=2, num_heads=4, ffn_size=64,
                       max_position=32, dropout=0.0, extra={"attn_implementation": impl})


def losses(family: str, impl: str, steps: int = 4) -> list[float]:
    """A few AdamW steps of a tiny model on fixed random batches (padding in half the rows)."""
    model = build_model(hf_config(tiny(family, impl), 61), seed=5)
    assert model.config._attn_implementation == impl
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    out = []
    for _ in range(steps):
        ids = torch.randint(0, 61, (4, 24), generator=gen)
        mask = torch.ones_like(ids)
        mask[2:, 17:] = 0  # padded rows: the attention mask matters
        labels = ids.masked_fill(mask == 0, -100)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        out.append(loss.item())
    return out


@pytest.mark.parametrize("family", ["gpt", "bert", "llama"])
def test_sdpa_and_eager_give_equal_losses(family: str) -> None:
    eager, sdpa = losses(family, "eager"), losses(family, "sdpa")
    assert all(abs(a - b) < 1e-5 for a, b in zip(eager, sdpa, strict=True)), (eager, sdpa)
    assert eager[0] != eager[-1]  # it trained


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
def test_the_attention_holds_at_every_level(impl: str) -> None:
    level1 = hf_config(tiny("gpt", impl), 61)
    small = level_config(level1, 2, VCycleConfig())
    assert build_model(small, 0).config._attn_implementation == impl


def test_an_unknown_attention_is_a_config_error() -> None:
    data = json.loads(json.dumps(GOOD))
    data["model"]["extra"] = {"attn_implementation": "flash"}
    with pytest.raises(ConfigError, match=r"model\.extra\.attn_implementation: 'flash' is not"):
        parse_run_config(data)


def test_build_engine_applies_the_switches(one_rank_group) -> None:
    from mlsys.config import TrainConfig
    from mlsys.train.engine import build_engine, destroy_engine

    ds = {"train_batch_size": 2, "train_micro_batch_size_per_gpu": 2,
          "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1}}
    for flags in ({}, {"activation_checkpointing": True}):
        model = build_model(hf_config(tiny("gpt", "sdpa"), 61), seed=1)
        engine = build_engine(model, ds, TrainConfig(**flags), 1e-3, lambda s: 1.0)
        assert engine.module.is_gradient_checkpointing == bool(flags)
        assert not engine.is_compiled
        destroy_engine(engine)


@pytest.mark.slow
def test_compile_gives_the_same_losses(one_rank_group) -> None:
    """``train.compile``: the engine's module is compiled (torch.compile, inductor on a CPU;
    the first step compiles) and trains to the eager engine's losses."""
    from mlsys.config import TrainConfig
    from mlsys.train.engine import build_engine, destroy_engine

    ds = {"train_batch_size": 4, "train_micro_batch_size_per_gpu": 4,
          "gradient_accumulation_steps": 1, "zero_optimization": {"stage": 1}}
    gen = torch.Generator().manual_seed(0)
    batches = [torch.randint(0, 61, (4, 24), generator=gen) for _ in range(3)]
    runs = []
    for compiled in (False, True):
        model = build_model(hf_config(tiny("gpt", "sdpa"), 61), seed=1)
        engine = build_engine(model, ds, TrainConfig(compile=compiled), 3e-3, lambda s: 1.0)
        assert engine.is_compiled == compiled
        out = []
        for ids in batches:
            loss = engine(input_ids=ids, labels=ids).loss
            engine.backward(loss)
            engine.step()
            out.append(loss.item())
        runs.append(out)
        destroy_engine(engine)
    assert all(abs(a - b) < 1e-5 for a, b in zip(*runs, strict=True)), runs


@pytest.mark.slow
@pytest.mark.parametrize("ds", ["zero1.json", "zero3.json"])
def test_activation_checkpointing_through_transitions_and_resume(
        one_rank_group, gpt_data: dict, tmp_path: Path, monkeypatch, ds: str) -> None:
    """In this process, 1 rank: a V-cycle (levels 1, 2, 1) with activation checkpointing has
    it on in every engine, also after resuming from the checkpoint taken at the end of the
    small phase, and logs the losses of the same run without it (fp32, dropout on:
    recomputation replays the RNG; within 1e-5)."""
    from launch.train import validate
    from mlsys.train import controller
    from mlsys.train.metrics import read_metrics

    built: list[tuple[str, bool, int]] = []  # (run, checkpointing on, hidden size)
    original = controller.build_engine

    def recording(model, *args, **kwargs):
        engine = original(model, *args, **kwargs)
        built.append((name, engine.module.is_gradient_checkpointing,
                      engine.module.config.hidden_size))
        return engine

    monkeypatch.setattr(controller, "build_engine", recording)
    phases = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
              {"level": 2, "steps": 2, "lr": 5e-3, "warmup": 1},
              {"level": 1, "steps": 2, "lr": 2e-3}]
    runs = {}
    for name, on in (("plain", False), ("ckpt", True)):
        raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                         tmp_path / name, phases, activation_checkpointing=on,
                         export_levels=False, data_workers=0, eval_every=100,
                         checkpoint_every=4, keep_checkpoints=5)
        cfg, ds_config = validate(str(write_yaml(tmp_path / f"{name}.yaml", raw)),
                                  str(REPO / "configs" / "ds" / ds), 1)
        assert controller.run_training(cfg, ds_config, progress=False)["status"] == "done"
        runs[name] = read_metrics(tmp_path / name / "metrics.jsonl")
    assert built == [("plain", False, 64), ("plain", False, 32), ("plain", False, 64),
                     ("ckpt", True, 64), ("ckpt", True, 32), ("ckpt", True, 64)]

    def step_losses(records: list[dict]) -> dict[int, float]:
        return {r["step"]: r["loss"] for r in records if r["event"] == "step"}

    plain, ckpt = step_losses(runs["plain"]), step_losses(runs["ckpt"])
    assert plain.keys() == ckpt.keys() == set(range(1, 7))
    assert all(abs(plain[k] - ckpt[k]) < 1e-5 for k in plain), (plain, ckpt)

    # resume the checkpointed run at step 4 (the small phase's end, before the up-transition)
    root = tmp_path / "ckpt"
    (root / "done.json").unlink()
    shutil.rmtree(root / "final")
    for tag in sorted(p.name for p in (root / "checkpoints").iterdir() if p.is_dir()):
        if tag != "step0000004-phase1":
            shutil.rmtree(root / "checkpoints" / tag)
    built.clear()
    name = "resumed"
    assert controller.run_training(cfg, ds_config, resume=True, progress=False)["status"] == "done"
    assert built == [("resumed", True, 32), ("resumed", True, 64)]
    resumed = step_losses(read_metrics(root / "metrics.jsonl"))
    assert all(abs(resumed[k] - plain[k]) < 1e-5 for k in plain), (resumed, plain)


def test_the_memory_bench_measures_a_variant() -> None:
    """mlsys.bench.switches on a tiny config (docs/performance.md's figures are its output on
    configs/llama-1b.yaml): one variant's record, in this process."""
    from mlsys.bench.switches import measure

    r = measure(str(REPO / "configs" / "tiny-llama-vcycle.yaml"), layers=1, seq=32, micro=2,
                vocab=64, attention="eager", checkpointing=True)
    assert (r["attention"], r["activation_checkpointing"], r["layers"], r["seq_length"]) == (
        "eager", True, 1, 32)
    assert r["params"] > 0 and r["forward_backward_seconds"] > 0 and r["loss"] == r["loss"]


def test_the_memory_bench_command_measures_one_variant_in_process(capsys) -> None:
    """``python -m launch.switches --one ATTENTION,CKPT`` (what it starts once per variant)
    prints that variant's record as one JSON line."""
    import json

    from launch.switches import main

    assert main(["--config", str(REPO / "configs" / "tiny-llama-vcycle.yaml"), "--layers", "1",
                 "--seq", "16", "--micro", "1", "--vocab", "64", "--one", "sdpa,0"]) == 0
    r = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert (r["attention"], r["activation_checkpointing"], r["seq_length"]) == ("sdpa", False, 16)
