"""Nothing lost, part 1 (no training): mistaken inputs are refused before anything is touched,
only the project's own outputs are ever replaced or removed, and integrity is checked. Each
case snapshots what it must not change (names and SHA-256 of every file) and compares."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from mlsys import atomic
from mlsys.config import ConfigError, parse_run_config
from mlsys.data.checks import check_text_data, split_tokens
from mlsys.data.indexed import IncompleteDataset, check_complete
from mlsys.train.checkpoint import _rng_state, _set_rng_state, latest_good_tag, tag_problem
from mlsys.train.manifest import write_manifest
from mlsys.train.resume import check_same_config
from mlsys.train.rundir import RunDir, RunDirError
from mlsys.train.runlock import RunLock
from tests.tiny_run import REPO, env, run_config


def snapshot(root: Path) -> dict[str, str]:
    """Relative path -> SHA-256 of every file under ``root`` (directories as '<dir>')."""
    out = {}
    for p in sorted(root.rglob("*")):
        rel = str(p.relative_to(root))
        out[rel] = "<dir>" if p.is_dir() else hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _cfg(data: dict, run_dir: Path, **model_changes):
    raw = run_config("gpt", data["tokenizer_dir"], data["data_prefix"], run_dir,
                     [{"level": 1, "steps": 4, "lr": 1e-3}])
    raw["model"].update(model_changes)
    return parse_run_config(raw)


# ---- run directories ---------------------------------------------------------------------

def test_a_users_directory_is_refused_and_left_alone(tmp_path: Path) -> None:
    user = tmp_path / "mine"
    (user / "checkpoints").mkdir(parents=True)
    (user / "checkpoints" / "precious.pt").write_bytes(b"x" * 10)
    (user / "metrics.jsonl").write_text("my own log\n")
    before = snapshot(user)
    run = RunDir(user)
    with pytest.raises(RunDirError, match="was not created by mlsys"):
        run.claim("test")
    with pytest.raises(RunDirError, match="not wiping"):
        run.wipe()
    assert snapshot(user) == before


@pytest.mark.parametrize("run_dir", ["", ".", "  "])
def test_the_current_directory_is_not_a_run_directory(gpt_data, tmp_path, run_dir) -> None:
    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], tmp_path,
                     [{"level": 1, "steps": 4, "lr": 1e-3}])
    raw["run_dir"] = run_dir
    with pytest.raises(ConfigError, match="run_dir"):
        parse_run_config(raw)
    assert RunDir(run_dir.strip()).claim_problem() is not None


def test_launch_refuses_an_empty_run_dir_option(gpt_data, tmp_path) -> None:
    from launch.train import validate
    from tests.tiny_run import write_yaml

    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], tmp_path / "r",
                     [{"level": 1, "steps": 4, "lr": 1e-3}])
    path = write_yaml(tmp_path / "c.yaml", raw)
    with pytest.raises(ConfigError, match="--run-dir: empty"):
        validate(str(path), str(REPO / "configs/ds/zero1.json"), 1, run_dir="")


@pytest.mark.parametrize("name", ["..", "."])
def test_a_run_name_of_dots_is_refused(gpt_data, tmp_path, name) -> None:
    raw = run_config("gpt", gpt_data["tokenizer_dir"], gpt_data["data_prefix"], tmp_path,
                     [{"level": 1, "steps": 4, "lr": 1e-3}])
    raw["name"] = name
    raw.pop("run_dir")
    with pytest.raises(ConfigError, match="name"):
        parse_run_config(raw)


def test_wipe_removes_only_the_projects_outputs(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    run.claim("test")
    for p in (run.checkpoints / "step0000004-phase0", run.final, run.root / "levels"):
        p.mkdir(parents=True)
    for p in (run.metrics, run.done, run.plot, run.run_config):
        p.write_text("{}")
    (run.root / "notes.txt").write_text("the user's notes")
    (run.root / "analysis").mkdir()
    (run.root / "analysis" / "fig.png").write_bytes(b"png")
    run.wipe()
    assert sorted(p.name for p in run.root.iterdir()) == [".mlsys-run", "analysis", "notes.txt"]
    assert (run.root / "notes.txt").read_text() == "the user's notes"


def _hold_lock(path: Path) -> subprocess.Popen:
    code = ("import sys, time; from mlsys.train.runlock import RunLock; "
            f"lock = RunLock({str(path)!r}).acquire(); print('held', flush=True); time.sleep(600)")
    proc = subprocess.Popen([sys.executable, "-c", code], env=env(), cwd=str(REPO),
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "held"
    return proc


def test_the_lock_names_its_holder_and_dies_with_it(tmp_path: Path) -> None:
    lock = tmp_path / ".lock"
    holder = _hold_lock(lock)
    try:
        with pytest.raises(RunDirError, match=f"in use by another run .*\"pid\": {holder.pid}"):
            RunLock(lock).acquire()
    finally:
        holder.send_signal(signal.SIGKILL)  # a crash: the kernel drops the lock
        holder.wait()
    RunLock(lock).acquire().release()


# ---- config changes on resume --------------------------------------------------------------

def test_a_changed_config_is_an_error_showing_the_difference(gpt_data, tmp_path) -> None:
    run = RunDir(tmp_path / "run")
    run.claim("test")
    first = _cfg(gpt_data, run.root)
    atomic.write_json(run.run_config, first.model_dump())
    before = snapshot(run.root)
    check_same_config(run, first)  # the same config passes
    check_same_config(run, first.model_copy(update={"run_dir": str(tmp_path / "moved")}))
    bigger = _cfg(gpt_data, run.root, hidden_size=128)
    with pytest.raises(ConfigError, match=r"model\.hidden_size: 64 -> 128"):
        check_same_config(run, bigger)
    raw = first.model_dump()
    raw["train"]["eval_every"] = 50
    changed = parse_run_config(raw)
    with pytest.raises(ConfigError, match=r"(?s)train\.eval_every: 4 -> 50.*--accept-change"):
        check_same_config(run, changed)
    check_same_config(run, changed, accept=["train.eval_every"])
    with pytest.raises(ConfigError, match="only fields that change no number"):
        check_same_config(run, bigger, accept=["model.hidden_size"])
    assert snapshot(run.root) == before


# ---- data_prep outputs ----------------------------------------------------------------------

def _data_prep(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "data_prep", *args], env=env(), cwd=str(REPO),
                          capture_output=True, text=True, timeout=600)


def test_tokenizer_out_never_deletes_other_files(gpt_data, tmp_path: Path) -> None:
    out = tmp_path / "work"
    out.mkdir()
    corpus = out / "corpus.jsonl"  # the input corpus, inside the output directory
    shutil.copy(gpt_data["corpus"], corpus)
    first = _data_prep("tokenizer", "--input", str(corpus), "--vocab-size", "512",
                       "--out", str(out))
    assert first.returncode == 0, first.stderr
    assert corpus.read_bytes() == Path(gpt_data["corpus"]).read_bytes()
    before = snapshot(out)
    again = _data_prep("tokenizer", "--input", str(corpus), "--vocab-size", "520",
                       "--out", str(out))
    assert again.returncode == 2 and "--overwrite" in again.stderr
    assert snapshot(out) == before
    forced = _data_prep("tokenizer", "--input", str(corpus), "--vocab-size", "520",
                        "--out", str(out), "--overwrite")
    assert forced.returncode == 0, forced.stderr
    assert json.loads((out / "tokenizer_meta.json").read_text())["vocab_size"] == 520
    assert corpus.read_bytes() == Path(gpt_data["corpus"]).read_bytes()


def test_another_tools_tokenizer_is_never_overwritten(gpt_data, tmp_path: Path) -> None:
    out = tmp_path / "theirs"
    out.mkdir()
    (out / "spm.model").write_bytes(b"someone else's model")
    before = snapshot(out)
    res = _data_prep("tokenizer", "--input", gpt_data["corpus"], "--vocab-size", "512",
                     "--out", str(out), "--overwrite")
    assert res.returncode == 2 and "not written by data_prep" in res.stderr
    assert snapshot(out) == before


def test_foreign_shards_are_never_overwritten(gpt_data, tmp_path: Path) -> None:
    prefix = tmp_path / "megatron"
    for ext in ("bin", "idx"):  # shards another tool wrote (no manifest of ours)
        shutil.copy(f"{gpt_data['data_prefix']}.{ext}", f"{prefix}.{ext}")
    before = snapshot(tmp_path)
    res = _data_prep("shards", "--input", gpt_data["corpus"], "--tokenizer",
                     gpt_data["tokenizer_dir"], "--out", str(prefix), "--workers", "0",
                     "--quiet", "--overwrite")
    assert res.returncode == 2 and "not written by data_prep" in res.stderr
    assert snapshot(tmp_path) == before


def test_stale_temps_only_of_this_host_and_dead_writers(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    mine = atomic.temp_path(tmp_path / "x.json")
    stale = tmp_path / f".x.tmp-{atomic.HOST}-{dead.pid}.json"
    remote = tmp_path / f".x.tmp-othernode-{dead.pid}.json"
    live = tmp_path / f".x.tmp-{atomic.HOST}-{os.getppid()}.json"
    users = tmp_path / f"backup.tmp-{dead.pid}"
    users_too = tmp_path / f"x.bin.tmp-{atomic.HOST}-{dead.pid}"  # not a dot-name: not a temp
    stale_dir = tmp_path / f".tokenizer.tmp-{atomic.HOST}-{dead.pid}"  # a temp directory
    for p in (mine, stale, remote, live, users, users_too):
        p.write_text("x")
    (stale_dir / "spm.model").parent.mkdir()
    (stale_dir / "spm.model").write_text("x")
    assert atomic.remove_stale_temps(tmp_path) == sorted([stale, stale_dir])
    assert all(p.exists() for p in (mine, remote, live, users, users_too))
    assert not stale_dir.exists()


def test_atomic_write_is_fsynced_before_the_rename(tmp_path: Path, monkeypatch) -> None:
    order = []
    real_fsync, real_replace = os.fsync, os.replace
    monkeypatch.setattr(os, "fsync", lambda fd: (order.append("fsync"), real_fsync(fd))[1])
    monkeypatch.setattr(os, "replace", lambda a, b: (order.append("rename"), real_replace(a, b))[1])
    atomic.write_json(tmp_path / "a.json", {"x": 1})
    assert order == ["fsync", "rename", "fsync"]  # the file, the rename, its directory


# ---- shards and data against the config ----------------------------------------------------

def _copy_shards(data: dict, tmp_path: Path) -> str:
    prefix = tmp_path / "shards"
    for ext in ("bin", "idx", "manifest.json"):
        shutil.copy(f"{data['data_prefix']}.{ext}", f"{prefix}.{ext}")
    return str(prefix)


def test_a_bin_shorter_than_its_index_is_found_whatever_the_manifest(gpt_data, tmp_path):
    prefix = _copy_shards(gpt_data, tmp_path)
    size = os.path.getsize(prefix + ".bin")
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(size - 100)
    manifest = json.loads(Path(prefix + ".manifest.json").read_text())
    manifest["bin_bytes"] = size - 100  # the sizes agree with the manifest
    Path(prefix + ".manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IncompleteDataset, match=rf"{prefix}\.bin: {size - 100} bytes, but "):
        check_complete(prefix)


def test_shard_hashes_catch_altered_tokens(gpt_data, tmp_path):
    prefix = _copy_shards(gpt_data, tmp_path)
    with open(prefix + ".bin", "r+b") as f:
        f.seek(10)
        byte = f.read(1)
        f.seek(10)
        f.write(bytes([byte[0] ^ 1]))
    check_complete(prefix)  # sizes and index still agree
    with pytest.raises(IncompleteDataset, match="sha256"):
        check_complete(prefix, checksums=True)


def test_positions_and_vocabulary_are_checked_against_the_model(gpt_data, tmp_path):
    tok, prefix = gpt_data["tokenizer_dir"], gpt_data["data_prefix"]
    raw = run_config("gpt", tok, prefix, tmp_path / "r", [{"level": 1, "steps": 4, "lr": 1e-3}])
    raw["model"]["extra"] = {"n_positions": 16}
    raw["data"]["seq_length"] = 32
    with pytest.raises(ConfigError, match=r"model\.extra\.n_positions: 16 positions, below "
                                          r"data\.seq_length 32"):
        check_text_data(parse_run_config(raw), tok, prefix, (8, 8, 0))
    raw = run_config("gpt", tok, prefix, tmp_path / "r", [{"level": 1, "steps": 4, "lr": 1e-3}])
    raw["model"]["vocab_size"] = 100
    with pytest.raises(ConfigError, match=r"model\.vocab_size: 100 is below the vocabulary"):
        check_text_data(parse_run_config(raw), tok, prefix, (8, 8, 0))
    with pytest.raises(ConfigError, match=r"data\.data_prefix: .*no manifest"):
        check_text_data(parse_run_config(raw), tok, str(tmp_path / "typo"), (8, 8, 0))
    with pytest.raises(ConfigError, match=r"data\.tokenizer_dir: .*no such directory"):
        check_text_data(parse_run_config(raw), str(tmp_path / "typo"), prefix, (8, 8, 0))


def test_an_empty_split_is_an_error_before_megatron(gpt_data, tmp_path):
    tok, prefix = gpt_data["tokenizer_dir"], gpt_data["data_prefix"]
    n = json.loads(Path(prefix + ".manifest.json").read_text())["num_documents"]
    split = f"{n * 1000},1,0"  # the valid split rounds to zero documents
    tokens = split_tokens(prefix, "causal", split)
    assert tokens[1] == 0 and tokens[0] == json.loads(
        Path(prefix + ".manifest.json").read_text())["num_tokens"]
    raw = run_config("gpt", tok, prefix, tmp_path / "r", [{"level": 1, "steps": 4, "lr": 1e-3}])
    raw["data"]["split"] = split
    with pytest.raises(ConfigError, match=r"data\.split: .* leaves the valid split .* without "
                                          "a token"):
        check_text_data(parse_run_config(raw), tok, prefix, (8, 8, 0))


# ---- checkpoint integrity ------------------------------------------------------------------

def _fake_tag(root: Path, step: int, state: str | None = '{"phase": 0}',
              manifest: bool = True) -> Path:
    tag = root / f"step{step:07d}-phase0"
    tag.mkdir(parents=True)
    (tag / "model.pt").write_bytes(b"w" * 8)
    if state is not None:
        (tag / "controller.json").write_text(state)
    if manifest:
        write_manifest(tag)
    return tag


def test_resume_skips_tags_without_manifest_or_good_state(tmp_path: Path) -> None:
    root = tmp_path / "checkpoints"
    _fake_tag(root, 4)
    assert latest_good_tag(root, report=lambda m: None) == "step0000004-phase0"
    _fake_tag(root, 8, manifest=False)  # interrupted before its manifest
    empty = _fake_tag(root, 12, state="")  # an empty state, listed in its manifest
    unlisted = _fake_tag(root, 16, state=None)
    (unlisted / "controller.json").write_text('{"phase": 0}')  # written after the manifest
    reports = []
    assert latest_good_tag(root, report=reports.append) == "step0000004-phase0"
    assert "does not record controller.json" in reports[0]
    assert f"{empty / 'controller.json'}: unreadable" in reports[1]
    assert "manifest.json: missing" in reports[2]
    assert tag_problem(root / "step0000004-phase0") is None


def test_rng_state_round_trips_without_pickle(tmp_path: Path) -> None:
    import random

    torch.manual_seed(3)
    np.random.seed(4)
    random.seed(5)
    np.random.standard_normal()  # a cached gaussian in numpy's state
    torch.save(_rng_state(), tmp_path / "rng.pt")
    want = (torch.rand(3), np.random.standard_normal(3), random.random())
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    _set_rng_state(torch.load(tmp_path / "rng.pt", weights_only=True))
    have = (torch.rand(3), np.random.standard_normal(3), random.random())
    assert torch.equal(want[0], have[0]) and np.array_equal(want[1], have[1])
    assert want[2] == have[2]


def test_data_prep_ends_on_sigterm_leaving_no_temp(gpt_data, tmp_path: Path) -> None:
    """SIGTERM while shards are written: exit at once, temp files removed, nothing complete."""
    fifo = tmp_path / "in.txt"
    os.mkfifo(fifo)
    proc = subprocess.Popen(
        [sys.executable, "-m", "data_prep", "shards", "--input", str(fifo), "--tokenizer",
         gpt_data["tokenizer_dir"], "--out", str(tmp_path / "out"), "--workers", "0",
         "--quiet"], env=env(), cwd=str(REPO), stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL)
    with open(fifo, "w") as writer:
        writer.write("a document.\n\n" * 100)
        writer.flush()
        deadline = time.monotonic() + 60
        while not any(n.startswith(".out.tmp-") and n.endswith(".bin")
                      for n in os.listdir(tmp_path)):
            assert time.monotonic() < deadline and proc.poll() is None
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 128 + signal.SIGTERM
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]
