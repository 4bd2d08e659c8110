"""The architecture as rules a change cannot break quietly: imports only go down the layers,
mlsys never imports data_prep (which may import only mlsys's format modules), no module outside
``mlsys/families`` names a family, and entry points stay thin and live in ``launch/``."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

from mlsys.families import FAMILIES

ROOT = Path(__file__).resolve().parents[1]
# Lower first. A module may import its own unit and the units of lower ranks, never higher.
RANK = {"atomic": 0, "distributed": 1, "families": 1, "recipe": 2, "config": 3,
        "config_reference": 4, "ds_config": 4, "operators": 4, "models": 5, "flops": 5,
        "length": 5, "data": 6, "vcycle": 7, "train": 8, "bench": 9}


def _modules(folder: str) -> list[Path]:
    return sorted((ROOT / folder).rglob("*.py"))


def _imports(path: Path) -> list[str]:
    """Every module imported anywhere in ``path`` (top level or inside functions)."""
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names]
    return names


def _unit(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "mlsys" and len(parts) > 1 else None


def test_every_mlsys_unit_has_a_rank():
    units = {p.stem if p.is_file() else p.name for p in (ROOT / "mlsys").iterdir()
             if p.name != "__init__.py" and not p.name.startswith((".", "__"))}
    assert units == set(RANK)


@pytest.mark.parametrize("path", _modules("mlsys"), ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_only_go_down(path: Path):
    own = path.relative_to(ROOT / "mlsys").parts[0].removesuffix(".py")
    for name in _imports(path):
        assert not name.startswith(("launch", "tests")), f"{path}: imports {name}"
        unit = _unit(name)
        if unit is None or unit == own or unit not in RANK:
            continue
        assert RANK[unit] < RANK[own], f"{path} ({own}) imports {name} ({unit}): climbs up"


# What data_prep (the data tool, a client of the library) may import of mlsys: the one write
# helper and the data formats it writes (shard layout, manifests, tokenizer metadata, image
# shards); never the training stack. The library runs data_prep only as a child process
# (``mlsys.data.prepare``), never imports it.
DATA_PREP_MAY_IMPORT = {"mlsys.atomic", "mlsys.data.manifest", "mlsys.data.indexed",
                        "mlsys.data.indexed_writer", "mlsys.data.tokenizer_meta",
                        "mlsys.data.image_shards"}
FORMAT_MODULE_DEPENDENCIES = {"numpy"}  # besides the standard library and each other


def _imported_modules(path: Path) -> set[str]:
    """The modules ``path`` imports (``from m import x`` gives ``m``), anywhere in it."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("path", _modules("mlsys"), ids=lambda p: str(p.relative_to(ROOT)))
def test_mlsys_never_imports_data_prep(path: Path):
    names = _imported_modules(path)
    assert not [n for n in names if n.split(".")[0] == "data_prep"], path


def test_data_prep_imports_only_the_format_modules_of_mlsys():
    for path in _modules("data_prep"):
        used = {n for n in _imported_modules(path) if n.split(".")[0] == "mlsys"}
        assert used <= DATA_PREP_MAY_IMPORT, (path, sorted(used - DATA_PREP_MAY_IMPORT))


@pytest.mark.parametrize("module", sorted(DATA_PREP_MAY_IMPORT))
def test_format_modules_stand_alone(module: str):
    """What data_prep imports of mlsys pulls in nothing else of it (no torch, no config)."""
    path = ROOT / (module.replace(".", "/") + ".py")
    for name in _imported_modules(path):
        top = name.split(".")[0]
        assert (name in DATA_PREP_MAY_IMPORT or top in sys.stdlib_module_names
                or top in FORMAT_MODULE_DEPENDENCIES or name == "__future__"), (path, name)


def _strings(path: Path) -> set[str]:
    """String constants of ``path`` that are not docstrings."""
    tree = ast.parse(path.read_text())
    docs = {id(n.body[0].value) for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and n.body and isinstance(n.body[0], ast.Expr)
            and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant)
            and isinstance(n.value, str) and id(n) not in docs}


def _family_words() -> set[str]:
    words = set()
    for f in FAMILIES:
        words |= {f.name, f.model_type, f.config_class, *f.classes}
    return words


@pytest.mark.parametrize("path", [p for p in _modules("mlsys") if "families" not in p.parts],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_outside_families_names_a_family(path: Path):
    words = _family_words()
    named = {s for s in _strings(path) if s in words}
    named |= {n.rsplit(".", 1)[-1] for n in _imports(path) if n.rsplit(".", 1)[-1] in words}
    assert not named, f"{path} names {sorted(named)}: look the family up in mlsys.families"


def _has_main_block(tree: ast.Module) -> bool:
    """A top-level ``if __name__ == "__main__":``."""
    for node in tree.body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Compare):
            sides = [node.test.left, *node.test.comparators]
            if {ast.unparse(s) for s in sides} >= {"__name__"} and any(
                    isinstance(s, ast.Constant) and s.value == "__main__" for s in sides):
                return True
    return False


@pytest.mark.parametrize("path", _modules("mlsys"), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_entry_point_in_the_library(path: Path):
    """Commands live in ``launch/`` (and ``python -m data_prep``); mlsys only holds library
    code: no ``__main__`` module, no ``if __name__ == "__main__"`` block."""
    assert path.name != "__main__.py", path
    assert not _has_main_block(ast.parse(path.read_text())), f"{path}: move the CLI to launch/"


def test_launch_holds_only_entry_points():
    for path in _modules("launch"):
        tree = ast.parse(path.read_text())
        defs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef)]
        assert "main" in defs or path.name == "__init__.py", path
        assert not [n for n in tree.body if isinstance(n, ast.ClassDef)], path
