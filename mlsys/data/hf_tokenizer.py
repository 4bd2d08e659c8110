"""The training tokenizer as a Hugging Face fast tokenizer (``tokenizer.json`` and its config).

Built from the sentencepiece model with the ``tokenizers`` library and transformers'
sentencepiece extractor (vocabulary, BPE merges by piece score), not by hand: a BPE (or
unigram) model with byte fallback over the normalized text, where the normalizer does what
``data_prep``'s sentencepiece settings do (identity normalization, one dummy "▁" prefix,
spaces kept as "▁", whitespace runs kept). The user-defined newline piece is an ordinary
vocabulary entry (sentencepiece never merges it), so ids equal ``spm.encode(text)`` on any text
that does not spell out a special token. Special tokens (pad, unk, bos, eos, cls, sep, mask)
are recognised in text; ``[MASK]`` absorbs the spaces around it, so ``"The [MASK] is"`` gives
the ids a masked ``"The cat is"`` gives in training. Masked-LM tokenizers add ``[CLS] … [SEP]``
around a text as the training samples have them; causal ones add nothing (documents end with
``</s>``, the end-of-document id).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mlsys.data.tokenizer_meta import read_meta


def _backend(model_file: Path, ids: dict[str, int], kind: str) -> Any:
    from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, processors
    from transformers.convert_slow_tokenizer import SentencePieceExtractor

    extractor = SentencePieceExtractor(str(model_file))
    proto = extractor.proto
    if not proto.normalizer_spec.add_dummy_prefix or proto.normalizer_spec.precompiled_charsmap:
        raise ValueError(f"{model_file}: expected identity normalization with a dummy prefix "
                         "(as data_prep trains it)")
    spec = extractor.extract(None)
    trainer = proto.trainer_spec
    if isinstance(spec["vocab"], dict):
        model = models.BPE(vocab=spec["vocab"], merges=spec["merges"], dropout=None,
                           unk_token=trainer.unk_piece, fuse_unk=True, byte_fallback=True)
    else:
        model = models.Unigram(spec["vocab"], unk_id=trainer.unk_id, byte_fallback=True)
    tok = Tokenizer(model)
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"),
                                           normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(),
                                     decoders.Fuse(), decoders.Strip(" ", 1, 0)])
    control = [p.piece for p in proto.pieces if p.type == 3]  # CONTROL: pad, bos, eos, cls, ...
    mask = proto.pieces[ids["mask"]].piece
    tok.add_special_tokens([AddedToken(piece, normalized=False, special=True,
                                       lstrip=piece == mask, rstrip=piece == mask)
                            for piece in control])
    if kind == "masked":
        cls, sep = proto.pieces[ids["cls"]].piece, proto.pieces[ids["sep"]].piece
        tok.post_processor = processors.TemplateProcessing(
            single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B:1 {sep}:1",
            special_tokens=[(cls, ids["cls"]), (sep, ids["sep"])])
    return tok


def hf_tokenizer(tokenizer_dir: str | Path, kind: str) -> Any:
    """A ``PreTrainedTokenizerFast`` equal to the sentencepiece tokenizer in ``tokenizer_dir``
    (written by ``python -m data_prep tokenizer``) for a run of data ``kind``."""
    from transformers import PreTrainedTokenizerFast

    tokenizer_dir = Path(tokenizer_dir)
    meta = read_meta(tokenizer_dir)
    ids = meta["ids"]
    backend = _backend(tokenizer_dir / meta["model_file"], ids, kind)
    piece = {name: backend.id_to_token(ids[name])
             for name in ("pad", "unk", "bos", "eos", "cls", "sep", "mask")}
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token=piece["pad"], unk_token=piece["unk"],
        bos_token=piece["bos"], eos_token=piece["eos"], cls_token=piece["cls"],
        sep_token=piece["sep"], mask_token=piece["mask"], clean_up_tokenization_spaces=False,
        model_max_length=int(1e30))


def save_hf_tokenizer(tokenizer_dir: str | Path, kind: str, out_dir: str | Path,
                      max_length: int | None = None) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and the special-tokens map to
    ``out_dir`` (``max_length``: the model's position limit, if it has one)."""
    tok = hf_tokenizer(tokenizer_dir, kind)
    if max_length is not None:
        tok.model_max_length = max_length
    tok.save_pretrained(str(out_dir))
