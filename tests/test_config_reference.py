"""The configuration reference: every documented field has a description, and
``docs/config.md`` is the text ``mlsys.config_reference.render()`` gives today."""

from __future__ import annotations

import dataclasses
import typing
from pathlib import Path

import pytest
from pydantic import BaseModel

from mlsys.config import RunConfig
from mlsys.config_reference import FAMILY_CLASSES, dataclass_docs, descriptions, render, sections

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "config.md"


def test_docs_config_md_is_current():
    assert DOC.is_file(), f"{DOC} is missing: run `make docs`"
    assert DOC.read_text(encoding="utf-8") == render(), \
        f"{DOC.relative_to(ROOT)} is not current: run `make docs`"


def test_every_field_has_a_description():
    missing = [name for name, doc in descriptions().items() if not doc.strip()]
    assert not missing, f"fields without a description (a docstring under the field): {missing}"


def _reachable(model: type[BaseModel]) -> set[type[BaseModel]]:
    """``model`` and every model its fields hold (also as list items), recursively."""
    out = {model}
    for info in model.model_fields.values():
        for tp in (info.annotation, *typing.get_args(info.annotation)):
            if isinstance(tp, type) and issubclass(tp, BaseModel) and tp not in out:
                out |= _reachable(tp)
    return out


def test_descriptions_cover_every_run_config_model_and_family_field():
    """``descriptions`` misses no field: every field of every model reachable from
    ``RunConfig`` (``RunConfig``'s own section fields are the sections) and of the family
    dataclasses."""
    listed = {model: names for _, model, names in sections()}
    assert set(listed) == _reachable(RunConfig)
    for model, names in listed.items():
        fields = [n for n in model.model_fields if model is not RunConfig or n in names]
        assert names == fields, model
    keys = set(descriptions())
    expected = {f"{m.__name__}.{n}" for m, names in listed.items() for n in names}
    expected |= {f"{c.__name__}.{f.name}" for c in FAMILY_CLASSES for f in dataclasses.fields(c)}
    assert keys == expected


def test_render_is_deterministic_and_lists_every_section():
    text = render()
    assert text == render() and text.endswith("\n") and not text.endswith("\n\n")
    for path, _, names in sections():
        for name in names:
            field = f"{path}.{name}" if path else name
            assert f"| `{field}` |" in text, field
    for cls in FAMILY_CLASSES:
        assert f"### `{cls.__name__}`" in text


def test_dataclass_docs_reads_the_docstring_under_each_field():
    @dataclasses.dataclass
    class Example:
        a: int
        """The first."""
        b: str = "x"
        c: float = 0.0
        """The third,
        on two lines."""

    assert dataclass_docs(Example) == {"a": "The first.", "b": "", "c": "The third,\non two lines."}


@pytest.mark.parametrize("current", [False, True])
def test_cli_writes_and_checks(tmp_path: Path, current: bool, capsys):
    from launch.config_reference import main

    out = tmp_path / "config.md"
    if current:
        out.write_text(render(), encoding="utf-8")
        assert main(["--out", str(out), "--check"]) == 0
    else:
        out.write_text("stale\n", encoding="utf-8")
        assert main(["--out", str(out), "--check"]) == 1
        assert "make docs" in capsys.readouterr().err
        assert out.read_text(encoding="utf-8") == "stale\n"
        assert main(["--out", str(out)]) == 0
    assert out.read_text(encoding="utf-8") == render()
    assert [p.name for p in tmp_path.iterdir()] == ["config.md"]  # no temp left behind
