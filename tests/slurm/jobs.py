"""Submitting and watching jobs on the local cluster (scontrol only: no accounting daemon)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def sbatch(args: list[str], env: dict[str, str]) -> int:
    """Submit from the repository root (the templates cd to SLURM_SUBMIT_DIR); the job id."""
    out = subprocess.run(["sbatch", "--parsable", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert out.returncode == 0, f"sbatch failed: {out.stderr}"
    return int(out.stdout.strip().split(";")[0])


def job_info(job: int, env: dict[str, str]) -> dict[str, str]:
    """`scontrol show job -o` as a dict (JobState, Restarts, ExitCode, ...)."""
    out = subprocess.run(["scontrol", "show", "job", "-o", str(job)], env=env,
                         capture_output=True, text=True, check=True).stdout
    return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)


def wait_for(what: str, cond: Callable[[], bool], timeout: float, log: Path | None = None,
             poll: float = 0.2) -> None:
    """Poll ``cond`` until true; on timeout fail with ``what`` and the job log's tail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(poll)
    tail = log.read_text()[-4000:] if log is not None and log.exists() else "(no log)"
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}\n{tail}")


def wait_done(job: int, env: dict[str, str], timeout: float, log: Path) -> dict[str, str]:
    """Wait until the job leaves the queue for good; its final scontrol record. A requeued job
    starts again by SLURM's own rules: eligible cred_expire + 1 s after the requeue (the local
    cluster sets 5 s). Forcing it earlier (``scontrol update StartTime=now``) can start it in
    the second its old credential was revoked, and slurmd then refuses it."""
    final = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}
    info: dict[str, str] = {}

    def done() -> bool:
        nonlocal info
        info = job_info(job, env)
        return info["JobState"] in final

    wait_for(f"job {job} to finish", done, timeout, log, poll=0.5)
    return info
