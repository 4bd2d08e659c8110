"""Start from weights (``model.init_from``): a Hugging Face model directory of the run's family
(another run's ``final/``, any ``save_pretrained`` directory with safetensors) whose weights
replace the fresh initialisation of the level-1 model on a fresh start.

``check_init_from(cfg, vocab_size)`` (``ConfigError`` naming ``model.init_from``; it only
reads): the directory exists, its ``config.json`` is the run's family (``model_type``) and has
the shapes of the run's level-1 model (hidden size, layers, heads, ffn, vocabulary, positions;
the first differing field is named with both values), and its safetensors weights
(``model.safetensors``, or the shards a ``model.safetensors.index.json`` lists) hold every
parameter of that model at its shape (a tied parameter under any of its names). Tensors the
model has no parameter for (buffers, another head) are ignored, as ``from_pretrained`` does.

``load_init_weights(model, directory)`` copies them into a model built as for a fresh start,
plain or ZeRO-3 partitioned (``mlsys.distributed.weights_io.copy_full``: collective there).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open

from mlsys.config import ConfigError, RunConfig
from mlsys.distributed.process import rank
from mlsys.distributed.weights_io import copy_full
from mlsys.distributed.zero import full_shape, is_partitioned
from mlsys.families import get_family
from mlsys.models import hf_config, model_class

WEIGHTS = "model.safetensors"
INDEX = "model.safetensors.index.json"
FIELD = "model.init_from"
# ConfigFields attribute -> the run config's field
RUN_FIELDS = (("hidden", "hidden_size"), ("layers", "num_layers"), ("heads", "num_heads"),
              ("ffn", "ffn_size"), ("vocab", "vocab_size"), ("positions", "max_position"))


def weight_files(directory: Path) -> dict[str, Path]:
    """{tensor name: safetensors file holding it}; ConfigError if there is no weights file."""
    single, index = directory / WEIGHTS, directory / INDEX
    if single.is_file():
        with safe_open(str(single), framework="pt") as f:
            return {k: single for k in f.keys()}  # noqa: SIM118 (safe_open is no dict)
    if index.is_file():
        try:
            weight_map = json.loads(index.read_text())["weight_map"]
        except (ValueError, KeyError, TypeError):
            raise ConfigError(f"{FIELD}: {index}: not a safetensors index (no weight_map)"
                              ) from None
        files = {k: directory / v for k, v in weight_map.items()}
        absent = sorted({str(p) for p in files.values() if not p.is_file()})
        if absent:
            raise ConfigError(f"{FIELD}: {index} lists {absent[0]}, which does not exist")
        return files
    raise ConfigError(f"{FIELD}: {directory}: no weights file ({WEIGHTS} or {INDEX}; "
                      "safetensors only)")


def _source_config(cfg: RunConfig, directory: Path) -> Any:
    path = directory / "config.json"
    if not path.is_file():
        raise ConfigError(f"{FIELD}: {directory}: no config.json (not a Hugging Face model "
                          "directory)")
    try:
        raw = json.loads(path.read_text())
    except ValueError:
        raise ConfigError(f"{FIELD}: {path}: not valid JSON") from None
    family = cfg.family
    if not isinstance(raw, dict) or raw.get("model_type") != family.model_type:
        got = raw.get("model_type") if isinstance(raw, dict) else None
        raise ConfigError(f"{FIELD}: {path}: model_type {got!r}, not the {cfg.model.family} "
                          f"family's {family.model_type!r}")
    config_class = family.hf_class(family.config_class)
    return config_class.from_dict(raw)


def _value(config: Any, fields: Any, attr: str) -> Any:
    name = getattr(fields, attr)
    value = getattr(config, name, None)
    if attr == "ffn" and value is None and fields.ffn_default_multiple is not None:
        value = fields.ffn_default_multiple * getattr(config, fields.hidden)
    return value


@contextmanager
def _meta_model(config: Any) -> Iterator[torch.nn.Module]:
    """The run's model of ``config`` on the meta device (no memory, unpartitioned)."""
    from mlsys.train.export import plain_construction

    with plain_construction(), torch.device("meta"):
        yield model_class(config)._from_config(config)


def _aliases(model: torch.nn.Module) -> dict[str, list[str]]:
    """{parameter name (as ``named_parameters`` gives it): every name of that tensor}."""
    names: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(name)
    return {n: names[id(p)] for n, p in model.named_parameters()}


def source_names(model: torch.nn.Module, files: dict[str, Path],
                 directory: Path) -> dict[str, str]:
    """{parameter name: tensor name in the directory}; ConfigError naming the first parameter
    that is not there."""
    out = {}
    for name, aliases in _aliases(model).items():
        found = next((a for a in aliases if a in files), None)
        if found is None:
            raise ConfigError(f"{FIELD}: {directory}: the weights have no tensor {name} "
                              f"(the run's {type(model).__name__} needs it)")
        out[name] = found
    return out


def check_init_from(cfg: RunConfig, vocab_size: int) -> None:
    """See the module docstring. ``vocab_size``: the data's vocabulary (or classes), which
    the run's level-1 model takes unless ``model.vocab_size`` is set. Only reads."""
    if cfg.model.init_from is None:
        return
    directory = Path(cfg.model.init_from)
    if not directory.is_dir():
        raise ConfigError(f"{FIELD}: {directory}: no such directory")
    source = _source_config(cfg, directory)
    want = hf_config(cfg.model, vocab_size)
    fields = get_family(cfg.model.family).fields
    for attr, run_field in RUN_FIELDS:
        if getattr(fields, attr) is None:
            continue
        have, need = _value(source, fields, attr), _value(want, fields, attr)
        if have != need:
            raise ConfigError(f"{FIELD}: {directory / 'config.json'}: "
                              f"{getattr(fields, attr)} {have}, but the run's level-1 model "
                              f"has {need} (model.{run_field})")
    files = weight_files(directory)
    with _meta_model(want) as model:
        names = source_names(model, files, directory)
        shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    with ExitStack() as stack:
        opened = {path: stack.enter_context(safe_open(str(path), framework="pt"))
                  for path in set(files.values())}
        for name, key in names.items():
            shape = tuple(opened[files[key]].get_slice(key).get_shape())
            if shape != shapes[name]:
                raise ConfigError(f"{FIELD}: {files[key]}: {key} has shape {shape}, the "
                                  f"run's model {shapes[name]}")


def load_init_weights(model: torch.nn.Module, directory: str | Path) -> None:
    """Copy the weights of ``directory`` (checked by ``check_init_from``) into ``model``'s
    parameters, cast to their dtype; partitioned parameters are written by rank 0 and
    re-partitioned (collective: every rank calls it)."""
    directory = Path(directory)
    files = weight_files(directory)
    names = source_names(model, files, directory)
    params = dict(model.named_parameters())
    with ExitStack() as stack:
        opened = {path: stack.enter_context(safe_open(str(path), framework="pt"))
                  for path in set(files.values())}
        for name, key in names.items():
            param = params[name]
            value = None
            if rank() == 0 or not is_partitioned(param):  # others' values are not used
                value = opened[files[key]].get_tensor(key)
                if tuple(value.shape) != tuple(full_shape(param)):
                    raise ValueError(f"{files[key]}: {key}: shape {tuple(value.shape)} != "
                                     f"model {tuple(full_shape(param))}")
            copy_full(param, value)


def data_vocab_size(cfg: RunConfig) -> int:
    """The vocabulary (image data: classes) the run's model takes from its data, as
    ``mlsys.data.run_data`` finds it; only reads data that ``check_run_data`` has checked."""
    from mlsys.data.image_shards import check_images_complete
    from mlsys.data.megatron import load_tokenizer
    from mlsys.data.run_data import prepare_default_data, tokenizer_vocab_size

    paths = prepare_default_data(cfg)  # prepared already: only found again
    if cfg.kind == "vision":
        return int(check_images_complete(paths["data_prefix"])["num_classes"])
    return tokenizer_vocab_size(load_tokenizer(paths["tokenizer_dir"]))


def check_before_start(run: Any, cfg: RunConfig, resume: bool | str) -> None:
    """``check_init_from`` on rank 0 before the run directory is touched, unless the start
    cannot be fresh (``resume`` not ``--fresh`` and checkpoints there: it resumes one or is
    refused, and never reads the directory again); every rank raises the same
    ``ConfigError`` (collective)."""
    from mlsys.distributed.process import from_main
    from mlsys.train.checkpoint import tags

    if cfg.model.init_from is None:
        return

    def problem() -> str | None:
        if resume is not False and tags(run.checkpoints):  # rank 0 decides for every rank
            return None
        try:
            vocab = cfg.model.vocab_size if cfg.model.vocab_size is not None \
                else data_vocab_size(cfg)
            check_init_from(cfg, vocab)
        except ConfigError as err:
            return str(err)
        return None

    message = from_main(problem)
    if message is not None:
        raise ConfigError(message)
