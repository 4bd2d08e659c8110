"""Train a sentencepiece tokenizer with the special tokens BERT and GPT need.

Fixed ids (the runtime adapter ``mlsys.data.SentencePieceTokenizer`` reads them from the JSON):
``<pad>`` 0, ``<unk>`` 1, ``</s>`` 2 (eos = eod), ``<s>`` 3, control symbols ``[CLS]`` 4,
``[SEP]`` 5, ``[MASK]`` 6 (never produced from text), and ``"\\n"`` 7 (a user symbol, so code keeps
its lines). Byte fallback is on (no ``<unk>`` for any UTF-8 text), normalisation is ``identity``
and extra whitespace is kept, so ``decode(encode(text)) == text`` exactly. Sentencepiece marks a
word start with ``▁``; the adapter uses that for whole-word masking.

Output directory: the files of ``mlsys.data.tokenizer_meta`` (``spm.model``, ``spm.vocab``,
``tokenizer_meta.json``), each written through ``mlsys.atomic`` (temp name, fsync, rename), the
metadata last: a directory is a complete tokenizer when its metadata is there. Other files in
the directory are never touched; an existing tokenizer there is replaced only with
``overwrite``, another tool's files never (``data_prep.outputs``).
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator

from data_prep.inputs import Problem, ProblemLog, expand_inputs, iter_documents, parse_record
from data_prep.outputs import check_tokenizer_out
from mlsys.atomic import atomic_path, remove_stale_temps
from mlsys.data.manifest import sha256_file
from mlsys.data.tokenizer_meta import (
    FORMAT,
    META_FILE,
    MODEL_FILE,
    OWNED_FILES,
    VOCAB_FILE,
    meta_path,
    write_meta,
)

SPECIAL_IDS = {"pad": 0, "unk": 1, "eos": 2, "eod": 2, "bos": 3, "cls": 4, "sep": 5, "mask": 6,
               "newline": 7}
CONTROL_SYMBOLS = ["[CLS]", "[SEP]", "[MASK]"]
USER_SYMBOLS = ["\n"]
MAX_SENTENCE_BYTES = 16384


def _training_lines(paths: list[str], json_key: str, log: ProblemLog,
                    max_sentences: int) -> Iterator[str]:
    """Non-empty lines of every valid document (sentencepiece trains on lines), capped."""
    n = 0
    for rec in iter_documents(paths, json_key, log):
        text = parse_record(rec, json_key)
        if isinstance(text, Problem):
            log.add(text)
            continue
        for line in text.split("\n"):
            if line.strip() and len(line.encode("utf-8")) <= MAX_SENTENCE_BYTES:
                yield line
                n += 1
                if n >= max_sentences:
                    return


def train_tokenizer(inputs: list[str], vocab_size: int, out_dir: str, model_type: str = "bpe",
                    json_key: str = "text", strict: bool = False,
                    max_sentences: int = 2_000_000, threads: int | None = None,
                    overwrite: bool = True) -> dict:
    """Train on the documents of ``inputs`` and write ``out_dir``; return the metadata dict.
    ``overwrite=False`` refuses an existing tokenizer in ``out_dir`` (the CLI's default);
    files not written by data_prep are refused either way, before any training."""
    import sentencepiece as spm

    if model_type not in ("bpe", "unigram"):
        raise ValueError(f"model_type must be bpe or unigram, not {model_type!r}")
    check_tokenizer_out(out_dir, OWNED_FILES, META_FILE, overwrite)
    paths = expand_inputs(inputs)
    log = ProblemLog(strict=strict)
    lines = list(_training_lines(paths, json_key, log, max_sentences))
    if not lines:
        raise ValueError(f"no valid text in {paths}")
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_writer=model, vocab_size=vocab_size,
        model_type=model_type, byte_fallback=True, character_coverage=1.0,
        normalization_rule_name="identity", remove_extra_whitespaces=False,
        allow_whitespace_only_pieces=True, split_digits=True, hard_vocab_limit=False,
        max_sentence_length=MAX_SENTENCE_BYTES, input_sentence_size=0,
        pad_id=0, unk_id=1, eos_id=2, bos_id=3, control_symbols=CONTROL_SYMBOLS,
        user_defined_symbols=USER_SYMBOLS, num_threads=threads or min(os.cpu_count() or 1, 8),
        minloglevel=2,
    )
    sp = spm.SentencePieceProcessor(model_proto=model.getvalue())
    ids = {name: sp.piece_to_id(piece) for name, piece in [
        ("pad", "<pad>"), ("unk", "<unk>"), ("eos", "</s>"), ("eod", "</s>"), ("bos", "<s>"),
        ("cls", "[CLS]"), ("sep", "[SEP]"), ("mask", "[MASK]"), ("newline", "\n")]}
    assert ids == SPECIAL_IDS, ids
    os.makedirs(out_dir, exist_ok=True)
    remove_stale_temps(out_dir)
    check_tokenizer_out(out_dir, OWNED_FILES, META_FILE, overwrite)  # again: training took long
    # both files whole under temp names first; then the old metadata goes (the old tokenizer
    # no longer looks complete), the files are renamed into place, and the metadata comes last
    with (atomic_path(os.path.join(out_dir, MODEL_FILE)) as model_tmp,
          atomic_path(os.path.join(out_dir, VOCAB_FILE)) as vocab_tmp):
        model_tmp.write_bytes(model.getvalue())
        with open(vocab_tmp, "w", encoding="utf-8") as f:
            for i in range(sp.get_piece_size()):
                f.write(f"{sp.id_to_piece(i)!r}\t{sp.get_score(i)}\n")
        meta = {
            "format": FORMAT, "model_file": MODEL_FILE, "model_sha256": sha256_file(model_tmp),
            "vocab_size": sp.get_piece_size(), "model_type": model_type,
            "normalization": "identity", "byte_fallback": True, "word_start": "\u2581",
            "ids": ids, "inputs": paths, "training_lines": len(lines),
            "problems": log.to_dict(),
        }
        if os.path.exists(meta_path(out_dir)):
            os.remove(meta_path(out_dir))
    write_meta(out_dir, meta)
    log.report()
    return meta
