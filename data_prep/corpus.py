"""The embedded default corpus: the standard library of the running Python, no download.

``code``: one document per module, its source (decoded with its declared encoding).
``prose``: one document per module, its docstrings and comments as English text (doctest lines and
decorative comment rules dropped, consecutive comment lines joined into a paragraph, paragraphs
separated by a blank line). Modules are visited in sorted path order, so the corpus is
deterministic for a given interpreter; ``site-packages`` and undecodable files are skipped.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
import io
import json
import os
import re
import sys
import sysconfig
import tokenize
from collections.abc import Iterator
from pathlib import Path

from mlsys.atomic import atomic_path, remove_stale_temps

KINDS = ("prose", "code")
_RULE = re.compile(r"^[\W_]*$")


def stdlib_root() -> Path:
    return Path(sysconfig.get_paths()["stdlib"])


def module_paths(root: Path | None = None) -> list[Path]:
    """Every ``.py`` file of the standard library, sorted by relative path."""
    root = root or stdlib_root()
    skip = {"site-packages", "dist-packages", "__pycache__"}
    return sorted((p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts)),
                  key=lambda p: p.relative_to(root).as_posix())


def read_source(path: Path) -> str | None:
    """Source text with its declared encoding, or None if undecodable."""
    try:
        with open(path, "rb") as f:
            encoding, _ = tokenize.detect_encoding(f.readline)
        return path.read_bytes().decode(encoding)
    except (SyntaxError, UnicodeDecodeError, LookupError, OSError):
        return None


def _docstrings(source: str) -> list[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return []
    nodes = [n for n in ast.walk(tree) if isinstance(
        n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)]
    out = []
    for node in nodes:
        doc = ast.get_docstring(node, clean=False)
        if doc:
            lines = [ln for ln in inspect.cleandoc(doc).split("\n")
                     if not ln.lstrip().startswith((">>>", "..."))]
            out.append("\n".join(lines).strip())
    return [d for d in out if d]


def _comments(source: str) -> list[str]:
    paragraphs, current, last_row = [], [], -2
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type != tokenize.COMMENT:
                continue
            text = tok.string.lstrip("#").strip()
            row = tok.start[0]
            if row != last_row + 1 and current:
                paragraphs.append(" ".join(current))
                current = []
            last_row = row
            if text and not _RULE.match(text) and not text.startswith(("!", "-*-", "noqa",
                                                                      "type:", "pragma")):
                current.append(text)
    except (tokenize.TokenError, SyntaxError, IndentationError):
        pass
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def prose_of(source: str) -> str:
    """Docstrings, then comment paragraphs, of one module; '' when it has none."""
    return "\n\n".join(_docstrings(source) + _comments(source)).strip()


def iter_corpus(kind: str, limit: int | None = None) -> Iterator[dict]:
    """Documents ``{"text", "module"}`` of the default corpus, in deterministic order."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    root = stdlib_root()
    n = 0
    for path in module_paths(root):
        source = read_source(path)
        if source is None:
            continue
        text = source if kind == "code" else prose_of(source)
        if not text.strip():
            continue
        yield {"text": text, "module": path.relative_to(root).as_posix()}
        n += 1
        if limit is not None and n >= limit:
            return


SOURCES = ("stdlib", "packages", "packages-mixed")


def corpus_path(out_dir: str, kind: str, source: str = "stdlib") -> str:
    if source not in SOURCES:
        raise ValueError(f"source must be one of {SOURCES}, not {source!r}")
    return os.path.join(out_dir, f"{source}_{kind}.jsonl")


def write_corpus(out_dir: str, kind: str = "prose", limit: int | None = None,
                 source: str = "stdlib") -> dict:
    """Write ``out_dir/<source>_<kind>.jsonl`` atomically (``mlsys.atomic``: a temp name,
    fsync'd and renamed when complete).

    ``source``: "stdlib" (this module), "packages" (:mod:`data_prep.packages`: the standard
    library plus site-packages) or "packages-mixed" (the same walk, kind ``mixed`` only).
    Returns the documents, characters and the file's sha256.
    """
    os.makedirs(out_dir, exist_ok=True)
    remove_stale_temps(out_dir)
    path = corpus_path(out_dir, kind, source)
    if (source == "packages-mixed") != (kind == "mixed"):
        raise ValueError(f"kind {kind!r} and source {source!r}: the mixed kind is the "
                         "packages-mixed source's, and only its")
    if source.startswith("packages"):
        from data_prep.packages import corpus_meta, iter_package_corpus

        stats: dict = {}
        docs_iter = iter_package_corpus(kind, limit, stats=stats)
        extra = corpus_meta(source=source)
        extra["skipped"] = stats
    else:
        docs_iter, extra = iter_corpus(kind, limit), {"stdlib": str(stdlib_root())}
    docs = chars = 0
    digest = hashlib.sha256()
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8") as f:
        for doc in docs_iter:
            line = json.dumps(doc, ensure_ascii=False) + "\n"
            f.write(line)
            digest.update(line.encode("utf-8"))
            docs += 1
            chars += len(doc["text"])
    return {"path": path, "kind": kind, "source": source, "documents": docs, "chars": chars,
            "sha256": digest.hexdigest(), "python": sys.version.split()[0], **extra,
            "limit": limit}
