"""The sbatch templates on a real (one-node, localhost) SLURM cluster: a tiny CPU V-cycle run
with 2 tasks reaches final/, a requeued or time-limit-signalled job resumes from its
checkpoint instead of starting over, and a run continues on another task count."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mlsys.config import load_run_config
from mlsys.train.metrics import read_metrics

from .jobs import ROOT, job_info, sbatch, wait_done, wait_for

TEMPLATE = "launch/slurm/bert-base.sbatch"
TINY = "configs/tiny-bert-vcycle.yaml"
JOB_TIMEOUT = 900  # seconds; the first job may build DeepSpeed's CPU comm op and the corpus
# The template's GPU directives, resized to this node (2 CPUs, 2 stand-in GPUs).
RESOURCES = ["--nodes=1", "--ntasks-per-node=2", "--gpus-per-node=2", "--cpus-per-task=1",
             "--time=30"]


def tiny_config(tmp: Path, scale: float, checkpoint_every: int, tiny: str = TINY
                ) -> tuple[Path, int]:
    """A repository tiny CPU V-cycle (default configs/tiny-bert-vcycle.yaml), its phases scaled
    by ``schedule.scale``, writing to tmp/run; (config path, total steps)."""
    cfg = yaml.safe_load((ROOT / tiny).read_text())
    cfg["run_dir"] = str(tmp / "run")
    cfg["schedule"] = {"scale": scale}
    cfg["train"]["checkpoint_every"] = checkpoint_every
    cfg["train"]["eval_every"] = 1000  # validation at phase ends only: keeps the jobs short
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return path, load_run_config(path).total_steps


def submit(tmp: Path, env: dict[str, str], config: Path, template: str = TEMPLATE,
           resources: list[str] = RESOURCES, log_name: str = "job.out") -> tuple[int, Path]:
    log = tmp / log_name
    job_env = {**env, "CONFIG": str(config), "DS_CONFIG": "configs/ds/zero1.json"}
    return sbatch([*resources, f"--output={log}", template], job_env), log


def step_records(run: Path) -> list[int]:
    return [r["step"] for r in read_metrics(run / "metrics.jsonl") if r["event"] == "step"]


def assert_finished(run: Path, total_steps: int) -> list[dict]:
    """final/ is a loadable HF model directory and every step ran exactly once."""
    from transformers import AutoConfig

    assert (run / "final" / "config.json").is_file()
    want = load_run_config(run / ".." / "tiny.yaml").model.hidden_size
    assert AutoConfig.from_pretrained(run / "final").hidden_size == want
    assert any(p.suffix == ".safetensors" or p.suffix == ".bin" for p in (run / "final").iterdir())
    assert step_records(run) == list(range(1, total_steps + 1))
    records = read_metrics(run / "metrics.jsonl")
    assert records[-1]["event"] == "end" and records[-1]["step"] == total_steps
    return records


def test_srun_maps_slurm_env_for_each_task(slurm_env, tmp_path):
    # Two tasks through srun + launch.slurm_env, as the templates launch them.
    code = ("import json, os; print(json.dumps({k: os.environ[k] for k in "
            "('RANK', 'LOCAL_RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT')}))")
    log = tmp_path / "env.out"
    job = sbatch(["--ntasks=2", f"--output={log}", "--wrap",
                  f"srun {sys.executable} -m launch.slurm_env {sys.executable} -c \"{code}\""],
                 slurm_env)
    assert wait_done(job, slurm_env, 120, log)["JobState"] == "COMPLETED", log.read_text()
    lines = [json.loads(s) for s in log.read_text().splitlines() if s.startswith("{")]
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    assert sorted(e["RANK"] for e in lines) == ["0", "1"]
    assert sorted(e["LOCAL_RANK"] for e in lines) == ["0", "1"]
    assert {e["WORLD_SIZE"] for e in lines} == {"2"}
    assert {e["MASTER_ADDR"] for e in lines} == {host}
    assert {e["MASTER_PORT"] for e in lines} == {str(20000 + job % 10000)}


@pytest.mark.parametrize("template, tiny", [
    (TEMPLATE, TINY), ("launch/slurm/llama-1b.sbatch", "configs/tiny-llama-vcycle.yaml")])
def test_template_trains_tiny_vcycle_to_final(slurm_env, tmp_path, template, tiny):
    config, total = tiny_config(tmp_path, 0.05, checkpoint_every=0, tiny=tiny)  # BERT 1 + 8 + 9
    job, log = submit(tmp_path, slurm_env, config, template)
    info = wait_done(job, slurm_env, JOB_TIMEOUT, log)
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "0"), \
        log.read_text()[-4000:]
    records = assert_finished(tmp_path / "run", total)
    assert [r["to_level"] for r in records if r["event"] == "transition"] == [2, 1]
    assert not any(r["event"] == "resume" for r in records)
    assert "run.sh: finished" in log.read_text()


def _first_checkpoint(run: Path) -> bool:
    return any((run / "checkpoints").glob("*/manifest.json"))  # a tag's completion marker


def _interrupt_and_check(tmp_path: Path, slurm_env: dict[str, str], interrupt: list[str],
                         job_env: dict[str, str] | None = None, run: Path | None = None):
    """Start a run, interrupt it right after its first checkpoint, let SLURM requeue it, and
    check that the second start resumed from a checkpoint and finished (in ``run``: the
    config's run_dir unless the job's environment sets RUN_DIR)."""
    config, total = tiny_config(tmp_path, 0.2, checkpoint_every=5)  # 4 + 32 + 36 steps
    run = run or tmp_path / "run"
    job, log = submit(tmp_path, {**slurm_env, **(job_env or {})}, config)
    wait_for("the first checkpoint", lambda: _first_checkpoint(run), JOB_TIMEOUT, log)
    assert job_info(job, slurm_env)["JobState"] == "RUNNING"
    subprocess.run([*interrupt, str(job)], env=slurm_env, check=True)
    info = wait_done(job, slurm_env, JOB_TIMEOUT, log)
    text = log.read_text()
    assert (info["JobState"], info["ExitCode"], info["Restarts"]) == ("COMPLETED", "0:0", "1"), \
        text[-4000:]
    records = assert_finished(run, total)
    resumes = [r for r in records if r["event"] == "resume"]
    assert len(resumes) == 1 and 0 < resumes[0]["step"] < total, resumes
    # The requeued job logged only the steps after its checkpoint: no step before the resume
    # point comes after it in the log.
    at = records.index(resumes[0])
    assert min(r["step"] for r in records[at:] if r["event"] == "step") == resumes[0]["step"] + 1
    assert "restart 1" in text
    return text


def test_requeue_resumes_from_checkpoint(slurm_env, tmp_path):
    # `scontrol requeue` (what preemption does): SIGTERM to the ranks, they checkpoint and
    # exit; SLURM requeues the job; the new start resumes from the newest checkpoint. With
    # RUN_DIR set (it overrides the config's run_dir) and TRAIN_ARGS="--fresh": --fresh applies
    # to the first start only, so the requeued start resumes instead of wiping its checkpoint.
    run = tmp_path / "elsewhere"
    text = _interrupt_and_check(tmp_path, slurm_env, ["scontrol", "requeue"],
                                {"RUN_DIR": str(run), "TRAIN_ARGS": "--fresh"}, run)
    assert not (tmp_path / "run").exists()
    assert "not passing --fresh again" in text


def test_time_limit_signal_checkpoints_and_requeues(slurm_env, tmp_path):
    # What `--signal=B:USR1@600` delivers before the time limit, sent now: run.sh forwards it,
    # the ranks checkpoint and exit 0, run.sh requeues the job itself, and it resumes.
    text = _interrupt_and_check(tmp_path, slurm_env, ["scancel", "--batch", "--signal=USR1"])
    assert "checkpointed before the time limit; requeueing" in text


def test_a_run_moves_onto_another_task_count(slurm_env, tmp_path):
    # A job of 2 tasks checkpoints inside the small phase; the same template submitted again
    # with 1 task on the same run directory resumes from the checkpoint's portable state and
    # finishes, every step once, with the 2-task run's losses (dropout off: a rank's dropout
    # stream depends on the rank count) within what a changed reduction order allows.
    import shutil

    from tests.test_portable_checkpoint import TOLERANCE, _differences

    config, total = tiny_config(tmp_path, 0.05, checkpoint_every=5)  # 1 + 8 + 9 steps
    cfg = yaml.safe_load(config.read_text())
    cfg["model"]["dropout"] = 0.0
    cfg["train"]["keep_checkpoints"] = 10  # the one at step 5 is still there at the end
    config.write_text(yaml.safe_dump(cfg))
    job, log = submit(tmp_path, slurm_env, config, log_name="two.out")
    info = wait_done(job, slurm_env, JOB_TIMEOUT, log)
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), log.read_text()[-4000:]
    run = tmp_path / "run"
    two = read_metrics(run / "metrics.jsonl")
    # as if the 2-task job had been stopped at its checkpoint of step 5 (phase 1, level 2)
    (run / "done.json").unlink()
    shutil.rmtree(run / "final")
    root = run / "checkpoints"
    steps = {tag: json.loads((tag / "controller.json").read_text())["global_step"]
             for tag in root.iterdir() if tag.is_dir()}
    assert 5 in steps.values(), steps
    for tag, step in steps.items():
        if step != 5:
            shutil.rmtree(tag)
    one = [r.replace("=2", "=1") if r.startswith(("--ntasks", "--gpus")) else r
           for r in RESOURCES]
    job, log = submit(tmp_path, slurm_env, config, resources=one, log_name="one.out")
    info = wait_done(job, slurm_env, JOB_TIMEOUT, log)
    text = log.read_text()
    assert (info["JobState"], info["ExitCode"]) == ("COMPLETED", "0:0"), text[-4000:]
    assert "written by 2 ranks, resumed on 1 from its portable state" in text, text[-4000:]
    records = assert_finished(run, total)
    assert [r["step"] for r in records if r["event"] == "resume"] == [5]
    diff = _differences(two, records)
    assert 0.0 < max(diff.values()) < TOLERANCE, diff
