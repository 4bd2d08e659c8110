"""The operators (and the Adam-state map) on ZeRO-3 partitioned models, 2 real ranks on gloo,
equal the dense result."""

from __future__ import annotations

import json

from tests.distributed import ROOT, launch


def test_sharded_operators_match_single_process(tmp_path):
    out = tmp_path / "checks.json"
    launch(ROOT / "tests/workers/sharded_operators.py", str(out))
    checks = json.loads(out.read_text())["checks"]
    for kind in ("bert-pretraining", "gpt2"):
        for scheme in ("stride", "adjacent"):
            assert checks[f"{kind}/{scheme}/partitioned"] == 1.0
            for op in ("coalesce", "decoalesce", "interpolate"):
                assert checks[f"{kind}/{scheme}/{op}"] == 0.0, (kind, scheme, op)
        assert checks[f"{kind}/engine/moved"] > 0.0  # the step changed the weights
        assert checks[f"{kind}/engine/coalesce"] == 0.0
        for key in ("exp_avg", "exp_avg_sq"):  # mapped Adam moments under ZeRO-3
            assert checks[f"{kind}/engine/map/{key}/nonzero"] > 0.0
            assert checks[f"{kind}/engine/map/{key}"] <= 1e-7 * max(
                1.0, checks[f"{kind}/engine/map/{key}/nonzero"]), key
        assert checks[f"{kind}/engine/map/step"] == 1.0
