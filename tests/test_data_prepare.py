"""The library prepares default data through the data tool's command (``mlsys.data.prepare``:
``python -m data_prep prepare`` in a child process), never by importing it: the same paths and
files as the tool's own function, and a clear error when the tool fails."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from mlsys.data.prepare import DataPrepError, prepare, run_tool, tool_env

REPO = Path(__file__).resolve().parents[1]


def _files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def test_prepare_returns_the_paths_the_tool_prints(tmp_path: Path, monkeypatch) -> None:
    from data_prep.images import prepare_default_images

    monkeypatch.chdir(tmp_path)  # a relative prepare_dir means this directory, as in-process
    out = prepare("prep", "vision", image_size=8)
    assert out["data_prefix"] == os.path.join("prep", "images", "digits8")
    assert (out["num_classes"], out["image_size"]) == (10, 8)
    child = _files(tmp_path / "prep")
    direct = prepare_default_images(str(tmp_path / "direct"), 8)  # the tool's own function
    assert direct["data_prefix"] == str(tmp_path / "direct" / "images" / "digits8")
    assert _files(tmp_path / "direct") == child  # the same files, byte for byte
    assert prepare("prep", "vision", image_size=8)["data_prefix"] == out["data_prefix"]
    assert _files(tmp_path / "prep") == child  # reused, not rewritten


def test_a_failing_tool_is_an_error_naming_the_command(tmp_path: Path) -> None:
    with pytest.raises(DataPrepError, match=r"data_prep shards .* exited 2:\n.*matches no file"):
        run_tool("shards", ["--input", str(tmp_path / "missing.jsonl"), "--tokenizer",
                            str(tmp_path), "--out", str(tmp_path / "out"), "--quiet"])


def test_the_tool_is_the_one_beside_this_library() -> None:
    assert tool_env()["PYTHONPATH"].split(os.pathsep)[0] == str(REPO)
