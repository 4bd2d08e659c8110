"""Rebuilding engines per phase must not keep the old ones alive (DeepSpeed 0.19.8 does)."""

from __future__ import annotations

import json

import pytest

from tests.distributed import ROOT, launch


@pytest.mark.slow
def test_destroyed_zero3_engines_are_freed(tmp_path):
    out = tmp_path / "alive.json"
    launch(ROOT / "tests/workers/engine_release.py", str(out), ranks=2)
    alive = json.loads(out.read_text())
    assert alive["alive_plain"] == 3  # the leak this guards against is real
    assert alive["alive_ours"] == 0
