"""The store never follows a symbolic link it did not make.

Everything under the home is opened with ``O_NOFOLLOW`` and every directory pimem walks into is checked with
``lstat``, so a link planted as a day file, ``memory.jsonl``, a tree file, ``write.lock``, ``ranges.writing``,
``index.sqlite``, ``imports.keys`` … (or as a memory's directory, its ``main/`` or ``tree/``) is refused with
exit 5 and one line naming it, and nothing is read, created or written where it points. The home itself may
be a link (a user's choice): ``env.home`` resolves it once.

Nor does it open anything but a regular file there: a named pipe at ``view.json`` or a day file would block
whoever opened it for ever (an agent's wrapper runs ``pimem view`` every turn), so every file is opened without
blocking and refused, as a directory is, in one line naming it (exit 7) unless it is a regular file.
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


def not_a_file(path: str | os.PathLike, mode: int) -> OSError:
    """What stands at ``path`` (its ``st_mode``) where pimem keeps a regular file, as the system says a directory
    there: ``Is a directory: PATH``, ``Is a named pipe, not a file: PATH`` (exit 7)."""
    if stat.S_ISDIR(mode):
        return IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
    what = "a named pipe" if stat.S_ISFIFO(mode) else "a socket" if stat.S_ISSOCK(mode) else "a device"
    return OSError(errno.EINVAL, f"Is {what}, not a file", os.fspath(path))


def not_a_dir(path: str | os.PathLike) -> NotADirectoryError:
    """A pipe or a file where pimem keeps a directory (``main/``, ``tree/``), as the system says it:
    ``Not a directory: PATH`` (exit 7), not taken for no directory there."""
    return NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), os.fspath(path))


def open_fd(path: str | os.PathLike, flags: int, mode: int = 0o600) -> int:
    """``os.open`` that refuses a symbolic link as the last component (``planted``, exit 5), and anything but a
    regular file (``not_a_file``, exit 7): opened without blocking, so a named pipe is found by the ``fstat`` of
    its descriptor instead of waiting for ever for a writer (or a reader) that never comes; a regular file's
    descriptor is given back blocking, as asked."""
    try:
        fd = os.open(path, flags | NOFOLLOW | os.O_NONBLOCK, mode)
    except OSError as exc:
        if exc.errno == errno.ELOOP or (exc.errno == errno.EEXIST and os.path.islink(path)):
            raise planted(path) from None
        if exc.errno == errno.ENXIO:  # (opened for writing only: a named pipe nobody reads, or a socket)
            try:
                st_mode = os.lstat(path).st_mode
            except OSError:
                raise exc from None
            raise not_a_file(path, st_mode) from None
        raise
    try:
        st_mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(st_mode):
            raise not_a_file(path, st_mode)
        if not flags & os.O_NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


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
    must not be links (``planted``); nor may the database be anything but a regular file (``not_a_file``): SQLite
    said a named pipe there was a disk I/O error ('is the disk full?'), a directory that it could not open the
    database, naming no file. One ``lstat`` each, as looking for links alone took. (A directory at its WAL or
    shared-memory file is left to SQLite's 'disk I/O error'.)"""
    for suffix in ("", "-wal", "-shm", "-journal"):
        name = f"{os.fspath(path)}{suffix}"
        try:
            mode = os.lstat(name).st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            raise planted(name)
        if not suffix and not stat.S_ISREG(mode):
            raise not_a_file(name, mode)
