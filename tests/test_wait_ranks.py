"""mlsys.distributed.spawn.wait_ranks on real processes: a rank that fails ends its peers
(SIGTERM, then ``end`` for one that ignores it), and a deadline ends every rank still running
and names them."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from mlsys.distributed import spawn

IGNORES_SIGTERM = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                   "print('ready', flush=True); time.sleep(60)")


def _python(code: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)


def _ready(proc: subprocess.Popen) -> subprocess.Popen:
    assert proc.stdout.readline().strip() == "ready"  # its SIGTERM handler is in place
    return proc


def _recording(ended: list[list[int]]):
    def end(procs: list[subprocess.Popen]) -> None:
        ended.append([p.pid for p in procs])
        spawn.kill_ranks(procs)
    return end


def test_a_failed_rank_ends_a_peer_that_ignores_sigterm(monkeypatch) -> None:
    monkeypatch.setattr(spawn, "GRACE_SECONDS", 1.0)
    stuck = _ready(_python(IGNORES_SIGTERM))
    failing = _python("import sys; sys.exit(3)")
    ended: list[list[int]] = []
    began = time.monotonic()
    code = spawn.wait_ranks([stuck, failing], end=_recording(ended))
    assert code == 3
    assert ended == [[stuck.pid]]
    assert stuck.returncode == -9
    assert time.monotonic() - began < 10


def test_a_rank_that_exits_on_sigterm_is_not_ended(monkeypatch) -> None:
    monkeypatch.setattr(spawn, "GRACE_SECONDS", 1.0)
    polite = _python("import time; print('ready', flush=True); time.sleep(60)")
    _ready(polite)
    failing = _python("import sys; sys.exit(2)")
    ended: list[list[int]] = []
    assert spawn.wait_ranks([polite, failing], end=_recording(ended)) == 2
    assert ended == [] and polite.returncode == -15


def test_the_deadline_ends_every_rank_still_running_and_names_them() -> None:
    ranks = [_ready(_python(IGNORES_SIGTERM)) for _ in range(2)]
    ended: list[list[int]] = []
    with pytest.raises(TimeoutError, match=str(ranks[1].pid)):
        spawn.wait_ranks(ranks, deadline=time.monotonic() + 1.0, end=_recording(ended))
    assert ended == [[p.pid for p in ranks]]
    assert all(p.returncode == -9 for p in ranks)


def test_ranks_that_end_in_time_return_their_code() -> None:
    ranks = [_python("pass"), _python("pass")]
    assert spawn.wait_ranks(ranks, deadline=time.monotonic() + 60) == 0


def test_a_caller_that_fails_stops_its_watched_processes(monkeypatch, tmp_path) -> None:
    """Left by an exception, a StopForwarder sends SIGTERM to what it watches (a training
    checkpoints on it: here the child writes a file) and waits; one that ignores SIGTERM is
    killed after the grace; nothing is left running."""
    monkeypatch.setattr(spawn, "EXIT_GRACE_SECONDS", 2.0)
    done = tmp_path / "checkpointed"
    polite = _ready(_python(
        "import pathlib, signal, sys, time\n"
        f"signal.signal(signal.SIGTERM, lambda *a: (pathlib.Path({str(done)!r}).write_text('x'),"
        " sys.exit(0)))\n"
        "print('ready', flush=True); time.sleep(60)"))
    stuck = _ready(_python(IGNORES_SIGTERM))
    with pytest.raises(ValueError, match="the runner failed"):
        with spawn.StopForwarder() as stop:
            stop.watch([polite, stuck])
            raise ValueError("the runner failed")
    assert polite.returncode == 0 and done.read_text() == "x"
    assert stuck.returncode == -9


def test_a_caller_that_ends_normally_leaves_its_processes_alone() -> None:
    alive = _ready(_python("import time; print('ready', flush=True); time.sleep(60)"))
    with spawn.StopForwarder() as stop:
        stop.watch([alive])
    assert alive.poll() is None
    spawn.kill_ranks([alive])
