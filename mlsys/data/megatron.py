"""Runtime datasets on megatron-core: GPT (causal LM) and BERT (masked LM), plus the tokenizer.

``build_datasets`` reads shards written by ``python -m data_prep shards`` through megatron-core's
``BlendedMegatronDatasetBuilder`` with its ``GPTDataset`` or ``BERTMaskedWordPieceDataset``
(train/valid/test by ``split``); shards
another tool wrote (no manifest) are read with a warning (``mlsys.data.indexed.read_shards``).
Samples are a pure function of (shards, seed, sizes, index): the
same seed gives the same sample at the same index, on any rank, in any process. ``num_samples``
may exceed one epoch (megatron reshuffles and repeats).

BERT masking is megatron's: 15 % of the tokens, whole words (a sentencepiece piece without the
``▁`` word-start mark continues the previous word), each masked token replaced by ``[MASK]`` 80 %,
a random ordinary token 10 %, itself 10 %; next-sentence prediction with ``nsp=True``.

Resuming: the data position is the number of samples consumed; a run that has consumed ``c``
samples continues at dataset index ``c`` (``mlsys.data.stream``).
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch
from megatron.core.tokenizers import MegatronTokenizerBase

from mlsys.data.indexed import max_token_id, read_shards, warn_foreign
from mlsys.data.tokenizer_meta import is_hf, read_meta

WORD_START = "\u2581"
MASK_PROB = 0.15


class PretrainingTokenizer(MegatronTokenizerBase):
    """What both pre-training tokenizers share: ``_vocab`` / ``_inv_vocab`` (set by the
    subclass) as megatron's ``vocab`` / ``inv_vocab``, and no chat template."""

    def apply_chat_template(self, *args, **kwargs):
        raise NotImplementedError("no chat template for pre-training tokenizers")

    @property
    def vocab(self) -> dict[str, int]:
        return self._vocab

    @property
    def inv_vocab(self) -> dict[int, str]:
        return self._inv_vocab


class SentencePieceTokenizer(PretrainingTokenizer):
    """A sentencepiece model as a megatron-core tokenizer (``MegatronTokenizerBase``).

    ``inv_vocab`` maps id -> piece in megatron's WordPiece convention (a piece that continues a
    word is prefixed ``##``), which is what megatron's whole-word masking reads.
    """

    def __init__(self, tokenizer_dir: str):
        import sentencepiece as spm

        self.meta = read_meta(tokenizer_dir)
        model_path = os.path.join(tokenizer_dir, self.meta["model_file"])
        super().__init__(model_path, {})
        self.sp = spm.SentencePieceProcessor(model_file=model_path)
        self.unique_identifiers = {"class": type(self).__name__,
                                   "model_sha256": self.meta["model_sha256"]}
        ids = self.meta["ids"]
        self._ids = ids
        n = self.sp.get_piece_size()
        self.special_ids = frozenset(v for k, v in ids.items() if k != "newline")
        self.is_word_start = np.array([self._starts_word(i) for i in range(n)], dtype=bool)
        self._vocab = {self.sp.id_to_piece(i): i for i in range(n)}
        self._inv_vocab = {i: (p if self.is_word_start[i] else "##" + p)
                           for i, p in ((i, self.sp.id_to_piece(i)) for i in range(n))}

    def _starts_word(self, i: int) -> bool:
        """Bytes continue a word; specials and ``\\n`` stand alone; others start with ``▁``."""
        if self.sp.is_byte(i):
            return False
        if self.sp.is_control(i) or self.sp.is_unknown(i) or i == self._ids["newline"]:
            return True
        return self.sp.id_to_piece(i).startswith(WORD_START)

    def tokenize(self, text: str) -> list[int]:
        return self.sp.encode(text)

    def detokenize(self, ids: Sequence[int] | np.ndarray | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor | np.ndarray):
            ids = ids.tolist()
        return self.sp.decode([int(i) for i in ids])

    @property
    def vocab_size(self) -> int:
        return self.sp.get_piece_size()

    pad = property(lambda self: self._ids["pad"])
    unk = property(lambda self: self._ids["unk"])
    cls = property(lambda self: self._ids["cls"])
    sep = property(lambda self: self._ids["sep"])
    mask = property(lambda self: self._ids["mask"])
    eod = property(lambda self: self._ids["eod"])
    eos = property(lambda self: self._ids["eos"])
    bos = property(lambda self: self._ids["bos"])


def load_tokenizer(tokenizer_dir: str) -> MegatronTokenizerBase:
    """The tokenizer written by ``python -m data_prep tokenizer``, or a Hugging Face
    ``tokenizer.json`` directory's (``mlsys.data.tokenizer_json``, causal families only)."""
    if is_hf(read_meta(tokenizer_dir)):
        from mlsys.data.tokenizer_json import TokenizerJson

        return TokenizerJson(tokenizer_dir)
    return SentencePieceTokenizer(tokenizer_dir)


def _bert_dataset_class():
    from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDataset

    class BertDataset(BERTMaskedWordPieceDataset):
        """Megatron's BERT dataset; random replacements drawn from ordinary tokens only."""

        def __init__(self, *args, **kwargs):
            with _rank_zero_if_not_distributed():
                super().__init__(*args, **kwargs)
            special = self.config.tokenizer.special_ids
            self.token_lookup = [i for i in self.token_lookup if i not in special]

        def __getitem__(self, idx: int) -> dict:
            sample = super().__getitem__(idx)
            if self.config.classification_head:
                sample["next_sentence_label"] = sample["is_random"]
            return sample

    return BertDataset


@contextlib.contextmanager
def _rank_zero_if_not_distributed() -> Iterator[None]:
    """megatron's masked and blended datasets call ``torch.distributed.get_rank()``
    unguarded; in a single process without a process group that is rank 0."""
    if torch.distributed.is_initialized():
        yield
        return
    original = torch.distributed.get_rank
    torch.distributed.get_rank = lambda group=None: 0
    try:
        yield
    finally:
        torch.distributed.get_rank = original


def _check_shards(data_prefix: str, kind: str, tokenizer: Any, tokenizer_dir: str) -> None:
    """The shards at ``data_prefix`` are complete and were made with this tokenizer (another
    tool's: every token id within its vocabulary); a masked LM's are split into sentences."""
    manifest = read_shards(data_prefix)
    if manifest.get("foreign"):  # another tool's shards: only the ids can be checked
        if not torch.distributed.is_initialized() or torch.distributed.get_rank() == 0:
            warn_foreign(data_prefix, tokenizer_dir)
        top = max_token_id(data_prefix)
        if top >= tokenizer.vocab_size:
            raise ValueError(f"{data_prefix}.bin holds token id {top}, beyond the vocabulary "
                             f"of {tokenizer_dir} ({tokenizer.vocab_size} ids)")
    elif manifest["tokenizer_sha256"] != tokenizer.meta["model_sha256"]:
        raise ValueError(f"{data_prefix} was tokenized with another tokenizer "
                         f"({manifest['tokenizer_sha256'][:12]}) than {tokenizer_dir} "
                         f"({tokenizer.meta['model_sha256'][:12]})")
    if kind == "masked" and not manifest["split_sentences"]:
        raise ValueError(f"{data_prefix}: a masked LM needs shards made with --split-sentences")


def build_datasets(kind: str, data_prefix: str | Sequence[tuple[float, str]],
                   tokenizer_dir: str, seq_length: int, seed: int,
                   num_samples: tuple[int, int, int], split: str = "98,1,1",
                   cache_dir: str | None = None, *, nsp: bool = False,
                   ) -> tuple[Any, Any, Any]:
    """(train, valid, test) megatron-core datasets over ``data_prefix`` (None for an empty split);
    ``data_prefix`` may be a blend, ``[(weight, prefix), ...]``: megatron-core's blended
    dataset, each split mixing the corpora's same splits by weight (each corpus checked as a
    single prefix is).

    Every rank calls it (with a process group, rank 0 builds the index caches first). Raises
    ValueError if the shards are incomplete or were made with another tokenizer (for shards
    without a manifest: if a token id is beyond the tokenizer's vocabulary, which each
    process checks by scanning the ``.bin`` once). Sample dicts
    are megatron's (GPT: ``tokens``, ``labels``, ``loss_mask``, ``position_ids``; BERT: ``text``,
    ``types``, ``labels``, ``padding_mask``, ``loss_mask``, ``is_random``); see :func:`collate_hf`.
    ``cache_dir`` defaults to ``<dir of data_prefix>/cache``.
    """
    from megatron.core.datasets.blended_megatron_dataset_builder import (
        BlendedMegatronDatasetBuilder,
    )

    if kind not in ("causal", "masked"):
        raise ValueError(f"kind must be 'causal' or 'masked', not {kind!r}")
    tokenizer = load_tokenizer(tokenizer_dir)
    if kind == "masked" and is_hf(tokenizer.meta):
        raise ValueError(f"{tokenizer_dir}: a Hugging Face tokenizer trains causal families "
                         "only (a masked LM needs data_prep's sentencepiece tokenizer)")
    blend = [(1.0, data_prefix)] if isinstance(data_prefix, str) else list(data_prefix)
    for _, prefix in blend:
        _check_shards(prefix, kind, tokenizer, tokenizer_dir)
    prefixes = [prefix for _, prefix in blend]
    weights = None if isinstance(data_prefix, str) else [float(w) for w, _ in blend]
    common = dict(random_seed=seed, sequence_length=seq_length, blend=(prefixes, weights),
                  split=split, tokenizer=tokenizer,
                  path_to_cache=cache_dir or os.path.join(os.path.dirname(prefixes[0]) or ".",
                                                          "cache"))
    logging.getLogger("megatron.core.datasets").setLevel(logging.WARNING)
    if kind == "causal":
        from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig

        cls = GPTDataset
        config = GPTDatasetConfig(**common, reset_position_ids=False, reset_attention_mask=False,
                                  eod_mask_loss=False, create_attention_mask=False)
    else:
        from megatron.core.datasets.bert_dataset import BERTMaskedWordPieceDatasetConfig

        cls = _bert_dataset_class()
        config = BERTMaskedWordPieceDatasetConfig(
            **common, masking_probability=MASK_PROB, short_sequence_probability=0.1,
            masking_max_ngram=1, masking_do_full_word=True, masking_do_permutation=False,
            masking_use_longer_ngrams=False, masking_use_geometric_distribution=False,
            classification_head=nsp)
    builder = BlendedMegatronDatasetBuilder(cls, list(num_samples), lambda: True, config)
    with _rank_zero_if_not_distributed():  # the blended dataset asks for the rank too
        train, valid, test = builder.build()
    return train, valid, test


def collate_hf(samples: list[dict], kind: str) -> dict[str, torch.Tensor]:
    """Stack megatron samples into Hugging Face model inputs.

    causal -> ``input_ids``, ``labels`` (for ``GPT2LMHeadModel``, which shifts labels itself:
            ``labels[t]`` is the target predicted at position ``t-1``; -100 where megatron's
            loss mask is 0).
    masked -> ``input_ids``, ``token_type_ids``, ``attention_mask``, ``labels`` (-100 on tokens
            that are not masked), plus ``next_sentence_label`` (1 = B is random) when the
            dataset was built with ``nsp=True``.
    """
    def stack(key: str) -> torch.Tensor:
        return torch.stack([torch.as_tensor(np.asarray(s[key])).long() for s in samples])

    if kind == "causal":
        tokens, loss_mask = stack("tokens"), torch.stack(
            [torch.as_tensor(s["loss_mask"]) for s in samples])
        labels = tokens.clone()
        labels[:, 1:][loss_mask[:, :-1] == 0] = -100
        return {"input_ids": tokens, "labels": labels}
    if kind == "masked":
        labels = torch.where(stack("loss_mask") == 1, stack("labels"), torch.tensor(-100))
        out = {"input_ids": stack("text"), "token_type_ids": stack("types"),
               "attention_mask": stack("padding_mask"), "labels": labels}
        if "next_sentence_label" in samples[0]:
            out["next_sentence_label"] = stack("next_sentence_label")
        return out
    raise ValueError(f"kind must be 'causal' or 'masked', not {kind!r}")
