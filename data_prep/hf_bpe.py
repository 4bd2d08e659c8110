"""A byte-level BPE tokenizer in the Hugging Face format (``tokenizer.json`` and
``tokenizer_config.json``), trained locally with the ``tokenizers`` library: what a team's own
tokenizer looks like (GPT-2 / Llama-3 style, ``<|endoftext|>`` as eos), for the data-prep
benchmark's comparison and the tests. Nothing is downloaded.
"""

from __future__ import annotations

import json
import os

from data_prep.inputs import ProblemLog, expand_inputs, iter_documents, parse_record
from mlsys.atomic import write_text

EOS = "<|endoftext|>"


def train_byte_level_bpe(inputs: list[str], vocab_size: int, out_dir: str,
                         json_key: str = "text") -> str:
    """Train on the documents of ``inputs`` and write ``out_dir/tokenizer.json`` and
    ``tokenizer_config.json`` (eos, bos and pad ``<|endoftext|>``, id 0); returns ``out_dir``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    log = ProblemLog(strict=False)

    def texts():
        for rec in iter_documents(expand_inputs(inputs), json_key, log):
            text = parse_record(rec, json_key)
            if isinstance(text, str):
                yield text

    tok.train_from_iterator(texts(), trainer)
    os.makedirs(out_dir, exist_ok=True)
    write_text(os.path.join(out_dir, "tokenizer.json"), tok.to_str())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOS,
              "bos_token": EOS, "pad_token": EOS, "model_max_length": 1 << 20}
    write_text(os.path.join(out_dir, "tokenizer_config.json"), json.dumps(config, indent=1))
    return out_dir
