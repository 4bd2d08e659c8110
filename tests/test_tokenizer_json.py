"""A team's own Hugging Face tokenizer (``tokenizer.json``; here a byte-level BPE trained
locally with the ``tokenizers`` library): data_prep encodes with it (the same ids as the library,
eos ending each document, 1 or 2 workers alike), a Llama-class run trains on it with the
vocabulary checked against the model's, and the export carries it unchanged."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest

from data_prep.hf_bpe import EOS, train_byte_level_bpe
from data_prep.shards import build_shards
from mlsys.config import ConfigError, parse_run_config
from mlsys.data.checks import check_text_data
from mlsys.data.tokenizer_meta import read_meta
from tests.tiny_run import run_config, train, write_yaml

VOCAB = 600


@pytest.fixture(scope="module")
def hf_data(gpt_data, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("hf_tok")
    tok = train_byte_level_bpe([gpt_data["corpus"]], VOCAB, str(root / "tok"))
    prefix = str(root / "shards")
    build_shards([gpt_data["corpus"]], tok, prefix, workers=2, progress=False, append_eod=True)
    return {"corpus": gpt_data["corpus"], "tokenizer_dir": tok, "data_prefix": prefix,
            "root": root}


def test_data_prep_encodes_with_the_tokenizer_and_its_eos(hf_data, tmp_path):
    from megatron.core.datasets.indexed_dataset import IndexedDataset
    from tokenizers import Tokenizer

    meta = read_meta(hf_data["tokenizer_dir"])
    tok = Tokenizer.from_file(os.path.join(hf_data["tokenizer_dir"], "tokenizer.json"))
    eos = tok.token_to_id(EOS)
    assert meta["vocab_size"] == tok.get_vocab_size() == VOCAB and meta["ids"]["eod"] == eos
    with open(hf_data["corpus"], encoding="utf-8") as f:
        docs = [json.loads(line)["text"] for line in f]
    index = IndexedDataset(hf_data["data_prefix"], mmap=True)
    assert len(index) == len(docs)
    for i in (0, 7, len(docs) - 1):
        assert index[i].tolist() == tok.encode(docs[i], add_special_tokens=False).ids + [eos]
    manifest = json.loads(Path(hf_data["data_prefix"] + ".manifest.json").read_text())
    assert manifest["tokenizer_sha256"] == meta["model_sha256"]
    one = str(tmp_path / "one")
    build_shards([hf_data["corpus"]], hf_data["tokenizer_dir"], one, workers=0, progress=False,
                 append_eod=True)
    assert Path(one + ".bin").read_bytes() == Path(hf_data["data_prefix"] + ".bin").read_bytes()


def _raw(hf_data: dict, run_dir: Path, family: str = "llama", **model) -> dict:
    raw = run_config(family, hf_data["tokenizer_dir"], hf_data["data_prefix"], run_dir,
                     [{"level": 1, "steps": 2, "lr": 3e-3, "warmup": 1},
                      {"level": 2, "steps": 2, "lr": 5e-3, "warmup": 1},
                      {"level": 1, "steps": 2, "lr": 2e-3, "warmup": 1}], eval_every=100)
    raw["model"].update(dropout=0.0, **model)
    if family == "llama":
        raw["model"]["extra"] = {"num_key_value_heads": 2}
    return raw


def test_the_vocabulary_and_the_family_are_checked(hf_data, tmp_path):
    small = parse_run_config(_raw(hf_data, tmp_path / "a", vocab_size=VOCAB - 88))
    with pytest.raises(ConfigError, match=rf"model.vocab_size: {VOCAB - 88} is below the "
                                          rf"vocabulary of .* \({VOCAB} ids\)"):
        check_text_data(small, hf_data["tokenizer_dir"], hf_data["data_prefix"], (8, 8, 0))
    bert = parse_run_config(_raw(hf_data, tmp_path / "b", family="bert"))
    with pytest.raises(ConfigError, match="data.tokenizer_dir: .* causal families only"):
        check_text_data(bert, hf_data["tokenizer_dir"], hf_data["data_prefix"], (8, 8, 0))
    # a tokenizer.json whose tokenizer_config.json names no eos: refused, naming the file
    bare = tmp_path / "bare"
    bare.mkdir()
    shutil.copy(Path(hf_data["tokenizer_dir"]) / "tokenizer.json", bare)
    (bare / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "X"}))
    cfg = parse_run_config({**_raw(hf_data, tmp_path / "c"), "data": {
        **_raw(hf_data, tmp_path / "c")["data"], "tokenizer_dir": str(bare)}})
    with pytest.raises(ConfigError, match=r"data.tokenizer_dir: .*tokenizer_config.json: no "
                                          r"eos_token"):
        check_text_data(cfg, str(bare), hf_data["data_prefix"], (8, 8, 0))


@pytest.mark.slow
def test_a_llama_vcycle_trains_on_it_and_exports_it_unchanged(hf_data, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    config = write_yaml(tmp_path / "run.yaml", _raw(hf_data, tmp_path / "run"))
    train(config, "zero1.json", nproc=1, log=tmp_path / "log.txt")
    final = tmp_path / "run" / "final"
    src = Path(hf_data["tokenizer_dir"])
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (final / name).read_bytes() == (src / name).read_bytes(), name
    assert not (final / "spm.model").exists()
    model = AutoModelForCausalLM.from_pretrained(final)
    assert model.config.vocab_size == VOCAB
    assert model.generation_config.eos_token_id == read_meta(src)["ids"]["eod"]
    text = "def f(x):\n    return x + 1\n"
    from tokenizers import Tokenizer

    ids = Tokenizer.from_file(str(src / "tokenizer.json")).encode(
        text, add_special_tokens=False).ids
    assert AutoTokenizer.from_pretrained(final)(text, add_special_tokens=False)["input_ids"] == ids
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").open()]
    end = [r for r in records if r["event"] == "end"][-1]
    assert np.isfinite(end["val_loss"]) and end["val_loss"] < np.log(VOCAB) + 0.5
