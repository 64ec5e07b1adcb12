"""Memory names, their directories, and the permissions everything on disk is created with."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson

from .errors import BadInput, IntegrityError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DIR_MODE = 0o700
FILE_MODE = 0o600
TRASH = ".trash"


def validate_name(name: str) -> str:
    """Refuse anything that is not a plain memory name, before the disk is touched."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name in (".", ".."):
        shown = repr(name) if name else "''"
        raise BadInput(
            f"invalid memory name {shown}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


def ensure_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents with mode 0700."""
    if not path.is_dir():
        ensure_dir(path.parent)
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
        os.chmod(path, DIR_MODE)
    return path


def resolve(home: Path, name: str) -> Path:
    """The directory of memory ``name``, following rename pointers (a file ``<home>/<old>`` holding
    ``{"renamedTo": "<new>"}``). The directory may not exist yet."""
    validate_name(name)
    seen = set()
    path = home / name
    while path.is_file():
        if name in seen or len(seen) > 16:
            raise IntegrityError(f"rename pointers loop at memory '{name}'")
        seen.add(name)
        try:
            name = validate_name(orjson.loads(path.read_bytes())["renamedTo"])
        except (orjson.JSONDecodeError, KeyError, TypeError, BadInput) as exc:
            raise IntegrityError(f"broken rename pointer {path}: {exc}") from None
        path = home / name
    return path


def names(home: Path) -> list[str]:
    """Every memory directory under ``home`` (pointers and the trash excluded), sorted."""
    if not home.is_dir():
        return []
    return sorted(p.name for p in home.iterdir() if p.is_dir() and NAME_RE.fullmatch(p.name) and (p / "main").is_dir())


_datasync = getattr(os, "fdatasync", os.fsync)  # the data and the size; not the file's times


def write_all(fd: int, data: bytes, durable: bool = True) -> None:
    """Write all of ``data`` at ``fd``'s position and (``durable``) flush it to the disk before returning:
    the one durable write every file pimem keeps goes through."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]
    if durable:
        _datasync(fd)


def sync_dir(path: Path) -> None:
    """Make the names created in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes, durable: bool = True) -> None:
    """Replace ``path`` with ``data`` atomically (temp file, flush, rename), mode 0600. ``durable=False``
    skips the flush, for derived files that a crash may leave old but never half-written."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    try:
        write_all(fd, data, durable)
    finally:
        os.close(fd)
    os.replace(tmp, path)


def append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` (whole lines) to ``path``, creating it 0600, durably before returning; a torn last
    line left by a crash is first terminated so the new lines start on lines of their own. A new file's
    name is made durable too."""
    created = not path.exists()
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        write_all(fd, data)
    finally:
        os.close(fd)
    if created:
        sync_dir(path.parent)
