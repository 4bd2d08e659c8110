"""Atomic, durable writes: the new content appears under its final name whole, or not at all.

Everything a run writes that another process (a resume, a benchmark, a user) may read goes
through ``atomic_path``: the caller writes to a temp name beside the target (same directory,
so the rename is atomic), and only a block that finishes renames it into place. Before the
rename the temp file (or every file of a temp directory) is fsync'd, and after it the parent
directory, so a published name never points at content a power cut could still lose. A block
that raises (a signal included) leaves the previous content untouched and removes its temp.

Temp names are ``.<stem>.tmp-<host>-<pid><suffix>`` (the suffix kept, so writers that look at
the extension still work); ``remove_stale_temps`` removes only names of that form written on
this host by a process that no longer runs, so live writers on other nodes of a shared
filesystem are never touched.
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
    """This process's temp name for ``path``."""
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


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temp path beside ``path``; on success fsync it, rename it to ``path``
    (replacing a file or a whole directory) and fsync the parent; on error remove it and
    re-raise."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    _remove(tmp)
    try:
        yield tmp
        fsync_tree(tmp)
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except BaseException:
        _remove(tmp)
        raise


def write_text(path: str | Path, text: str) -> Path:
    """Write ``text`` to ``path`` atomically and durably."""
    with atomic_path(path) as tmp:
        tmp.write_text(text)
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
    """Remove ``stale_temps(directory)``; the paths removed."""
    removed = stale_temps(directory)
    for p in removed:
        _remove(p)
    return removed
