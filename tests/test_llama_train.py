"""A tiny Llama V-cycle (GQA 4:2, tied embeddings, SwiGLU) through launch/train.py, ZeRO-3 on 2
gloo ranks, on the same megatron GPT (causal) data as GPT-2: it trains through both
transitions, final/ loads with AutoModelForCausalLM and reproduces the logged val loss, and a
resume from the checkpoint inside the small phase reproduces the run's losses."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from mlsys.train.checkpoint import complete_tags
from mlsys.train.metrics import read_metrics
from tests.test_resume import assert_same
from tests.tiny_run import exported_val_loss, run_config, train, write_yaml

PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 6, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 4, "lr": 2e-3, "warmup": 1}]


@pytest.mark.slow
def test_llama_vcycle_trains_exports_and_resumes(gpt_data: dict, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, LlamaForCausalLM

    cfg = run_config("llama", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                     tmp_path / "run", PHASES, checkpoint_every=4, keep_checkpoints=5)
    cfg["model"].update(dropout=0.0, extra={"num_key_value_heads": 2,
                                            "tie_word_embeddings": True})
    cfg["vcycle"] = {"alpha": 0.0, "depth_mapping": "identity", "interpolation": "width",
                     "noise": 0.001}
    config = write_yaml(tmp_path / "run.yaml", cfg)
    train(config, "zero3.json", log=tmp_path / "log.txt")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["level"] for r in records if r["event"] == "transition"] == [2, 1]
    end = [r for r in records if r["event"] == "end"][-1]
    assert end["step"] == 12 and end["val_loss"] == [
        r for r in records if r["event"] == "eval"][-1]["val_loss"]

    final = tmp_path / "run" / "final"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert isinstance(model, LlamaForCausalLM)
    c = model.config
    assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
            c.num_key_value_heads) == (64, 2, 4, 2)  # the level-1 size
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
    loss = exported_val_loss(config, final, AutoModelForCausalLM)
    assert abs(loss - end["val_loss"]) < 1e-5, (loss, end["val_loss"])
    assert torch.isfinite(torch.tensor(loss))

    # Resume from the checkpoint inside the small phase (level 2, step 4): same losses. The
    # finished run's done.json and final/ go too (a finished run is never retrained).
    (tmp_path / "run" / "done.json").unlink()
    shutil.rmtree(final)
    root = tmp_path / "run" / "checkpoints"
    small = [t for t in complete_tags(root)
             if json.loads((root / t / "controller.json").read_text())["phase"] == 1]
    assert small, complete_tags(root)
    for t in complete_tags(root):
        if t != small[-1]:
            shutil.rmtree(root / t)
    train(config, "zero3.json", extra=("--resume",), log=tmp_path / "resume.log")
    again = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in again) == 1
    assert_same(records, again)
    assert abs(exported_val_loss(config, final, AutoModelForCausalLM) - end["val_loss"]) < 1e-5
