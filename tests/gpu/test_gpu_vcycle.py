"""The GPU path: a bf16 ZeRO-3 V-cycle (1 -> 2 -> 1 -> 2 -> 1) of a small GPT-2 and a small
Llama on every visible GPU (at most 2) over NCCL: four transitions with the accelerator's
memory back where it was at each return to level 1, a SIGTERM in a small phase that
checkpoints and a resume that ends the run, a Hugging Face export that reproduces the logged
validation loss, and the MFU the step records report (printed; the figures for the docs)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mlsys.distributed.spawn import start_ranks, wait_ranks
from mlsys.train.metrics import read_metrics
from tests.tiny_run import REPO, exported_val_loss, write_yaml

PHASES = [{"level": 1, "steps": 30, "lr": 1e-3, "warmup": 5},
          {"level": 2, "steps": 60, "lr": 2e-3, "warmup": 5},
          {"level": 1, "steps": 30, "lr": 1e-3, "warmup": 5},
          {"level": 2, "steps": 60, "lr": 2e-3, "warmup": 5},
          {"level": 1, "steps": 60, "lr": 1e-3, "warmup": 5}]
MODELS = {
    "gpt": {"family": "gpt", "hidden_size": 512, "num_layers": 8, "num_heads": 8,
            "ffn_size": 2048, "max_position": 512, "dropout": 0.0},
    "llama": {"family": "llama", "hidden_size": 512, "num_layers": 8, "num_heads": 8,
              "ffn_size": 1408, "max_position": 512, "dropout": 0.0,
              "extra": {"num_key_value_heads": 4, "tie_word_embeddings": True}},
}


def _ranks() -> int:
    import torch

    return min(2, torch.cuda.device_count())


def _config(tmp_path: Path, data: dict, family: str) -> Path:
    ranks = _ranks()
    return write_yaml(tmp_path / f"{family}.yaml", {
        "name": f"gpu-{family}", "run_dir": str(tmp_path / family), "model": MODELS[family],
        "data": {"tokenizer_dir": data["tokenizer_dir"], "data_prefix": data["data_prefix"],
                 "seq_length": 256, "split": "90,10,0"},
        "train": {"micro_batch_size": 8, "global_batch_size": 8 * ranks, "eval_every": 60,
                  "eval_batches": 4, "checkpoint_every": 50, "log_every": 10},
        "vcycle": {"width": 2, "depth": 2, "alpha": 0.0, "depth_mapping": "identity",
                   "interpolation": "width", "noise": 0.001},
        "phases": PHASES})


def _start(config: Path, log: Path, extra: tuple[str, ...] = ()) -> list[subprocess.Popen]:
    env = dict(os.environ, DS_ACCELERATOR="cuda", PYTHONPATH=str(REPO))
    out = open(log, "a")
    return start_ranks("launch.train", ["--config", str(config), "--ds_config",
                                        str(REPO / "configs" / "ds" / "zero3-bf16.json"),
                                        "--no-progress", *extra], _ranks(), env=env,
                       cwd=str(REPO), stdout=out, stderr=subprocess.STDOUT)


@pytest.mark.parametrize("family", ["gpt", "llama"])
def test_bf16_zero3_vcycle_on_gpus(gpt_data: dict, tmp_path: Path, family: str) -> None:
    from transformers import AutoModelForCausalLM

    config, log = _config(tmp_path, gpt_data, family), tmp_path / f"{family}.log"
    metrics = tmp_path / family / "metrics.jsonl"
    procs = _start(config, log)
    deadline = time.time() + 900
    while not (metrics.exists() and any(r["event"] == "step" and r["phase"] == 3
                                        and r["phase_step"] >= 20 for r in read_metrics(metrics))):
        assert all(p.poll() is None for p in procs) and time.time() < deadline, \
            log.read_text()[-4000:]
        time.sleep(0.5)
    for p in procs:  # preemption in the second small phase
        p.send_signal(signal.SIGTERM)
    assert [p.wait(timeout=300) for p in procs] == [0] * len(procs), log.read_text()[-4000:]
    assert any(r["event"] == "preempted" for r in read_metrics(metrics))

    try:
        code = wait_ranks(_start(config, log), deadline=time.monotonic() + 900)
    except TimeoutError as stuck:
        raise AssertionError(f"{stuck}\n{log.read_text()[-4000:]}") from None
    assert code == 0, log.read_text()[-4000:]
    records = read_metrics(metrics)
    assert sum(r["event"] == "resume" for r in records) == 1
    moves = [r for r in records if r["event"] == "transition"]
    assert [(r["from_level"], r["to_level"]) for r in moves] == [(1, 2), (2, 1), (1, 2), (2, 1)]
    back = [r["device_memory_bytes"] for r in moves if r["to_level"] == 1]
    assert back[1] <= 1.05 * back[0], back  # a destroyed engine's memory came back

    steps = [r for r in records if r["event"] == "step"]
    assert all(r["mfu"] is not None and r["mfu"] > 0 for r in steps[1:]), steps[-1]
    end = [r for r in records if r["event"] == "end"][-1]
    loss = exported_val_loss(config, tmp_path / family / "final", AutoModelForCausalLM)
    assert abs(loss - end["val_loss"]) < 0.05, (loss, end["val_loss"])  # bf16 run, fp32 export
    figures = {"family": family, "ranks": _ranks(),
               "mfu_level1": sorted(r["mfu"] for r in steps if r["level"] == 1)[
                   len([r for r in steps if r["level"] == 1]) // 2],
               "mfu_level2": sorted(r["mfu"] for r in steps if r["level"] == 2)[
                   len([r for r in steps if r["level"] == 2]) // 2],
               "device_memory_at_level1_bytes": back,
               "peak_memory_bytes": max(r["peak_memory_bytes"] for r in steps),
               "val_loss": end["val_loss"], "exported_val_loss": loss}
    print(json.dumps(figures))
    out = os.environ.get("MLSYS_GPU_FIGURES")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / f"{family}.json").write_text(json.dumps(figures, indent=1))
