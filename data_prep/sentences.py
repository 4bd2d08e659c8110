"""A small rule-based English sentence splitter (no model, no download).

Paragraphs (blank-line separated) are split at ``. ! ?`` (optionally followed by a closing quote or
bracket) followed by whitespace and an upper-case letter, digit, quote or bracket. Whitespace inside
a sentence is collapsed to single spaces, so
``" ".join(split_sentences(t)) == " ".join(t.split())``: the split only loses whitespace.
"""

from __future__ import annotations

import re

_PARAGRAPH = re.compile(r"\n[ \t\r\f\v]*\n")
_BOUNDARY = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[A-Z0-9\"'(\[])")


def split_sentences(text: str) -> list[str]:
    """Sentences of ``text``, whitespace-normalised, empty ones dropped."""
    out = []
    for paragraph in _PARAGRAPH.split(text):
        for sentence in _BOUNDARY.split(paragraph):
            sentence = " ".join(sentence.split())
            if sentence:
                out.append(sentence)
    return out
