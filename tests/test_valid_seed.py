"""``data.valid_seed``: runs at different ``train.seed`` that share it validate on the same
samples (and, for a masked LM, the same masks), while each trains on its own seed's samples."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from mlsys.config import parse_run_config
from mlsys.data.run_data import build_run_data
from tests.tiny_run import run_config

PHASES = [{"level": 1, "steps": 4, "lr": 1.0e-3}]


def _samples(dataset, n: int) -> list[dict[str, np.ndarray]]:
    return [{k: np.asarray(v) for k, v in dataset[i].items()} for i in range(n)]


def _same(a: list[dict], b: list[dict]) -> bool:
    return all(x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)
               for x, y in zip(a, b, strict=True))


@pytest.mark.parametrize("kind", ["gpt", "bert"])
def test_valid_seed_fixes_validation_not_training(kind: str, request, tmp_path: Path) -> None:
    data = request.getfixturevalue(f"{kind}_data")

    def build(seed: int, valid_seed: int | None, steps: int):
        raw = run_config(kind, data["tokenizer_dir"], data["data_prefix"],
                         tmp_path / f"run-{seed}-{valid_seed}-{steps}",
                         [{**PHASES[0], "steps": steps}], seed=seed)
        raw["data"]["valid_seed"] = valid_seed
        cfg = parse_run_config(raw, source="test")
        run = build_run_data(cfg, cfg.train_samples, 16)
        return _samples(run.train, 16), _samples(run.valid, 16)

    own_train, own_valid = build(1234, None, 4)
    other_train, other_valid = build(1235, None, 4)
    fixed_train, fixed_valid = build(1235, 1234, 4)
    assert not _same(own_valid, other_valid)  # the seed picks the samples: the test can fail
    assert _same(fixed_valid, own_valid)
    assert _same(fixed_train, other_train) and not _same(fixed_train, own_train)
    # a run of another length at the seed validates on the same samples too
    _, longer_valid = build(1235, 1234, 8)
    assert _same(longer_valid, own_valid)
