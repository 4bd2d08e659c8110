"""A tokenizer directory's files and its metadata (``tokenizer_meta.json``).

``python -m data_prep tokenizer`` writes ``spm.model`` (the sentencepiece model), ``spm.vocab``
(one ``repr(piece)<TAB>score`` line per id) and ``tokenizer_meta.json`` (``OWNED_FILES``) into
a directory, the metadata last: a directory is a complete tokenizer when its metadata is there.
Other files in the directory are never the tokenizer's.

The metadata (``FORMAT``): ``format``, ``model_file`` (``MODEL_FILE``), ``model_sha256``,
``vocab_size``, ``model_type``, ``normalization``, ``byte_fallback``, ``word_start`` (``"▁"``),
``ids`` (``pad``, ``unk``, ``eos``, ``eod``, ``bos``, ``cls``, ``sep``, ``mask``, ``newline``),
the training inputs and problems; ``prepare_default`` adds what it was made from.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mlsys.data.manifest import write_manifest

META_FILE = "tokenizer_meta.json"
MODEL_FILE = "spm.model"
VOCAB_FILE = "spm.vocab"
OWNED_FILES = (MODEL_FILE, VOCAB_FILE, META_FILE)
FORMAT = "mlsys-sentencepiece-1"


def meta_path(tokenizer_dir: str | os.PathLike[str]) -> str:
    """``<tokenizer_dir>/tokenizer_meta.json``."""
    return os.path.join(tokenizer_dir, META_FILE)


def read_meta(tokenizer_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """The metadata of the tokenizer in ``tokenizer_dir``. Raises ``FileNotFoundError`` when
    there is none (not a tokenizer data_prep wrote, or not finished) and ``ValueError`` when
    it is not valid JSON."""
    with open(meta_path(tokenizer_dir), encoding="utf-8") as f:
        return json.load(f)


def write_meta(tokenizer_dir: str | os.PathLike[str], meta: dict[str, Any]) -> None:
    """Write the metadata atomically (``mlsys.atomic``); the model files must be in place."""
    write_manifest(meta_path(tokenizer_dir), meta)
