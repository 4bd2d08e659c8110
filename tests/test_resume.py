"""Preemption and resume, ZeRO-3 on 2 gloo ranks: SIGTERM in the small phase checkpoints and
exits 0; resuming gives the uninterrupted run's losses (fp32, within 1e-5), also when resuming
from the checkpoint taken right after the up-transition."""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path

import pytest

from mlsys.train.checkpoint import complete_tags, fork_run
from mlsys.train.metrics import read_metrics
from tests.tiny_run import run_config, start, train, wait_for_small_phase, write_yaml

PHASES = [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
          {"level": 2, "steps": 6, "lr": 5e-3, "warmup": 1},
          {"level": 1, "steps": 4, "lr": 2e-3, "warmup": 1}]


def losses(records: list[dict]) -> dict[tuple[str, int, int], float]:
    """(event, step, phase) -> loss / val loss."""
    out = {}
    for r in records:
        if r["event"] in ("step", "eval", "end"):
            out[(r["event"], r["step"], r["phase"])] = r.get("loss", r.get("val_loss"))
    return out


def assert_same(a: list[dict], b: list[dict]) -> None:
    la, lb = losses(a), losses(b)
    assert la.keys() == lb.keys()
    bad = {k: (la[k], lb[k]) for k in la if abs(la[k] - lb[k]) > 1e-5}
    assert not bad, bad


@pytest.mark.slow
def test_sigterm_in_small_phase_then_resume_matches(bert_data: dict, tmp_path: Path) -> None:
    def config(name: str) -> Path:
        return write_yaml(tmp_path / f"{name}.yaml", run_config(
            "bert", bert_data["tokenizer_dir"], bert_data["data_prefix"], tmp_path / name,
            PHASES))

    train(config("ref"), "zero3.json", log=tmp_path / "ref.log")
    ref = read_metrics(tmp_path / "ref" / "metrics.jsonl")

    cut = config("cut")
    procs = start(cut, "zero3.json", log=tmp_path / "cut.log")
    wait_for_small_phase(tmp_path / "cut" / "metrics.jsonl", procs, 1)  # stop within 2 steps
    for p in procs:  # what SLURM does at preemption: every task gets SIGTERM
        p.send_signal(signal.SIGTERM)
    codes = [p.wait(timeout=300) for p in procs]
    assert codes == [0, 0], (tmp_path / "cut.log").read_text()[-3000:]
    cut_records = read_metrics(tmp_path / "cut" / "metrics.jsonl")
    stop = [r for r in cut_records if r["event"] == "preempted"]
    assert len(stop) == 1 and stop[0]["level"] == 2 and stop[0]["signal"] == signal.SIGTERM
    assert not (tmp_path / "cut" / "final").exists()

    train(cut, "zero3.json", log=tmp_path / "resume.log")  # finds the checkpoint by itself
    resumed = read_metrics(tmp_path / "cut" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in resumed) == 1
    assert_same(ref, resumed)

    # Resume from the checkpoint written right after the up-transition (interpolated model,
    # fresh optimizer): drop the newer tags and the finished run's outputs (a finished run is
    # never retrained: as if it had crashed there) and go again.
    (tmp_path / "cut" / "done.json").unlink()
    shutil.rmtree(tmp_path / "cut" / "final")
    root = tmp_path / "cut" / "checkpoints"
    tags = [t for t in complete_tags(root) if json.loads(
        (root / t / "controller.json").read_text())["phase"] == 2]
    assert tags, complete_tags(root)
    for t in complete_tags(root):
        if t != tags[0]:
            shutil.rmtree(root / t)
    train(cut, "zero3.json", extra=("--resume",), log=tmp_path / "resume2.log")
    again = read_metrics(tmp_path / "cut" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in again) == 2
    assert_same(ref, again)


@pytest.mark.slow
def test_fork_at_a_checkpoint_reproduces_or_branches(gpt_data: dict, tmp_path: Path) -> None:
    """``fork_run`` copies the checkpoint taken before the up-transition: resumed with the same
    config the fork reproduces the source's losses; with another alpha it shares everything up
    to the fork and differs after it."""
    def config(name: str, alpha: float) -> Path:
        cfg = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"],
                         tmp_path / name, PHASES)
        cfg["train"].update(checkpoint_every=8, keep_checkpoints=5)  # step 8 ends level 2
        cfg["vcycle"] = {"alpha": alpha}
        return write_yaml(tmp_path / f"{name}.yaml", cfg)

    train(config("source", 0.5), "zero1.json", nproc=1, log=tmp_path / "source.log")
    source = read_metrics(tmp_path / "source" / "metrics.jsonl")
    for name, alpha in (("same", 0.5), ("other", 0.9)):
        tag = fork_run(tmp_path / "source", tmp_path / name, 8)
        assert tag == "step0000008-phase1"  # before the transition, not the one after it
        train(config(name, alpha), "zero1.json", nproc=1, log=tmp_path / f"{name}.log")
        forked = read_metrics(tmp_path / name / "metrics.jsonl")
        assert sum(r["event"] == "resume" for r in forked) == 1
        assert sum(r["event"] == "transition" for r in forked) == 2  # down, and up once
        if name == "same":
            assert_same(source, forked)
    a, b = losses(source), losses(read_metrics(tmp_path / "other" / "metrics.jsonl"))
    assert a.keys() == b.keys()
    assert all(a[k] == b[k] for k in a if k[1] <= 8 and k[2] <= 1)
    assert all(a[k] != b[k] for k in a if k[2] == 2)
