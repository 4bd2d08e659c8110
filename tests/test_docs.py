"""The docs name only what exists: every repository path and every ``mlsys.…`` / ``data_prep.…``
/ ``launch.…`` name in README.md and docs/ resolves, every relative link reaches a file, and
the layer table of docs/design.md is the one tests/test_architecture.py enforces."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from tests.test_architecture import RANK

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
TOP = ("mlsys", "data_prep", "launch", "configs", "tests", "docs", "bench", ".ci")
FILES = ("Makefile", "pyproject.toml", "README.md")
CODE = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
_TOPS, _FILES = "|".join(re.escape(t) for t in TOP), "|".join(re.escape(f) for f in FILES)
PATH = re.compile(rf"(?<![\w./-])((?:{_TOPS})/[\w./{{}},*<>-]*|{_FILES})(?![\w/])")
DOTTED = re.compile(r"(?<![\w./-])((?:mlsys|data_prep|launch)(?:\.\w+)+)")


def _expand(path: str) -> list[str]:
    """``a/{b,c}.py`` -> ``a/b.py``, ``a/c.py``."""
    parts = re.split(r"\{([^{}]*)\}", path)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def _exists(path: str) -> bool:
    path = path.rstrip(".,:;")
    if "<" in path:  # a placeholder (`docs/results/<profile>-<family>.md`): its folder
        path = path.split("<")[0].rsplit("/", 1)[0]
    if "*" in path:
        return any(ROOT.glob(path))
    return (ROOT / path).exists()


def _named_paths(text: str) -> set[str]:
    names = set()
    fenced = FENCE.findall(text)
    for block in fenced:
        text = text.replace(block, "")
    for span in CODE.findall(text) + LINK.findall(text) + fenced:
        for m in PATH.finditer(span):
            names.update(_expand(m.group(1)))
    return names


def _resolves(dotted: str) -> bool:
    """A module path, possibly followed by names defined at the module's top level."""
    parts = dotted.split(".")
    for i in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:i])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.exists():
            rest = parts[i:]
            if not rest:
                return True
            src = module.read_text()
            name = rest[0]
            return re.search(rf"^(?:class|def)\s+{name}\b|^\s*{name}\b\s*[:=]|"
                             rf"import .*\b{name}\b", src, re.M) is not None
    return False


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_path_a_doc_names_exists(doc: Path):
    missing = sorted(p for p in _named_paths(doc.read_text()) if not _exists(p))
    assert not missing, f"{doc.relative_to(ROOT)} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_name_a_doc_uses_resolves(doc: Path):
    names = {m.group(1).rstrip(".") for span in CODE.findall(doc.read_text())
             for m in DOTTED.finditer(span)}
    missing = sorted(n for n in names if not _resolves(n))
    assert not missing, f"{doc.relative_to(ROOT)} names modules or names that do not exist: " \
                        f"{missing}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_reaches_a_file(doc: Path):
    bad = []
    for target in LINK.findall(doc.read_text()):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        if not (doc.parent / target.split("#")[0]).exists():
            bad.append(target)
    assert not bad, f"{doc.relative_to(ROOT)} links to missing files: {bad}"


def test_the_design_layer_table_is_the_enforced_one():
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("## 4. How the code is cut", 1)[1].split("\n## ", 1)[0]
    table = {}
    for rank, part in re.findall(r"^\| (\d+) \| (.+?) \|", section, re.M):
        for name in re.findall(r"`mlsys/(\w+)(?:\.py|/)`", part):
            table[name] = int(rank)
    assert table == RANK, "docs/design.md section 4 and tests/test_architecture.py RANK differ"


def test_the_results_pages_are_listed():
    listed = set(re.findall(r"\(results/([\w.-]+)\.md\)", (ROOT / "docs" / "benchmark.md")
                            .read_text()))
    pages = {p.stem for p in (ROOT / "docs" / "results").glob("*.md")}
    assert pages <= listed, f"docs/benchmark.md does not link {sorted(pages - listed)}"
