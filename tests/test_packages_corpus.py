"""The packages corpus (``data_prep/packages.py``): the walk's rule on small fake roots, and
determinism and the limit on a slice of the real ones (seconds, no tokenizer on the real set)."""

from __future__ import annotations

import json
import os

import pytest

from data_prep import packages
from data_prep.corpus import corpus_path, stdlib_root, write_corpus
from data_prep.default import prepare_default
from mlsys.data.manifest import sha256_file

CODE_A = '"""Module a: the first one."""\n\n# a comment\nX = 1\n'
CODE_B = 'def f():\n    """Return two, always."""\n    return 2\n'


def _tree(root, files: dict[str, bytes | str]) -> None:
    for rel, content in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(content.encode() if isinstance(content, str) else content)


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """Two fake roots: a "stdlib" and a "site-packages" with every case the rule names."""
    lib, site = tmp_path / "lib", tmp_path / "site"
    _tree(lib, {"zeta.py": CODE_B, "alpha/mod.py": CODE_A, "alpha/__init__.py": "",
                "site-packages/hidden.py": "Y = 3\n", "__pycache__/x.py": "Z = 1\n"})
    _tree(site, {
        "pkg/core.py": "import os\n# uses os\nprint(os.sep)\n",
        "pkg/_vendor/alpha_copy.py": CODE_A,               # identical to lib/alpha/mod.py
        "pkg/big.py": "# " + "x" * 200 + "\n",            # over the (patched) size cap
        "pkg/bad.py": b"# -*- coding: utf-8 -*-\nS = '\xff\xfe'\n",  # undecodable
        "pkg-1.0.dist-info/meta.py": "W = 1\n",
        "__editable___pkg_finder.py": "MAPPING = {'pkg': '/abs/path'}\n",
        "Apkg/upper.py": "V = 1\n",                         # sorts before 'pkg' (code points)
    })
    monkeypatch.setattr(packages, "MAX_FILE_BYTES", 150)
    return [("stdlib", lib), ("site-packages", site)]


def test_walk_order_skips_and_duplicates(roots):
    stats: dict = {}
    docs = list(packages.iter_package_corpus("code", roots=roots, stats=stats))
    assert [d["module"] for d in docs] == [
        "stdlib/alpha/mod.py", "stdlib/zeta.py",
        "site-packages/Apkg/upper.py", "site-packages/pkg/core.py"]
    assert docs[0]["text"] == CODE_A
    # the vendored copy of alpha/mod.py is dropped (first in walk order kept), and so are the
    # empty __init__, the too-large file and the undecodable one; __pycache__, the stdlib's own
    # site-packages, .dist-info and the editable shim are never read
    assert stats == {"files": 8, "too_large": 1, "undecodable": 1, "empty": 1, "duplicate": 1}


def test_prose_kind_and_limit(roots):
    prose = list(packages.iter_package_corpus("prose", roots=roots))
    assert [d["module"] for d in prose] == ["stdlib/alpha/mod.py", "stdlib/zeta.py",
                                            "site-packages/pkg/core.py"]
    assert prose[0]["text"] == "Module a: the first one.\n\na comment"
    assert len(list(packages.iter_package_corpus("code", limit=2, roots=roots))) == 2
    with pytest.raises(ValueError):
        next(packages.iter_package_corpus("poetry", roots=roots))


LITERALS = '''"""Doc."""
import x
x.add_docstr(x.abs, r"""
    Computes the absolute value of each element in the input tensor, elementwise.

    >>> x.abs(-1)
    """)
HELP = "Number of workers that the pool starts before reading any of the input files."
FMT = f"{x} is not a number and the value cannot be parsed by this function at all"
CODE = "for i in range(10): print(i, i * 2, i ** 3); x = [a, b, c]; y = {1: 2}"
SHORT = "too short to be prose"
ODD = "a lone surrogate escape \\udc80 is not text that UTF-8 can encode at all"
AGAIN = "Number of workers that the pool starts before reading any of the input files."
'''


def test_prose_string_literals():
    """Documentation handed to a helper and messages are prose; docstrings (already in
    prose_of), f-string parts, code, short strings and repeats are not."""
    kept = ["Computes the absolute value of each element in the input tensor, elementwise.",
            "Number of workers that the pool starts before reading any of the input files."]
    assert packages.prose_strings(LITERALS) == kept
    assert packages.package_prose(LITERALS) == "\n\n".join(["Doc.", *kept])
    assert packages.prose_strings("def broken(:\n") == []


C_SOURCE = """// Copyright 2024 Somebody. Licensed under the Apache License.
#include <x.h>
int a = 1;  // the first value that we keep here
// and the second line of the same paragraph
const char* s = "// not a comment, inside a string literal";
char q = '"';  /* a quote character must not open a string that eats this comment */
/** A block comment
 *  that says something useful about a function. */
// x
"""


def test_c_comments_and_prose_suffixes(tmp_path):
    assert packages.c_comments(C_SOURCE) == [
        "the first value that we keep here and the second line of the same paragraph",
        "a quote character must not open a string that eats this comment",
        "A block comment that says something useful about a function."]
    _tree(tmp_path, {"b.h": C_SOURCE, "a.pyi": 'def f() -> int:\n    """Stub: returns an int."""\n',
                     "c.py": "# Copyright 2020 the authors, licensed under MIT.\nX = 1\n"})
    roots = [("site-packages", tmp_path)]
    prose = list(packages.iter_package_corpus("prose", roots=roots))
    assert [d["module"] for d in prose] == ["site-packages/a.pyi", "site-packages/b.h"]
    assert prose[0]["text"] == "Stub: returns an int."  # c.py: only a license comment
    code = list(packages.iter_package_corpus("code", roots=roots))
    assert [d["module"] for d in code] == ["site-packages/c.py"]  # code: .py files only


def test_real_slice_is_deterministic(tmp_path):
    """Two builds of the first 25 documents of the real roots: the same bytes and hash."""
    metas = [write_corpus(str(tmp_path / d), "code", limit=25, source="packages")
             for d in ("one", "two")]
    a, b = (m["path"] for m in metas)
    assert open(a, "rb").read() == open(b, "rb").read()
    assert metas[0]["sha256"] == metas[1]["sha256"] == sha256_file(a)
    assert metas[0]["documents"] == 25 and metas[0]["chars"] > 0
    modules = [json.loads(line)["module"] for line in open(a, encoding="utf-8")]
    assert modules == sorted(modules) and all(m.startswith("stdlib/") for m in modules)
    assert not any(m.startswith("/") or "/work/" in m for m in modules)  # relative paths only
    # what the bytes depend on is recorded: the interpreter and the pinned distributions
    dists = metas[0]["distributions"]
    assert dists == sorted(dists)
    assert any(d.startswith("torch==2.13.0") for d in dists)
    assert any(d.startswith("transformers==5.23.0") for d in dists)
    assert metas[0]["skipped"]["files"] >= 25
    assert corpus_path(str(tmp_path / "one"), "code", "packages") == a


def test_stdlib_source_unchanged(tmp_path):
    meta = write_corpus(str(tmp_path), "code", limit=3)
    assert os.path.basename(meta["path"]) == "stdlib_code.jsonl"
    assert meta["sha256"] == sha256_file(meta["path"]) and meta["source"] == "stdlib"


def test_prepare_default_packages_is_idempotent(tmp_path, monkeypatch):
    """corpus -> tokenizer (on an every-k-th sample) -> shards on a small real slice, and a
    second call reuses all three."""
    root = stdlib_root()
    monkeypatch.setattr(packages, "default_roots",
                        lambda: [("stdlib", root / "json"), ("site-packages", root / "email")])
    monkeypatch.setattr("data_prep.default.TOKENIZER_SAMPLE_CHARS", 100_000)
    out = prepare_default(str(tmp_path), "causal", vocab_size=512, workers=0, source="packages")
    base = tmp_path / "packages-causal"
    corpus = json.loads((base / "corpus.json").read_text())
    tok = json.loads((base / "tokenizer" / "tokenizer_meta.json").read_text())
    assert corpus["source"] == "packages" and corpus["documents"] > 10
    assert tok["corpus_sha256"] == corpus["sha256"] and tok["sample"]["every"] >= 2
    assert out["num_tokens"] > 0 and out["data_prefix"] == str(base / "shards")
    stamps = {p: os.path.getmtime(p) for p in (base / "packages_code.jsonl",
                                                base / "tokenizer" / "spm.model",
                                                base / "shards.bin")}
    again = prepare_default(str(tmp_path), "causal", vocab_size=512, workers=0,
                            source="packages")
    assert again == out
    assert all(os.path.getmtime(p) == t for p, t in stamps.items())


def test_mixed_kind_is_prose_then_code_lines(roots):
    """``mixed``: a module's prose, then its source one stripped line a paragraph, so that the
    sentence splitter makes every code line a sentence; a module with code but no prose is in."""
    from data_prep.sentences import split_sentences

    docs = list(packages.iter_package_corpus("mixed", roots=roots))
    assert [d["module"] for d in docs] == [
        "stdlib/alpha/mod.py", "stdlib/zeta.py", "site-packages/Apkg/upper.py",
        "site-packages/pkg/core.py"]
    assert split_sentences(docs[0]["text"]) == [
        "Module a: the first one.", "a comment", '"""Module a: the first one."""',
        "# a comment", "X = 1"]
    assert split_sentences(docs[1]["text"]) == [
        "Return two, always.", "def f():", '"""Return two, always."""', "return 2"]
    assert docs[2]["text"] == "V = 1"
    with pytest.raises(ValueError, match="mixed kind"):
        write_corpus(str(roots[0][1]), "mixed", source="packages")


def test_prepare_default_packages_mixed(tmp_path, monkeypatch):
    """The masked corpus with code: its own directory and corpus record, every prose token
    still in it (the same slice's prose-only shards hold fewer tokens), causal refused."""
    root = stdlib_root()
    monkeypatch.setattr(packages, "default_roots",
                        lambda: [("stdlib", root / "json"), ("site-packages", root / "email")])
    monkeypatch.setattr("data_prep.default.TOKENIZER_SAMPLE_CHARS", 100_000)
    mixed = prepare_default(str(tmp_path), "masked", vocab_size=512, workers=0,
                            source="packages-mixed")
    prose = prepare_default(str(tmp_path), "masked", vocab_size=512, workers=0,
                            source="packages")
    base = tmp_path / "packages-mixed-masked"
    corpus = json.loads((base / "corpus.json").read_text())
    assert corpus["source"] == "packages-mixed" and corpus["kind"] == "mixed"
    assert mixed["data_prefix"] == str(base / "shards")
    assert mixed["num_tokens"] > 2 * prose["num_tokens"]
    with pytest.raises(ValueError, match="masked-LM corpus"):
        prepare_default(str(tmp_path), "causal", vocab_size=512, workers=0,
                        source="packages-mixed")
