"""Write a megatron-core indexed dataset (``mlsys.data.indexed``) as a stream, atomically.

Megatron's own builder keeps the sequence lengths in Python lists; here they are spooled to
temp files, so memory stays bounded by one chunk whatever the input size. The bytes are
identical to megatron's builder (a test checks).

Contract: every file is written under its ``mlsys.atomic`` temp name (``.PREFIX.tmp-<host>-<pid>
.bin`` and ``.idx``, plus two spool files), stale temps of dead writers in the directory are
removed first. ``commit`` removes an old manifest (from then on the old dataset no longer looks
complete), publishes ``.idx`` then ``.bin`` (fsync'd, renamed, directory fsync'd) and writes
``PREFIX.manifest.json`` last, with the caller's fields plus counts, dtype, and the size and
SHA-256 of both files. Leaving the ``with`` block without ``commit`` (an exception, a signal)
removes every temp and leaves an earlier complete dataset at ``PREFIX`` untouched.
"""

from __future__ import annotations

import os
import shutil
import struct
from typing import Any

import numpy as np

from mlsys.atomic import publish, remove_stale_temps, temp_path
from mlsys.data.indexed import DTYPE_CODES, INDEX_HEADER
from mlsys.data.manifest import manifest_path, sha256_file, write_manifest

SPOOL_ROWS = 1 << 20


class IndexedWriter:
    """Append chunks of tokenized documents; ``commit`` publishes them, ``abort`` removes all.

    Use as a context manager: leaving the block by an exception aborts.
    """

    def __init__(self, prefix: str, dtype: np.dtype | type):
        self.prefix = prefix
        self.dtype = np.dtype(dtype)
        self.tmp = {ext: str(temp_path(f"{prefix}.{ext}"))
                    for ext in ("bin", "idx", "lens", "docs")}
        directory = os.path.dirname(os.path.abspath(prefix))
        os.makedirs(directory, exist_ok=True)
        remove_stale_temps(directory)
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

    def commit(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Finish the index, publish ``.idx`` and ``.bin``, write the manifest last; return
        the manifest (``manifest`` plus counts, dtype, sizes and SHA-256s)."""
        self._write_index()
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
        publish(self.tmp["idx"], self.prefix + ".idx")
        publish(self.tmp["bin"], self.prefix + ".bin")
        write_manifest(mpath, manifest)
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
        """Remove every temp file; outputs of an earlier complete run stay untouched."""
        self._cleanup()

    def __enter__(self) -> IndexedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if not self.committed:
            self.abort()
