"""A prepared data set's manifest: the JSON file written last, whose presence marks it complete.

Every output of ``python -m data_prep`` (indexed shards, image shards, a tokenizer's metadata,
a corpus's ``corpus.json``) is published by writing its data files first and its manifest last,
each through ``mlsys.atomic``; a writer that replaces a data set removes the old manifest before
the first new file is renamed into place. So a reader that finds a manifest whose records
(sizes, SHA-256s) match the files holds a whole data set, and one that finds none knows the set
is not (or not yet) there.

Manifests are JSON with two-space indents, sorted keys and a final newline (``write_manifest``),
so two builds of the same data give the same bytes. Every format data_prep writes is named
``mlsys-<what>-<version>`` (``FORMAT_FAMILY``): a manifest whose ``format`` starts with it was
written by data_prep, anything else (Megatron-LM's own shards, another tool's tokenizer) was not.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from mlsys.atomic import write_text

FORMAT_FAMILY = "mlsys-"


class IncompleteDataset(ValueError):
    """The data set has no manifest, or its files do not match it (the message names the file)."""


def manifest_path(prefix: str) -> str:
    """``PREFIX.manifest.json``: the manifest of the data set at ``prefix``."""
    return prefix + ".manifest.json"


def sha256_file(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


def manifest_text(data: dict[str, Any]) -> str:
    """The bytes (as text) of a manifest holding ``data``."""
    return json.dumps(data, indent=2, sort_keys=True) + "\n"


def write_manifest(path: str | os.PathLike[str], data: dict[str, Any]) -> None:
    """Write ``data`` to ``path`` as a manifest, atomically and durably (``mlsys.atomic``)."""
    write_text(path, manifest_text(data))
