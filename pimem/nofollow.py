"""The store never follows a symbolic link it did not make.

Everything under the home is opened with ``O_NOFOLLOW`` and every directory pimem walks into is checked with
``lstat``, so a link planted as a day file, ``memory.jsonl``, a tree file, ``write.lock``, ``ranges.writing``,
``index.sqlite``, ``imports.keys`` … (or as a memory's directory, its ``main/`` or ``tree/``) is refused with
exit 5 and one line naming it, and nothing is read, created or written where it points. The home itself may
be a link (a user's choice): ``env.home`` resolves it once.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from .errors import IntegrityError

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)


def planted(path: str | os.PathLike) -> IntegrityError:
    return IntegrityError(f"{path} is a symbolic link: pimem never follows links inside its home; remove it")


def open_fd(path: str | os.PathLike, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that refuses a symbolic link as the last component (``planted``, exit 5)."""
    try:
        return os.open(path, flags | NOFOLLOW, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise planted(path) from None
        raise


def open_binary(path: str | os.PathLike, buffering: int = -1):
    """A file opened for reading in binary, never through a link."""
    fd = open_fd(path, os.O_RDONLY)
    try:
        return os.fdopen(fd, "rb", buffering=buffering)
    except OSError as exc:  # (a directory at the file's name: named by its path, not by the descriptor's number)
        try:
            os.close(fd)
        except OSError:
            pass
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from None


def lstat(path: str | os.PathLike) -> os.stat_result:
    """``lstat`` of a file pimem reads or writes; a link there is ``planted``."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise planted(path)
    return st


def kind(path: str | os.PathLike) -> str | None:
    """``dir``, ``file`` or None (nothing there) for a name under the home; a link there is ``planted``."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # (a file where the path has a directory: a renamed memory's pointer)
        return None
    if stat.S_ISLNK(st.st_mode):
        raise planted(path)
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def check_dir(path: str | os.PathLike) -> bool:
    """Whether ``path`` is a real directory (False when it does not exist); a link there is ``planted``."""
    return kind(path) == "dir"


def check_free(path: str | os.PathLike) -> None:
    """Refuse a link where pimem is about to create a file or hand a path to a library (SQLite)."""
    if os.path.islink(path):
        raise planted(path)


def read_bytes(path: Path) -> bytes:
    with open_binary(path) as f:
        return f.read()


def check_database(path: str | os.PathLike) -> None:
    """Before SQLite opens ``path`` (it follows links itself): the database, its WAL and shared-memory files
    must not be links."""
    for suffix in ("", "-wal", "-shm", "-journal"):
        check_free(f"{os.fspath(path)}{suffix}")
