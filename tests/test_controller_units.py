"""The controller's pure parts: LR schedule, data stream partition, weights file round trip,
metrics truncation on resume."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from mlsys.config import ModelConfig
from mlsys.data.stream import eval_indices, micro_indices
from mlsys.distributed.weights_io import load_weights, save_weights
from mlsys.models import build_model, hf_config
from mlsys.train.metrics import read_metrics, truncate_after
from mlsys.train.schedule import lr_factor


def test_lr_warmup_then_decay_to_min() -> None:
    f = [lr_factor(s, 10, 4, "linear", 0.1) for s in range(10)]
    assert f[:4] == [0.25, 0.5, 0.75, 1.0]
    assert f[4] == 1.0 and f[9] == pytest.approx(0.1)
    assert all(a >= b for a, b in zip(f[3:], f[4:], strict=False))
    c = [lr_factor(s, 10, 0, "cosine", 0.0) for s in range(10)]
    assert c[0] == 1.0 and c[9] == pytest.approx(0.0, abs=1e-12)
    assert [lr_factor(s, 5, 2, "constant", 0.1) for s in range(5)] == [0.5, 1, 1, 1, 1]


@pytest.mark.parametrize("world,micro,accum", [(1, 8, 1), (2, 4, 1), (2, 2, 2), (4, 1, 3)])
def test_stream_covers_each_sample_once(world: int, micro: int, accum: int) -> None:
    """Over several steps (as across phases), every index in [0, consumed) exactly once."""
    g = world * micro * accum
    seen: list[int] = []
    for step in range(5):
        for r in range(world):
            for chunk in micro_indices(step * g, micro, world, r, accum):
                seen += chunk
    assert sorted(seen) == list(range(5 * g))


def test_eval_indices_partition() -> None:
    parts = [eval_indices(10, 3, 2, r) for r in range(2)]
    flat = sorted(i for p in parts for chunk in p for i in chunk)
    assert flat == list(range(10))


@pytest.mark.parametrize("family", ["bert", "gpt"])
def test_weights_file_round_trip(tmp_path: Path, family: str) -> None:
    config = hf_config(ModelConfig(family=family, hidden_size=32, num_layers=2, num_heads=2,
                                   max_position=16), 50)
    a, b = build_model(config, seed=1), build_model(config, seed=2)
    save_weights(a, tmp_path / "w.safetensors")
    load_weights(b, tmp_path / "w.safetensors")
    for (n, pa), (_, pb) in zip(a.state_dict().items(), b.state_dict().items(), strict=True):
        assert torch.equal(pa, pb), n
    other = build_model(hf_config(ModelConfig(family=family, hidden_size=16, num_layers=2,
                                              num_heads=2, max_position=16), 50), 0)
    with pytest.raises(ValueError, match="shape"):
        load_weights(other, tmp_path / "w.safetensors")


def test_truncate_after_keeps_records_up_to_step(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps({"event": "step", "step": s}) + "\n" for s in range(8)))
    assert truncate_after(path, 4) == 3
    assert [r["step"] for r in read_metrics(path)] == [0, 1, 2, 3, 4]


def test_truncate_after_drops_a_later_phase_at_the_same_step(tmp_path: Path) -> None:
    """Resuming from the checkpoint taken before a transition redoes that transition."""
    path = tmp_path / "metrics.jsonl"
    rows = [("step", 4, 1), ("eval", 4, 1), ("transition", 4, 2), ("eval", 4, 2),
            ("step", 5, 2)]
    path.write_text("".join(json.dumps({"event": e, "step": s, "phase": p}) + "\n"
                            for e, s, p in rows))
    assert truncate_after(path, 4, phase=1) == 3
    assert [r["event"] for r in read_metrics(path)] == ["step", "eval"]


def test_truncate_after_drops_the_end_of_a_finished_run(tmp_path: Path) -> None:
    """A run forked from (or resumed after) a finished one ends anew: the old end goes."""
    path = tmp_path / "metrics.jsonl"
    rows = [("step", 4, 0), ("eval", 4, 0), ("checkpoint", 4, 0), ("end", 4, 0)]
    path.write_text("".join(json.dumps({"event": e, "step": s, "phase": p}) + "\n"
                            for e, s, p in rows))
    assert truncate_after(path, 4, phase=0) == 1
    assert [r["event"] for r in read_metrics(path)] == ["step", "eval", "checkpoint"]
