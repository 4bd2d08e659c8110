"""The data a run trains and validates on: prepared corpus -> megatron-core datasets, or image
shards -> ``mlsys.data.vision`` datasets; ``BUILDERS`` maps the data kind to its builder.

With ``data.tokenizer_dir``/``data.data_prefix`` unset, rank 0 prepares the embedded default
corpus (images: scikit-learn's digits) under ``data.prepare_dir`` (idempotent) while the other
ranks wait.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from data_prep.default import prepare_default
from data_prep.images import check_images_complete, prepare_default_images
from mlsys.config import RunConfig
from mlsys.data.megatron import build_datasets, collate_hf, load_tokenizer
from mlsys.data.vision import build_image_datasets, collate_images
from mlsys.dist.process import barrier, rank


@dataclass
class RunData:
    train: Sequence[Any]
    valid: Sequence[Any]
    tokenizer_dir: str | None  # None for image data
    vocab_size: int  # image data: the number of classes
    collate: Callable[[list[Any]], dict]


def data_paths(cfg: RunConfig) -> tuple[str, str]:
    """(tokenizer_dir, data_prefix), preparing the default corpus on rank 0 if needed."""
    d = cfg.data
    if d.tokenizer_dir is not None and d.data_prefix is not None:
        return d.tokenizer_dir, d.data_prefix
    if rank() == 0:
        prepare_default(d.prepare_dir, cfg.kind, vocab_size=d.prepare_vocab_size)
    barrier()
    out = prepare_default(d.prepare_dir, cfg.kind, vocab_size=d.prepare_vocab_size)
    return str(out["tokenizer_dir"]), str(out["data_prefix"])


def tokenizer_vocab_size(tokenizer: Any) -> int:
    for attr in ("vocab_size", "get_piece_size"):
        value = getattr(tokenizer, attr, None)
        if value is not None:
            return int(value() if callable(value) else value)
    return len(tokenizer)


def build_run_data(cfg: RunConfig, train_samples: int, valid_samples: int) -> RunData:
    """Datasets with at least ``train_samples`` / ``valid_samples`` samples (collective)."""
    return BUILDERS[cfg.kind](cfg, train_samples, valid_samples)


def _text_data(cfg: RunConfig, train_samples: int, valid_samples: int) -> RunData:
    tokenizer_dir, prefix = data_paths(cfg)
    cache = cfg.data.cache_dir or str(Path(cfg.out_dir) / "data_cache")
    train, valid, _ = build_datasets(cfg.kind, prefix, tokenizer_dir, cfg.data.seq_length,
                                     cfg.train.seed, num_samples=(train_samples, valid_samples, 0),
                                     split=cfg.data.split, cache_dir=cache)
    kind = cfg.kind
    return RunData(train, valid, tokenizer_dir, tokenizer_vocab_size(load_tokenizer(tokenizer_dir)),
                   lambda samples: collate_hf(samples, kind))


def _image_data(cfg: RunConfig, train_samples: int, valid_samples: int) -> RunData:
    d, size = cfg.data, cfg.model.extra["image_size"]
    prefix = d.data_prefix
    if prefix is None:
        if rank() == 0:
            prepare_default_images(d.prepare_dir, size)
        barrier()
        prefix = prepare_default_images(d.prepare_dir, size)["data_prefix"]
    train, valid = build_image_datasets(prefix, cfg.train.seed, size, split=d.split,
                                        num_samples=(train_samples, valid_samples))
    return RunData(train, valid, None, check_images_complete(prefix)["num_classes"],
                   collate_images)


BUILDERS: dict[str, Callable[[RunConfig, int, int], RunData]] = {
    "causal": _text_data, "masked": _text_data, "vision": _image_data}
