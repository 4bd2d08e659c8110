"""``prepare_default``: the embedded corpus -> tokenizer -> shards, idempotently.

Layout under ``out_dir/<kind>/``: ``stdlib_<prose|code>.jsonl`` (+ ``corpus.json``),
``tokenizer/``, ``shards.{bin,idx,manifest.json}``. Each step is reused when its output is complete
and was made from the same inputs (corpus: same interpreter; tokenizer: same corpus hash, vocab
size and model type; shards: same tokenizer hash and corpus size), else rebuilt.

``source="packages"`` (:mod:`data_prep.packages`: the standard library plus site-packages) builds
under ``out_dir/packages-<kind>/`` instead (``packages-mixed``, masked only:
``packages-mixed-masked/``); its corpus is reused only for the same interpreter and the same
installed distributions, and its tokenizer is trained on a deterministic sample (every k-th
document, k chosen so that the sample holds about ``TOKENIZER_SAMPLE_CHARS`` characters,
written to ``tokenizer_sample.jsonl``), the shards on the whole corpus.
"""

from __future__ import annotations

import json
import math
import os
import sys

from data_prep.corpus import corpus_path, write_corpus
from data_prep.shards import build_shards
from data_prep.tokenizer import train_tokenizer
from mlsys.atomic import atomic_path
from mlsys.data.indexed import IncompleteDataset, check_complete
from mlsys.data.manifest import sha256_file, write_manifest
from mlsys.data.tokenizer_meta import MODEL_FILE, meta_path, write_meta

KIND_TO_CORPUS = {"causal": "code", "masked": "prose"}
TOKENIZER_SAMPLE_CHARS = 24_000_000


def _read_json(path: str) -> dict | None:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _write_sample(corpus: str, chars: int, out: str) -> dict:
    """Every k-th line (document) of ``corpus`` into ``out``: about TOKENIZER_SAMPLE_CHARS."""
    every = max(1, math.ceil(chars / TOKENIZER_SAMPLE_CHARS))
    n = 0
    with (open(corpus, encoding="utf-8") as src, atomic_path(out) as tmp,
          open(tmp, "w", encoding="utf-8") as dst):
        for i, line in enumerate(src):
            if i % every == 0:
                dst.write(line)
                n += 1
    return {"every": every, "documents": n}


def _corpus_current(meta: dict | None, corpus: str, source: str) -> bool:
    if not (meta and os.path.exists(corpus) and meta.get("limit") is None
            and meta.get("python") == sys.version.split()[0]):
        return False
    if source.startswith("packages"):
        from data_prep.packages import corpus_meta

        return all(meta.get(k) == v for k, v in corpus_meta(source=source).items())
    return True


def prepare_default(out_dir: str, kind: str, vocab_size: int = 4096, workers: int = 2,
                    source: str = "stdlib") -> dict:
    """Build (or reuse) the default corpus, tokenizer and shards for ``kind``:
    "causal" (source code, documents ending in eod) or "masked" (prose, one sequence per
    sentence). ``source``: "stdlib" (the default), "packages" (the large corpus) or, masked
    only, "packages-mixed" (its prose and its code, :func:`data_prep.packages.mixed_text`).

    Returns ``{"tokenizer_dir", "data_prefix", "num_tokens"}``.
    """
    if kind not in KIND_TO_CORPUS:
        raise ValueError(f"kind must be 'causal' or 'masked', not {kind!r}")
    if source == "packages-mixed" and kind != "masked":
        raise ValueError("source 'packages-mixed' is a masked-LM corpus (prose and code as "
                         "sentences); a causal LM's packages corpus is source 'packages'")
    corpus_kind = "mixed" if source == "packages-mixed" else KIND_TO_CORPUS[kind]
    base = os.path.join(out_dir, kind if source == "stdlib" else f"{source}-{kind}")
    corpus = corpus_path(base, corpus_kind, source)
    corpus_meta_path = os.path.join(base, "corpus.json")
    corpus_meta = _read_json(corpus_meta_path)
    if not _corpus_current(corpus_meta, corpus, source):
        corpus_meta = write_corpus(base, corpus_kind, source=source)
        write_manifest(corpus_meta_path, corpus_meta)

    tok_dir = os.path.join(base, "tokenizer")
    tok_meta = _read_json(meta_path(tok_dir))
    want = {"vocab_size_requested": vocab_size, "corpus_sha256": corpus_meta["sha256"]}
    if source != "stdlib":
        want["sample_chars"] = TOKENIZER_SAMPLE_CHARS
    if not (tok_meta and all(tok_meta.get(k) == v for k, v in want.items())):
        train_on = corpus
        if source != "stdlib":
            train_on = os.path.join(base, "tokenizer_sample.jsonl")
            want["sample"] = _write_sample(corpus, corpus_meta["chars"], train_on)
        tok_meta = train_tokenizer([train_on], vocab_size, tok_dir, model_type="bpe")
        tok_meta.update(want)
        write_meta(tok_dir, tok_meta)

    prefix = os.path.join(base, "shards")
    try:
        manifest = check_complete(prefix)
        if (manifest["tokenizer_sha256"] != sha256_file(os.path.join(tok_dir, MODEL_FILE))
                or manifest["inputs"][0]["bytes"] != os.path.getsize(corpus)):
            raise IncompleteDataset("stale")
    except IncompleteDataset:
        manifest = build_shards([corpus], tok_dir, prefix, workers=workers,
                                split_sentences=(kind == "masked"),
                                append_eod=(kind == "causal"))
    return {"tokenizer_dir": tok_dir, "data_prefix": prefix, "num_tokens": manifest["num_tokens"]}
