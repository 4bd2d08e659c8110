"""Atomic, durable writes: the new content appears under its final name whole, or not at all.

The one write helper of mlsys and data_prep. Everything either writes that another process
(a resume, a benchmark, a run reading prepared data, a user) may read goes through it:

* ``atomic_path(path)``: the caller writes to a temp name beside the target (same directory,
  so the rename is atomic); only a block that finishes publishes it. A block that raises (a
  signal included) leaves the previous content untouched and removes its temp.
* ``publish(tmp, path)``: what ``atomic_path`` does on success, for writers that keep a temp
  open across calls (the indexed shard writer): fsync the temp file (or every file of a temp
  directory), rename it over ``path`` (an existing directory at ``path`` is removed first, so a
  directory is replaced whole), then fsync the parent directory. A published name never points
  at content a power cut could still lose.
* ``write_bytes`` / ``write_text`` / ``write_json``: a whole file in one call.

Temp names are ``.<stem>.tmp-<host>-<pid><suffix>`` (``temp_path``; the suffix kept, so writers
that look at the extension still work). ``remove_stale_temps(directory)`` removes only names of
that form written on *this* host by a process that no longer runs: a temp of a live process,
of this process, or of another host (a live writer on another node of a shared filesystem) is
left alone, and so is every other name (a user's ``backup.tmp-123``).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
_TEMP = re.compile(r"^\..+\.tmp-(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)(\.[^.]+)?$")


def temp_path(path: str | Path) -> Path:
    """This process's temp name for ``path``: ``.<stem>.tmp-<host>-<pid><suffix>`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.stem}.tmp-{HOST}-{os.getpid()}{path.suffix}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def fsync_tree(path: str | Path) -> None:
    """fsync ``path`` (a file, or a directory with everything in it) to stable storage."""
    path = Path(path)
    targets = [path] if not path.is_dir() else [*sorted(path.rglob("*")), path]
    for p in targets:
        if p.is_symlink():
            continue
        fd = os.open(p, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def fsync_dir(directory: str | Path) -> None:
    """fsync a directory's entries (after a rename into it)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def publish(tmp: str | Path, path: str | Path) -> None:
    """fsync ``tmp``, rename it to ``path`` (replacing a file, or a whole directory), fsync
    the parent. ``tmp`` must be in ``path``'s directory (``temp_path``)."""
    fsync_tree(tmp)
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    os.replace(os.fspath(tmp), os.fspath(path))
    fsync_dir(os.path.dirname(os.path.abspath(path)))


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success ``publish`` it to ``path``; on error
    remove it and re-raise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    _remove(tmp)
    try:
        yield tmp
        publish(tmp, path)
    except BaseException:
        _remove(tmp)
        raise


def write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically and durably."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)
    return Path(path)


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` atomically and durably."""
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")
    return Path(path)


def write_json(path: str | Path, data: Any) -> Path:
    """Write ``data`` as indented JSON to ``path`` atomically and durably."""
    return write_text(path, json.dumps(data, indent=1))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def stale_temps(directory: str | Path) -> list[Path]:
    """Temp names of this module's form in ``directory`` written on this host by a process
    that no longer runs (never this process's own)."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    out = []
    for p in sorted(directory.iterdir()):
        m = _TEMP.match(p.name)
        if m and m["host"] == HOST and int(m["pid"]) != os.getpid() and not _alive(int(m["pid"])):
            out.append(p)
    return out


def remove_stale_temps(directory: str | Path) -> list[Path]:
    """Remove ``stale_temps(directory)`` (files and temp directories); the paths removed."""
    removed = stale_temps(directory)
    for p in removed:
        _remove(p)
    return removed
