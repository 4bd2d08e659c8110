"""One run per directory: an exclusive ``flock`` on ``RUN_DIR/.lock``, held by rank 0 for the
run's life. The kernel releases it when the process ends, however it ends (a crash, SIGKILL),
so a stale lock never blocks a restart; a second start while it is held fails at once, naming
the holder (host, pid, start time) that the lock file records. On network filesystems the
lock is as good as their ``flock`` (Linux NFS maps it to a POSIX byte-range lock)."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from pathlib import Path

from mlsys.train.rundir import RunDirError


class RunLock:
    """``acquire()`` or RunDirError; ``release()`` (also on garbage collection / exit)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._fd: int | None = None

    def acquire(self) -> RunLock:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 4096, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunDirError(f"{self.path.parent}: in use by another run ({holder}); "
                              "nothing was changed. One run per directory") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, json.dumps({"host": socket.gethostname(), "pid": os.getpid(),
                                  "since": time.strftime("%Y-%m-%dT%H:%M:%S%z")}).encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)  # closing drops the flock
            self._fd = None

    def __del__(self) -> None:
        self.release()
