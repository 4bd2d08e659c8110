"""Export of a GPT-2 V-cycle (ZeRO-2, 2 gloo ranks): final/ loads with AutoModelForCausalLM and
gives the validation loss the run logged; the tokenizer travels with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from mlsys.train.metrics import read_metrics
from tests.tiny_run import exported_val_loss, run_config, train, write_yaml

PHASES = [{"level": 1, "steps": 3, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 3, "lr": 2e-3, "warmup": 1}]


@pytest.mark.slow
def test_gpt_export_loads_and_reproduces_val_loss(gpt_data: dict, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel

    config = write_yaml(tmp_path / "run.yaml", run_config(
        "gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], tmp_path / "run", PHASES))
    train(config, "zero2.json", log=tmp_path / "log.txt")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    end = [r for r in records if r["event"] == "end"][-1]
    last_eval = [r for r in records if r["event"] == "eval"][-1]
    assert end["val_loss"] == last_eval["val_loss"] and end["step"] == 10

    final = tmp_path / "run" / "final"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert isinstance(model, GPT2LMHeadModel)
    assert model.config.n_embd == 64 and model.config.n_layer == 2  # the level-1 size
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # tied
    assert (final / "spm.model").read_bytes() == (Path(gpt_data["tokenizer_dir"])
                                                  / "spm.model").read_bytes()
    loss = exported_val_loss(config, final, AutoModelForCausalLM)
    assert abs(loss - end["val_loss"]) < 1e-5, (loss, end["val_loss"])
    assert torch.isfinite(torch.tensor(loss))
