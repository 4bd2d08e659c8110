"""The overhead benchmark compares like with like: the plain loop's step times are summed over
the same windows of steps as the controller's records, so a slow step counts on both sides."""

from __future__ import annotations

import pytest

from mlsys.bench.overhead import plain_walls, window_seconds


def test_plain_loop_windows_match_the_record_steps() -> None:
    seconds = [1.0] * 30
    seconds[14] = 6.0  # step 15 is slow
    walls = plain_walls(seconds, [10, 20, 30])
    assert walls == [(10, 10.0), (20, 25.0), (30, 35.0)]
    # windows (10, 20] and (20, 30]; the last one is left out (it holds the final evaluation)
    assert window_seconds(walls, warmup=10) == [pytest.approx(1.5)]
    assert window_seconds(plain_walls(seconds, list(range(1, 31))), warmup=10) == \
        [pytest.approx(x) for x in seconds[10:29]]  # per-step windows: each step's own time


def test_the_plain_loop_command_writes_the_library_loops_seconds(tmp_path, monkeypatch) -> None:
    """``python -m launch.plain_loop`` (what the benchmark starts per rank) is the CLI of
    ``mlsys.bench.plain_loop.plain_loop_seconds``: rank 0 writes its seconds to ``--out``."""
    import json

    import launch.plain_loop
    import mlsys.bench.plain_loop

    calls = []
    monkeypatch.setattr(mlsys.bench.plain_loop, "plain_loop_seconds",
                        lambda *a: calls.append(a) or [0.5, 0.25])
    out = tmp_path / "t.json"
    assert launch.plain_loop.main(["--config", "r.yaml", "--ds_config", "d.json", "--steps",
                                   "2", "--out", str(out)]) == 0
    assert calls == [("r.yaml", "d.json", 2)]
    assert json.loads(out.read_text()) == {"seconds": [0.5, 0.25]}
