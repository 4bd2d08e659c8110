"""Temp files left by a killed earlier run: every writer here names its temp files
``NAME.tmp-PID``; one whose process is gone is stale and removed before writing anew."""

from __future__ import annotations

import os
import re
import shutil

_TMP = re.compile(r"\.tmp-(\d+)$")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process
        return True
    return True


def remove_stale_temps(directory: str) -> list[str]:
    """Remove ``*.tmp-PID`` files and folders in ``directory`` whose process no longer runs
    (not this process's own); the paths removed."""
    if not os.path.isdir(directory):
        return []
    removed = []
    for name in sorted(os.listdir(directory)):
        m = _TMP.search(name)
        if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
            continue
        path = os.path.join(directory, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.remove(path)
        removed.append(path)
    return removed
