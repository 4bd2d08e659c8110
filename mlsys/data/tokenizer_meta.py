"""A tokenizer directory's files and its metadata (``tokenizer_meta.json``).

``python -m data_prep tokenizer`` writes ``spm.model`` (the sentencepiece model), ``spm.vocab``
(one ``repr(piece)<TAB>score`` line per id) and ``tokenizer_meta.json`` (``OWNED_FILES``) into
a directory, the metadata last: a directory is a complete tokenizer when its metadata is there.
Other files in the directory are never the tokenizer's.

The metadata (``FORMAT``): ``format``, ``model_file`` (``MODEL_FILE``), ``model_sha256``,
``vocab_size``, ``model_type``, ``normalization``, ``byte_fallback``, ``word_start`` (``"▁"``),
``ids`` (``pad``, ``unk``, ``eos``, ``eod``, ``bos``, ``cls``, ``sep``, ``mask``, ``newline``),
the training inputs and problems; ``prepare_default`` adds what it was made from.

A **Hugging Face tokenizer directory** (a fast tokenizer's ``tokenizer.json``, with
``tokenizer_config.json`` naming its special tokens; ``HF_FILES``) has no such file: its
metadata is derived (``hf_meta``): ``format`` ``HF_FORMAT``, ``model_file`` ``tokenizer.json``,
its SHA-256, ``vocab_size`` (the highest id of the model's vocabulary and the added tokens, plus
one) and ``ids`` (``eod`` = ``eos``, ``pad``, ``bos``, ``unk``: null where the tokenizer has
none; ``pad`` falls back to ``eos``). Documents end in the eos token, which it must have.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mlsys.data.manifest import sha256_file, write_manifest

META_FILE = "tokenizer_meta.json"
MODEL_FILE = "spm.model"
VOCAB_FILE = "spm.vocab"
OWNED_FILES = (MODEL_FILE, VOCAB_FILE, META_FILE)
FORMAT = "mlsys-sentencepiece-1"
HF_FILE = "tokenizer.json"
HF_CONFIG = "tokenizer_config.json"
HF_FILES = (HF_FILE, HF_CONFIG, "special_tokens_map.json")  # copied unchanged into exports
HF_FORMAT = "hf-tokenizer-json"


def meta_path(tokenizer_dir: str | os.PathLike[str]) -> str:
    """``<tokenizer_dir>/tokenizer_meta.json``."""
    return os.path.join(tokenizer_dir, META_FILE)


def read_meta(tokenizer_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of the tokenizer in ``tokenizer_dir`` (data_prep's, or derived from a
    Hugging Face ``tokenizer.json``). Raises ``FileNotFoundError`` when there is neither (not a
    tokenizer, or not finished) and ``ValueError`` naming the file when it is not valid JSON
    or a Hugging Face tokenizer lacks what training needs."""
    if not os.path.exists(meta_path(tokenizer_dir)) and \
            os.path.exists(os.path.join(tokenizer_dir, HF_FILE)):
        return hf_meta(tokenizer_dir)
    with open(meta_path(tokenizer_dir), encoding="utf-8") as f:
        return json.load(f)


def is_hf(meta: dict[str, Any]) -> bool:
    """True for a Hugging Face ``tokenizer.json`` directory's metadata."""
    return meta.get("format") == HF_FORMAT


def _load_json(path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}:{err.lineno}:{err.colno}: not valid JSON: {err.msg}") from None


def _token_text(value: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or ``{"content": ...}``."""
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def hf_meta(tokenizer_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of a Hugging Face tokenizer directory (module docstring)."""
    path = os.path.join(tokenizer_dir, HF_FILE)
    data = _load_json(path)
    vocab = (data.get("model") or {}).get("vocab")
    if isinstance(vocab, list):  # Unigram: [[piece, score], ...], the id is the position
        try:
            vocab = {piece: i for i, (piece, _) in enumerate(vocab)}
        except (TypeError, ValueError):
            raise ValueError(f"{path}: model.vocab is not a list of [piece, score]") from None
    if not isinstance(vocab, dict) or not vocab:
        raise ValueError(f"{path}: no model vocabulary (model.vocab)")
    try:
        ids = {str(piece): int(i) for piece, i in vocab.items()}
        ids.update({t["content"]: int(t["id"]) for t in data.get("added_tokens") or []})
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{path}: a vocabulary entry or added token is malformed ({err!r})"
                         ) from None
    config_path = os.path.join(tokenizer_dir, HF_CONFIG)
    config = _load_json(config_path) if os.path.exists(config_path) else {}
    map_path = os.path.join(tokenizer_dir, HF_FILES[2])  # older directories name them here
    special = _load_json(map_path) if os.path.exists(map_path) else {}
    named = {name: _token_text(config.get(f"{name}_token", special.get(f"{name}_token")))
             for name in ("eos", "bos", "pad", "unk")}
    found = {name: None if text is None else ids.get(text) for name, text in named.items()}
    for name, text in named.items():
        if text is not None and found[name] is None:
            raise ValueError(f"{config_path}: {name}_token {text!r} is not in {path}")
    if found["eos"] is None:
        raise ValueError(f"{config_path}: no eos_token (documents end in it; a tokenizer "
                         f"directory needs {HF_CONFIG} or {HF_FILES[2]} naming one)")
    return {"format": HF_FORMAT, "model_file": HF_FILE, "model_sha256": sha256_file(path),
            "vocab_size": max(ids.values()) + 1,
            "ids": {"eod": found["eos"], "eos": found["eos"], "bos": found["bos"],
                    "pad": found["eos"] if found["pad"] is None else found["pad"],
                    "unk": found["unk"]}}


def write_meta(tokenizer_dir: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Write the metadata atomically (``mlsys.atomic``); the model files must be in place."""
    write_manifest(meta_path(tokenizer_dir), meta)
