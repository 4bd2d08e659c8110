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
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

from data_prep.corpus import KINDS, prose_of, read_source, stdlib_root

MAX_FILE_BYTES = 1 << 20
MIN_PROSE_WORDS = 8
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


def source_files(root: Path) -> list[Path]:
    """The ``.py`` files of one root that the rule walks, sorted by relative POSIX path."""
    found = (p for p in root.rglob("*.py") if p.is_file() and not _skipped(p.relative_to(root)))
    return sorted(found, key=lambda p: p.relative_to(root).as_posix())


def _is_prose(text: str) -> bool:
    words = text.split()
    if len(words) < MIN_PROSE_WORDS:
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


def package_prose(source: str) -> str:
    """The packages corpus' prose of one module: docstrings, comments, prose literals."""
    return "\n\n".join(p for p in (prose_of(source), *prose_strings(source)) if p).strip()


def iter_package_corpus(kind: str, limit: int | None = None,
                        roots: list[tuple[str, Path]] | None = None,
                        stats: dict | None = None) -> Iterator[dict]:
    """Documents ``{"text", "module"}`` of the packages corpus, in the rule's order (above).

    ``limit``: stop after that many documents. ``stats`` (a dict, optional) is filled with the
    counts of files seen and skipped (``too_large``, ``undecodable``, ``empty``, ``duplicate``).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    stats = stats if stats is not None else {}
    for key in ("files", "too_large", "undecodable", "empty", "duplicate"):
        stats.setdefault(key, 0)
    seen: set[bytes] = set()
    n = 0
    for label, root in roots if roots is not None else default_roots():
        for path in source_files(root):
            stats["files"] += 1
            if path.stat().st_size > MAX_FILE_BYTES:
                stats["too_large"] += 1
                continue
            source = read_source(path)
            if source is None:
                stats["undecodable"] += 1
                continue
            text = source if kind == "code" else package_prose(source)
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


def corpus_meta(roots: list[tuple[str, Path]] | None = None) -> dict:
    """What the bytes of the packages corpus depend on (compared by ``prepare_default``)."""
    return {"source": "packages", "python": sys.version.split()[0],
            "distributions": distributions(roots), "max_file_bytes": MAX_FILE_BYTES}


def package_corpus_path(out_dir: str, kind: str) -> str:
    return os.path.join(out_dir, f"packages_{kind}.jsonl")
