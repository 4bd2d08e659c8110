"""Shared fixtures."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def gpt_data(tmp_path_factory) -> dict:
    """Small code corpus (40 stdlib modules) -> 512-piece tokenizer -> shards with eod."""
    from data_prep.corpus import write_corpus
    from data_prep.shards import build_shards
    from data_prep.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("gpt_data")
    corpus = write_corpus(str(root), "code", limit=40)["path"]
    tok = str(root / "tok")
    train_tokenizer([corpus], 512, tok)
    prefix = str(root / "shards")
    build_shards([corpus], tok, prefix, workers=0, append_eod=True, progress=False)
    return {"root": root, "corpus": corpus, "tokenizer_dir": tok, "data_prefix": prefix}


@pytest.fixture(scope="session")
def bert_data(tmp_path_factory) -> dict:
    """Small prose corpus (150 stdlib modules) -> 512-piece tokenizer -> sentence shards."""
    from data_prep.corpus import write_corpus
    from data_prep.shards import build_shards
    from data_prep.tokenizer import train_tokenizer

    root = tmp_path_factory.mktemp("bert_data")
    corpus = write_corpus(str(root), "prose", limit=150)["path"]
    tok = str(root / "tok")
    train_tokenizer([corpus], 512, tok)
    prefix = str(root / "shards")
    build_shards([corpus], tok, prefix, workers=0, split_sentences=True, progress=False)
    return {"root": root, "corpus": corpus, "tokenizer_dir": tok, "data_prefix": prefix}
