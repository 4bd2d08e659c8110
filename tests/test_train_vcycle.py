"""A 2-level V-cycle (BERT) with ZeRO-3 on 2 gloo ranks, end to end, on real data."""

from __future__ import annotations

import pytest

from mlsys.config import load_run_config
from mlsys.flops import dims_of, flops_per_step
from mlsys.models import hf_config, level_config
from mlsys.train.metrics import read_metrics
from tests.tiny_run import exported_val_loss, run_config, train, write_yaml

PHASES = [{"level": 1, "steps": 4, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 8, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 8, "lr": 2e-3, "warmup": 1}]


@pytest.fixture(scope="module")
def run(bert_data: dict, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("vcycle")
    config = write_yaml(root / "run.yaml", run_config(
        "bert", bert_data["tokenizer_dir"], bert_data["data_prefix"], root / "run", PHASES))
    train(config, "zero3.json", log=root / "log.txt")
    return {"config": config, "dir": root / "run",
            "records": read_metrics(root / "run" / "metrics.jsonl")}


def steps_of(records: list[dict], phase: int) -> list[dict]:
    return [r for r in records if r["event"] == "step" and r["phase"] == phase]


@pytest.mark.slow
def test_loss_decreases_in_every_phase(run: dict) -> None:
    for phase, spec in enumerate(PHASES):
        steps = steps_of(run["records"], phase)
        assert [r["level"] for r in steps] == [spec["level"]] * spec["steps"]
        first = sum(r["loss"] for r in steps[:2]) / 2
        last = sum(r["loss"] for r in steps[-2:]) / 2
        assert last < first, (phase, [round(r["loss"], 3) for r in steps])


@pytest.mark.slow
def test_transitions_and_flops_accounting(run: dict) -> None:
    records, cfg = run["records"], load_run_config(run["config"])
    moves = [(r["from_level"], r["to_level"]) for r in records if r["event"] == "transition"]
    assert moves == [(1, 2), (2, 1)]
    assert all(r["transition_seconds"] > 0 for r in records if r["event"] == "transition")
    assert (run["dir"] / "vcycle" / "phase0-level1.safetensors").is_file()
    level1 = hf_config(cfg.model, 512)
    g, s = cfg.train.global_batch_size, cfg.data.seq_length
    per = {lv: flops_per_step(dims_of(level_config(level1, lv, cfg.vcycle)), s, g)
           for lv in (1, 2)}
    steps = [r for r in records if r["event"] == "step"]
    prev = 0
    for r in steps:
        assert r["flops"] - prev == per[r["level"]]
        prev = r["flops"]
    assert steps[-1]["tokens"] == 20 * g * s and steps[-1]["step"] == 20
    evals = [r for r in records if r["event"] == "eval"]
    assert [r["step"] for r in evals] == [4, 4, 8, 12, 12, 16, 20]  # every 4, phase ends, starts


@pytest.mark.slow
def test_outputs_and_export_reproduce_val_loss(run: dict) -> None:
    from transformers import AutoModelForMaskedLM, BertForMaskedLM

    out = run["dir"]
    assert (out / "val_loss_vs_flops.png").read_bytes()[:4] == b"\x89PNG"
    end = [r for r in run["records"] if r["event"] == "end"][-1]
    final = out / "final"
    assert (final / "model.safetensors").is_file() and (final / "spm.model").is_file()
    loss = exported_val_loss(run["config"], final, AutoModelForMaskedLM)
    assert isinstance(AutoModelForMaskedLM.from_pretrained(final), BertForMaskedLM)
    assert abs(loss - end["val_loss"]) < 1e-5, (loss, end["val_loss"])


@pytest.mark.slow
def test_fill_mask_pipeline_on_the_export(run: dict) -> None:
    """``pipeline("fill-mask")`` on final/ scores the mask with the model's own softmax over
    the ids of ``[CLS] text [SEP]``, as training samples have them."""
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer, pipeline

    final = run["dir"] / "final"
    tok, model = AutoTokenizer.from_pretrained(final), AutoModelForMaskedLM.from_pretrained(final)
    text = "def foo(x): return [MASK] + 1"
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.cls_token_id and ids[-1] == tok.sep_token_id
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, ids.index(tok.mask_token_id)]
    probs = logits.softmax(-1)
    top = pipeline("fill-mask", model=str(final), device="cpu")(text, top_k=3)
    assert [t["token"] for t in top] == probs.topk(3).indices.tolist()
    assert [t["score"] for t in top] == pytest.approx(probs.topk(3).values.tolist(), abs=1e-6)
