"""Which projects a memory holds, and which memory a project's sessions go to without ``--name``.

A memory records the working directories whose sessions it was given in ``<memory>/projects.json``,
``{"version": 1, "projects": ["/home/dev/client-a/api", …]}``, written atomically (and durably) under its
writer lock, never shrunk. A memory an earlier pimem made has none: what its ``imports.json`` says of the files
it imported (each one's ``state.cwd``) stands for it until the file is written, the first time the memory is
claimed or given a project (one whose ``imports.json`` was deleted before then holds no project, as far as
pimem can tell without reading its whole log). A file of its own, not ``imports.json``: that one is derived
(deleted freely, rebuilt without the files' positions when inconsistent) and grows with every file imported, a
memory claimed before its first message has none, and the hook reads this one on every event.

Without ``--name`` a project goes to the first of its ``choices`` (``importers.detect``) that holds it; else to
the memory of its directory's name while that holds no project's sessions (one made by ``append`` or
``remember`` under the project's name is that project's, as before), else to its own, named with its path's
hash. ``memory_for`` only looks (a reader: the hook's answer); ``claim`` takes the memory of the directory's name
under its writer lock and records the project there before anything is imported, so two projects of one
directory name starting at once never both take it, and every later event of either finds the same memory again
(a project's own memory is no other project's: the import records the project in it, ``record``).

A project is its directory with links resolved (``resolved``): ``~/work/api`` a link to ``/srv/api`` is one
project, recorded as ``/srv/api``. A memory holds a project recorded by either path (``holds``): an earlier
pimem recorded the path as it was given.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from . import home as homes
from .errors import Busy, IntegrityError, NotFound, PimemError
from .nofollow import read_bytes

FILE = "projects.json"
VERSION = 1
# when a choice is taken: while it holds the project; also while it holds none; always
HELD, FREE, OWN = "held", "free", "own"


def held(directory: Path) -> list[str] | None:
    """The project directories memory ``directory`` holds sessions of: its ``projects.json``, else the working
    directories its ``imports.json`` names ([] without one: a memory made by hand, or none yet); None when
    that cannot be read (not shown to hold no project). A ``projects.json`` that cannot be read raises
    ``IntegrityError``."""
    path = directory / FILE
    try:
        data = orjson.loads(read_bytes(path))
    except (FileNotFoundError, NotADirectoryError):
        return _imported(directory)
    except orjson.JSONDecodeError as exc:
        raise IntegrityError(f"broken project list {path}: {exc}; remove it to have it made again from the "
                             "memory's imports") from None
    projects = data.get("projects") if isinstance(data, dict) else None
    if not isinstance(projects, list) or not all(isinstance(p, str) for p in projects):
        raise IntegrityError(f"broken project list {path}: no list of directories; remove it to have it made "
                             "again from the memory's imports")
    return projects


def resolved(cwd: str) -> str:
    """Project directory ``cwd`` with its links resolved (``os.path.realpath``), as far as it exists here (a
    session's directory on another machine, or removed since, is as recorded); a relative or unusable one
    (a lone surrogate, a NUL) as it is."""
    if not os.path.isabs(cwd):
        return cwd
    try:
        return os.path.realpath(cwd)
    except (OSError, ValueError):
        return cwd


def holds(projects, cwd: str) -> bool:
    """Whether the project list ``projects`` holds project ``cwd``: by its path as given or resolved, or by a
    path recorded unresolved (an earlier pimem's record of a link) that resolves to it."""
    key = resolved(cwd)
    return any(p in (cwd, key) or resolved(p) == key for p in projects)


def recorded(directory: Path) -> bool:
    return os.path.lexists(directory / FILE)


def _imported(directory: Path) -> list[str] | None:
    """The working directories the memory's import state (``imports.json`` and its journal) carries for the files
    it imported (``state.cwd``)."""
    from .importers.state import read_state

    if not os.path.lexists(directory / "imports.json"):
        return []
    try:
        state = read_state(directory)
    except OSError:
        return None
    files = state.get("files") if state is not None else None
    if not isinstance(files, dict):
        return None
    found = []
    for position in files.values():
        carried = position.get("state") if isinstance(position, dict) else None
        cwd = carried.get("cwd") if isinstance(carried, dict) else None
        if isinstance(cwd, str) and cwd:
            found.append(cwd)
    return list(dict.fromkeys(found))


def record(mem, cwds, timeout: float | None = None) -> None:
    """Record that memory ``mem`` (it exists) holds sessions of the directories ``cwds``: under its writer
    lock unless its ``projects.json`` already lists them all."""
    cwds = [cwd for cwd in dict.fromkeys(cwds) if cwd]
    if not cwds or (recorded(mem.path) and all(holds(held(mem.path) or (), cwd) for cwd in cwds)):
        return
    with mem.lock(timeout):
        _add(mem.path, cwds)


def _add(directory: Path, cwds: list[str]) -> None:
    """Under the writer lock: ``cwds`` added to ``directory``'s projects (those ``held`` finds, the first time),
    resolved."""
    was = recorded(directory)
    projects = held(directory) or []
    missing = list(dict.fromkeys(resolved(cwd) for cwd in cwds if not holds(projects, cwd)))
    if was and not missing:
        return
    homes.write_atomic(directory / FILE, orjson.dumps({"version": VERSION, "projects": projects + missing}) + b"\n")
    if not was:
        homes.sync_dir(directory)


def remake(directory: Path) -> None:
    """Under the writer lock: a ``projects.json`` that cannot be read made again from what the memory's
    ``imports.json`` says it imported, as removing it does (``fsck --repair``)."""
    try:
        os.unlink(directory / FILE)
    except FileNotFoundError:
        pass
    _add(directory, [])


def memory_for(cwd: str, choices: list[tuple[str, str]], home=None) -> tuple[str, bool]:
    """Where project ``cwd``'s sessions are, or would go: the name of the first of ``choices`` that holds it,
    else of the first ``FREE`` one that holds no project, else the ``OWN`` one; and whether that is settled
    (False: a ``FREE`` one, to be claimed before it is written). Writes nothing (a reader's choice). Reads the
    project lists of the memories it passes, a small file each (an earlier pimem's memory, until its list is
    written, its ``imports.json``): one while the project is in the memory of its directory's name, or in its
    own because that one holds another project; the ``OWN`` one is read only after a ``FREE`` one (it may hold
    the project still, from before that one was deleted)."""
    from .memory import Memory

    free = None
    for name, when in choices:
        if when == OWN and free is None:
            return name, True  # (its own, by its path's hash: no other project's; ``record`` lists it there)
        try:
            projects = held(Memory.at(name, home).path)
        except PimemError:
            if when != HELD:
                raise
            continue  # (an earlier pimem's name that leads nowhere now, a broken pointer: not shown to hold it)
        if projects and holds(projects, cwd):
            return name, True
        if when == OWN:
            return free, False
        if when == FREE and projects == [] and free is None:
            free = name
    raise ValueError("no OWN choice")  # (the last choice is always one)


def claim(cwd: str, choices: list[tuple[str, str]], home=None, timeout: float | None = None) -> str:
    """The memory project ``cwd``'s sessions go to, as ``memory_for`` chooses it, claimed for the project when
    it is the ``FREE`` one: the choice is made again under that memory's writer lock and the project recorded
    there (a memory not there yet gets its directory, its lock and the record, and is made by its first
    append), so of two projects claiming one name at once the second finds the first's record and goes on to
    its own. ``Busy`` after ``timeout`` seconds. The list of an earlier pimem's memory it passes is written on
    the way, from its ``imports.json``."""
    from .memory import Memory

    for name, when in choices[:-1]:  # an earlier pimem's memory of the name, of other projects: their list written
        try:  # now (when its lock is free), so that a reader of this project reads one small file, not its imports.json
            mem = Memory.at(name, home)
            if not recorded(mem.path) and mem.exists() and held(mem.path):
                with mem.lock(0):
                    _add(mem.path, [])
        except Busy:
            pass  # (written by a later claim; its imports.json says the same meanwhile)
        except PimemError:
            if when != HELD:
                raise
    while True:
        name, settled = memory_for(cwd, choices, home)
        if settled:
            return name
        mem = Memory.at(name, home)
        homes.ensure_dir(mem.path)
        try:
            with mem.lock(timeout):
                projects = held(mem.path)
                if projects == [] or holds(projects or (), cwd):
                    _add(mem.path, [cwd])
                    return name
        except NotFound:
            pass  # (its directory removed while this waited: an unused claim released, ``release``)
        # (taken by another project meanwhile, or released: chosen again, its record read)


def release(mem, cwds=None) -> None:
    """Undo the claim of memory ``mem`` for projects ``cwds`` (None: any) when nothing was logged in it (an
    import of nothing, or one that failed before its first message; a rename to its name): its directory,
    holding only the lock and the project list ``claim`` left, is removed, so a refused import leaves the home
    as it found it and the name is free for ``rename``. Left as it is while the memory exists, holds anything
    else or another project, or is locked (a writer is at it); a claimer waiting for the lock meanwhile finds it
    gone and chooses again. The lease of a builder that died holding the claim (a watcher killed) goes with it; a
    live builder's keeps it (leases are taken under the writer lock)."""
    from . import lease

    try:
        if mem.exists() or mem.identity() is None:  # (made, or never claimed: no lock taken)
            return
        with mem.lock(0):
            if mem.exists() or cwds is not None and not all(holds(cwds, p) for p in held(mem.path) or ()):
                return
            if not set(os.listdir(mem.path)) <= {lease.FILE, FILE, "write.lock"} or lease.holder(mem) is not None:
                return
            for leftover in (lease.FILE, FILE, "write.lock"):  # (the lock last: a waiter on it then finds it gone, ``Moved``)
                try:
                    os.unlink(mem.path / leftover)
                except FileNotFoundError:
                    pass
            os.rmdir(mem.path)
    except (Busy, NotFound, IntegrityError, OSError):
        pass  # (a claim left as it was: harmless, its project's next import uses it)


def still_free(name: str, cwd: str, home=None) -> bool:
    """Whether memory ``name`` holds no other project than ``cwd`` (after a reader used it unclaimed)."""
    from .memory import Memory

    projects = held(Memory.at(name, home).path)
    return projects is not None and all(holds([cwd], p) for p in projects)
