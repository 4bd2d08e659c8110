"""Throughput in the step records (tokens/s, TFLOP/s per device, MFU, peak memory) and the
step log line: the arithmetic as pure functions, then on a real tiny V-cycle run (1 process)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mlsys.train.progress import Progress
from mlsys.train.throughput import (
    accelerator_name,
    log_line,
    peak_tflops,
    table_peak,
    throughput,
)


def test_throughput_arithmetic() -> None:
    t = throughput(tokens=4096, flops=3 * 10**12, seconds=2.0, world=4, peak=0.5)
    assert t.tokens_per_s == 2048.0
    assert t.tflops_per_device == pytest.approx(3 / 2 / 4)
    assert t.mfu == pytest.approx(3 / 2 / 4 / 0.5)
    assert throughput(10, 10**12, 1.0, 1, None).mfu is None
    with pytest.raises(ValueError, match="positive"):
        throughput(1, 1, 0.0, 1, None)


@pytest.mark.parametrize("name,peak", [
    ("NVIDIA H100 80GB HBM3", 989.4), ("NVIDIA H100 PCIe", 756.5), ("NVIDIA H100 NVL", 835.5),
    ("NVIDIA H200", 989.4), ("NVIDIA H200 NVL", 835.5), ("NVIDIA A100-SXM4-80GB", 312.0),
    ("NVIDIA A100 80GB PCIe", 312.0), ("NVIDIA L4", 121.0), ("NVIDIA L40S", 362.05),
    ("NVIDIA A10", 125.0), ("NVIDIA A10G", None), ("AMD Instinct MI300X", 1307.4),
    ("Tesla T4", None), ("", None), (None, None)])
def test_peak_table(name: str | None, peak: float | None) -> None:
    assert table_peak(name) == peak


def test_peak_override_and_cpu() -> None:
    assert peak_tflops(123.0, "NVIDIA H100 80GB HBM3") == 123.0
    assert peak_tflops(None, "NVIDIA H100 80GB HBM3") == 989.4
    assert peak_tflops(None, None) is None
    import torch

    if not torch.cuda.is_available():
        assert accelerator_name() is None and peak_tflops(None, accelerator_name()) is None


RECORD = {"event": "step", "step": 12, "phase": 1, "level": 2, "loss": 3.42101, "lr": 1e-3,
          "seconds": 0.0521, "window": 2, "tokens_per_s": 12345.6, "tflops_per_device": 0.4523,
          "mfu": 0.1234, "peak_memory_bytes": 1.21 * 2**30}


def test_log_line() -> None:
    assert log_line(RECORD, 40) == ("step 12/40 phase 1 L2 loss 3.4210 lr 1.00e-03 | "
                                    "12,346 tok/s | 0.452 TFLOP/s/dev | MFU 12.3% | "
                                    "peak mem 1.21 GiB | 0.0521 s/step")
    assert "| MFU - |" in log_line({**RECORD, "mfu": None}, 40)


def test_progress_log_prints_without_a_bar(capsys: pytest.CaptureFixture) -> None:
    with Progress(10, enabled=False) as bar:
        bar.log("step 1/10 hello")
    assert capsys.readouterr().out == "step 1/10 hello\n"


LINE = re.compile(r"^step (\d+)/(\d+) phase (\d) L(\d) loss \S+ lr \S+ \| ([\d,]+) tok/s \| "
                  r"(\S+) TFLOP/s/dev \| MFU (\S+)% \| peak mem (\S+) GiB \| (\S+) s/step$",
                  re.MULTILINE)


@pytest.mark.slow
def test_step_records_carry_throughput(gpt_data: dict, tmp_path: Path) -> None:
    """A V-cycle (levels 1, 2, 1) with records covering 2 steps and 1: every step record's
    tokens/s, TFLOP/s per device and MFU follow from its tokens, FLOPs (the differences of the
    cumulative counts since the previous record), seconds and window; peak memory is there;
    rank 0 prints one line per record with --no-progress."""
    from mlsys.train.metrics import read_metrics
    from tests.tiny_run import run_config, train, write_yaml

    peak = 0.002  # TFLOP/s: a made-up peak, so that MFU is a number on a CPU
    phases = [{"level": 1, "steps": 3, "lr": 3e-3, "warmup": 1},
              {"level": 2, "steps": 2, "lr": 5e-3, "warmup": 1},
              {"level": 1, "steps": 1, "lr": 2e-3}]
    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                     tmp_path / "run", phases, log_every=2, eval_every=100, peak_tflops=peak)
    raw["train"]["export_levels"] = False
    config = write_yaml(tmp_path / "run.yaml", raw)
    train(config, "zero1.json", nproc=1, log=tmp_path / "log.txt")
    steps = [r for r in read_metrics(tmp_path / "run" / "metrics.jsonl")
             if r["event"] == "step"]
    assert [(r["step"], r["window"]) for r in steps] == [(2, 2), (3, 1), (4, 1), (5, 1),
                                                         (6, 1)]
    prev_tokens = prev_flops = 0
    for r in steps:
        seconds = r["seconds"] * r["window"]
        tokens, flops = r["tokens"] - prev_tokens, r["flops"] - prev_flops
        assert tokens == r["window"] * 8 * 64
        assert r["tokens_per_s"] == pytest.approx(tokens / seconds, rel=1e-9)
        assert r["tflops_per_device"] == pytest.approx(flops / seconds / 1 / 1e12, rel=1e-9)
        assert r["mfu"] == pytest.approx(r["tflops_per_device"] / peak, rel=1e-9)
        assert r["peak_memory_bytes"] > 0
        prev_tokens, prev_flops = r["tokens"], r["flops"]
    assert steps[2]["level"] == 2 and steps[2]["tflops_per_device"] > 0

    lines = LINE.findall((tmp_path / "log.txt").read_text())
    assert [(int(s), int(t), int(p), int(lv)) for s, t, p, lv, *_ in lines] == [
        (r["step"], 6, r["phase"], r["level"]) for r in steps]
    for (*_, tok, tfl, mfu, mem, sec), r in zip(lines, steps, strict=True):
        assert int(tok.replace(",", "")) == round(r["tokens_per_s"])
        assert float(mfu) == pytest.approx(100 * r["mfu"], abs=0.05)
        assert float(mem) == pytest.approx(r["peak_memory_bytes"] / 2**30, abs=0.005)
        assert float(tfl) == pytest.approx(r["tflops_per_device"], rel=1e-2)
        assert float(sec) == pytest.approx(r["seconds"], rel=1e-2)
