"""Megatron-core indexed datasets (``PREFIX.bin``/``.idx``): the format and its completeness.

The ``.idx`` layout is megatron-core's (``megatron.core.datasets.indexed_dataset``):
``b"MMIDIDX\\0\\0"``, ``<Q`` version 1, ``<B`` dtype code, ``<Q`` sequence count, ``<Q`` document
count, int32 sequence lengths, int64 sequence byte offsets, int64 document indices (0, then the
cumulative sequence count at the end of each document). The ``.bin`` holds the token ids, all
sequences concatenated, in the dtype the code names.

A prefix is *complete* when ``PREFIX.manifest.json`` (``mlsys.data.manifest``; written last by
``mlsys.data.indexed_writer``) exists, its ``bin_bytes``/``idx_bytes`` match the files, and the
``.idx`` describes exactly the bytes of the ``.bin`` (:func:`index_problem`); with
``checksums=True`` also its ``bin_sha256``/``idx_sha256``. :func:`check_complete` returns that
manifest or raises ``IncompleteDataset`` naming the file, so an interrupted writer leaves
nothing that passes for a dataset. Shards another tool wrote (no manifest) are never complete.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

from mlsys.data.manifest import IncompleteDataset, manifest_path, sha256_file

__all__ = ["DTYPE_CODES", "FORMAT", "INDEX_HEADER", "IncompleteDataset", "check_complete",
           "index_problem", "token_dtype"]

FORMAT = "mlsys-shards-1"  # the manifest's ``format``
INDEX_HEADER = b"MMIDIDX\x00\x00"
DTYPE_CODES = {np.dtype(t): c for t, c in [
    (np.uint8, 1), (np.int8, 2), (np.int16, 3), (np.int32, 4), (np.int64, 5),
    (np.float64, 6), (np.float32, 7), (np.uint16, 8)]}
HEADER_BYTES = len(INDEX_HEADER) + 8 + 1 + 8 + 8  # magic, version, dtype code, two counts


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest dtype megatron uses for token ids of this vocabulary (uint16 below 65500)."""
    return np.dtype(np.uint16 if vocab_size < 65500 else np.int32)


def index_problem(prefix: str) -> str | None:
    """What is wrong between ``PREFIX.idx`` and ``PREFIX.bin`` (naming the file), or None:
    the header, and the byte range the last sequence's pointer and length claim against the
    ``.bin``'s size. Reads the header and two numbers, whatever the dataset's size."""
    idx, bin_ = f"{prefix}.idx", f"{prefix}.bin"
    try:
        with open(idx, "rb") as f:
            head = f.read(HEADER_BYTES)
            if len(head) < HEADER_BYTES or not head.startswith(INDEX_HEADER):
                return f"{idx}: not a megatron-core index (bad header)"
            code = head[len(INDEX_HEADER) + 8]
            n_seq, n_docs = struct.unpack("<QQ", head[len(INDEX_HEADER) + 9:])
            dtype = next((t for t, c in DTYPE_CODES.items() if c == code), None)
            if dtype is None:
                return f"{idx}: unknown token dtype code {code}"
            want = len(head) + n_seq * (4 + 8) + n_docs * 8
            have = os.path.getsize(idx)
            if have != want:
                return f"{idx}: {have} bytes, its header ({n_seq} sequences) needs {want}"
            if n_seq == 0:
                end = 0
            else:
                f.seek(len(head) + (n_seq - 1) * 4)
                (last_len,) = struct.unpack("<i", f.read(4))
                f.seek(len(head) + n_seq * 4 + (n_seq - 1) * 8)
                (last_ptr,) = struct.unpack("<q", f.read(8))
                end = last_ptr + last_len * dtype.itemsize
    except OSError as err:
        return f"{idx}: cannot read: {err.strerror}"
    size = os.path.getsize(bin_) if os.path.exists(bin_) else None
    if size != end:
        return f"{bin_}: {size} bytes, but {idx} indexes {end}"
    return None


def check_complete(prefix: str, checksums: bool = False) -> dict:
    """Return the manifest of a complete dataset, or raise IncompleteDataset saying why
    (naming the file): manifest present and readable, sizes as it records, the index
    consistent with the tokens (:func:`index_problem`), and with ``checksums`` the SHA-256 of
    both files (manifests without hashes, from before they were recorded, pass that check)."""
    mpath = manifest_path(prefix)
    if not os.path.exists(mpath):
        raise IncompleteDataset(f"{prefix}: no manifest {mpath} (not written, or interrupted)")
    try:
        with open(mpath, encoding="utf-8") as f:
            manifest = json.load(f)
    except ValueError:
        raise IncompleteDataset(f"{mpath}: not valid JSON") from None
    for ext in ("bin", "idx"):
        path = f"{prefix}.{ext}"
        want = manifest.get(f"{ext}_bytes")
        have = os.path.getsize(path) if os.path.exists(path) else None
        if have != want:
            raise IncompleteDataset(f"{path}: {have} bytes, manifest says {want}")
    problem = index_problem(prefix)
    if problem is not None:
        raise IncompleteDataset(problem)
    if checksums:
        for ext in ("bin", "idx"):
            want = manifest.get(f"{ext}_sha256")
            if want is not None and sha256_file(f"{prefix}.{ext}") != want:
                raise IncompleteDataset(f"{prefix}.{ext}: contents differ from {mpath} (sha256)")
    return manifest
