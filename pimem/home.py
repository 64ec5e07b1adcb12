"""Memory names, their directories, and the permissions everything on disk is created with."""

from __future__ import annotations

import os
import re
from pathlib import Path

import orjson

from .errors import BadInput, IntegrityError, NotFound
from .nofollow import check_dir, kind as _kind, open_fd, read_bytes

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
DIR_MODE = 0o700
FILE_MODE = 0o600
TRASH = ".trash"
CLAIM = "projects.json"  # the project list a claim writes (``pimem.projects``), before anything is logged
# the home's own files are named like this (config.json, and whatever pimem keeps beside the memories):
# no memory may take such a name
RESERVED_SUFFIXES = (".json", ".jsonl", ".lock", ".sqlite", ".tmp")


def reserved(name: str) -> bool:
    return name.lower().endswith(RESERVED_SUFFIXES)


def validate_name(name: str, what: str = "memory") -> str:
    """Refuse anything that is not a plain memory name (or a consumer's, ``what``), before the disk is touched."""
    if not isinstance(name, str) or not NAME_RE.fullmatch(name) or name in (".", ".."):
        shown = repr(name) if name else "''"
        raise BadInput(
            f"invalid {what} name {shown}: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    if reserved(name):
        raise BadInput(f"invalid {what} name {name!r}: names ending in {', '.join(RESERVED_SUFFIXES)} are kept for "
                       "the home's own files (config.json, …)")
    return name


def ensure_dir(path: Path) -> Path:
    """Create ``path`` and any missing parents with mode 0700; a link where a directory should be is refused
    (``nofollow.planted``), never followed."""
    if not check_dir(path):
        ensure_dir(path.parent)
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            if not check_dir(path):  # a file is in the way: never chmod what is not ours
                raise NotADirectoryError(20, "Not a directory", str(path)) from None
        os.chmod(path, DIR_MODE)
    return path



def rename_intent(home: Path, name: str) -> Path:
    """Where ``rename`` puts the pointer of ``name`` before moving it: followed while ``<home>/<name>`` is missing
    (a rename that crashed between its steps)."""
    return home / f".{name}.renaming"


def delete_intent(home: Path, name: str) -> Path:
    """Where ``delete`` records, before it moves memory ``name`` into the trash, where it goes and the rename
    pointers that lead to it: ``{"trash": "<name>-<stamp>", "pointers": ["<old>", …]}``."""
    return home / f".{name}.deleting"


def finish_delete(home: Path, name: str) -> bool:
    """Finish a delete of ``name`` whose memory is in the trash (its intent says where): remove the pointers
    that led to it, then the intent. Whether one was finished: False while there is no intent, or the memory
    has not moved (a delete under way, or one stopped before its move, whose intent is harmless)."""
    intent = delete_intent(home, name)
    if _kind(intent) != "file":
        return False
    try:
        record = orjson.loads(read_bytes(intent))
        trash, pointers = record["trash"], [validate_name(p) for p in record["pointers"]]
        validate_name(trash)
    except (orjson.JSONDecodeError, KeyError, TypeError, BadInput) as exc:
        raise IntegrityError(f"broken delete record {intent}: {exc}") from None
    if _kind(home / name) == "dir" or _kind(home / TRASH / trash) != "dir":
        return False
    for path in [home / p for p in pointers] + [rename_intent(home, name), intent]:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    return True


def resolve(home: Path, name: str) -> Path:
    """The directory of memory ``name``, following rename pointers (a file ``<home>/<old>`` holding
    ``{"renamedTo": "<new>"}``, or a rename's pointer written before it moved the memory). The directory may
    not exist yet. A delete stopped between its move into the trash and the removal of its pointers is
    finished first (``finish_delete``), so its names are free as after a whole delete."""
    given = validate_name(name)
    seen = set()
    path = home / name
    while (kind := _kind(path)) == "file" or (kind is None and _kind(rename_intent(home, name)) == "file"):
        if kind is None:
            path = rename_intent(home, name)
        if name in seen or len(seen) > 16:
            raise IntegrityError(f"rename pointers loop at memory '{name}'")
        seen.add(name)
        try:
            name = validate_name(orjson.loads(read_bytes(path))["renamedTo"])
        except (orjson.JSONDecodeError, KeyError, TypeError, BadInput) as exc:
            raise IntegrityError(f"broken rename pointer {path}: {exc}") from None
        path = home / name
        if _kind(path) is None and _kind(rename_intent(home, name)) is None:
            if finish_delete(home, name):  # a delete stopped before it removed the pointers: finished now
                return resolve(home, given)
            raise NotFound(f"memory '{given}' was renamed to '{name}', which was deleted; remove the pointer "
                           f"{home / given} to use the name again")
    if kind is None:
        finish_delete(home, name)  # (so that a memory made under a deleted name inherits no old pointer)
    return path


def claimed(path: Path) -> bool:
    """Whether memory directory ``path`` is claimed for a project with nothing logged in it yet: it holds the
    lock and the project list (``pimem.projects.claim``), no ``main/`` (``Memory.claimed``)."""
    return (not os.path.lexists(path / "main") and os.path.lexists(path / "write.lock")
            and os.path.lexists(path / CLAIM))


def names(home: Path, claims: bool = False) -> list[str]:
    """Every memory directory under ``home`` (pointers and the trash excluded), sorted: a directory holding
    ``main/`` and the ``write.lock`` every writer leaves (another project's ``main/`` is not a memory). A
    ``main``, or a memory's directory, that is a link is listed, for its readers to refuse by name (a link
    is nothing pimem made, and is never followed). With ``claims``, also the memories claimed for a project
    with nothing logged yet (``Memory.claimed``)."""
    if not home.is_dir():
        return []
    return sorted(p.name for p in home.iterdir()
                  if p.is_dir() and NAME_RE.fullmatch(p.name) and not reserved(p.name)
                  and os.path.lexists(p / "write.lock")
                  and (os.path.lexists(p / "main") or claims and os.path.lexists(p / CLAIM)))


_datasync = getattr(os, "fdatasync", os.fsync)  # the data and the size; not the file's times


def write_all(fd: int, data: bytes, durable: bool = True, path: str | os.PathLike | None = None) -> None:
    """Write all of ``data`` at ``fd``'s position and (``durable``) flush it to the disk before returning:
    the one durable write every file pimem keeps goes through. A failure (the disk full) names ``path``."""
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        if durable:
            _datasync(fd)
    except OSError as exc:
        if path is None or exc.filename is not None:
            raise
        raise OSError(exc.errno, exc.strerror, str(path)) from None


def cut_back(fd: int, size: int) -> None:
    """Undo a failed append at ``fd``: its file cut back to the ``size`` it had before, durably (shrinking
    needs no space, so this works on a full disk); best effort, the write's own error is the one to tell."""
    try:
        if os.fstat(fd).st_size != size:
            os.ftruncate(fd, size)
            os.fsync(fd)
    except OSError:
        pass


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
    try:
        fd = open_fd(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, FILE_MODE)
    except OSError as exc:  # (named by the file the user knows, not its temporary twin)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        try:
            write_all(fd, data, durable, path)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException as exc:  # the disk is full, say: leave no half-written temp file behind
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError) and exc.filename == str(tmp):
            raise OSError(exc.errno, exc.strerror, str(path)) from None
        raise


def append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` (whole lines) to ``path``, creating it 0600, durably before returning; a torn last
    line left by a crash is first terminated so the new lines start on lines of their own. A new file's
    name is made durable too. A write that fails (the disk full) leaves the file as it was: cut back to
    its size before, or removed if this write created it."""
    created = not path.exists()
    fd = open_fd(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, FILE_MODE)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            data = b"\n" + data
        try:
            write_all(fd, data, path=path)
        except BaseException:
            cut_back(fd, size)
            if created:
                path.unlink(missing_ok=True)
            raise
    finally:
        os.close(fd)
    if created:
        sync_dir(path.parent)
