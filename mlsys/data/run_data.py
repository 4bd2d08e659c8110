"""The data a run trains and validates on: prepared corpus -> megatron-core datasets, or image
shards -> ``mlsys.data.vision`` datasets; ``BUILDERS`` maps the data kind to its builder.

With ``data.tokenizer_dir``/``data.data_prefix`` unset, rank 0 prepares the embedded default
corpus (images: scikit-learn's digits) under ``data.prepare_dir`` (idempotent; the data tool
in a child process, ``mlsys.data.prepare``) while the other ranks wait.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import transformers

from mlsys.config import ConfigError, RunConfig
from mlsys.data.checks import check_text_data
from mlsys.data.hf_tokenizer import save_hf_tokenizer
from mlsys.data.image_shards import check_images_complete
from mlsys.data.megatron import build_datasets, collate_hf, load_tokenizer
from mlsys.data.prepare import prepare
from mlsys.data.tokenizer_meta import HF_FILES, is_hf, read_meta
from mlsys.data.tokenizer_meta import OWNED_FILES as TOKENIZER_FILES
from mlsys.data.vision import build_image_datasets, collate_images
from mlsys.distributed.process import barrier, from_main, rank
from mlsys.families import get_family


@dataclass
class RunData:
    train: Sequence[Any]
    valid: Sequence[Any]
    tokenizer_dir: str | None  # None for image data
    vocab_size: int  # image data: the number of classes
    collate: Callable[[list[Any]], dict]
    # writes what a Hugging Face pipeline needs besides the model into a directory: the
    # tokenizer (tokenizer.json and config, plus the sentencepiece files) or image processor
    save_processor: Callable[[Path], None]
    labels: list[str] | None = None  # image data: the class names, if the data has them


def prepare_default_data(cfg: RunConfig) -> dict[str, str]:
    """Build (or reuse; idempotent) the embedded default data the config asks for, waiting
    for it (``python -m data_prep prepare`` in a child process; ``DataPrepError`` if it
    fails): ``{"tokenizer_dir", "data_prefix"}`` (no tokenizer for images; a blend:
    ``{"tokenizer_dir", "blend"}``). Call it once before starting several runs that share
    ``data.prepare_dir``."""
    d = cfg.data
    if cfg.kind == "vision":
        if d.data_prefix is not None:
            return {"data_prefix": d.data_prefix}
        out = prepare(d.prepare_dir, "vision", image_size=cfg.model.extra["image_size"])
        return {"data_prefix": str(out["data_prefix"])}
    if d.blend is not None:
        return {"tokenizer_dir": d.tokenizer_dir, "blend": [list(item) for item in d.blend]}
    if d.tokenizer_dir is not None and d.data_prefix is not None:
        return {"tokenizer_dir": d.tokenizer_dir, "data_prefix": d.data_prefix}
    out = prepare(d.prepare_dir, cfg.kind, vocab_size=d.prepare_vocab_size,
                  source=d.prepare_source)
    return {"tokenizer_dir": str(out["tokenizer_dir"]), "data_prefix": str(out["data_prefix"])}


def data_paths(cfg: RunConfig) -> dict[str, str]:
    """``prepare_default_data`` on rank 0 first, then on every rank (which then only reads)."""
    if rank() == 0:
        prepare_default_data(cfg)
    barrier()
    return prepare_default_data(cfg)


def check_run_data(cfg: RunConfig, train_samples: int, valid_samples: int) -> None:
    """Prepare the default data if the config asks for it (outside the run directory), then
    check the data against the config on rank 0 (``mlsys.data.checks``); every rank raises
    the same ``ConfigError``. Writes nothing in the run directory (collective)."""
    paths = data_paths(cfg)

    def problem() -> str | None:
        try:
            if cfg.kind == "vision":
                check_images_complete(paths["data_prefix"])
            elif "blend" in paths:
                for i, (_, prefix) in enumerate(paths["blend"]):
                    check_text_data(cfg, paths["tokenizer_dir"], prefix,
                                    (train_samples, valid_samples, 0), f"data.blend[{i}]")
            else:
                check_text_data(cfg, paths["tokenizer_dir"], paths["data_prefix"],
                                (train_samples, valid_samples, 0))
        except ConfigError as err:
            return str(err)
        except (ValueError, OSError) as err:  # an image prefix that is not complete
            return f"data.data_prefix: {err}"
        return None

    message = from_main(problem)
    if message is not None:
        raise ConfigError(message)


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
    paths = data_paths(cfg)
    tokenizer_dir = paths["tokenizer_dir"]
    source = [tuple(item) for item in paths["blend"]] if "blend" in paths else paths["data_prefix"]
    cache = cfg.data.cache_dir or str(Path(cfg.out_dir) / "data_cache")
    train, valid, _ = build_datasets(cfg.kind, source, tokenizer_dir, cfg.data.seq_length,
                                     cfg.train.seed, num_samples=(train_samples, valid_samples, 0),
                                     split=cfg.data.split, cache_dir=cache)
    valid_seed = cfg.data.valid_seed
    if valid_seed is not None and valid_seed != cfg.train.seed:  # its valid split only: a
        # split's samples depend on its own count, so one train sample spares that index
        _, valid, _ = build_datasets(cfg.kind, source, tokenizer_dir, cfg.data.seq_length,
                                     valid_seed, num_samples=(1, valid_samples, 0),
                                     split=cfg.data.split, cache_dir=cache)
    kind, max_length = cfg.kind, cfg.model.max_position

    hf_files = is_hf(read_meta(tokenizer_dir))

    def save_processor(out_dir: Path) -> None:
        """The tokenizer's own files, by name (never over a file the export already holds:
        a tokenizer_dir that is an older run's final/ carries a model too): a Hugging Face
        tokenizer's unchanged; data_prep's sentencepiece files plus the Hugging Face
        tokenizer made from them."""
        for name in HF_FILES if hf_files else TOKENIZER_FILES:
            src, dst = Path(tokenizer_dir) / name, Path(out_dir) / name
            if src.is_file():
                if dst.exists():
                    raise FileExistsError(f"export: {dst} exists; not copying {src} over it")
                shutil.copy2(src, dst)
        if not hf_files:
            save_hf_tokenizer(tokenizer_dir, kind, out_dir, max_length)

    return RunData(train, valid, tokenizer_dir, tokenizer_vocab_size(load_tokenizer(tokenizer_dir)),
                   lambda samples: collate_hf(samples, kind), save_processor)


def _image_data(cfg: RunConfig, train_samples: int, valid_samples: int) -> RunData:
    d, size = cfg.data, cfg.model.extra["image_size"]
    prefix = data_paths(cfg)["data_prefix"]
    train, valid = build_image_datasets(prefix, cfg.train.seed, size, split=d.split,
                                        num_samples=(train_samples, valid_samples))
    manifest = check_images_complete(prefix)
    processor_class = get_family(cfg.model.family).image_processor

    def save_processor(out_dir: Path) -> None:
        processor = getattr(transformers, processor_class)(
            do_resize=True, size={"height": size, "width": size}, resample=2,  # bilinear
            do_rescale=True, rescale_factor=1 / 255, do_normalize=True,
            image_mean=manifest["mean"], image_std=manifest["std"])
        processor.save_pretrained(str(out_dir))

    return RunData(train, valid, None, manifest["num_classes"], collate_images, save_processor,
                   manifest.get("classes") or None)


BUILDERS: dict[str, Callable[[RunConfig, int, int], RunData]] = {
    "causal": _text_data, "masked": _text_data, "vision": _image_data}
