"""Tokenize documents in parallel worker processes into a megatron-core indexed dataset.

The main process streams records (:mod:`data_prep.inputs`), groups them into chunks and hands
them to a pool of ``workers`` processes, at most ``2 * workers + 1`` chunks in flight (so memory
stays bounded whatever the input size). Workers validate, optionally split sentences, and encode;
the main process writes the results *in submission order*, so any number of workers yields the
same bytes. ``workers=0`` tokenizes in the main process.

Sequences: one per document, or one per sentence with ``split_sentences`` (BERT); documents keep
their boundaries in the index. ``append_eod`` ends each document with the eod id (GPT).

The tokenizer is data_prep's sentencepiece model or a Hugging Face fast tokenizer
(``tokenizer.json``, through the ``tokenizers`` library: each chunk encoded as one batch
without special tokens, one thread per worker process; its eos token is the eod).
"""

from __future__ import annotations

import multiprocessing as mp
import os
from collections import deque
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from data_prep.inputs import (
    Problem,
    ProblemLog,
    Record,
    expand_inputs,
    iter_documents,
    parse_record,
)
from data_prep.outputs import check_shards_out
from data_prep.sentences import split_sentences
from mlsys.data.indexed import FORMAT, token_dtype
from mlsys.data.indexed_writer import IndexedWriter
from mlsys.data.manifest import manifest_path, sha256_file
from mlsys.data.tokenizer_meta import HF_FILE, read_meta

CHUNK_DOCS = 64
CHUNK_BYTES = 1 << 20


@dataclass
class ChunkResult:
    tokens: np.ndarray
    seq_lengths: np.ndarray
    doc_seqs: np.ndarray
    problems: list[Problem] = field(default_factory=list)


_state: dict = {}


def _init_worker(model_path: str, eod: int, split: bool, append_eod: bool, json_key: str,
                 dtype: str, pool: bool = True) -> None:
    if pool:  # a worker process: the processes are the parallelism, one thread each
        os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _state.update(encode=_encoder(model_path), eod=eod, split=split,
                  append_eod=append_eod, json_key=json_key, dtype=np.dtype(dtype))


def _encoder(model_path: str):
    """texts -> token ids, for a sentencepiece model or a Hugging Face ``tokenizer.json``."""
    if os.path.basename(model_path) == HF_FILE:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(model_path)
        return lambda texts: [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=model_path)
    return lambda texts: sp.encode(texts, num_threads=1)


def _encode_chunk(records: list[Record]) -> ChunkResult:
    """Validate and encode one chunk (runs in a worker, state from ``_init_worker``)."""
    split, key = _state["split"], _state["json_key"]
    problems, docs = [], []
    for rec in records:
        text = parse_record(rec, key)
        if isinstance(text, Problem):
            problems.append(text)
            continue
        pieces = split_sentences(text) if split else [text]
        if not pieces:
            problems.append(Problem("empty_document", rec.file, rec.line, "no sentences"))
            continue
        docs.append(pieces)
    flat = [p for d in docs for p in d]
    encoded = _state["encode"](flat) if flat else []
    if _state["append_eod"]:
        i = 0
        for d in docs:
            i += len(d)
            encoded[i - 1] = encoded[i - 1] + [_state["eod"]]
    seq_lengths = np.fromiter((len(e) for e in encoded), dtype=np.int32, count=len(encoded))
    tokens = np.fromiter(chain.from_iterable(encoded), dtype=_state["dtype"],
                         count=int(seq_lengths.sum()))
    return ChunkResult(tokens, seq_lengths, np.array([len(d) for d in docs], dtype=np.int64),
                       problems)


def _chunks(records, chunk_docs: int, chunk_bytes: int):
    chunk, size = [], 0
    for rec in records:
        chunk.append(rec)
        size += len(rec.raw) if isinstance(rec.raw, bytes | str) else 0
        if len(chunk) >= chunk_docs or size >= chunk_bytes:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def build_shards(inputs: list[str], tokenizer_dir: str, out_prefix: str, workers: int = 2,
                 split_sentences: bool = False, json_key: str = "text", append_eod: bool = False,
                 strict: bool = False, progress: bool = True, overwrite: bool = True) -> dict:
    """Tokenize ``inputs`` into ``out_prefix.{bin,idx}`` plus ``out_prefix.manifest.json``.

    Bad records are skipped, counted and reported with file and line (``strict``: the first one
    raises :class:`data_prep.inputs.BadInput` and nothing is written). Raises ValueError when no
    valid document remains. Returns the manifest. ``overwrite=False`` refuses existing shards
    of data_prep's at ``out_prefix`` (the CLI's default); files not written by data_prep are
    refused either way, before anything is read.
    """
    check_shards_out(out_prefix, manifest_path(out_prefix), overwrite)
    paths = expand_inputs(inputs)
    meta = read_meta(tokenizer_dir)
    model_path = os.path.join(tokenizer_dir, meta["model_file"])
    dtype = token_dtype(meta["vocab_size"])
    init_args = (model_path, meta["ids"]["eod"], split_sentences, append_eod, json_key, dtype.str)
    log = ProblemLog(strict=strict)
    records = iter_documents(paths, json_key, log)
    bar = _progress(progress)
    with IndexedWriter(out_prefix, dtype) as writer:
        def consume(result: ChunkResult) -> None:
            for p in result.problems:
                log.add(p)
            writer.add_chunk(result.tokens, result.seq_lengths, result.doc_seqs)
            bar(len(result.tokens))

        if workers <= 0:
            _init_worker(*init_args, pool=False)
            for chunk in _chunks(records, CHUNK_DOCS, CHUNK_BYTES):
                consume(_encode_chunk(chunk))
        else:
            ctx = mp.get_context("spawn")
            with ctx.Pool(workers, initializer=_init_worker, initargs=init_args) as pool:
                pending: deque = deque()
                for chunk in _chunks(records, CHUNK_DOCS, CHUNK_BYTES):
                    pending.append(pool.apply_async(_encode_chunk, (chunk,)))
                    if len(pending) > 2 * workers:
                        consume(pending.popleft().get())
                while pending:
                    consume(pending.popleft().get())
        if writer.num_documents == 0:
            log.report()
            raise ValueError(f"no valid document in {paths}; nothing written")
        manifest = writer.commit({
            "format": FORMAT,
            "inputs": [{"path": p, "bytes": os.path.getsize(p)} for p in paths],
            "tokenizer_dir": os.path.abspath(tokenizer_dir),
            "tokenizer_sha256": sha256_file(model_path),
            "vocab_size": meta["vocab_size"],
            "split_sentences": split_sentences, "append_eod": append_eod, "json_key": json_key,
            "problems": log.to_dict(),
        })
    bar(None)
    log.report()
    return manifest


def _progress(enabled: bool):
    """A callable taking token counts (None closes it): a tqdm bar on stderr."""
    if not enabled:
        return lambda n: None
    from tqdm import tqdm

    bar = tqdm(unit="tok", unit_scale=True, desc="tokenize", mininterval=1.0, leave=False)

    def update(n):
        if n is None:
            bar.close()
        else:
            bar.update(n)
    return update
