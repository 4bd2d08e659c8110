"""Faults a long run meets, each with real processes: a damaged newest checkpoint, a rank
killed with SIGKILL, a loss that stops being finite, a full disk; and the manifest and
atomic writes underneath."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from mlsys.atomic import write_text
from mlsys.train.checkpoint import complete_tags
from mlsys.train.manifest import manifest_problem, write_manifest
from mlsys.train.metrics import read_metrics
from tests.tiny_run import run_config, start, train, write_yaml

PHASES = [{"level": 1, "steps": 40, "lr": 1e-3, "warmup": 1}]


def _config(data: dict, tmp_path: Path, name: str, run_dir: Path | None = None,
            phases: list[dict] | None = None, **train_options) -> Path:
    cfg = run_config("gpt", data["tokenizer_dir"], data["data_prefix"],
                     run_dir or tmp_path / name, phases or PHASES, **train_options)
    return write_yaml(tmp_path / f"{name}.yaml", cfg)


def _wait_step(metrics: Path, procs, step: int, timeout: float = 600) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            raise AssertionError("a rank exited early")
        if metrics.exists() and any(r["event"] == "step" and r["step"] >= step
                                    for r in read_metrics(metrics)):
            return
        time.sleep(0.1)
    raise AssertionError(f"step {step} not reached in time")


def _steps_once(records: list[dict], total: int) -> None:
    """Every step of the run logged exactly once, whatever was interrupted and redone."""
    assert sorted(r["step"] for r in records if r["event"] == "step") == list(range(1, total + 1))


def test_manifest_names_what_is_wrong(tmp_path: Path) -> None:
    tag = tmp_path / "tag"
    (tag / "rng").mkdir(parents=True)
    (tag / "model.pt").write_bytes(b"x" * 100)
    (tag / "rng" / "rank0.pt").write_bytes(b"r" * 10)
    saved = tmp_path / "saved.safetensors"
    saved.write_bytes(b"s" * 50)
    write_manifest(tag, extra=[saved])
    assert manifest_problem(tag) is None
    (tag / "model.pt").write_bytes(b"x" * 99)
    assert manifest_problem(tag) == f"{tag / 'model.pt'}: 99 bytes, the manifest says 100"
    (tag / "model.pt").write_bytes(b"y" * 100)
    assert manifest_problem(tag, checksums=False) is None
    assert manifest_problem(tag) == \
        f"{tag / 'model.pt'}: contents differ from the manifest (sha256)"
    (tag / "model.pt").write_bytes(b"x" * 100)
    saved.unlink()
    assert manifest_problem(tag) == f"{saved}: missing"


@pytest.mark.slow
def test_damaged_newest_checkpoint_resumes_from_the_one_before(gpt_data, tmp_path):
    config = _config(gpt_data, tmp_path, "run", checkpoint_every=4, keep_checkpoints=3)
    procs = start(config, "zero1.json", nproc=1, log=tmp_path / "first.log")
    _wait_step(tmp_path / "run" / "metrics.jsonl", procs, 13)
    procs[0].send_signal(signal.SIGTERM)
    assert procs[0].wait(timeout=300) == 0
    root = tmp_path / "run" / "checkpoints"
    *_, before, newest = complete_tags(root)
    biggest = max((p for p in (root / newest).rglob("*") if p.is_file()),
                  key=lambda p: p.stat().st_size)
    size = biggest.stat().st_size
    with open(biggest, "r+b") as f:
        f.truncate(size // 2)

    train(config, "zero1.json", nproc=1, log=tmp_path / "again.log")
    log = (tmp_path / "again.log").read_text()
    assert f"checkpoint {newest} is damaged or incomplete ({biggest}: {size // 2} bytes, the " \
           f"manifest says {size})" in log
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["tag"] for r in records if r["event"] == "resume"] == [before]
    _steps_once(records, 40)
    assert (tmp_path / "run" / "final" / "config.json").is_file()


@pytest.mark.slow
def test_killed_rank_ends_the_job_in_bounded_time_then_resumes(gpt_data, tmp_path):
    """SIGKILL one of 2 ranks mid-run: the launcher (mlsys.distributed.spawn) returns non-zero
    within GRACE_SECONDS (SIGTERM to the others, SIGKILL 10 s later) plus its 0.5 s poll; the
    same command then resumes from the newest checkpoint with no step logged twice."""
    from mlsys.distributed.spawn import GRACE_SECONDS, wait_ranks

    config = _config(gpt_data, tmp_path, "run", checkpoint_every=4)
    procs = start(config, "zero1.json", nproc=2, log=tmp_path / "first.log")
    _wait_step(tmp_path / "run" / "metrics.jsonl", procs, 10)
    killed = time.monotonic()
    os.kill(procs[1].pid, signal.SIGKILL)
    code = wait_ranks(procs)
    waited = time.monotonic() - killed
    assert code != 0 and all(p.returncode is not None for p in procs)
    assert waited < GRACE_SECONDS + 5, waited
    newest = complete_tags(tmp_path / "run" / "checkpoints")[-1]

    train(config, "zero1.json", nproc=2, log=tmp_path / "again.log")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["tag"] for r in records if r["event"] == "resume"] == [newest]
    _steps_once(records, 40)


@pytest.mark.slow
def test_nonfinite_loss_stops_without_checkpointing_over_the_good_one(gpt_data, tmp_path):
    phases = [{"level": 1, "steps": 10, "lr": 1e30, "warmup": 0}]
    config = _config(gpt_data, tmp_path, "run", phases=phases, checkpoint_every=1)
    procs = start(config, "zero1.json", nproc=1, log=tmp_path / "run.log")
    assert procs[0].wait(timeout=600) == 3
    log = (tmp_path / "run.log").read_text()
    found = re.search(r"NonFiniteError: the (training loss|gradient norm) is (nan|inf|-inf) "
                      r"at step (\d+) \(phase 0, level 1\)", log)
    assert found, log[-3000:]
    bad = int(found.group(3))
    tags = complete_tags(tmp_path / "run" / "checkpoints")
    assert tags and int(tags[-1][4:11]) == bad - 1  # the last good step's, nothing after it
    text = (tmp_path / "run" / "metrics.jsonl").read_text()
    for line in text.splitlines():  # strict JSON: no bare NaN / Infinity
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in metrics.jsonl"))
    assert max(r["step"] for r in read_metrics(tmp_path / "run" / "metrics.jsonl")) == bad - 1
    assert not (tmp_path / "run" / "final").exists()


def _mount_tmpfs(path: Path, size: str) -> None:
    path.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                         capture_output=True, text=True)
    if out.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root needed): {out.stderr.strip()}")


def _du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def test_atomic_write_on_a_full_disk_keeps_the_old_file(tmp_path: Path) -> None:
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "64k")
    try:
        write_text(disk / "result.json", "old")
        with pytest.raises(OSError):
            write_text(disk / "result.json", "x" * 200_000)
        assert (disk / "result.json").read_text() == "old"
        assert [p.name for p in disk.iterdir()] == ["result.json"]  # no temp file left
    finally:
        subprocess.run(["umount", str(disk)], check=False)


@pytest.mark.slow
def test_full_disk_while_checkpointing_then_resume(gpt_data, tmp_path):
    # How much one checkpoint takes, and the rest of a run directory, on an ordinary disk.
    probe = _config(gpt_data, tmp_path, "probe", phases=[{"level": 1, "steps": 2, "lr": 1e-3}],
                    checkpoint_every=2)
    train(probe, "zero1.json", nproc=1, log=tmp_path / "probe.log")
    probe_dir = tmp_path / "probe"
    tag = _du(probe_dir / "checkpoints")
    rest = _du(probe_dir) - tag - _du(probe_dir / "final")
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, str(rest + tag + tag // 2))  # room for one checkpoint, not two
    try:
        config = _config(gpt_data, tmp_path, "run", run_dir=disk / "run",
                         phases=[{"level": 1, "steps": 8, "lr": 1e-3, "warmup": 1}],
                         checkpoint_every=2, keep_checkpoints=1)
        procs = start(config, "zero1.json", nproc=1, log=tmp_path / "full.log")
        assert procs[0].wait(timeout=600) == 3
        log = (tmp_path / "full.log").read_text()
        assert "CheckpointError: checkpoint step0000004-phase0 could not be written" in log, \
            log[-3000:]
        assert "the newest checkpoint is still step0000002-phase0" in log
        root = disk / "run" / "checkpoints"
        assert complete_tags(root) == ["step0000002-phase0"]
        assert manifest_problem(root / "step0000002-phase0") is None
        assert not (root / "step0000004-phase0").exists()
        assert not [p for p in disk.rglob("*") if ".tmp" in p.name]

        subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
        train(config, "zero1.json", nproc=1, log=tmp_path / "again.log")
        records = read_metrics(disk / "run" / "metrics.jsonl")
        assert [r["tag"] for r in records if r["event"] == "resume"] == ["step0000002-phase0"]
        _steps_once(records, 8)
        assert (disk / "run" / "final" / "config.json").is_file()
    finally:
        subprocess.run(["umount", str(disk)], check=False)


def test_data_prep_removes_temp_files_of_a_killed_run(tmp_path: Path) -> None:
    from data_prep.corpus import write_corpus
    from mlsys.atomic import HOST

    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".stdlib_code.tmp-{HOST}-{dead.pid}.jsonl"
    stale.write_text("half a corpus")
    live = tmp_path / f".other.tmp-{HOST}-{os.getppid()}"  # a live process's temp file stays
    live.write_text("in use")
    remote = tmp_path / f".other.tmp-node7-{dead.pid}"  # another host's writer: not ours to judge
    remote.write_text("written on another node")
    foreign = tmp_path / f"notes.tmp-{dead.pid}"  # not the temp naming of mlsys.atomic
    foreign.write_text("the user's")
    write_corpus(str(tmp_path), "code", limit=2)
    assert not stale.exists() and live.exists() and remote.exists() and foreign.exists()
    assert (tmp_path / "stdlib_code.jsonl").is_file()

