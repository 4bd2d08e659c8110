"""Blends (``data.blend: [[weight, prefix], ...]``) through megatron-core's blended dataset: the
sampled proportions follow the weights, the order is deterministic (and a seed changes it),
every corpus is checked as a single prefix is (errors name ``data.blend[i]``), and a V-cycle
over a blend resumes mid-run with the same losses."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from mlsys.config import ConfigError, parse_run_config
from mlsys.data.megatron import build_datasets
from mlsys.data.run_data import check_run_data
from mlsys.train.metrics import read_metrics
from tests.test_resume import assert_same
from tests.tiny_run import keep_only_checkpoint, run_config, train, write_yaml


@pytest.fixture(scope="module")
def two_corpora(gpt_data, tmp_path_factory) -> dict:
    """The conftest code corpus and a prose corpus, both through the conftest tokenizer."""
    from data_prep.corpus import write_corpus
    from data_prep.shards import build_shards

    root = tmp_path_factory.mktemp("blend")
    prose = write_corpus(str(root), "prose", limit=60)["path"]
    prefix = str(root / "prose")
    build_shards([prose], gpt_data["tokenizer_dir"], prefix, workers=0, progress=False,
                 append_eod=True)
    return {**gpt_data, "code": gpt_data["data_prefix"], "prose": prefix, "root": root}


def _build(data: dict, blend, seed: int, cache: Path, samples: int = 400):
    return build_datasets("causal", blend, data["tokenizer_dir"], 64, seed, (samples, 40, 0),
                          split="90,10,0", cache_dir=str(cache))


def _tokens(dataset, n: int) -> np.ndarray:
    return np.stack([np.asarray(dataset[i]["tokens"]) for i in range(n)])


def test_the_weights_set_the_proportions_and_the_order_is_deterministic(two_corpora, tmp_path):
    blend = [(3.0, two_corpora["code"]), (1.0, two_corpora["prose"])]
    train_set, valid, _ = _build(two_corpora, blend, 1, tmp_path / "a")
    # the order the trainer reads (index i = the i-th sample): at every prefix, each corpus'
    # count within one sample of its share (megatron's greedy blending)
    picks = np.asarray(train_set.dataset_index[:400])
    for n in (8, 40, 400):
        count = Counter(picks[:n].tolist())
        assert abs(count[0] - 0.75 * n) <= 1 and abs(count[1] - 0.25 * n) <= 1, (n, count)
    assert len(valid) >= 40 and Counter(np.asarray(valid.dataset_index[:40]).tolist())[1] == 10
    # deterministic: a fresh build (no cache) reads the same tokens; another seed does not
    again, _, _ = _build(two_corpora, blend, 1, tmp_path / "b")
    assert np.array_equal(_tokens(train_set, 64), _tokens(again, 64))
    other, _, _ = _build(two_corpora, blend, 2, tmp_path / "c")
    assert not np.array_equal(_tokens(train_set, 64), _tokens(other, 64))


def _blend_cfg(data: dict, blend: list, run_dir: Path, **train_fields) -> dict:
    raw = run_config("gpt", data["tokenizer_dir"], None, run_dir,
                     [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
                      {"level": 2, "steps": 4, "lr": 5e-3, "warmup": 1},
                      {"level": 1, "steps": 2, "lr": 2e-3, "warmup": 1}], **train_fields)
    del raw["data"]["data_prefix"]
    raw["data"]["blend"] = blend
    raw["model"]["dropout"] = 0.0
    return raw


@pytest.mark.parametrize("broken, match", [
    ("missing", r"data\.blend\[1\]: .*missing"),
    ("tokenizer", r"data\.blend\[1\]: .* was tokenized with another tokenizer"),
])
def test_each_corpus_of_a_blend_is_checked_and_named(two_corpora, tmp_path, broken, match):
    if broken == "missing":
        second = str(tmp_path / "missing")
    else:  # shards of the same text through another tokenizer
        from data_prep.shards import build_shards
        from data_prep.tokenizer import train_tokenizer

        tok = str(tmp_path / "tok")
        train_tokenizer([two_corpora["corpus"]], 640, tok)
        second = str(tmp_path / "other")
        build_shards([two_corpora["corpus"]], tok, second, workers=0, progress=False)
    cfg = parse_run_config(_blend_cfg(two_corpora, [[1.0, two_corpora["code"]], [1.0, second]],
                                      tmp_path / "run"))
    with pytest.raises(ConfigError, match=match):
        check_run_data(cfg, 16, 8)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_vcycle_over_a_blend_resumes_with_the_same_losses(two_corpora, tmp_path):
    raw = _blend_cfg(two_corpora, [[2.0, two_corpora["code"]], [1.0, two_corpora["prose"]]],
                     tmp_path / "run", checkpoint_every=4, keep_checkpoints=5, eval_every=100)
    config = write_yaml(tmp_path / "run.yaml", raw)
    train(config, "zero1.json", nproc=1, log=tmp_path / "log.txt")
    records = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert [r["level"] for r in records if r["event"] == "step"] == [1, 1, 2, 2, 2, 2, 1, 1]
    keep_only_checkpoint(tmp_path / "run", phase=1, step_in_phase=2)
    train(config, "zero1.json", nproc=1, extra=("--resume",), log=tmp_path / "resume.log")
    again = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert sum(r["event"] == "resume" for r in again) == 1
    assert_same(records, again)
