"""Shards another tool wrote: megatron-core's own ``IndexedDatasetBuilder`` (no manifest of
ours) train with the tokenizer the config names, with a warning that the tokenizer cannot be
verified; the index is checked against the .bin, and a token id beyond the vocabulary is a
ConfigError naming the prefix, before the run directory exists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mlsys.config import ConfigError, parse_run_config
from mlsys.data.checks import check_text_data
from mlsys.data.indexed import IncompleteDataset, read_shards
from tests.tiny_run import REPO, env, run_config, write_yaml

PHASES = [{"level": 1, "steps": 3, "lr": 1e-3}]


def megatron_shards(prefix: Path, docs: list[list[int]], dtype=np.int32) -> str:
    """``docs`` (token ids) written by megatron-core's ``IndexedDatasetBuilder``."""
    import torch
    from megatron.core.datasets.indexed_dataset import IndexedDatasetBuilder

    builder = IndexedDatasetBuilder(f"{prefix}.bin", dtype=dtype)
    for ids in docs:
        builder.add_document(torch.tensor(ids, dtype=torch.int64), [len(ids)])
    builder.finalize(f"{prefix}.idx")
    return str(prefix)


def tokenized_corpus(data: dict) -> list[list[int]]:
    """The conftest corpus through its sentencepiece tokenizer, each document ending in eod."""
    import sentencepiece as spm

    meta = json.loads(Path(data["tokenizer_dir"], "tokenizer_meta.json").read_text())
    sp = spm.SentencePieceProcessor(
        model_file=os.path.join(data["tokenizer_dir"], meta["model_file"]))
    eod = meta["ids"]["eod"]
    with open(data["corpus"], encoding="utf-8") as f:
        return [sp.encode(json.loads(line)["text"]) + [eod] for line in f]


@pytest.fixture(scope="module")
def foreign(gpt_data, tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("foreign")
    docs = tokenized_corpus(gpt_data)
    prefix = megatron_shards(root / "megatron", docs)
    return {**gpt_data, "data_prefix": prefix, "docs": docs, "root": root}


def _cfg(data: dict, prefix: str, run_dir: Path, **model):
    raw = run_config("gpt", data["tokenizer_dir"], prefix, run_dir, PHASES)
    raw["model"].update(model)
    return parse_run_config(raw)


def test_megatron_shards_are_read_with_one_warning(foreign, tmp_path, capsys):
    prefix = foreign["data_prefix"]
    assert not os.path.exists(prefix + ".manifest.json")
    cfg = _cfg(foreign, prefix, tmp_path / "run")
    summary = check_text_data(cfg, foreign["tokenizer_dir"], prefix, (8, 8, 0))
    n_tokens = sum(map(len, foreign["docs"]))
    assert summary == {"foreign": True, "format": None, "tokenizer_sha256": None,
                       "dtype": "int32", "num_sequences": len(foreign["docs"]),
                       "num_documents": len(foreign["docs"]), "num_tokens": n_tokens,
                       "bin_bytes": 4 * n_tokens, "idx_bytes": os.path.getsize(prefix + ".idx"),
                       "split_sentences": False}
    check_text_data(cfg, foreign["tokenizer_dir"], prefix, (8, 8, 0))
    err = capsys.readouterr().err
    assert err.count("warning:") == 1
    assert (f"warning: data.data_prefix {prefix}: no manifest of data_prep's" in err
            and f"the tokenizer {foreign['tokenizer_dir']} cannot be verified" in err)
    masked = parse_run_config(run_config("bert", foreign["tokenizer_dir"], prefix,
                                         tmp_path / "r", PHASES))
    with pytest.raises(ConfigError, match=r"a masked LM needs shards made with "
                                          r"--split-sentences \(its index holds one sequence"):
        check_text_data(masked, foreign["tokenizer_dir"], prefix, (8, 8, 0))


def test_the_megatron_dataset_gives_the_tokens_written(foreign, tmp_path):
    from mlsys.data.megatron import build_datasets

    train, _, _ = build_datasets("causal", foreign["data_prefix"], foreign["tokenizer_dir"],
                                 32, 3, (4, 0, 0), split="100,0,0", cache_dir=str(tmp_path))
    flat = np.concatenate([np.asarray(d, dtype=np.int32) for d in foreign["docs"]])
    text = flat.tobytes()
    for i in range(4):  # every sample is a run of consecutive corpus tokens
        tokens = np.asarray(train[i]["tokens"], dtype=np.int32)
        assert tokens.max() < 512 and tokens.tobytes() in text


def test_an_index_that_disagrees_with_the_bin_is_refused(foreign, tmp_path):
    prefix = megatron_shards(tmp_path / "cut", foreign["docs"][:5])
    size = os.path.getsize(prefix + ".bin")
    with open(prefix + ".bin", "r+b") as f:
        f.truncate(size - 8)
    with pytest.raises(IncompleteDataset, match=rf"{prefix}\.bin: {size - 8} bytes, but "):
        read_shards(prefix)
    with pytest.raises(ConfigError, match=rf"data\.data_prefix: {prefix}\.bin: {size - 8} "):
        check_text_data(_cfg(foreign, prefix, tmp_path / "run"), foreign["tokenizer_dir"],
                        prefix, (8, 8, 0))


def test_token_ids_beyond_the_vocabulary_are_refused(foreign, tmp_path):
    docs = [list(d) for d in foreign["docs"]]
    docs[3][5] = 600  # the tokenizer and the model hold 512 ids
    prefix = megatron_shards(tmp_path / "oov", docs)
    with pytest.raises(ConfigError, match=rf"data\.data_prefix: {prefix}\.bin holds token id "
                                          r"600, beyond the model's vocabulary \(model\."
                                          r"vocab_size 512 ids\)"):
        check_text_data(_cfg(foreign, prefix, tmp_path / "run"), foreign["tokenizer_dir"],
                        prefix, (8, 8, 0))
    with pytest.raises(ConfigError, match=rf"{prefix}\.bin holds token id 600, beyond the "
                                          r"vocabulary of data\.tokenizer_dir .* \(512 ids\)"):
        check_text_data(_cfg(foreign, prefix, tmp_path / "run", vocab_size=1024),
                        foreign["tokenizer_dir"], prefix, (8, 8, 0))


def _launch(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launch.train", "--config", str(config),
                           "--ds_config", str(REPO / "configs" / "ds" / "zero1.json"),
                           "--no-progress"], env=env(), cwd=str(REPO), capture_output=True,
                          text=True, timeout=900)


@pytest.mark.slow
def test_megatron_shards_train_and_out_of_vocabulary_shards_do_not_start(foreign, tmp_path):
    prefix = foreign["data_prefix"]
    raw = run_config("gpt", foreign["tokenizer_dir"], prefix, tmp_path / "run", PHASES)
    res = _launch(write_yaml(tmp_path / "run.yaml", raw))
    assert res.returncode == 0, res.stderr[-3000:]
    assert (tmp_path / "run" / "done.json").is_file()
    assert res.stderr.count(f"warning: data.data_prefix {prefix}: no manifest") == 1
    docs = [list(d) for d in foreign["docs"]]
    docs[0][0] = 4096
    bad = megatron_shards(tmp_path / "oov", docs)
    raw = run_config("gpt", foreign["tokenizer_dir"], bad, tmp_path / "oov-run", PHASES)
    res = _launch(write_yaml(tmp_path / "oov.yaml", raw))
    assert res.returncode == 2
    assert f"data.data_prefix: {bad}.bin holds token id 4096, beyond the model's" in res.stderr
    assert not (tmp_path / "oov-run").exists()
