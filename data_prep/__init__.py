"""Corpus -> sentencepiece tokenizer -> megatron indexed shards. CLI: ``python -m data_prep``."""

from data_prep.default import prepare_default

__all__ = ["prepare_default"]
