"""No sample read twice: a benchmark's runs must fit in one epoch of the train split.

Every run of a profile builds its dataset for ``data.train_samples`` samples (the longest run's,
so that runs share one token order); megatron-core repeats and reshuffles the split when that is
more than one epoch. ``check_single_epoch`` compares the tokens those samples read,
``train_samples * seq_length`` (+1 for a causal LM: a GPT sample reads ``seq_length + 1``
tokens, consecutive samples share one), with the tokens of the train split, and raises
``ConfigError`` unless they are fewer. The split is megatron's own rule
(``parse_and_normalize_split`` -> ``convert_split_vector_to_split_matrix``, bounds rounded over
the low-level dataset's elements: sequences for GPT, documents for BERT), so the count is that
of the split the runs read. For BERT the comparison is the issue's (tokens against tokens); a
masked-LM sample packs whole sentences and cuts the last one, so the samples of one epoch can
read slightly more than ``seq_length`` tokens each: keep a margin (``margin``, default 5 %).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mlsys.config import ConfigError, RunConfig


def split_tokens(data_prefix: str, kind: str, split: str) -> int:
    """Tokens in the train split of the shards at ``data_prefix``, by megatron's split rule."""
    from megatron.core.datasets.blended_megatron_dataset_config import (
        convert_split_vector_to_split_matrix,
        parse_and_normalize_split,
    )
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    ds = IndexedDataset(data_prefix)
    lengths = np.asarray(ds.sequence_lengths, dtype=np.int64)
    docs = np.asarray(ds.document_indices, dtype=np.int64)
    n = len(lengths) if kind == "causal" else len(docs) - 1
    lo, hi = convert_split_vector_to_split_matrix(parse_and_normalize_split(split))[0]
    beg, end = int(round(lo * float(n))), int(round(hi * float(n)))
    if kind != "causal":
        beg, end = int(docs[beg]), int(docs[end])
    return int(lengths[beg:end].sum())


def tokens_read(cfg: RunConfig) -> int:
    """Tokens the run's dataset (``cfg.train_samples`` samples) reads from the train split."""
    extra = 1 if cfg.kind == "causal" else 0
    return cfg.train_samples * cfg.data.seq_length + extra


def check_single_epoch(configs: dict[str, RunConfig], data_prefix: str | None = None,
                       margin: float = 0.05) -> dict[str, Any]:
    """Raise ``ConfigError`` unless every run's dataset reads fewer tokens than the train
    split holds (masked LMs: with ``margin`` to spare). All runs must share kind, seq_length
    and split (a profile family does). ``data_prefix``: the shards (default: the configs'
    ``data.data_prefix``; a benchmark passes what ``prepare_default_data`` returned). Returns
    the figures."""
    cfgs = list(configs.values())
    if not cfgs:
        raise ConfigError("check_single_epoch: no runs")
    first = cfgs[0]
    for c in cfgs:
        if (c.kind, c.data.seq_length, c.data.split) != (first.kind, first.data.seq_length,
                                                         first.data.split):
            raise ConfigError(f"{c.name}: kind, seq_length and split differ from "
                              f"{first.name}'s; check them apart")
    data_prefix = data_prefix or first.data.data_prefix
    if data_prefix is None:
        raise ConfigError("check_single_epoch: no data_prefix (prepare the default data first)")
    have = split_tokens(data_prefix, first.kind, first.data.split)
    name, need = max(((n, tokens_read(c)) for n, c in configs.items()), key=lambda x: x[1])
    room = have * (1.0 - margin) if first.kind != "causal" else have
    if need >= room:
        raise ConfigError(
            f"{name}: its dataset reads {need:,} tokens ({configs[name].train_samples:,} "
            f"samples of {first.data.seq_length}), but the train split of {data_prefix} holds "
            f"{have:,}" + (f" ({margin:.0%} kept in reserve)" if room != have else "")
            + ": samples would be read twice; lower data.train_samples or use a larger corpus")
    return {"split_tokens": have, "max_tokens_read": need, "longest": name,
            "fraction": need / have}
