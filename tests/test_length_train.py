"""A tiny GPT-2 V-cycle with a length level (width 2 and length 2 per coalescing step) through
launch/train.py, one process, ZeRO-1, gradient accumulation 2: the small phase trains on S/2
pooled positions of the same samples (tokens and data position as at k = 1, FLOPs of the
pooled sequence), the level export evaluated at k = 2 reproduces the logged level loss, the
final model is a plain GPT2LMHeadModel at k = 1 that reproduces the logged val loss, and a
resume from the checkpoint inside the length level reproduces the run's losses."""

from __future__ import annotations

from pathlib import Path

import pytest

from mlsys.config import load_run_config
from mlsys.flops import dims_of, flops_per_step
from mlsys.models import hf_config, level_config
from mlsys.train.metrics import read_metrics
from tests.test_resume import assert_same
from tests.tiny_run import (
    exported_val_loss,
    keep_only_checkpoint,
    run_config,
    train,
    write_yaml,
)

PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 2, "lr": 2e-3, "warmup": 1}]


@pytest.mark.slow
def test_length_level_trains_exports_and_resumes(gpt_data: dict, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, GPT2LMHeadModel

    from mlsys.data.run_data import build_run_data
    from mlsys.data.stream import batches, eval_indices
    from mlsys.train.evaluate import validation_loss

    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], tmp_path / "run",
                     PHASES, checkpoint_every=4, keep_checkpoints=5, eval_every=100)
    raw["model"]["dropout"] = 0.0
    raw["vcycle"] = {"alpha": 0.8, "width": 2, "depth": 1, "length": 2}
    config = write_yaml(tmp_path / "run.yaml", raw)
    train(config, "zero1.json", nproc=1, log=tmp_path / "log.txt")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    cfg = load_run_config(config)
    g, s = cfg.train.global_batch_size, cfg.data.seq_length

    moves = [(r["from_level"], r["to_level"]) for r in records if r["event"] == "transition"]
    assert moves == [(1, 2), (2, 1)]
    steps = [r for r in records if r["event"] == "step"]
    assert [(r["level"], r.get("length", 1)) for r in steps] == [(1, 1)] * 2 + [(2, 2)] * 4 \
        + [(1, 1)] * 2
    level1 = hf_config(cfg.model, 512)
    per = {lv: flops_per_step(dims_of(level_config(level1, lv, cfg.vcycle)), s, g,
                              cfg.vcycle.length_factor(lv)) for lv in (1, 2)}
    assert per[2] < flops_per_step(dims_of(level_config(level1, 2, cfg.vcycle)), s, g)
    prev_flops, prev_tokens = 0, 0
    for r in steps:  # every step reads g samples of s tokens, whatever its k
        assert (r["flops"] - prev_flops, r["tokens"] - prev_tokens) == (per[r["level"]], g * s)
        prev_flops, prev_tokens = r["flops"], r["tokens"]
    assert all(r["loss"] == r["loss"] for r in steps)  # finite numbers logged

    # The level export: a plain GPT-2 of level 2's width; evaluated at k = 2 it is the level.
    small_dir = tmp_path / "run" / "levels" / "phase1-level2"
    small = AutoModelForCausalLM.from_pretrained(small_dir)
    assert isinstance(small, GPT2LMHeadModel) and small.config.n_embd == 32
    assert "| length factor (validation loss at it; mlsys.length) | 2 |" in \
        (small_dir / "README.md").read_text()
    data = build_run_data(cfg, cfg.train_samples, cfg.train.eval_batches * g)
    idx = eval_indices(cfg.train.eval_batches * g, cfg.train.micro_batch_size, 1, 0)
    level_val = [r for r in records if r["event"] == "eval" and r["phase"] == 1][-1]
    assert level_val["length"] == 2
    got = validation_loss(small, batches(data.valid, idx, data.collate), cfg.kind, length=2)
    assert abs(got - level_val["val_loss"]) < 1e-5, (got, level_val["val_loss"])
    # It trained at k = 2: position rows >= S/2 got no gradient in the level (a fresh AdamW
    # only decays them, one factor for the whole table), rows below did.
    import torch

    from mlsys.distributed.weights_io import load_weights
    from mlsys.models import build_model
    from mlsys.operators import coalesce

    large = build_model(level1, seed=0)
    load_weights(large, tmp_path / "run" / "vcycle" / "phase0-level1.safetensors")
    start = coalesce(large, width=2, depth=1).transformer.wpe.weight.detach()
    ratio = small.transformer.wpe.weight.detach() / start
    unused, used = ratio[s // 2:], ratio[:s // 2 - 1]
    assert (unused - unused.mean()).abs().max() < 1e-6 and unused.mean() < 1.0
    assert (used - unused.mean()).abs().max() > 1e-3
    assert torch.isfinite(ratio).all()

    # final/: a plain Hugging Face model at k = 1, of the level-1 size.
    end = [r for r in records if r["event"] == "end"][-1]
    final = tmp_path / "run" / "final"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert isinstance(model, GPT2LMHeadModel) and model.config.n_embd == 64
    loss = exported_val_loss(config, final, AutoModelForCausalLM)
    assert abs(loss - end["val_loss"]) < 1e-5, (loss, end["val_loss"])

    # Resume from the checkpoint inside the length level (global step 4 = its 2nd step). The
    # finished run's done.json and final/ go too (a finished run is never retrained).
    keep_only_checkpoint(tmp_path / "run", phase=1, step_in_phase=2)
    train(config, "zero1.json", nproc=1, extra=("--resume",), log=tmp_path / "resume.log")
    again = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in again) == 1
    assert_same(records, again)
    assert abs(exported_val_loss(config, final, AutoModelForCausalLM) - end["val_loss"]) < 1e-5


BERT_PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
               {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
               {"level": 1, "steps": 2, "lr": 2e-3, "warmup": 1}]


@pytest.mark.slow
def test_bert_length_and_depth_under_zero3(bert_data: dict, tmp_path: Path) -> None:
    """Compound BERT (depth 2 and length 2 per step), ZeRO-3 in one process: the level trains
    on S/2 positions with the MLM head at S; final/ is a plain BertForMaskedLM that reproduces
    the logged val loss."""
    from transformers import AutoModelForMaskedLM, BertForMaskedLM

    raw = run_config("bert", bert_data["tokenizer_dir"], bert_data["data_prefix"],
                     tmp_path / "run", BERT_PHASES, eval_every=100)
    raw["model"]["dropout"] = 0.0
    raw["vcycle"] = {"alpha": 0.8, "width": 1, "depth": 2, "length": 2}
    config = write_yaml(tmp_path / "run.yaml", raw)
    train(config, "zero3.json", nproc=1, log=tmp_path / "log.txt")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    cfg = load_run_config(config)
    g, s = cfg.train.global_batch_size, cfg.data.seq_length
    steps = [r for r in records if r["event"] == "step"]
    assert [(r["level"], r.get("length", 1)) for r in steps] == [(1, 1)] * 2 + [(2, 2)] * 4 \
        + [(1, 1)] * 2
    level1 = hf_config(cfg.model, 512)
    small = level_config(level1, 2, cfg.vcycle)
    per2 = flops_per_step(dims_of(small), s, g, 2)
    assert [b["flops"] - a["flops"] for a, b in
            zip(steps[1:5], steps[2:6], strict=True)] == [per2] * 4
    first, last = (sum(r["loss"] for r in steps[i:i + 2]) / 2 for i in (2, 4))
    assert last < first, [r["loss"] for r in steps]
    # It trained at k = 2 under ZeRO-3: position rows >= S/2 only decayed in the level.
    from mlsys.distributed.weights_io import load_weights
    from mlsys.models import build_model
    from mlsys.operators import coalesce

    large = build_model(level1, seed=0)
    load_weights(large, tmp_path / "run" / "vcycle" / "phase0-level1.safetensors")
    start = coalesce(large, width=1, depth=2).bert.embeddings.position_embeddings.weight
    level = AutoModelForMaskedLM.from_pretrained(tmp_path / "run" / "levels" / "phase1-level2")
    ratio = (level.bert.embeddings.position_embeddings.weight / start).detach()
    unused, used = ratio[s // 2:], ratio[:s // 2]
    assert (unused - unused.mean()).abs().max() < 1e-6 and unused.mean() < 1.0
    assert (used - unused.mean()).abs().max() > 1e-3
    end = [r for r in records if r["event"] == "end"][-1]
    final = tmp_path / "run" / "final"
    assert isinstance(AutoModelForMaskedLM.from_pretrained(final), BertForMaskedLM)
    loss = exported_val_loss(config, final, AutoModelForMaskedLM)
    assert abs(loss - end["val_loss"]) < 1e-5, (loss, end["val_loss"])
