"""What data_prep may replace: only its own outputs, and only when asked.

A tokenizer directory is data_prep's when it holds ``tokenizer_meta.json`` of its format; a
shard prefix is data_prep's when ``PREFIX.manifest.json`` of its format is there. Anything
else under an output name (another tool's ``spm.model``, shards written by Megatron-LM) is
never overwritten; an output of data_prep's own is replaced only with ``overwrite``. Other
files in an output directory (the input corpus, say) are never touched either way.
"""

from __future__ import annotations

import json
import os

from mlsys.data.manifest import FORMAT_FAMILY


class OutputExists(ValueError):
    """An output name is taken (by data_prep's own earlier output, or by something else)."""


def _format_of(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("format")
    except (OSError, ValueError, AttributeError):
        return None


def check_tokenizer_out(out_dir: str, owned: tuple[str, ...], meta_file: str,
                        overwrite: bool) -> None:
    """Raise OutputExists unless writing ``owned`` files into ``out_dir`` is allowed."""
    taken = [n for n in owned if os.path.lexists(os.path.join(out_dir, n))]
    if not taken:
        return
    ours = (_format_of(os.path.join(out_dir, meta_file)) or "").startswith(FORMAT_FAMILY)
    if not ours:
        raise OutputExists(f"{out_dir}: holds {', '.join(taken)} not written by data_prep "
                           "(no tokenizer_meta.json of its format); refusing to overwrite. "
                           "Choose another --out")
    if not overwrite:
        raise OutputExists(f"{out_dir}: holds a tokenizer already; --overwrite replaces its "
                           f"files ({', '.join(owned)}) and nothing else")


def check_shards_out(prefix: str, manifest: str, overwrite: bool) -> None:
    """Raise OutputExists unless writing ``PREFIX.{bin,idx}`` and the manifest is allowed."""
    taken = [p for p in (f"{prefix}.bin", f"{prefix}.idx", manifest) if os.path.lexists(p)]
    if not taken:
        return
    if not (_format_of(manifest) or "").startswith(FORMAT_FAMILY):
        raise OutputExists(f"{', '.join(taken)}: not written by data_prep (no manifest of its "
                           "format); refusing to overwrite. Choose another --out")
    if not overwrite:
        raise OutputExists(f"{prefix}: shards exist already; --overwrite replaces them")
