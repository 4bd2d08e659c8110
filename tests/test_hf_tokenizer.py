"""The exported Hugging Face tokenizer is the training tokenizer: ids equal sentencepiece's on
text it never saw (code, prose, unicode, whitespace runs, random strings), for the BPE models
data_prep trains and for a unigram one; special tokens set; decode inverts encode."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import sentencepiece as spm

from data_prep.tokenizer import train_tokenizer
from mlsys.data.hf_tokenizer import save_hf_tokenizer

UNSEEN = [
    "def foo(x): return x",
    "class Ünïcödé:\n\tpass  # tab, two spaces\n\n\n",
    "\nleading newline", "  two leading spaces", "trailing spaces   ", " ", "\n", "",
    "x = [1, 22, 333, 4444.5e-6]\nfor i in range(10):\n    print(i)\n",
    "Prose with “curly quotes” — and dashes… 日本語のテキスト, emoji 🙂🚀, Ελληνικά, עברית.",
    "\x00\x01 control \u200b zero width \r\n crlf \u00a0nbsp",
    "    deeply\n        indented\n\t\t\tmixed \t whitespace",
]


def _random_texts(n: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    alphabet = "abcdefghijklmnopqrstuvwxyzABC     \n\n\t0123456789()[]{}:;.,'\"=_éüß中文🙂\u0301"
    return ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 120))) for _ in range(n)]


def _check_same_ids(tokenizer_dir: str | Path, kind: str, out: Path) -> None:
    from transformers import AutoTokenizer

    save_hf_tokenizer(tokenizer_dir, kind, out, max_length=64)
    tok = AutoTokenizer.from_pretrained(out)
    sp = spm.SentencePieceProcessor(model_file=str(Path(tokenizer_dir) / "spm.model"))
    for text in UNSEEN + _random_texts(200):
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert ids == sp.encode(text), repr(text)
        assert tok.decode(ids) == sp.decode(ids), repr(text)
    assert tok.model_max_length == 64
    for name, piece in [("pad", "<pad>"), ("unk", "<unk>"), ("bos", "<s>"), ("eos", "</s>"),
                        ("cls", "[CLS]"), ("sep", "[SEP]"), ("mask", "[MASK]")]:
        assert getattr(tok, f"{name}_token") == piece
        assert getattr(tok, f"{name}_token_id") == sp.piece_to_id(piece)


@pytest.mark.parametrize("kind", ["causal", "masked"])
def test_bpe_tokenizer_ids_equal_sentencepiece(kind, gpt_data, bert_data, tmp_path):
    data = gpt_data if kind == "causal" else bert_data
    _check_same_ids(data["tokenizer_dir"], kind, tmp_path / "hf")


def test_unigram_tokenizer_ids_equal_sentencepiece(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(_random_texts(400, seed=1) + UNSEEN[:4] * 3))
    train_tokenizer([str(corpus)], 600, str(tmp_path / "tok"), model_type="unigram", threads=1)
    _check_same_ids(tmp_path / "tok", "causal", tmp_path / "hf")


def test_special_tokens_around_a_text(bert_data, gpt_data, tmp_path):
    from transformers import AutoTokenizer

    sp = spm.SentencePieceProcessor(model_file=str(Path(bert_data["tokenizer_dir"])
                                                   / "spm.model"))
    save_hf_tokenizer(bert_data["tokenizer_dir"], "masked", tmp_path / "bert")
    bert = AutoTokenizer.from_pretrained(tmp_path / "bert")
    ids = bert("The cat is here")["input_ids"]
    assert ids == [bert.cls_token_id, *sp.encode("The cat is here"), bert.sep_token_id]
    word = next(p[1:] for p in (sp.id_to_piece(i) for i in range(sp.get_piece_size()))
                if p.startswith("\u2581") and p[1:].isalpha() and len(p) > 3
                and len(sp.encode(f"The {p[1:]} is here")) == len(sp.encode("The is here")) + 1)
    masked = sp.encode(f"The {word} is here")
    masked[masked.index(sp.piece_to_id("\u2581" + word))] = bert.mask_token_id
    # [MASK] takes the spaces around it: the ids of the masked sentence in training
    assert bert("The [MASK] is here", add_special_tokens=False)["input_ids"] == masked
    save_hf_tokenizer(gpt_data["tokenizer_dir"], "causal", tmp_path / "gpt")
    gpt = AutoTokenizer.from_pretrained(tmp_path / "gpt")
    gpt_sp = spm.SentencePieceProcessor(model_file=str(Path(gpt_data["tokenizer_dir"])
                                                       / "spm.model"))
    assert gpt("The cat")["input_ids"] == gpt_sp.encode("The cat")  # nothing added
