"""What a GPT-2 V-cycle (ZeRO-2, 2 gloo ranks, TensorBoard and CSV monitors on) leaves behind,
after a SIGTERM in the small phase and a resume that redoes steps the monitors already have:

- final/ loads with ``AutoModelForCausalLM`` + ``AutoTokenizer``, gives the validation loss the
  run logged, tokenizes like the training tokenizer, generates through ``pipeline``, and says
  in its model card what it is;
- every phase but the last is exported under levels/ at its own size, with the same files;
- the TensorBoard event files and the CSV files hold each step's loss and each evaluation's
  loss exactly once, equal to metrics.jsonl, continuing across the transitions and the resume.
"""

from __future__ import annotations

import csv
import json
import shutil
import signal
from pathlib import Path

import pytest
import sentencepiece as spm
import torch

from mlsys.train.checkpoint import complete_tags
from mlsys.train.metrics import read_metrics
from tests.tiny_run import (
    REPO,
    exported_val_loss,
    run_config,
    start,
    train,
    wait_for_small_phase,
    write_yaml,
)

PHASES = [{"level": 1, "steps": 3, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 3, "lr": 2e-3, "warmup": 1}]
TEXT = "def unseen_function(alpha, beta):\n    return alpha  ** beta  # ünïcödé 🙂\n"


@pytest.fixture(scope="module")
def gpt_run(gpt_data: dict, tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("export")
    ds = json.loads((REPO / "configs/ds/zero2.json").read_text())
    ds["tensorboard"] = {"enabled": True}  # no output_path: inside the run directory
    ds["csv_monitor"] = {"enabled": True, "output_path": str(tmp / "csv"), "job_name": "gpt"}
    ds_path = tmp / "ds.json"
    ds_path.write_text(json.dumps(ds))
    run = tmp / "run"
    config = write_yaml(tmp / "run.yaml", run_config(
        "gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], run, PHASES))
    procs = start(config, str(ds_path), log=tmp / "cut.log")
    wait_for_small_phase(run / "metrics.jsonl", procs, 2)
    for p in procs:
        p.send_signal(signal.SIGTERM)
    assert [p.wait(timeout=300) for p in procs] == [0, 0], (tmp / "cut.log").read_text()[-3000:]
    before = max(r["step"] for r in read_metrics(run / "metrics.jsonl"))
    root = run / "checkpoints"  # resume from the transition's checkpoint: steps are redone
    tags = complete_tags(root)
    for tag in tags[1:]:
        shutil.rmtree(root / tag)
    train(config, str(ds_path), log=tmp / "resume.log")
    return {"config": config, "run": run, "csv": tmp / "csv" / "gpt", "redone_through": before,
            "resumed_at": json.loads((root / tags[0] / "controller.json").read_text()),
            "tokenizer_dir": gpt_data["tokenizer_dir"]}


@pytest.mark.slow
def test_final_loads_with_its_tokenizer_and_reproduces_val_loss(gpt_run: dict) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2LMHeadModel, pipeline

    records = read_metrics(gpt_run["run"] / "metrics.jsonl")
    end = [r for r in records if r["event"] == "end"][-1]
    assert end["val_loss"] == [r for r in records if r["event"] == "eval"][-1]["val_loss"]
    final = gpt_run["run"] / "final"
    model = AutoModelForCausalLM.from_pretrained(final)
    assert isinstance(model, GPT2LMHeadModel)
    assert model.config.n_embd == 64 and model.config.n_layer == 2  # the level-1 size
    assert model.lm_head.weight.data_ptr() == model.transformer.wte.weight.data_ptr()  # tied
    loss = exported_val_loss(gpt_run["config"], final, AutoModelForCausalLM)
    assert abs(loss - end["val_loss"]) < 1e-5, (loss, end["val_loss"])

    tok = AutoTokenizer.from_pretrained(final)
    sp = spm.SentencePieceProcessor(model_file=str(final / "spm.model"))
    assert (final / "spm.model").read_bytes() == (Path(gpt_run["tokenizer_dir"])
                                                  / "spm.model").read_bytes()
    ids = tok(TEXT)["input_ids"]
    assert ids == sp.encode(TEXT) and 1 not in ids  # no [UNK]: byte fallback as in training
    assert tok.eos_token_id == model.generation_config.eos_token_id == sp.piece_to_id("</s>")

    generate = pipeline("text-generation", model=str(final), device="cpu")
    out = generate("def foo(x):", max_new_tokens=6, do_sample=False,
                   return_tensors=True)[0]["generated_token_ids"]
    with torch.no_grad():  # greedy by hand: the same continuation
        x = torch.tensor([tok("def foo(x):")["input_ids"]])
        for _ in range(6):
            nxt = model(input_ids=x).logits[0, -1].argmax()
            if nxt.item() == tok.eos_token_id:
                break
            x = torch.cat([x, nxt.view(1, 1)], dim=1)
    assert list(out) == x[0].tolist()

    card = (final / "README.md").read_text()
    assert "| family | gpt |" in card and f"| validation loss | {end['val_loss']:.4f} |" in card
    assert f"| training FLOPs | {end['flops']:.4g} |" in card


@pytest.mark.slow
def test_every_phase_but_the_last_is_exported(gpt_run: dict) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    levels = gpt_run["run"] / "levels"
    assert sorted(p.name for p in levels.iterdir()) == ["phase0-level1", "phase1-level2"]
    small = AutoModelForCausalLM.from_pretrained(levels / "phase1-level2")
    assert (small.config.n_embd, small.config.n_layer) == (32, 1)
    tok = AutoTokenizer.from_pretrained(levels / "phase1-level2")
    assert tok(TEXT)["input_ids"] == AutoTokenizer.from_pretrained(
        gpt_run["run"] / "final")(TEXT)["input_ids"]
    records = read_metrics(gpt_run["run"] / "metrics.jsonl")
    last_small = [r for r in records if r["event"] == "eval" and r["phase"] == 1][-1]
    card = (levels / "phase1-level2" / "README.md").read_text()
    assert f"| validation loss | {last_small['val_loss']:.4f} |" in card
    assert f"| trained steps | {last_small['step']} |" in card


def _tensorboard(path: Path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path), size_guidance={"scalars": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def _csv(path: Path) -> dict[str, list[tuple[int, float]]]:
    out = {}
    for f in sorted(path.glob("*.csv")):
        rows = list(csv.reader(f.open()))
        assert rows[0][0] == "step" and all(r[0] != "step" for r in rows[1:]), f
        out[f.stem.replace("_", "/", 1)] = [(int(r[0]), float(r[1])) for r in rows[1:]]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("monitor", ["tensorboard", "csv"])
def test_monitors_have_every_point_once(gpt_run: dict, monitor: str) -> None:
    records = read_metrics(gpt_run["run"] / "metrics.jsonl")
    assert gpt_run["redone_through"] > gpt_run["resumed_at"]["global_step"]  # steps were redone
    scalars = (_tensorboard(gpt_run["run"] / "tensorboard") if monitor == "tensorboard"
               else _csv(gpt_run["csv"]))
    for tag, event, key in [("Train/loss", "step", "loss"), ("Train/lr", "step", "lr"),
                            ("Train/flops", "step", "flops"), ("Train/level", "step", "level"),
                            ("Eval/val_loss", "eval", "val_loss")]:
        want = [(r["step"], float(r[key])) for r in records if r["event"] == event]
        got = scalars[tag]
        assert [s for s, _ in got] == [s for s, _ in want], tag  # each once, in order
        for (_, a), (_, b) in zip(got, want, strict=True):
            assert a == pytest.approx(b, rel=1e-5, abs=1e-6), tag
