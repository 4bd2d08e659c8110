"""The vision family through the run config, FLOPs accounting and a real 2-rank ZeRO-3 V-cycle."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import yaml
from torch.utils.flop_counter import FlopCounterMode
from transformers import DeiTConfig, DeiTForImageClassification, ViTForImageClassification

from mlsys.config import ConfigError, parse_run_config
from mlsys.data.stream import batches, eval_indices
from mlsys.flops import dims_of, flops_per_step
from mlsys.train.evaluate import validation_metrics
from tests.distributed import ROOT, launch

IMAGE, PATCH = 16, 4
TOKENS = (IMAGE // PATCH) ** 2 + 1


def run_config(tmp_path, **changes) -> dict:
    cfg = {
        "name": "vit-test", "run_dir": str(tmp_path / "run"),
        "model": {"family": "vit", "hidden_size": 32, "num_layers": 2, "num_heads": 4,
                  "ffn_size": 64, "dropout": 0.0,
                  "extra": {"image_size": IMAGE, "patch_size": PATCH}},
        "data": {"prepare_dir": str(tmp_path / "data"), "seq_length": TOKENS,
                 "split": "90,10,0"},
        "train": {"micro_batch_size": 8, "global_batch_size": 16, "eval_every": 100,
                  "eval_batches": 2},
        "vcycle": {"alpha": 0.8},
        "phases": [{"level": 1, "steps": 3, "lr": 2e-3}, {"level": 2, "steps": 3, "lr": 4e-3},
                   {"level": 1, "steps": 3, "lr": 1e-3}],
    }
    for section, value in changes.items():
        cfg[section] = {**cfg[section], **value} if isinstance(value, dict) else value
    return cfg


@pytest.mark.parametrize("family,extra_tokens", [("vit", 1), ("deit", 2)])
def test_vit_flops_match_the_flop_counter(family, extra_tokens):
    """6N + 12LSd per token against torch's count of the real model (eager attention); the
    formula charges the patch embedding an input gradient it does not have, and skips the
    classifier, so it may be a little high."""
    from transformers import ViTConfig

    kw = dict(hidden_size=64, num_attention_heads=4, intermediate_size=256, num_hidden_layers=2,
              image_size=32, patch_size=4, num_labels=10, attn_implementation="eager")
    config = ViTConfig(**kw) if family == "vit" else DeiTConfig(**kw)
    model = (ViTForImageClassification if family == "vit" else DeiTForImageClassification)(config)
    with FlopCounterMode(display=False) as counter:
        model(pixel_values=torch.randn(4, 3, 32, 32), labels=torch.arange(4)).loss.backward()
    predicted = flops_per_step(dims_of(config), 64 + extra_tokens, 4)
    assert 1.0 <= predicted / counter.get_total_flops() <= 1.02


@pytest.mark.parametrize("changes,field", [
    ({"data": {"seq_length": 16}}, "data.seq_length"),
    ({"data": {"tokenizer_dir": "tok", "data_prefix": "x"}}, "data.tokenizer_dir"),
    ({"model": {"extra": {"image_size": 16}}}, "model.extra"),
    ({"model": {"family": "deit"}}, "data.seq_length"),  # DeiT has a distillation token too
])
def test_vision_config_errors_name_the_field(tmp_path, changes, field):
    with pytest.raises(ConfigError, match=field):
        parse_run_config(run_config(tmp_path, **changes))


def _metrics(model, valid, n: int) -> dict[str, float]:
    from mlsys.data.vision import collate_images

    return validation_metrics(model, batches(valid, eval_indices(n, 8, 1, 0), collate_images),
                              "vision")


@pytest.mark.slow
def test_two_rank_zero3_vit_vcycle(tmp_path):
    """Real DeepSpeed ZeRO-3 run on 2 gloo ranks: level 1 -> 2 -> 1 on the digits. The eval
    right after coalescing equals coalescing the saved level-1 weights in one process, and the
    exported model reproduces the last eval: the partitioned operators, the data stream and the
    export agree with the dense, single-process path."""
    from mlsys.data.vision import build_image_datasets
    from mlsys.distributed.weights_io import load_weights
    from mlsys.operators import coalesce

    cfg = run_config(tmp_path)
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(cfg))
    launch(ROOT / "launch/train.py", "--config", str(path), "--ds_config",
           str(ROOT / "configs/ds/zero3.json"), "--no-progress", timeout=300)

    run = tmp_path / "run"
    assert json.loads((run / "done.json").read_text())["status"] == "done"
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [r for r in records if r["event"] == "step"]
    assert [r["level"] for r in steps] == [1] * 3 + [2] * 3 + [1] * 3
    assert all(torch.isfinite(torch.tensor(r["loss"])) for r in steps)
    assert [(r["from_level"], r["to_level"]) for r in records if r["event"] == "transition"] \
        == [(1, 2), (2, 1)]
    evals = [r for r in records if r["event"] == "eval"]
    assert all(0.0 <= r["val_top1"] <= 1.0 for r in evals)
    assert steps[-1]["tokens"] == 9 * 16 * TOKENS

    prefix = str(tmp_path / "data" / "images" / f"digits{IMAGE}")
    _, valid = build_image_datasets(prefix, 1234, IMAGE, split="90,10,0")
    n = 2 * 16
    full = ViTForImageClassification.from_pretrained(run / "final")
    assert full.config.num_labels == 10 and full.config.hidden_size == 32
    final = _metrics(full, valid, n)
    assert final["val_loss"] == pytest.approx(evals[-1]["val_loss"], abs=1e-5)
    assert final["val_top1"] == evals[-1]["val_top1"]

    # the image-classification pipeline preprocesses as the data does and ranks by the model
    from PIL import Image
    from transformers import pipeline

    from mlsys.data.vision import ImageShards
    image, _ = ImageShards(prefix).get(int(valid.indices[0]))
    classify = pipeline("image-classification", model=str(run / "final"), device="cpu")
    top = classify(Image.fromarray(np.asarray(image)), top_k=3)
    with torch.no_grad():
        probs = full(pixel_values=valid[0]["pixel_values"][None]).logits[0].softmax(-1)
    assert [full.config.label2id[t["label"]] for t in top] == probs.topk(3).indices.tolist()
    assert [t["score"] for t in top] == pytest.approx(probs.topk(3).values.tolist(), abs=1e-5)

    level1 = ViTForImageClassification._from_config(full.config)
    load_weights(level1, run / "vcycle" / "phase0-level1.safetensors")
    after_down = next(r for r in evals if r["level"] == 2 and r["phase_step"] == 0)
    small = _metrics(coalesce(level1.eval()), valid, n)
    assert small["val_loss"] == pytest.approx(after_down["val_loss"], abs=1e-5)
    assert small["val_top1"] == after_down["val_top1"]
