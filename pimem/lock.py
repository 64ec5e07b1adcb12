"""The writer lock: a kernel lock (``flock``) on ``<memory>/write.lock``.

The kernel releases it when its holder dies, so a crashed writer never leaves it held, and the file is never
deleted, so every waiter locks the same inode. It is the lock ``filelock.FileLock`` takes on Unix, so code
that uses that library on the same file is excluded too. Written out here (twenty lines) because importing
``filelock`` costs about 19 ms, a fifth of a whole ``pimem append``.
"""

from __future__ import annotations

import fcntl
import os
import threading
import time

from .errors import NotFound
from .home import FILE_MODE
from .nofollow import open_fd

_POLL_MAX = 0.05  # seconds between tries, at most (the first tries come faster)


class Moved(NotFound):
    """The locked file is no longer at its path: its memory was renamed or deleted meanwhile (exit 3)."""


def _same_file(fd: int, path: str) -> bool:
    try:
        here = os.stat(path, follow_symlinks=False)
    except OSError:
        return False
    held = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (held.st_dev, held.st_ino)


class WriterLock:
    """A reentrant, process-wide lock on one file; ``acquire`` gives up after ``timeout`` seconds."""

    def __init__(self, path: str | os.PathLike):
        self.path = os.fspath(path)
        self._threads = threading.RLock()  # threads of this process queue here, not on the file
        self._fd: int | None = None
        self._depth = 0

    def acquire(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(timeout, 0)
        if not self._threads.acquire(timeout=max(timeout, 0)):
            return False
        if self._depth:
            self._depth += 1
            return True
        fd = open_fd(self.path, os.O_RDWR | os.O_CREAT, FILE_MODE)
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    os.close(fd)
                    self._threads.release()
                    return False
                time.sleep(pause)
                pause = min(pause * 2, _POLL_MAX)
        if not _same_file(fd, self.path):  # its directory was moved away (a rename, a delete) while we waited
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)
            self._threads.release()
            raise Moved(f"{os.path.dirname(self.path)} was renamed or deleted while this waited for it; nothing was written")
        self._fd, self._depth = fd, 1
        return True

    def adopt(self, fd: int) -> None:
        """Hold the lock through ``fd``, a descriptor of this file that holds it already (handed over by the process
        that started this one), as ``acquire`` would: nobody else can take it in between."""
        self._threads.acquire()
        self._fd, self._depth = fd, 1

    def release(self) -> None:
        self._depth -= 1
        if not self._depth:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
        self._threads.release()
