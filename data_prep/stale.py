"""Temp files of data_prep's writers: ``NAME.tmp-<host>-<pid>``, renamed into place when
complete. One left by a killed earlier run is stale: written on *this* host by a process that
no longer runs. Only such names are removed, never another tool's files and never a temp of a
live writer on another node of a shared filesystem (its host differs)."""

from __future__ import annotations

import os
import re
import shutil
import socket

HOST = re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"
_TMP = re.compile(r"\.tmp-(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)$")


def temp_name(path: str) -> str:
    """This process's temp name for ``path``."""
    return f"{path}.tmp-{HOST}-{os.getpid()}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temps(directory: str) -> list[str]:
    """Remove ``*.tmp-<host>-<pid>`` files and folders in ``directory`` written on this host
    by a process that no longer runs (not this process's own); the paths removed."""
    if not os.path.isdir(directory):
        return []
    removed = []
    for name in sorted(os.listdir(directory)):
        m = _TMP.search(name)
        if m is None or m["host"] != HOST:
            continue
        pid = int(m["pid"])
        if pid == os.getpid() or _alive(pid):
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
        removed.append(path)
    return removed
