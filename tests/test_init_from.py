"""Start from weights (``model.init_from``): the checks before anything is written, the loading
(plain and ZeRO-3 partitioned), and real runs through launch/train.py on 1 rank: a tiny GPT-2 run
trains to final/, then a V-cycle started from that final/ trains its first step on exactly the
loaded model (its step-1 loss is the loaded model's loss on that batch, computed here) and
evaluates it at step 0 to the first run's final validation loss; a shape mismatch is refused
with exit 2 naming the field, before the run directory exists."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mlsys.config import ConfigError, parse_run_config
from mlsys.train.metrics import read_metrics
from tests.tiny_run import REPO, env, exported_val_loss, run_config, train, write_yaml

FIRST = [{"level": 1, "steps": 3, "lr": 3e-3, "warmup": 1}]
VCYCLE = [{"level": 1, "steps": 2, "lr": 2e-3, "warmup": 1},
          {"level": 2, "steps": 1, "lr": 3e-3, "warmup": 0},
          {"level": 1, "steps": 1, "lr": 1e-3, "warmup": 0}]


def _config(gpt_data: dict, run_dir: Path, phases: list[dict], **model) -> dict:
    cfg = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], run_dir, phases,
                     log_every=1, eval_every=100)
    cfg["model"].update(dropout=0.0, **model)
    return cfg


# -- the checks and the loading, in this process ---------------------------------------------

def _cfg(tmp_path: Path, **model):
    base = {"family": "gpt", "hidden_size": 64, "num_layers": 2, "num_heads": 4,
            "ffn_size": 128, "max_position": 64, "vocab_size": 512, "dropout": 0.0}
    return parse_run_config({"name": "t", "run_dir": str(tmp_path / "run"),
                             "model": {**base, **model}, "data": {"seq_length": 64},
                             "phases": [{"level": 1, "steps": 1, "lr": 1e-3}]})


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    """A GPT-2 of the run's level-1 shape, written by ``save_pretrained``."""
    from mlsys.models import build_model, hf_config

    model = build_model(hf_config(_cfg(tmp_path).model, 512), seed=7)
    model.save_pretrained(tmp_path / "src")
    return tmp_path / "src"


def test_a_save_pretrained_directory_passes_and_loads_exactly(saved: Path, tmp_path: Path):
    from mlsys.models import build_model, hf_config
    from mlsys.train.init_from import check_init_from, load_init_weights

    cfg = _cfg(tmp_path, init_from=str(saved))
    check_init_from(cfg, 512)
    model = build_model(hf_config(cfg.model, 512), seed=1)
    load_init_weights(model, saved)
    from transformers import AutoModelForCausalLM

    ref = AutoModelForCausalLM.from_pretrained(saved)
    for (name, p), (_, q) in zip(model.named_parameters(), ref.named_parameters(), strict=True):
        assert torch.equal(p, q), name
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()


@pytest.mark.parametrize(("change", "message"), [
    ({"hidden_size": 32}, "n_embd 64, but the run's level-1 model has 32 (model.hidden_size)"),
    ({"num_layers": 4}, "n_layer 2, but the run's level-1 model has 4 (model.num_layers)"),
    ({"ffn_size": 256}, "n_inner 128, but the run's level-1 model has 256 (model.ffn_size)"),
    ({"max_position": 128}, "n_positions 64, but the run's level-1 model has 128"),
    ({"vocab_size": 600}, "vocab_size 512, but the run's level-1 model has 600"),
])
def test_a_shape_mismatch_names_the_field(saved: Path, tmp_path: Path, change, message):
    from mlsys.train.init_from import check_init_from

    cfg = _cfg(tmp_path, init_from=str(saved), **change)
    with pytest.raises(ConfigError, match="^model.init_from: ") as err:
        check_init_from(cfg, 512)
    assert message in str(err.value)


def test_other_directories_are_refused(saved: Path, tmp_path: Path):
    from mlsys.train.init_from import check_init_from

    def refused(path: Path, text: str) -> None:
        with pytest.raises(ConfigError, match="^model.init_from: ") as err:
            check_init_from(_cfg(tmp_path, init_from=str(path)), 512)
        assert text in str(err.value), str(err.value)

    refused(tmp_path / "absent", "no such directory")
    (tmp_path / "empty").mkdir()
    refused(tmp_path / "empty", "no config.json")
    other = tmp_path / "bert"
    other.mkdir()
    (other / "config.json").write_text(json.dumps({"model_type": "bert"}))
    refused(other, "model_type 'bert', not the gpt family's 'gpt2'")
    (saved / "model.safetensors").rename(tmp_path / "weights.safetensors")
    refused(saved, "no weights file (model.safetensors or model.safetensors.index.json")


def test_weights_missing_a_parameter_are_refused(saved: Path, tmp_path: Path):
    from safetensors.torch import load_file, save_file

    from mlsys.train.init_from import check_init_from

    weights = load_file(saved / "model.safetensors")
    del weights["transformer.ln_f.bias"]
    save_file(weights, saved / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ConfigError, match="no tensor transformer.ln_f.bias"):
        check_init_from(_cfg(tmp_path, init_from=str(saved)), 512)


# -- real runs ---------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def first(gpt_data: dict, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("init_from")
    config = write_yaml(tmp / "first.yaml", _config(gpt_data, tmp / "first", FIRST))
    train(config, "zero1.json", nproc=1, log=tmp / "first.log")
    evals = [r for r in read_metrics(tmp / "first" / "metrics.jsonl") if r["event"] == "eval"]
    return {"tmp": tmp, "final": tmp / "first" / "final", "val_loss": evals[-1]["val_loss"],
            "config": config}


def _first_step_loss(config: Path, final: Path) -> float:
    """The loaded model's mean micro-batch loss on the run's first step (1 rank), here."""
    from transformers import AutoModelForCausalLM

    from mlsys.config import load_run_config
    from mlsys.data.run_data import build_run_data
    from mlsys.data.stream import batches, micro_indices

    cfg = load_run_config(config)
    t = cfg.train
    data = build_run_data(cfg, cfg.train_samples, t.eval_batches * t.global_batch_size)
    model = AutoModelForCausalLM.from_pretrained(final)
    index = micro_indices(0, t.micro_batch_size, 1, 0, t.global_batch_size // t.micro_batch_size)
    with torch.no_grad():
        losses = [model(**b).loss.item() for b in batches(data.train, index, data.collate)]
    return sum(losses) / len(losses)


@pytest.mark.slow
@pytest.mark.parametrize(("ds", "phases"), [("zero1.json", VCYCLE), ("zero3.json", FIRST)],
                         ids=["zero1-vcycle", "zero3-plain"])
def test_a_run_starts_from_the_loaded_weights(first: dict, gpt_data: dict, ds: str,
                                              phases: list[dict]):
    from transformers import AutoModelForCausalLM

    tmp, name = first["tmp"], ds.removesuffix(".json")
    run = tmp / f"second-{name}"
    config = write_yaml(tmp / f"second-{name}.yaml",
                        _config(gpt_data, run, phases, init_from=str(first["final"])))
    train(config, ds, nproc=1, log=tmp / f"second-{name}.log")
    records = read_metrics(run / "metrics.jsonl")
    evals = [r for r in records if r["event"] == "eval"]
    assert evals[0]["step"] == 0, evals[0]  # the loaded model, before any step
    assert abs(evals[0]["val_loss"] - first["val_loss"]) < 1e-5, (evals[0], first["val_loss"])
    step1 = next(r for r in records if r["event"] == "step")
    assert step1["step"] == 1 and step1["window"] == 1
    want = _first_step_loss(config, first["final"])
    assert abs(step1["loss"] - want) < 1e-5, (step1["loss"], want)
    assert [r["to_level"] for r in records if r["event"] == "transition"] == \
        [p["level"] for p in phases[1:]]
    stored = json.loads((run / "run_config.json").read_text())
    assert stored["model"]["init_from"] == str(first["final"])
    assert f"| initialised from | {first['final']} |" in (run / "final" / "README.md").read_text()
    loss = exported_val_loss(config, run / "final", AutoModelForCausalLM)
    assert abs(loss - evals[-1]["val_loss"]) < 1e-5


@pytest.mark.slow
def test_a_mismatched_shape_is_refused_before_anything_is_written(first: dict, gpt_data: dict):
    tmp = first["tmp"]
    run = tmp / "mismatch"
    config = write_yaml(tmp / "mismatch.yaml", _config(
        gpt_data, run, FIRST, init_from=str(first["final"]), hidden_size=32))
    out = subprocess.run(
        [sys.executable, "-m", "launch.train", "--config", str(config),
         "--ds_config", str(REPO / "configs/ds/zero1.json"), "--no-progress"],
        cwd=str(REPO), env=env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 2, out.stderr[-3000:]
    assert "model.init_from: " in out.stderr
    assert "n_embd 64, but the run's level-1 model has 32 (model.hidden_size)" in out.stderr
    assert not run.exists()


def test_a_growth_run_coalesces_the_loaded_model_to_its_first_level(saved: Path, tmp_path: Path):
    from transformers import AutoModelForCausalLM

    from mlsys.models import hf_config
    from mlsys.operators import coalesce
    from mlsys.train.controller import Controller

    base = _cfg(tmp_path, init_from=str(saved)).model_dump()
    cfg = parse_run_config({**base, "vcycle": {**base["vcycle"], "growth": True},
                            "phases": [{"level": 2, "steps": 1, "lr": 1e-3},
                                       {"level": 1, "steps": 1, "lr": 1e-3}]})
    controller = Controller.__new__(Controller)  # only what _loaded_model reads
    controller.cfg, controller.level1 = cfg, hf_config(cfg.model, 512)
    small = controller._loaded_model(2)
    want = coalesce(AutoModelForCausalLM.from_pretrained(saved), width=2, depth=2)
    assert (small.config.n_embd, small.config.n_layer) == (32, 1)
    for (name, p), (_, q) in zip(small.named_parameters(), want.named_parameters(), strict=True):
        assert torch.equal(p, q), name


def test_only_a_start_that_may_be_fresh_reads_the_directory(tmp_path: Path):
    from mlsys.train.init_from import check_before_start
    from mlsys.train.rundir import RunDir

    cfg = _cfg(tmp_path, init_from=str(tmp_path / "gone"))
    run = RunDir(cfg.out_dir)
    with pytest.raises(ConfigError, match="model.init_from: .*gone: no such directory"):
        check_before_start(run, cfg, "auto")
    (run.checkpoints / "step0000004-phase0").mkdir(parents=True)  # it resumes, or is refused
    check_before_start(run, cfg, "auto")
    check_before_start(run, cfg, True)
    with pytest.raises(ConfigError, match="no such directory"):
        check_before_start(run, cfg, False)  # --fresh: a fresh start
