"""A Hugging Face fast tokenizer (``tokenizer.json``) as a megatron-core tokenizer, for the
causal families: the model's own tokenizer (Llama, Qwen, Mistral, GPT-2 style). Its ids and
special tokens come from the directory's metadata (``mlsys.data.tokenizer_meta.hf_meta``):
documents end in eos (the eod), and padding uses a pad token only where it differs from eos
(else megatron's own pad id, never a real token). Masked LMs need data_prep's sentencepiece
tokenizer (megatron's whole-word masking reads word starts in its WordPiece convention).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np
import torch

from mlsys.data.megatron import PretrainingTokenizer
from mlsys.data.tokenizer_meta import read_meta


class TokenizerJson(PretrainingTokenizer):
    def __init__(self, tokenizer_dir: str):
        from tokenizers import Tokenizer

        self.meta = read_meta(tokenizer_dir)
        path = os.path.join(tokenizer_dir, self.meta["model_file"])
        super().__init__(path, {})
        self.tok = Tokenizer.from_file(path)
        self.unique_identifiers = {"class": type(self).__name__,
                                   "model_sha256": self.meta["model_sha256"]}
        self._ids = self.meta["ids"]
        self.special_ids = frozenset(v for v in self._ids.values() if v is not None)
        self._vocab = self.tok.get_vocab(with_added_tokens=True)
        self._inv_vocab = {i: p for p, i in self._vocab.items()}

    def tokenize(self, text: str) -> list[int]:
        return self.tok.encode(text, add_special_tokens=False).ids

    def detokenize(self, ids: Sequence[int] | np.ndarray | torch.Tensor) -> str:
        if isinstance(ids, torch.Tensor | np.ndarray):
            ids = ids.tolist()
        return self.tok.decode([int(i) for i in ids], skip_special_tokens=False)

    @property
    def vocab_size(self) -> int:
        return int(self.meta["vocab_size"])

    @property
    def pad(self) -> int:
        if self._ids["pad"] is None or self._ids["pad"] == self._ids["eod"]:
            raise AttributeError("no pad token distinct from eos")
        return self._ids["pad"]

    eod = property(lambda self: self._ids["eod"])
    eos = property(lambda self: self._ids["eos"])
    bos = property(lambda self: self._ids["bos"])
