"""The large offline corpus: the standard library plus the installed, pinned packages.

``source="packages"`` of ``python -m data_prep corpus`` (and of ``prepare_default``): the same two
kinds as :mod:`data_prep.corpus` (``code``: one document per module, its source; ``prose``: its
docstrings and comment paragraphs, :func:`data_prep.corpus.prose_of`, then its prose string
literals, :func:`prose_strings`), read from every ``.py`` file of the running interpreter's
standard library and then of its ``site-packages`` (torch, transformers, deepspeed, megatron-core,
scipy, numpy, scikit-learn, matplotlib, ... : whatever ``make install`` put there from
``pyproject.toml``). No download, no network.

Prose string literals: much of the packages' documentation is not in docstrings but in string
constants handed to a helper (torch's ``add_docstr(torch.abs, r"..."``), numpy's
``add_newdoc``, transformers' ``*_INPUTS_DOCSTRING`` templates, argparse help, error messages).
A string constant that is not a docstring and not part of an f-string is kept when, after
``inspect.cleandoc`` and dropping doctest lines, it has at least ``MIN_PROSE_WORDS`` words, at
least 80 % of its characters are letters or whitespace and at least 60 % of its words are
alphabetic (trailing punctuation aside): English, not code, tables or format strings. Kept
literals follow the docstrings and comments in source order, each once per module.

A third kind, ``mixed`` (source ``packages-mixed`` of ``prepare_default``: BERT's corpus for
budgets its prose alone cannot feed without repetition), walks the prose files and gives each
its prose followed, for a ``.py`` module, by its source one stripped line a paragraph
(:func:`mixed_text`), so that a masked LM's sentences are prose sentences and code lines, as
CodeBERT trains on both.

More prose files (``prose`` and ``mixed``; ``code`` stays ``.py`` sources): ``.pyi`` stubs and
Cython ``.pyx`` / ``.pxd`` (read like Python: what parses and tokenizes), and the comments of
the C / C++ / CUDA sources and headers the packages ship (``C_SUFFIXES``: torch's ``include/``,
pyarrow's, numpy's, deepspeed's ``csrc``; :func:`c_comments`). Comment paragraphs that mention a
copyright, licence or SPDX tag are dropped in every language (the same header in thousands of
files would be repetition, and license texts are not prose to learn). ``RULE`` names this rule;
``prepare_default`` rebuilds a corpus made under another.

The rule, so that two builds on the same installed set give the same bytes:

* roots in this order: ``stdlib`` (``sysconfig``'s stdlib, without its ``site-packages`` /
  ``dist-packages``), then each distinct ``site-packages`` directory (``purelib``, ``platlib``);
  within a root, files in sorted order of their relative POSIX path;
* skipped: anything under ``__pycache__``, ``site-packages`` or ``dist-packages`` (below the root),
  and ``*.dist-info`` / ``*.egg-info``; the editable-install shims ``__editable__*`` (they hold
  this checkout's absolute path); files over ``MAX_FILE_BYTES`` (generated tables, e.g. torch's
  ``common_methods_invocations.py``); undecodable files (:func:`data_prep.corpus.read_source`)
  and documents that are not valid UTF-8 (a docstring with a lone surrogate escape);
  documents that are empty for the kind (an empty ``__init__.py``, a module without any
  docstring or comment);
* de-duplication: a document whose text (sha256 of its UTF-8 bytes) equals an earlier one's is
  dropped, the first in walk order is kept; so identical vendored copies (``pip/_vendor``,
  ``setuptools/_vendor``, ...) and identical modules shipped by two packages appear once. For
  ``prose`` this also drops a second module whose docstrings and comments are identical;
* each document is ``{"text", "module"}`` with ``module`` = ``<root label>/<relative path>``
  (``stdlib/...`` or ``site-packages/...``), never an absolute path.

The bytes depend on the interpreter and the installed distributions; the writer records both
(``python``, ``distributions``: sorted ``name==version``) next to the document count, characters
and the sha256 of the written file, so a changed hash can be traced to a changed package.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import inspect
import os
import re
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from data_prep.corpus import _RULE, KINDS, _comments, _docstrings, read_source, stdlib_root

RULE = "packages-2"  # bump when the walk or the extraction changes
MAX_FILE_BYTES = 1 << 20
MIN_PROSE_WORDS = 8
MIN_COMMENT_WORDS = 4
C_SUFFIXES = (".h", ".hh", ".hpp", ".cuh", ".c", ".cc", ".cpp", ".cxx", ".cu")
PROSE_SUFFIXES = (".py", ".pyi", ".pyx", ".pxd", *C_SUFFIXES)
PACKAGE_KINDS = (*KINDS, "mixed")  # mixed: prose, then a module's code (BERT's long budgets)
_LICENSE = re.compile(r"copyright|licen[cs]e|spdx", re.IGNORECASE)
_SKIP_PARTS = {"__pycache__", "site-packages", "dist-packages"}
_SKIP_SUFFIXES = (".dist-info", ".egg-info")


def site_roots() -> list[Path]:
    """The distinct ``site-packages`` directories of the running interpreter, in sysconfig order."""
    out: list[Path] = []
    for key in ("purelib", "platlib"):
        p = Path(sysconfig.get_paths()[key]).resolve()
        if p.is_dir() and p not in out:
            out.append(p)
    return out


def default_roots() -> list[tuple[str, Path]]:
    """``[("stdlib", <stdlib>), ("site-packages", <purelib>), ...]``: the walk's roots in order."""
    roots = [("stdlib", stdlib_root())]
    return roots + [("site-packages", p) for p in site_roots()]


def _skipped(rel: Path) -> bool:
    parts = rel.parts
    return (bool(_SKIP_PARTS & set(parts[:-1]))
            or any(p.endswith(_SKIP_SUFFIXES) for p in parts[:-1])
            or parts[-1].startswith("__editable__"))


def source_files(root: Path, suffixes: tuple[str, ...] = (".py",)) -> list[Path]:
    """The files of one root with these suffixes that the rule walks, sorted by relative
    POSIX path (skipped directories are not entered)."""
    found = []
    for top, dirs, files in os.walk(root):
        rel = Path(top).relative_to(root)
        dirs[:] = [d for d in dirs if not _skipped(rel / d / "_")]
        found += [Path(top) / f for f in files
                  if f.endswith(suffixes) and not _skipped(rel / f)]
    return sorted((p for p in found if p.is_file()),
                  key=lambda p: p.relative_to(root).as_posix())


def _is_prose(text: str, min_words: int = MIN_PROSE_WORDS) -> bool:
    words = text.split()
    if len(words) < min_words:
        return False
    letters = sum(c.isalpha() or c.isspace() for c in text)
    alpha = sum(w.rstrip(".,;:!?)'\"").lstrip("('\"").isalpha() for w in words)
    return letters >= 0.8 * len(text) and alpha >= 0.6 * len(words)


def _encodable(text: str) -> bool:
    """False for text with lone surrogates (a literal's ``"\\udc80"`` escape): not UTF-8."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def prose_strings(source: str) -> list[str]:
    """The module's prose string literals (rule above), in source order, each once."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.add(id(first.value))  # a docstring: prose_of has it
        elif isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            lines = [ln for ln in inspect.cleandoc(node.value).split("\n")
                     if not ln.lstrip().startswith((">>>", "..."))]
            text = "\n".join(lines).strip()
            if _is_prose(text) and _encodable(text):
                found.append((node.lineno, node.col_offset, text))
    out, seen = [], set()
    for _, _, text in sorted(found):
        if text not in seen:
            seen.add(text)
            out.append(text)
    return out


_C_TOKENS = re.compile(r'//[^\n]*|/\*.*?(?:\*/|\Z)|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'',
                       re.DOTALL)


def c_comments(source: str) -> list[str]:
    """Comment paragraphs of C / C++ / CUDA source: each ``/* */`` block (leading ``*``
    stripped) and each run of consecutive ``//`` lines is one paragraph, whitespace collapsed;
    string and character literals are skipped; kept when prose-like with at least
    ``MIN_COMMENT_WORDS`` words (rule above), license paragraphs dropped."""
    out: list[str] = []
    run: list[str] = []
    line, pos, last = 0, 0, -2
    for m in _C_TOKENS.finditer(source):
        tok = m.group()
        if tok[0] in "\"'":
            continue
        line += source.count("\n", pos, m.start())
        pos = m.start()
        if tok.startswith("//"):
            if line != last + 1 and run:
                out.append(" ".join(run))
                run = []
            last = line
            text = tok[2:].lstrip("/!<").strip()
            if text and not _RULE.match(text):
                run.append(text)
        else:
            if run:
                out.append(" ".join(run))
                run = []
            lines = [ln.strip().lstrip("*!<").strip() for ln in tok[2:].removesuffix("*/")
                     .split("\n")]
            out.append(" ".join(ln for ln in lines if ln and not _RULE.match(ln)))
    if run:
        out.append(" ".join(run))
    return [p for p in (" ".join(t.split()) for t in out)
            if _is_prose(p, MIN_COMMENT_WORDS) and not _LICENSE.search(p)]


def package_prose(source: str, suffix: str = ".py") -> str:
    """The packages corpus' prose of one file: C-family files their comment paragraphs;
    Python (and stubs, Cython) its docstrings, comment paragraphs (license ones dropped) and
    prose literals."""
    if suffix in C_SUFFIXES:
        return "\n\n".join(c_comments(source)).strip()
    comments = [c for c in _comments(source) if not _LICENSE.search(c)]
    parts = [*_docstrings(source), *comments, *prose_strings(source)]
    return "\n\n".join(p for p in parts if p).strip()


def code_lines(source: str) -> str:
    """A module's source as prose-like text for a masked LM: every non-blank line, stripped,
    its own paragraph (so ``split_sentences`` makes it one sentence, or more where the line
    itself holds a sentence boundary)."""
    return "\n\n".join(line.strip() for line in source.splitlines() if line.strip())


def mixed_text(source: str, suffix: str = ".py") -> str:
    """The ``mixed`` kind's document of one file (BERT's long-budget corpus): its prose
    (``package_prose``), then, for a Python module, its source one line a paragraph
    (``code_lines``); the other prose files (stubs, Cython, C) their prose only."""
    prose = package_prose(source, suffix)
    code = code_lines(source) if suffix == ".py" else ""
    return "\n\n".join(p for p in (prose, code) if p)


def iter_package_corpus(kind: str, limit: int | None = None,
                        roots: list[tuple[str, Path]] | None = None,
                        stats: dict | None = None) -> Iterator[dict]:
    """Documents ``{"text", "module"}`` of the packages corpus, in the rule's order (above).

    ``limit``: stop after that many documents. ``stats`` (a dict, optional) is filled with the
    counts of files seen and skipped (``too_large``, ``undecodable``, ``empty``, ``duplicate``).
    """
    if kind not in PACKAGE_KINDS:
        raise ValueError(f"kind must be one of {PACKAGE_KINDS}, not {kind!r}")
    stats = stats if stats is not None else {}
    for key in ("files", "too_large", "undecodable", "empty", "duplicate"):
        stats.setdefault(key, 0)
    seen: set[bytes] = set()
    n = 0
    for label, root in roots if roots is not None else default_roots():
        for path in source_files(root, (".py",) if kind == "code" else PROSE_SUFFIXES):
            stats["files"] += 1
            if path.stat().st_size > MAX_FILE_BYTES:
                stats["too_large"] += 1
                continue
            source = read_source(path)
            if source is None:
                stats["undecodable"] += 1
                continue
            text = (source if kind == "code" else mixed_text(source, path.suffix)
                    if kind == "mixed" else package_prose(source, path.suffix))
            if not text.strip():
                stats["empty"] += 1
                continue
            if not _encodable(text):  # a docstring with a surrogate escape
                stats["undecodable"] += 1
                continue
            digest = hashlib.sha256(text.encode("utf-8")).digest()
            if digest in seen:
                stats["duplicate"] += 1
                continue
            seen.add(digest)
            yield {"text": text, "module": f"{label}/{path.relative_to(root).as_posix()}"}
            n += 1
            if limit is not None and n >= limit:
                return


def distributions(roots: list[tuple[str, Path]] | None = None) -> list[str]:
    """Sorted ``name==version`` of the distributions installed under the site roots."""
    dirs = [str(p) for label, p in (roots if roots is not None else default_roots())
            if label != "stdlib"]
    out = set()
    for dist in importlib.metadata.distributions(path=dirs):
        name = dist.metadata["Name"]
        if name:
            out.add(f"{name.lower().replace('_', '-')}=={dist.version}")
    return sorted(out)


def corpus_meta(roots: list[tuple[str, Path]] | None = None, source: str = "packages") -> dict:
    """What the bytes of the packages corpus depend on (compared by ``prepare_default``)."""
    return {"source": source, "rule": RULE, "python": sys.version.split()[0],
            "distributions": distributions(roots), "max_file_bytes": MAX_FILE_BYTES}


def package_corpus_path(out_dir: str, kind: str) -> str:
    return os.path.join(out_dir, f"packages_{kind}.jsonl")
