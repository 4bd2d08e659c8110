"""Checks of a run's text data against its config, before anything is built or written.

``check_text_data`` raises ``ConfigError`` naming the file and the config field for: a missing
or foreign tokenizer directory; shards that are incomplete, inconsistent (an ``.idx`` that
indexes more bytes than its ``.bin`` holds, whatever the manifest says), made with another
tokenizer or, for a masked LM, not split into sentences; a model vocabulary smaller than the
tokenizer's; a position table shorter than ``data.seq_length`` (``model.extra`` included: the
check reads the Hugging Face config the run will build); and a split that is asked for samples
but holds no token (megatron's dataset build would loop forever on it). It only reads.

Shards with no manifest (another tool's, e.g. megatron-core's ``IndexedDatasetBuilder``) are
accepted with a warning (once, naming the prefix) that the tokenizer cannot be verified: their
index is checked against the ``.bin``, and their tokens are scanned (``max_token_id``, one
read of the whole ``.bin``) for an id the model's or the tokenizer's vocabulary does not hold.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mlsys.config import ConfigError, RunConfig
from mlsys.data.indexed import IncompleteDataset, max_token_id, read_shards, warn_foreign
from mlsys.data.tokenizer_meta import HF_FILE, META_FILE, is_hf, meta_path, read_meta
from mlsys.models import hf_config

SPLIT_NAMES = ("train", "valid", "test")
HASH_LIMIT_BYTES = 2 << 30  # shards up to this size are also checked against their SHA-256


def _tokenizer_meta(tokenizer_dir: str, kind: str) -> dict[str, Any]:
    if not os.path.isdir(tokenizer_dir):
        raise ConfigError(f"data.tokenizer_dir: {tokenizer_dir}: no such directory")
    try:
        meta = read_meta(tokenizer_dir)
    except FileNotFoundError:
        raise ConfigError(f"data.tokenizer_dir: {tokenizer_dir}: not a tokenizer written by "
                          f"data_prep (no {META_FILE}) nor a Hugging Face one (no {HF_FILE})"
                          ) from None
    except json.JSONDecodeError:
        raise ConfigError(f"data.tokenizer_dir: {meta_path(tokenizer_dir)}: not valid JSON"
                          ) from None
    except ValueError as err:  # a Hugging Face tokenizer's problem, naming its file
        raise ConfigError(f"data.tokenizer_dir: {err}") from None
    if kind == "masked" and is_hf(meta):
        raise ConfigError(f"data.tokenizer_dir: {tokenizer_dir}: a Hugging Face tokenizer "
                          "trains causal families only (a masked LM needs data_prep's "
                          "sentencepiece tokenizer: megatron's whole-word masking)")
    return meta


def _field_name(cfg: RunConfig, hf_field: str, run_field: str) -> str:
    return f"model.extra.{hf_field}" if hf_field in cfg.model.extra else f"model.{run_field}"


def check_model_fits(cfg: RunConfig, vocab_size: int, source: str) -> None:
    """The model the run builds holds every token id of ``source``'s vocabulary and every
    position of a sequence."""
    fields = cfg.family.fields
    config = hf_config(cfg.model, vocab_size)
    vocab = getattr(config, fields.vocab)
    if vocab < vocab_size:
        raise ConfigError(f"{_field_name(cfg, fields.vocab, 'vocab_size')}: {vocab} is below "
                          f"the vocabulary of {source} ({vocab_size} ids)")
    if fields.positions is not None:
        positions = getattr(config, fields.positions)
        if positions < cfg.data.seq_length:
            raise ConfigError(f"{_field_name(cfg, fields.positions, 'max_position')}: "
                              f"{positions} positions, below data.seq_length "
                              f"{cfg.data.seq_length}")


def check_token_ids(cfg: RunConfig, data_prefix: str, tokenizer_vocab: int,
                    tokenizer_dir: str, field: str = "data.data_prefix") -> None:
    """Every token id in ``PREFIX.bin`` is below the model's vocabulary size and the
    tokenizer's (scans the whole ``.bin``). ``field``: the config field errors name."""
    top = max_token_id(data_prefix)
    fields = cfg.family.fields
    vocab = getattr(hf_config(cfg.model, tokenizer_vocab), fields.vocab)
    if top >= vocab:
        raise ConfigError(f"{field}: {data_prefix}.bin holds token id {top}, beyond "
                          f"the model's vocabulary ({_field_name(cfg, fields.vocab, 'vocab_size')}"
                          f" {vocab} ids): tokenized with another tokenizer than "
                          f"data.tokenizer_dir {tokenizer_dir}?")
    if top >= tokenizer_vocab:
        raise ConfigError(f"{field}: {data_prefix}.bin holds token id {top}, beyond "
                          f"the vocabulary of data.tokenizer_dir {tokenizer_dir} "
                          f"({tokenizer_vocab} ids): tokenized with another tokenizer?")


def split_tokens(data_prefix: str, kind: str, split: str) -> list[int]:
    """Tokens in each of megatron's train/valid/test splits of ``data_prefix`` (its own split
    arithmetic: by sequence for a causal LM, by document for a masked LM)."""
    import numpy as np
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    index = IndexedDataset(data_prefix, mmap=True)
    lengths = np.asarray(index.sequence_lengths, dtype=np.int64)
    cumulative = np.concatenate([[0], np.cumsum(lengths)])
    if kind == "causal":
        bounds = np.arange(len(lengths) + 1)
    else:
        bounds = np.asarray(index.document_indices, dtype=np.int64)
    n = len(bounds) - 1
    out = []
    for part in convert_split_vector_to_split_matrix(parse_and_normalize_split(split)):
        if part is None:
            out.append(0)
            continue
        beg, end = int(round(part[0] * float(n))), int(round(part[1] * float(n)))
        out.append(int(cumulative[bounds[end]] - cumulative[bounds[beg]]))
    return out


def check_text_data(cfg: RunConfig, tokenizer_dir: str, data_prefix: str,
                    samples: tuple[int, int, int], field: str = "data.data_prefix"
                    ) -> dict[str, Any]:
    """Everything above for a causal or masked run; returns the shards' manifest. ``field``:
    the config field errors name (a blend's corpus: ``data.blend[i]``)."""
    meta = _tokenizer_meta(tokenizer_dir, cfg.kind)
    try:
        size = sum(os.path.getsize(f"{data_prefix}.{e}") for e in ("bin", "idx")
                   if os.path.exists(f"{data_prefix}.{e}"))
        manifest = read_shards(data_prefix, checksums=size <= HASH_LIMIT_BYTES)
    except IncompleteDataset as err:
        raise ConfigError(f"{field}: {err}") from None
    foreign = bool(manifest.get("foreign"))
    if foreign:
        warn_foreign(data_prefix, tokenizer_dir)
    elif manifest.get("tokenizer_sha256") != meta.get("model_sha256"):
        raise ConfigError(f"{field}: {data_prefix} was tokenized with another "
                          f"tokenizer than data.tokenizer_dir {tokenizer_dir}")
    if cfg.kind == "masked" and not manifest.get("split_sentences"):
        raise ConfigError(f"{field}: {data_prefix}: a masked LM needs shards made "
                          "with --split-sentences" + (" (its index holds one sequence per "
                                                      "document)" if foreign else ""))
    check_model_fits(cfg, int(meta["vocab_size"]), tokenizer_dir)
    if foreign:
        check_token_ids(cfg, data_prefix, int(meta["vocab_size"]), tokenizer_dir, field)
    for name, want, have in zip(SPLIT_NAMES, samples, split_tokens(data_prefix, cfg.kind,
                                                                   cfg.data.split), strict=True):
        if want and not have:
            raise ConfigError(f"data.split: {cfg.data.split!r} leaves the {name} split of "
                              f"{data_prefix} without a token ({manifest.get('num_documents')} "
                              "documents in all); give it more data or another split")
    return manifest
