"""The operators (and the Adam-state map) on ZeRO-3 partitioned models, 2 real ranks on gloo,
equal the dense result (llama: GQA 4:2, SwiGLU, RMSNorm, tied)."""

from __future__ import annotations

import json

import pytest

from tests.distributed import ROOT, launch


@pytest.mark.slow
def test_sharded_operators_match_single_process(tmp_path):
    out = tmp_path / "checks.json"
    launch(ROOT / "tests/workers/sharded_operators.py", str(out))
    checks = json.loads(out.read_text())["checks"]
    for kind in ("bert-pretraining", "gpt2", "llama"):
        for scheme in ("stride", "adjacent"):
            assert checks[f"{kind}/{scheme}/partitioned"] == 1.0
            for op in ("coalesce", "decoalesce", "interpolate", "width_detail",
                       "detail"):
                assert checks[f"{kind}/{scheme}/{op}"] == 0.0, (kind, scheme, op)
        for stage in (3, 1):
            tag = f"{kind}/engine{stage}"
            assert checks[f"{tag}/moved"] > 0.0  # the step changed the weights
            assert checks[f"{tag}/coalesce"] == 0.0
            for key in ("exp_avg", "exp_avg_sq"):  # mapped Adam moments, both param groups
                assert checks[f"{tag}/map/{key}/nonzero"] > 0.0
                assert checks[f"{tag}/map/{key}"] <= 1e-7, (tag, key)
            assert checks[f"{tag}/map/step"] == 1.0
