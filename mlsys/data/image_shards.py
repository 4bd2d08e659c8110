"""Image shards (``python -m data_prep images``): the layout and its completeness check.

Layout of ``PREFIX``: ``PREFIX-00000.images.npy`` (uint8, N×S×S×3), ``PREFIX-00000.labels.npy``
(int64, N), … and ``PREFIX.manifest.json`` (``mlsys.data.manifest``), written last, holding
``format`` (``FORMAT``), ``shards`` (a list of ``{"images", "labels", "count"}``, file names
relative to PREFIX's directory), ``num_images``, ``image_size``, ``channels``, ``num_classes``,
``classes``, the per-channel ``mean``/``std`` of the data in [0, 1], ``hflip`` (whether a
horizontal flip keeps the label), ``source`` and ``problems``. A writer removes an old manifest
before its first shard is renamed into place, so a prefix is complete exactly when
:func:`check_images_complete` accepts it.
"""

from __future__ import annotations

import json
import os
from typing import Any

from mlsys.data.manifest import IncompleteDataset, manifest_path

FORMAT = "mlsys-images-1"


def shard_stem(prefix: str, index: int) -> str:
    """``PREFIX-NNNNN``: shard ``index``'s files are this plus ``.images.npy``/``.labels.npy``."""
    return f"{prefix}-{index:05d}"


def check_images_complete(prefix: str) -> dict[str, Any]:
    """The manifest of a complete image dataset; IncompleteDataset (naming the file) if the
    manifest is missing, unreadable or of another format, or a shard file is missing."""
    try:
        with open(manifest_path(prefix), encoding="utf-8") as f:
            manifest = json.load(f)
    except (OSError, ValueError) as e:
        raise IncompleteDataset(f"{prefix}: no image dataset manifest ({e})") from None
    if manifest.get("format") != FORMAT:
        raise IncompleteDataset(f"{manifest_path(prefix)}: format is not {FORMAT!r}")
    base = os.path.dirname(prefix)
    for shard in manifest["shards"]:
        for key in ("images", "labels"):
            if not os.path.exists(os.path.join(base, shard[key])):
                raise IncompleteDataset(f"{prefix}: shard file {shard[key]} is missing")
    return manifest
