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
