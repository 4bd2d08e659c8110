"""Nothing lost, part 2: the mistakes users make, run for real (``launch.train``, one gloo
rank, tiny GPT-2). Each asserts the exit code, the message, and that nothing outside the
project's own outputs changed (or, on a refusal, nothing at all; the lock file's holder record
is the one entry a refused start rewrites)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from mlsys.train.metrics import read_metrics
from tests.test_nothing_lost import snapshot
from tests.tiny_run import REPO, env, run_config, write_yaml

DS = str(REPO / "configs" / "ds" / "zero1.json")
pytestmark = pytest.mark.slow


def _launch(config: Path, *extra: str, timeout: float = 600,
            port: int | None = None) -> subprocess.CompletedProcess:
    environ = env() if port is None else {**env(), "MASTER_PORT": str(port)}
    return subprocess.run([sys.executable, "-m", "launch.train", "--config", str(config),
                           "--ds_config", DS, "--no-progress", *extra], env=environ,
                          cwd=str(REPO), capture_output=True, text=True, timeout=timeout)


def _config(data: dict, path: Path, run_dir: Path, steps: int = 6, **changes) -> Path:
    raw = run_config("gpt", data["tokenizer_dir"], data["data_prefix"], run_dir,
                     changes.pop("phases", [{"level": 1, "steps": steps, "lr": 1e-3}]))
    for section, values in changes.items():
        raw[section].update(values)
    return write_yaml(path, raw)


def _unchanged(root: Path) -> dict[str, str]:
    return {k: v for k, v in snapshot(root).items() if k != ".lock"}


@pytest.fixture(scope="module")
def finished(gpt_data, tmp_path_factory) -> dict:
    """A finished tiny run without checkpoints (``checkpoint_every: 0``)."""
    tmp = tmp_path_factory.mktemp("finished")
    config = _config(gpt_data, tmp / "run.yaml", tmp / "run")
    res = _launch(config)
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp / "run" / "done.json").is_file()
    return {"tmp": tmp, "config": config, "run": tmp / "run"}


def test_a_finished_run_is_never_retrained_or_touched(finished) -> None:
    run = finished["run"]
    before = _unchanged(run)
    res = _launch(finished["config"])
    assert res.returncode == 0 and "already-done" in res.stdout, res.stderr[-2000:]
    assert _unchanged(run) == before


def test_a_typo_in_the_data_path_changes_nothing(gpt_data, finished) -> None:
    run, tmp = finished["run"], finished["tmp"]
    before = _unchanged(run)
    data = dict(gpt_data, data_prefix=gpt_data["data_prefix"] + "-typo")
    res = _launch(_config(data, tmp / "typo.yaml", run))
    assert res.returncode == 2
    assert "data.data_prefix" in res.stderr and "no manifest" in res.stderr
    data = dict(gpt_data, tokenizer_dir=gpt_data["tokenizer_dir"] + "-typo")
    res = _launch(_config(data, tmp / "typo-tok.yaml", run))
    assert res.returncode == 2 and "data.tokenizer_dir" in res.stderr
    assert _unchanged(run) == before


def test_a_changed_model_on_resume_shows_the_difference(gpt_data, finished) -> None:
    run, tmp = finished["run"], finished["tmp"]
    before = _unchanged(run)
    res = _launch(_config(gpt_data, tmp / "bigger.yaml", run, model={"hidden_size": 128}))
    assert res.returncode == 2
    assert "model.hidden_size: 64 -> 128" in res.stderr and "done" not in res.stdout
    assert _unchanged(run) == before


def test_a_users_directory_as_run_dir_is_refused(finished, tmp_path) -> None:
    mine = tmp_path / "mine"
    for name in ("checkpoints", "final", "levels", "tensorboard"):
        (mine / name).mkdir(parents=True)
        (mine / name / "keep.txt").write_text(name)
    (mine / "metrics.jsonl").write_text("mine\n")
    before = snapshot(mine)
    res = _launch(finished["config"], "--run-dir", str(mine))
    assert res.returncode == 2 and "was not created by mlsys" in res.stderr
    res = _launch(finished["config"], "--run-dir", str(mine), "--fresh")
    assert res.returncode == 2 and "was not created by mlsys" in res.stderr
    assert snapshot(mine) == before


def test_fresh_restarts_keeping_what_is_not_the_projects(gpt_data, finished, tmp_path) -> None:
    import shutil

    run = tmp_path / "copy"
    shutil.copytree(finished["run"], run)
    (run / "notes.txt").write_text("the user's")
    config = _config(gpt_data, tmp_path / "copy.yaml", run)
    res = _launch(config, "--fresh")
    assert res.returncode == 0, res.stderr[-2000:]
    assert (run / "notes.txt").read_text() == "the user's"
    records = read_metrics(run / "metrics.jsonl")
    assert sum(r["event"] == "end" for r in records) == 1  # one run's records, not two


def test_an_old_final_as_tokenizer_dir_exports_the_new_model(gpt_data, finished, tmp_path):
    from safetensors.torch import load_file

    old = finished["run"] / "final"
    data = dict(gpt_data, tokenizer_dir=str(old))
    config = _config(data, tmp_path / "new.yaml", tmp_path / "new",
                     model={"hidden_size": 32, "num_heads": 4, "ffn_size": 64})
    res = _launch(config)
    assert res.returncode == 0, res.stderr[-2000:]
    new = tmp_path / "new" / "final"
    assert json.loads((new / "config.json").read_text())["n_embd"] == 32
    weights = load_file(new / "model.safetensors")
    assert weights["transformer.wte.weight"].shape[1] == 32
    assert (new / "spm.model").read_bytes() == (old / "spm.model").read_bytes()


def test_a_second_start_on_a_running_directory_fails_naming_the_holder(gpt_data, tmp_path):
    config = _config(gpt_data, tmp_path / "run.yaml", tmp_path / "run", steps=5000)
    log = tmp_path / "first.log"
    first = subprocess.Popen([sys.executable, "-m", "launch.train", "--config", str(config),
                              "--ds_config", DS, "--no-progress"], env=env(), cwd=str(REPO),
                             stdout=open(log, "w"), stderr=subprocess.STDOUT)
    metrics = tmp_path / "run" / "metrics.jsonl"
    deadline = time.monotonic() + 300
    while not (metrics.exists() and any(r["event"] == "step" for r in read_metrics(metrics))):
        assert time.monotonic() < deadline and first.poll() is None, log.read_text()[-3000:]
        time.sleep(0.2)
    stored = (tmp_path / "run" / "run_config.json").read_text()
    other = _config(gpt_data, tmp_path / "other.yaml", tmp_path / "run", steps=5000,
                    train={"seed": 7})
    second = _launch(other, port=29512)  # its own rendezvous port: one machine, two runs
    assert first.poll() is None, "the first run ended before the second start: make it longer"
    assert second.returncode == 2 and "in use by another run" in second.stderr
    assert f'"pid": {first.pid}' in second.stderr
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=300) == 0
    assert (tmp_path / "run" / "run_config.json").read_text() == stored
    records = read_metrics(metrics)  # the first run's log, whole: nothing went elsewhere
    assert records[-1]["event"] == "preempted"
    steps = [r["step"] for r in records if r["event"] == "step"]
    assert steps == list(range(1, len(steps) + 1))


_PATCHED = """
import sys, time
import {module} as m
real = m.{name}
def slow(*a, **k):
    print("READY", flush=True)
    time.sleep({sleep})
    return real(*a, **k)
m.{name} = slow
from launch.train import main
sys.exit(main(sys.argv[1:]))
"""


def _patched(module: str, name: str, sleep: float, config: Path) -> subprocess.Popen:
    """launch.train with ``module.name`` made slow (it prints READY when entered): a stand-in
    for a long data build or transition, so the signal lands there deterministically."""
    code = _PATCHED.format(module=module, name=name, sleep=sleep)
    return subprocess.Popen([sys.executable, "-c", code, "--config", str(config), "--ds_config",
                             DS, "--no-progress"], env=env(), cwd=str(REPO), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _until_ready(proc: subprocess.Popen) -> list[str]:
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if line.strip() == "READY":
            return lines
    raise AssertionError("".join(lines[-40:]))


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_data_is_prepared_ends_the_run_at_once(gpt_data, tmp_path, sig) -> None:
    config = _config(gpt_data, tmp_path / "run.yaml", tmp_path / "run")
    proc = _patched("mlsys.train.controller", "check_run_data", 600, config)
    _until_ready(proc)
    t0 = time.monotonic()
    proc.send_signal(sig)
    assert proc.wait(timeout=30) == 0
    assert time.monotonic() - t0 < 30
    assert f"stopped by {signal.Signals(sig).name} before training started" in proc.stdout.read()
    assert not (tmp_path / "run").exists()  # nothing was written


def test_two_single_process_runs_on_one_machine_at_once(gpt_data, tmp_path) -> None:
    """A single process without a launcher takes a free port for its process group: a second
    run started beside a live one trains (a fixed port made it fail with EADDRINUSE)."""
    first = _patched("mlsys.train.controller", "check_run_data", 600,
                     _config(gpt_data, tmp_path / "a.yaml", tmp_path / "a"))
    try:
        _until_ready(first)  # its process group (and port) is up: it is inside run_training
        res = _launch(_config(gpt_data, tmp_path / "b.yaml", tmp_path / "b"))
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        assert (tmp_path / "b" / "done.json").is_file()
    finally:
        first.send_signal(signal.SIGTERM)
        first.wait(timeout=120)


def test_sigterm_during_the_export_finishes_it(gpt_data, tmp_path) -> None:
    """The export is written whole or not at all; a signal during it lets it finish."""
    from transformers import AutoModelForCausalLM

    config = _config(gpt_data, tmp_path / "run.yaml", tmp_path / "run")
    proc = _patched("mlsys.train.controller", "export_run_model", 3, config)
    _until_ready(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, proc.stdout.read()[-3000:]
    assert (tmp_path / "run" / "done.json").is_file()
    AutoModelForCausalLM.from_pretrained(tmp_path / "run" / "final")  # loads: complete


def test_sigterm_during_a_transition_checkpoints_after_it(gpt_data, tmp_path) -> None:
    phases = [{"level": 1, "steps": 4, "lr": 1e-3}, {"level": 2, "steps": 4, "lr": 2e-3},
              {"level": 1, "steps": 4, "lr": 1e-3}]
    config = _config(gpt_data, tmp_path / "run.yaml", tmp_path / "run", phases=phases)
    proc = _patched("mlsys.vcycle.transition", "down", 3, config)
    _until_ready(proc)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=300) == 0, proc.stdout.read()[-3000:]
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    events = [r["event"] for r in records]
    assert events[-3:] == ["eval", "checkpoint", "preempted"], events
    assert records[-1]["phase"] == 1 and records[-1]["phase_step"] == 0
    res = _launch(config)
    assert res.returncode == 0, res.stderr[-2000:]
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["step"] for r in records if r["event"] == "step"] == list(range(1, 13))


def test_a_checkpoint_of_two_ranks_without_portable_state_is_refused_on_one(gpt_data,
                                                                           tmp_path) -> None:
    """Without ``train.portable_checkpoints`` a resume onto another rank count (a requeue onto
    fewer nodes) is refused before anything is touched: DeepSpeed's optimizer state and the
    RNG state are saved per rank. (With it, the default, it resumes:
    ``tests/test_portable_checkpoint.py``.)"""
    import shutil

    from tests.tiny_run import train

    run = tmp_path / "run"
    config = _config(gpt_data, tmp_path / "run.yaml", run, steps=4,
                     train={"checkpoint_every": 2, "portable_checkpoints": False})
    train(config, "zero1.json", nproc=2, log=tmp_path / "two.log")
    assert not list(run.glob("checkpoints/*/portable"))
    (run / "done.json").unlink()  # as if the job had been killed after its last checkpoint
    shutil.rmtree(run / "final")
    before = _unchanged(run)
    res = _launch(config)  # one rank
    assert res.returncode == 2, res.stdout[-2000:] + res.stderr[-2000:]
    assert "written by 2 ranks, and this start has 1" in res.stdout + res.stderr
    assert "no portable/ state" in res.stdout + res.stderr
    assert _unchanged(run) == before
