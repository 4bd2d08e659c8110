"""Megatron-core indexed datasets (``PREFIX.bin``/``.idx``), written as a stream, atomically.

The ``.idx`` layout is megatron-core's (``megatron.core.datasets.indexed_dataset``):
``b"MMIDIDX\\0\\0"``, ``<Q`` version 1, ``<B`` dtype code, ``<Q`` sequence count, ``<Q`` document
count, int32 sequence lengths, int64 sequence byte offsets, int64 document indices (0, then the
cumulative sequence count at the end of each document). Megatron's own builder keeps the lengths in
Python lists; here they are spooled to temporary files, so memory stays bounded by one chunk
whatever the input size. The bytes are identical to megatron's builder (a test checks).

Atomicity: everything is written as ``PREFIX.<ext>.tmp-<host>-<pid>`` and fsync'd. ``commit``
removes an old manifest, renames ``.idx`` and ``.bin`` into place and writes
``PREFIX.manifest.json`` last, with the size and SHA-256 of both files. A prefix counts as
complete only when its manifest exists, matches the sizes of ``.bin`` and ``.idx``, and the
``.idx`` describes exactly the bytes of the ``.bin`` (:func:`check_complete`; with
``checksums=True`` also the hashes), so an interrupted run leaves nothing that passes for a
dataset.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct

import numpy as np

from data_prep.stale import remove_stale_temps, temp_name

INDEX_HEADER = b"MMIDIDX\x00\x00"
DTYPE_CODES = {np.dtype(t): c for t, c in [
    (np.uint8, 1), (np.int8, 2), (np.int16, 3), (np.int32, 4), (np.int64, 5),
    (np.float64, 6), (np.float32, 7), (np.uint16, 8)]}
SPOOL_ROWS = 1 << 20


class IncompleteDataset(ValueError):
    """The prefix has no manifest, or its files do not match it."""


def token_dtype(vocab_size: int) -> np.dtype:
    """Smallest dtype megatron uses for token ids of this vocabulary (uint16 below 65500)."""
    return np.dtype(np.uint16 if vocab_size < 65500 else np.int32)


def manifest_path(prefix: str) -> str:
    return prefix + ".manifest.json"


def write_json_atomic(path: str, obj: dict) -> None:
    """Write JSON under a temporary name, fsync, then rename into place."""
    tmp = temp_name(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=2, sort_keys=True)
            f.write("\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    fsync_dir(os.path.dirname(os.path.abspath(path)))


def fsync_dir(directory: str) -> None:
    """fsync a directory's entries (after a rename into it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            h.update(block)
    return h.hexdigest()


class IndexedWriter:
    """Append chunks of tokenized documents; ``commit`` publishes them, ``abort`` removes all.

    Use as a context manager: leaving the block by an exception aborts.
    """

    def __init__(self, prefix: str, dtype: np.dtype):
        self.prefix = prefix
        self.dtype = np.dtype(dtype)
        self.tmp = {ext: temp_name(f"{prefix}.{ext}") for ext in ("bin", "idx", "lens", "docs")}
        os.makedirs(os.path.dirname(os.path.abspath(prefix)), exist_ok=True)
        remove_stale_temps(os.path.dirname(os.path.abspath(prefix)))
        self._bin = open(self.tmp["bin"], "wb")
        self._lens = open(self.tmp["lens"], "wb")
        self._docs = open(self.tmp["docs"], "wb")
        self.num_sequences = 0
        self.num_documents = 0
        self.num_tokens = 0
        self.committed = False

    def add_chunk(self, tokens: np.ndarray, seq_lengths: np.ndarray, doc_seqs: np.ndarray) -> None:
        """``tokens``: all ids of the chunk, concatenated; ``seq_lengths``: tokens per sequence
        (sentence, or whole document); ``doc_seqs``: sequences per document."""
        seq_lengths = np.asarray(seq_lengths, dtype=np.int32)
        doc_seqs = np.asarray(doc_seqs, dtype=np.int64)
        if int(seq_lengths.sum()) != len(tokens) or int(doc_seqs.sum()) != len(seq_lengths):
            raise ValueError("chunk lengths do not add up")
        self._bin.write(np.ascontiguousarray(tokens, dtype=self.dtype).data)
        self._lens.write(seq_lengths.tobytes())
        self._docs.write((self.num_sequences + np.cumsum(doc_seqs)).astype(np.int64).tobytes())
        self.num_sequences += len(seq_lengths)
        self.num_documents += len(doc_seqs)
        self.num_tokens += len(tokens)

    def _write_index(self) -> None:
        for f in (self._bin, self._lens, self._docs):
            f.close()
        itemsize = self.dtype.itemsize
        with open(self.tmp["idx"], "wb") as out:
            out.write(INDEX_HEADER)
            out.write(struct.pack("<Q", 1))
            out.write(struct.pack("<B", DTYPE_CODES[self.dtype]))
            out.write(struct.pack("<Q", self.num_sequences))
            out.write(struct.pack("<Q", self.num_documents + 1))
            with open(self.tmp["lens"], "rb") as f:
                shutil.copyfileobj(f, out)
            offset = 0
            with open(self.tmp["lens"], "rb") as f:
                while block := f.read(SPOOL_ROWS * 4):
                    lens = np.frombuffer(block, dtype=np.int32).astype(np.int64) * itemsize
                    ends = offset + np.cumsum(lens)
                    out.write((ends - lens).tobytes())
                    offset = int(ends[-1])
            out.write(np.zeros(1, dtype=np.int64).tobytes())
            with open(self.tmp["docs"], "rb") as f:
                shutil.copyfileobj(f, out)
            out.flush()
            os.fsync(out.fileno())

    def commit(self, manifest: dict) -> dict:
        """Finish the index, rename into place, write the manifest last; return the manifest."""
        self._write_index()
        with open(self.tmp["bin"], "rb+") as f:
            os.fsync(f.fileno())
        manifest = dict(manifest)
        manifest.update(
            num_documents=self.num_documents, num_sequences=self.num_sequences,
            num_tokens=self.num_tokens, dtype=self.dtype.name,
            bin_bytes=os.path.getsize(self.tmp["bin"]), idx_bytes=os.path.getsize(self.tmp["idx"]),
            bin_sha256=sha256_file(self.tmp["bin"]), idx_sha256=sha256_file(self.tmp["idx"]),
        )
        mpath = manifest_path(self.prefix)
        if os.path.exists(mpath):
            os.remove(mpath)  # from here on the old dataset no longer looks complete
        os.replace(self.tmp["idx"], self.prefix + ".idx")
        os.replace(self.tmp["bin"], self.prefix + ".bin")
        write_json_atomic(mpath, manifest)
        self.committed = True
        self._cleanup()
        return manifest

    def _cleanup(self) -> None:
        for f in (self._bin, self._lens, self._docs):
            f.close()
        for path in self.tmp.values():
            if os.path.exists(path):
                os.remove(path)

    def abort(self) -> None:
        """Remove every temporary file; outputs of an earlier complete run stay untouched."""
        self._cleanup()

    def __enter__(self) -> IndexedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.committed:
            self.abort()


def index_problem(prefix: str) -> str | None:
    """What is wrong between ``PREFIX.idx`` and ``PREFIX.bin`` (naming the file), or None:
    the header, and the byte range the last sequence's pointer and length claim against the
    ``.bin``'s size. Reads the header and two numbers, whatever the dataset's size."""
    idx, bin_ = f"{prefix}.idx", f"{prefix}.bin"
    try:
        with open(idx, "rb") as f:
            head = f.read(len(INDEX_HEADER) + 8 + 1 + 8 + 8)
            if len(head) < len(INDEX_HEADER) + 25 or not head.startswith(INDEX_HEADER):
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
