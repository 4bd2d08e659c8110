"""Checkpoint manifests: the size and SHA-256 of every file of a checkpoint tag (the
controller's state included, and the saved interpolation weights it refers to), written last:
the manifest is the tag's completion marker, so a tag without one is incomplete, and a
truncated, missing or altered file is found before anything is loaded."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path

from mlsys.atomic import write_json

MANIFEST = "manifest.json"


def _digest(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def write_manifest(tag_dir: Path, extra: Iterable[str | Path] = (),
                   exclude: Iterable[str] = ()) -> Path:
    """Record every file under ``tag_dir`` (but ``exclude``, relative names) and the ``extra``
    files (stored by their path as given) in ``tag_dir/manifest.json``."""
    skip = {MANIFEST, *exclude}
    files = {str(p.relative_to(tag_dir)): p for p in sorted(tag_dir.rglob("*"))
             if p.is_file() and str(p.relative_to(tag_dir)) not in skip
             and not p.name.startswith(".")}
    entries = {name: {"bytes": p.stat().st_size, "sha256": _digest(p)}
               for name, p in files.items()}
    external = {str(p): {"bytes": Path(p).stat().st_size, "sha256": _digest(Path(p))}
                for p in extra}
    return write_json(tag_dir / MANIFEST, {"files": entries, "external": external})


def manifest_problem(tag_dir: Path, checksums: bool = True) -> str | None:
    """What is wrong with the files ``tag_dir/manifest.json`` lists (the first problem, naming
    the file), or None. A tag without a manifest is incomplete: a problem."""
    path = tag_dir / MANIFEST
    if not path.is_file():
        return f"{path}: missing (the checkpoint was not finished)"
    try:
        manifest = json.loads(path.read_text())
        listed = [(tag_dir / name, e) for name, e in manifest["files"].items()]
    except (ValueError, KeyError, TypeError, AttributeError):
        return f"{path}: unreadable manifest"
    listed += [(Path(name), e) for name, e in manifest.get("external", {}).items()]
    for file, entry in listed:
        if not file.is_file():
            return f"{file}: missing"
        size = file.stat().st_size
        if size != entry["bytes"]:
            return f"{file}: {size} bytes, the manifest says {entry['bytes']}"
        if checksums and _digest(file) != entry["sha256"]:
            return f"{file}: contents differ from the manifest (sha256)"
    return None


def lists(tag_dir: Path, name: str) -> bool:
    """True if ``tag_dir``'s manifest records the file ``name`` (relative to the tag)."""
    try:
        return name in json.loads((tag_dir / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
