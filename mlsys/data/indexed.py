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

*Foreign* shards (``.bin``/``.idx`` with no manifest, as megatron-core's own
``IndexedDatasetBuilder`` writes them) are read by :func:`read_shards`: their index is checked
against the ``.bin`` (:func:`index_problem`) and a summary of the index stands in for the
manifest (``foreign: True``); :func:`max_token_id` scans their tokens (the tokenizer that made
them cannot be verified, so the ids are checked against the vocabulary instead). An
interrupted replacement by ``data_prep`` (manifest removed, new files published) looks the same,
which is why both checks run.
"""

from __future__ import annotations

import json
import os
import struct
import sys

import numpy as np

from mlsys.data.manifest import IncompleteDataset, manifest_path, sha256_file

__all__ = ["DTYPE_CODES", "FORMAT", "INDEX_HEADER", "IncompleteDataset", "check_complete",
           "foreign_summary", "index_problem", "max_token_id", "read_shards", "token_dtype",
           "warn_foreign"]

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


def _index_header(prefix: str) -> tuple[np.dtype, int, int]:
    with open(f"{prefix}.idx", "rb") as f:
        head = f.read(HEADER_BYTES)
    code = head[len(INDEX_HEADER) + 8]
    n_seq, n_docs = struct.unpack("<QQ", head[len(INDEX_HEADER) + 9:])
    return next(t for t, c in DTYPE_CODES.items() if c == code), n_seq, n_docs


def foreign_summary(prefix: str) -> dict:
    """What the index of shards without a manifest says, in the manifest's keys (plus
    ``foreign: True``); IncompleteDataset (naming the file) when the index and the ``.bin``
    disagree. ``split_sentences`` is True when some document holds more than one sequence."""
    problem = index_problem(prefix)
    if problem is not None:
        raise IncompleteDataset(problem)
    dtype, n_seq, n_docs = _index_header(prefix)
    bin_bytes = os.path.getsize(f"{prefix}.bin")
    num_documents = max(n_docs - 1, 0)  # document indices start with 0
    return {"foreign": True, "format": None, "tokenizer_sha256": None, "dtype": dtype.name,
            "num_sequences": n_seq, "num_documents": num_documents,
            "num_tokens": bin_bytes // dtype.itemsize, "bin_bytes": bin_bytes,
            "idx_bytes": os.path.getsize(f"{prefix}.idx"),
            "split_sentences": n_seq > num_documents}


def read_shards(prefix: str, checksums: bool = False) -> dict:
    """:func:`check_complete`'s manifest for shards of ours; for ``.bin`` + ``.idx`` without
    a manifest, :func:`foreign_summary`; IncompleteDataset otherwise (no manifest and a file
    missing: the message of :func:`check_complete`)."""
    if not os.path.exists(manifest_path(prefix)) and all(
            os.path.isfile(f"{prefix}.{ext}") for ext in ("bin", "idx")):
        return foreign_summary(prefix)
    return check_complete(prefix, checksums=checksums)


_max_ids: dict[tuple, int] = {}


def max_token_id(prefix: str) -> int:
    """The largest token id in ``PREFIX.bin`` (-1 if it holds none): numpy's max over the
    memory-mapped file, so it reads every byte once (remembered per process for the same
    file size and modification time)."""
    dtype = _index_header(prefix)[0]
    st = os.stat(f"{prefix}.bin")
    key = (os.path.abspath(prefix), st.st_size, st.st_mtime_ns)
    if key not in _max_ids:
        if st.st_size < dtype.itemsize:
            _max_ids[key] = -1
        else:
            tokens = np.memmap(f"{prefix}.bin", dtype=dtype, mode="r")
            _max_ids[key] = int(tokens.max())
            del tokens
    return _max_ids[key]


_warned: set[str] = set()


def warn_foreign(prefix: str, tokenizer_dir: str) -> None:
    """Say once per process (on stderr) that shards without a manifest cannot be verified
    against the tokenizer."""
    if prefix in _warned:
        return
    _warned.add(prefix)
    print(f"warning: data.data_prefix {prefix}: no manifest of data_prep's (shards another "
          f"tool wrote, e.g. megatron-core's IndexedDatasetBuilder); the tokenizer "
          f"{tokenizer_dir} cannot be verified against them: only the index against the .bin "
          "and the token ids against the vocabulary are checked", file=sys.stderr, flush=True)
