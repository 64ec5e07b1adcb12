"""Moving whole memories: rename (the old name keeps a pointer) and delete (into ``<home>/.trash``).

Both refuse while a watcher holds the memory's lease (``lock.json``, see ``pimem.lease``), naming the process,
and both take the writer lock, under which leases are taken, so no append or lease is cut in half by the move.

Both are all or nothing. ``rename`` writes its pointer before it moves anything (as ``.<old>.renaming``, which
``home.resolve`` follows while ``<old>`` is missing), so a crash or a full disk at any step leaves the old name
leading to the memory; a step that fails is rolled back. ``delete`` first records where the memory goes and the
pointers that lead to it (``.<name>.deleting``), then moves it into the trash with one ``rename``, then removes
those pointers and the record (``home.finish_delete``); a crash after the move leaves the record, and the next
command that meets the name or a pointer to it finishes the delete, so the names end free either way.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

import orjson

from . import env, home as homes
from .errors import BadInput, Busy, PimemError
from .memory import Memory


def refuse_if_watched(mem: Memory, doing: str, to: str | None = None) -> None:
    """``Busy`` naming the process while a live watcher (or build-tree) holds the memory's lease; ``to``: the
    memory it would be renamed to, whose lease this is (a claim's: a memory of that name would be taken over)."""
    from .lease import holder, not_answering, quiet, resume

    lease = holder(mem)
    if lease is not None:
        where = f" on {lease['host']}" if lease.get("host") and lease["host"] != socket.gethostname() else ""
        since = f", since {lease['started']}" if lease.get("started") else ""
        what = f"'{to}' to '{mem.name}'" if to else f"'{mem.name}'"
        late = quiet(lease)  # (frozen with Ctrl-Z: a SIGTERM waits, pending, until it is resumed)
        raise Busy(
            f"cannot {doing} {what}: a tree builder, pimem watch or build-tree (pid {lease['pid']}{where}{since}), "
            f"{'' if late is None else not_answering(late) + ', '}holds {f'{mem.name!r}' if to else 'it'}; "
            + ("stop that process first" if late is None else f"{resume(lease)} and stop it first")
        )


def rename(old: str, new: str, home: str | os.PathLike | None = None, timeout: float | None = None) -> Memory:
    """Move memory ``old`` to ``new``; ``<home>/<old>`` becomes a pointer ``{"renamedTo": new}`` that every
    command follows. ``new`` must be free: renaming back over a pointer that leads to ``old`` is allowed."""
    from .projects import release

    homes.validate_name(new)
    mem = Memory.open(old, home)
    target = mem.home / new
    # a project's claim of the name, nothing logged in it, is taken over (not the claim being renamed): released
    # once the rename goes ahead, under the lock, so a rename refused leaves it as it was
    claim = target.is_dir() and not target.is_symlink() and target != mem.path and homes.claimed(target)

    def refuse_taken() -> None:
        if target.exists() or target.is_symlink():
            if not (target.is_file() and _leads_to(mem.home, new, mem.path)):
                raise BadInput(f"cannot rename '{old}' to '{new}': '{new}' already exists in {mem.home}")

    if not claim:
        refuse_taken()
    if target == mem.path:
        raise BadInput(f"'{old}' is already named '{new}'")
    refuse_if_watched(mem, "rename")
    with mem.lock(timeout):
        refuse_if_watched(mem, "rename")
        if claim:  # (a live builder's lease keeps it: said so, not that the name is taken)
            taken = Memory(new, target, mem.home)
            refuse_if_watched(taken, "rename", to=mem.name)
            release(taken)
            refuse_taken()
        intent = homes.rename_intent(mem.home, mem.name)
        homes.write_atomic(intent, orjson.dumps({"renamedTo": new}) + b"\n")  # the pointer, before any move
        aside = mem.home / f".{new}.pointer-{os.getpid()}"
        steps: list = []  # how to undo each step taken so far
        try:
            if target.is_file():  # a pointer back to old: kept aside until the move is done
                os.rename(target, aside)
                steps.append(lambda: os.rename(aside, target))
            os.rename(mem.path, target)
            steps.append(lambda: os.rename(target, mem.path))
            os.rename(intent, mem.path)
        except BaseException:
            for undo in reversed(steps):
                undo()
            _unlink(intent)
            raise
        _unlink(aside)
    return Memory(new, target, mem.home)


def _unlink(path: Path) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


def _leads_to(root: Path, name: str, path: Path) -> bool:
    try:
        return homes.resolve(root, name) == path
    except PimemError:  # a broken or looping pointer leads nowhere
        return False


def delete(name: str, home: str | os.PathLike | None = None, timeout: float | None = None) -> Path:
    """Move memory ``name`` whole to ``<home>/.trash/<name>-<timestamp>`` and return where it went. Rename
    pointers that led to it are removed (they would point at nothing). A memory claimed for a project with
    nothing logged in it yet (``Memory.claimed``) is moved so too."""
    mem = Memory.open(name, home)
    refuse_if_watched(mem, "delete")
    stamp = env.now().strftime("%Y%m%dT%H%M%S")
    with mem.lock(timeout):
        refuse_if_watched(mem, "delete")
        trash = homes.ensure_dir(mem.home / homes.TRASH)
        dest = trash / f"{mem.name}-{stamp}"
        n = 1
        while dest.exists():
            n += 1
            dest = trash / f"{mem.name}-{stamp}-{n}"
        pointers = [p.name for p in mem.home.iterdir() if p.is_file() and homes.NAME_RE.fullmatch(p.name) and _leads_to(mem.home, p.name, mem.path)]
        intent = homes.delete_intent(mem.home, mem.name)
        homes.write_atomic(intent, orjson.dumps({"trash": dest.name, "pointers": pointers}) + b"\n")  # before the move
        homes.sync_dir(mem.home)
        try:
            os.rename(mem.path, dest)
        except BaseException:
            _unlink(intent)
            raise
    homes.finish_delete(mem.home, mem.name)
    return dest
