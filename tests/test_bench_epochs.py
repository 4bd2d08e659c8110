"""``mlsys.bench.epochs``: the train split's tokens by megatron's own rule, and the check that a
benchmark's datasets read no sample twice."""

from __future__ import annotations

import numpy as np
import pytest

from mlsys.bench.epochs import check_single_epoch, split_tokens, tokens_read
from mlsys.config import ConfigError, parse_run_config
from mlsys.data.megatron import build_datasets

SEQ = 32


def _cfg(data: dict, family: str, samples: int, name: str = "r"):
    return parse_run_config({
        "name": name,
        "model": {"family": family, "hidden_size": 32, "num_layers": 2, "num_heads": 2,
                  "max_position": SEQ},
        "data": {"tokenizer_dir": data["tokenizer_dir"], "data_prefix": data["data_prefix"],
                 "seq_length": SEQ, "train_samples": samples},
        "train": {"micro_batch_size": 1, "global_batch_size": 1},
        "phases": [{"level": 1, "steps": 1, "lr": 1e-3}]})


def test_split_tokens_is_megatrons_train_split(gpt_data, bert_data, tmp_path):
    train, _, _ = build_datasets("causal", gpt_data["data_prefix"], gpt_data["tokenizer_dir"],
                                 SEQ, 1, (4, 1, 0), split="90,5,5", cache_dir=str(tmp_path / "g"))
    assert split_tokens(gpt_data["data_prefix"], "causal", "90,5,5") == \
        train._get_num_tokens_per_epoch()
    train, _, _ = build_datasets("masked", bert_data["data_prefix"], bert_data["tokenizer_dir"],
                                 SEQ, 1, (4, 1, 0), split="90,5,5", cache_dir=str(tmp_path / "b"))
    docs = np.asarray(train.dataset.document_indices)
    want = sum(int(np.asarray(train.dataset.sequence_lengths)[docs[d]:docs[d + 1]].sum())
               for d in train.indices)
    assert split_tokens(bert_data["data_prefix"], "masked", "90,5,5") == want


def test_check_single_epoch(gpt_data, bert_data):
    have = split_tokens(gpt_data["data_prefix"], "causal", "98,1,1")
    fits = (have - 2) // SEQ
    ok = {"short": _cfg(gpt_data, "gpt", 1, "short"), "long": _cfg(gpt_data, "gpt", fits, "long")}
    out = check_single_epoch(ok)
    assert out["longest"] == "long" and out["max_tokens_read"] == fits * SEQ + 1 < have
    assert tokens_read(ok["long"]) == fits * SEQ + 1
    with pytest.raises(ConfigError, match="read twice"):
        check_single_epoch({"over": _cfg(gpt_data, "gpt", fits + 1, "over")})
    have = split_tokens(bert_data["data_prefix"], "masked", "98,1,1")
    inside = int(have * 0.9) // SEQ
    assert check_single_epoch({"b": _cfg(bert_data, "bert", inside)})["fraction"] < 0.95
    with pytest.raises(ConfigError, match="in reserve"):  # masked LMs keep a 5 % margin
        check_single_epoch({"b": _cfg(bert_data, "bert", int(have * 0.97) // SEQ)})
