"""Following session files as agents write them (``pimem import --follow``, ``pimem watch --import``).

    >>> follower = Follower(["~/.codex/sessions", "~/.claude/projects"])
    >>> follower.run(stop)        # until ``stop`` (a threading.Event) is set

Every ``POLL`` seconds the follower looks at the directories it was given (a directory is listed again only
when its modification time changed, so a large tree costs one ``stat`` per directory, and for ``SETTLE``
seconds after a change, whose time stamp a file made right after the listing may share) and at every
``*.jsonl`` file under them, and imports what grew through the import job (``job.run``): each file into
its project's memory (named and claimed as ``import`` names it, unless a name was given), nothing twice, where it
left off. It holds the files it follows open, so that

- a file **rotated** away (renamed, a new file created at its path, a link at its path pointed at another
  file) is read to its end before the new file at its path is read from its start;
- a file **truncated** or rewritten is read again from the start (the keys decide what is new), its format
  told afresh (a rewrite may hold another);
- a **restart** reads on from each memory's import state (``imports.json`` and its journal, folded into it when
  the follower stops), where the last run stopped.

A memory it feeds that is **renamed** (``pimem rename``) is followed into its new name, found through the pointer
its old name keeps; its import state moved with it, so nothing is logged twice or left out. One **deleted**
(``pimem delete``, or moved away or removed by hand) is fed no more for the rest of the run, from the files it was
fed from or new ones of its project: it is not made again behind the user's back from what they deleted (a
follower started again reads those files on from where the deleted memory stood, while it is in the trash:
``deleted_positions``). Each is said once. (A project's memory
the follower only claimed, nothing logged in it, that another lets go of is no delete: it is chosen again.)
Neither is refused while a follower runs (both are while a watcher holds the memory's lease): a follower holds
no lease, and writes each batch under the writer lock, which both take, so no write is cut in half by the move;
it looks for a move at each round, and one during a read is noticed at the read's next write.

A file that cannot be read yet (empty, a first line still being written, a format it cannot tell, lines
that give no message and name no working directory, so no project's memory yet) is looked at again when it
changes; one that cannot be read at all (its mode, a directory now at its path, a read that fails) and a
directory that cannot be listed are tried again every round. A problem is reported
once per file (or directory) and cause, and the other files are followed on meanwhile.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Callable

from .. import decoder
from ..errors import BadInput, NotFound, PimemError, in_the_way
from ..memory import Memory
from .detect import FORMATS, PEEK_LINES, Source, claim_name, default_name, inspect_file
from .job import FileReport, run
from .parser import Malformed, read_lines
from .state import ImportState, deleted_positions, trash_stamp

POLL = 0.25  # seconds between looks at the followed files and directories
OPEN_FILES = 128  # files held open at most (the ones that changed last); others are reopened by path
SETTLE = 3.0  # seconds: a directory whose mtime is this close to when it was listed is listed again next round (a file
# system's time stamps tick by up to 2 s, FAT's; a session file made in the listing's tick leaves the mtime as it was)


@dataclass
class _File:
    """A followed file: the one open at its path (``handle``), its inode, what it was when last read."""

    source: Source
    memory: str
    handle: BinaryIO | None
    ino: int
    seen: tuple = ()  # (size, mtime) when last imported


@dataclass
class _Target:
    mem: Memory
    state: ImportState = field(init=False)
    held: bool = False  # the memory held messages (not a project's claim alone, which another may let go of)

    def __post_init__(self):
        self.state = ImportState(self.mem)


class Follower:
    """Tails the session files under ``paths`` (directories or files) into memories. ``on_report(memory,
    report)`` is called for each file read that logged something, ``on_warning(text)`` for each problem."""

    def __init__(
        self,
        paths: list[str],
        home=None,
        name: str | None = None,
        fmt: str = "auto",
        on_report: Callable[[str, FileReport], None] = lambda memory, report: None,
        on_warning: Callable[[str], None] = lambda text: None,
        timeout: float | None = None,
    ):
        self.home, self.name, self.fmt, self.timeout = home, name, fmt, timeout
        self.on_report, self.on_warning = on_report, on_warning
        self.roots: list[Path] = []
        self.singles: list[Path] = []
        for given in paths:  # (links kept: one re-pointed is a file rotated at its path, read from the new target)
            path = Path(given).expanduser()
            if path.is_dir():
                self.roots.append(Path(os.path.abspath(path)))
            elif path.is_file():
                self.singles.append(Path(os.path.abspath(path)))
            else:
                raise BadInput(f"{given}: no such file or directory")
        self.dirs: dict[Path, int | None] = {}  # directory -> its mtime when last listed (None: listed again next round)
        self.children: dict[Path, list[Path]] = {}  # directory -> its subdirectories when last listed
        self.files: dict[str, _File] = {}
        self.pending: dict[str, tuple] = {str(p): () for p in self.singles}  # not readable yet -> (ino, size, mtime) then
        self.warned: dict[str, str] = {}
        self.failed: set[str] = set()  # files whose last import failed (``_forget``)
        self.targets: dict[str, _Target] = {}
        self.deleted: set[str] = set()  # memories deleted while fed: fed no more (``_moved``)
        self.left: set[str] = set()  # the files that fed them: followed no more
        self.dropped: dict[str, Memory] = {}  # memories a failed read let go of (``_forget``), until opened again
        self.open_order: OrderedDict[str, None] = OrderedDict()
        self.trash: tuple = (None, {})  # (``trash_stamp``, ``deleted_positions`` of every file) when last read

    # ---- the loop -------------------------------------------------------------------------------------

    def run(self, stop: threading.Event, interval: float = POLL) -> None:
        """Poll until ``stop`` is set (between two imports: what was read is logged and recorded); ``stop`` is
        anything with ``is_set()`` and ``wait(seconds)``."""
        try:
            while not stop.is_set():
                self.poll(stop)
                stop.wait(interval)
        finally:
            self.close()

    def poll(self, stop: threading.Event | None = None) -> int:
        """One round: find new files, import what changed. Returns the number of messages logged."""
        for memory, mem in list(self.dropped.items()):  # (let go of after a failed read: looked at as if held still)
            if memory not in self.targets and mem.moved():
                self.targets[memory] = _Target(self.dropped.pop(memory).reopened(pinned=True), held=True)
        for memory, target in list(self.targets.items()):
            if target.mem.moved():  # renamed or deleted since the last round
                self._moved(memory, target)
        for root in self.roots:
            self._scan(root)
        logged = 0
        for path in sorted(self.pending):
            if stop is not None and stop.is_set():
                break
            try:
                self._discover(path)
            except OSError as exc:  # unreadable, or a directory now: said once, the others go on
                self._warn(path, _cannot(path, exc))
                if path in self.pending:
                    self.pending[path] = ()  # (looked at again next round, changed or not)
        for path in list(self.files):
            if stop is not None and stop.is_set():
                break
            try:
                logged += self._check(path)
            except OSError as exc:  # (its last read not recorded as seen: read again next round)
                self._warn(path, _cannot(path, exc))
        return logged

    def close(self) -> None:
        for tracked in self.files.values():
            if tracked.handle is not None:
                tracked.handle.close()
                tracked.handle = None
        for target in self.targets.values():
            try:  # (a stop folds each memory's import journal into its imports.json, if its lock is free now)
                target.state.settle()
            except (PimemError, OSError):
                pass
            target.mem.close()

    # ---- finding files --------------------------------------------------------------------------------

    def _scan(self, directory: Path) -> None:
        """List ``directory`` (and, recursively, its subdirectories) again if it changed since last time."""
        try:
            mtime = directory.stat().st_mtime_ns
        except OSError as exc:
            self.dirs.pop(directory, None)
            if not isinstance(exc, FileNotFoundError):
                self._warn(str(directory), _cannot(str(directory), exc))
            return
        if self.dirs.get(directory) != mtime:
            listed = time.time_ns()
            try:
                entries = list(os.scandir(directory))
                subs = [Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)]
                found = [e.path for e in entries if e.name.endswith(".jsonl") and e.is_file()]
            except FileNotFoundError:
                return
            except OSError as exc:  # an unreadable directory: said once, listed again every round until it can be
                self._warn(str(directory), _cannot(str(directory), exc))
                subs, found = self.children.get(directory, []), []
            else:  # (an mtime in the listing's tick, or ahead of it, is not trusted yet: listed again next round)
                self.dirs[directory] = mtime if abs(listed - mtime) >= SETTLE * 1e9 else None
                self.warned.pop(str(directory), None)
            self.children[directory] = subs
            for path in found:
                if path not in self.files and path not in self.left:
                    self.pending.setdefault(path, ())
        for sub in self.children.get(directory, ()):
            self._scan(sub)

    def _discover(self, path: str) -> None:
        """Start following ``path`` once its format (and so its memory) can be told."""
        if path in self.left:  # (it fed a memory since deleted)
            del self.pending[path]
            return
        try:
            mode = os.stat(path).st_mode
            if not stat.S_ISREG(mode):  # (a directory now at its path, say; a pipe would block the open)
                raise OSError(errno.EISDIR if stat.S_ISDIR(mode) else errno.EINVAL,
                              "a directory, not a session file" if stat.S_ISDIR(mode) else "not a regular file", path)
            handle = open(path, "rb")
        except FileNotFoundError:
            if Path(path) not in self.singles:
                del self.pending[path]
            return
        st = os.fstat(handle.fileno())
        if self.pending.get(path) == (st.st_ino, st.st_size, st.st_mtime_ns):
            handle.close()
            return  # not readable when last looked at, and unchanged since
        self.pending[path] = (st.st_ino, st.st_size, st.st_mtime_ns)
        try:
            source = inspect_file(Path(os.path.realpath(path)), self.fmt)  # (the file's own path, as import keeps it)
        except BadInput as exc:
            handle.close()
            if _ends_a_line(path):  # (else its first line is still being written)
                self._warn(path, str(exc))
            return
        except OSError:
            handle.close()
            raise
        if source is None:  # empty so far
            handle.close()
            return
        if not (self.name or source.cwd or _gives_a_message(path, source)):
            handle.close()  # (bookkeeping lines so far, Claude Code's file-history-snapshot say, which name no project:
            return  # the memory is chosen with the first line to log, which names it, as import chooses it)
        try:
            if self.deleted and (self.name or default_name([source], self.home)) in self.deleted:
                handle.close()  # (a session of a project whose memory was deleted: not claimed again)
                self._leave(path)
                return
            memory = self.name or claim_name([source], self.home, self.timeout)
        except PimemError as exc:  # (a busy lock, a broken project list: said once, tried again next round)
            handle.close()
            self.pending[path] = ()
            self._warn(path, f"{path}: {exc}")
            return
        del self.pending[path]
        if path not in self.failed:  # (readable again; a failed import is said again only if it changes)
            self.warned.pop(path, None)
        self.files[path] = _File(source, memory, handle, st.st_ino)
        self._opened(path)

    # ---- reading them ---------------------------------------------------------------------------------

    def _check(self, path: str) -> int:
        tracked = self.files[path]
        try:
            st = os.stat(path)
        except FileNotFoundError:
            st = None
        truncated = st is not None and st.st_ino == tracked.ino and st.st_size < (tracked.source.size or 0)
        if truncated:  # rewritten in place: told afresh, as a new file (it may be another format now)
            if tracked.handle is not None:
                tracked.handle.close()
            self.files.pop(path, None)
            self.open_order.pop(path, None)
            self.pending[path] = ()
            self._discover(path)
            return self._check(path) if path in self.files else 0
        if st is None or st.st_ino != tracked.ino:  # rotated or removed: read the old file to its end first
            logged = self._read(path, tracked, tracked.handle) if tracked.handle is not None else 0
            if tracked.handle is not None:
                tracked.handle.close()
            self.files.pop(path, None)  # (gone already when that read failed)
            self.open_order.pop(path, None)
            if st is not None or Path(path) in self.singles:
                self.pending[path] = ()
                self._discover(path)
                if path in self.files:
                    logged += self._check(path)
            return logged
        if (st.st_size, st.st_mtime_ns) == tracked.seen:
            return 0
        if tracked.handle is None:
            tracked.handle = open(path, "rb")  # (an OSError: said by ``poll``, tried again next round)
            if os.fstat(tracked.handle.fileno()).st_ino != tracked.ino:
                tracked.handle.close()
                tracked.handle = None
                return 0  # replaced between the two looks: the next round sees the new inode
        self._opened(path)
        logged = self._read(path, tracked, tracked.handle)
        tracked.seen = (st.st_size, st.st_mtime_ns)
        return logged

    def _read(self, path: str, tracked: _File, handle: BinaryIO) -> int:
        tracked.source.size = os.fstat(handle.fileno()).st_size
        target = self._target(tracked.memory)
        opener = lambda source: os.fdopen(os.dup(handle.fileno()), "rb")  # noqa: E731  (run closes its copy)
        target.held = target.held or target.mem.exists()
        try:
            reports = run(target.mem, [tracked.source], on_warning=self.on_warning, timeout=self.timeout,
                          state=target.state, open_file=opener, since=self._deleted(target, tracked.source.shown))
        except OSError:  # a read or write that failed (the library's ``SystemRefused`` too): ``poll`` says so, and
            self._forget(path, tracked)  # it is tried again next round
            raise
        except PimemError as exc:  # a busy lock, a refused batch: say so and try again next round
            if target.mem.moved() and self.targets.get(tracked.memory) is target:  # (renamed or deleted meanwhile)
                self._moved(tracked.memory, target)
                if self.targets.get(tracked.memory) is not target:  # (fed on under its new name, or left)
                    return self._read(path, tracked, handle) if self.files.get(path) is tracked else 0
            self._warn(path, f"{tracked.memory}: {exc}" if not str(exc).startswith(f"{tracked.memory}: ") else str(exc))
            self._forget(path, tracked)
            return 0
        self.warned.pop(path, None)
        self.failed.discard(path)
        report = reports[0]
        if report.imported:
            target.held = True
            self.on_report(target.mem.name, report)
        return report.imported

    def _deleted(self, target: _Target, path: str) -> dict | None:
        """For a file ``target``'s memory has imported nothing of: where the import of the memory deleted last that
        held it stood (``deleted_positions``; the trash read once, and again when a delete changes it), so a
        follower started again does not bring back what was deleted; else None."""
        if target.state.peek_file(path) is not None:
            return None
        stamp = trash_stamp(target.mem.home)
        if stamp is None:
            return None
        if stamp != self.trash[0]:
            self.trash = (stamp, deleted_positions(target.mem.home))
        position = self.trash[1].get(path)
        return {path: position} if position is not None else None

    def _forget(self, path: str, tracked: _File) -> None:
        """After a failed read: the file is found again next round, with its memory and import state read
        afresh (the failed run may have moved them past lines it did not log)."""
        tracked.seen = ()
        target = self.targets.pop(tracked.memory, None)
        if target is not None:
            target.mem.close()
            if target.held:  # (opened afresh, it is still the memory it fed: one deleted since is not made again)
                self.dropped[tracked.memory] = target.mem
        if tracked.handle is not None:
            tracked.handle.close()
        self.files.pop(path, None)
        self.open_order.pop(path, None)
        self.pending[path] = ()
        self.failed.add(path)

    def _moved(self, memory: str, target: _Target) -> None:
        """The memory ``target`` (fed the files that go to ``memory``) is no longer at its path: renamed, it is
        fed on under its new name (its import state moved with it, read afresh there); deleted (or moved by hand:
        no pointer leads to it), its files are followed no more and it is not made again. Said once."""
        old = target.mem.name
        try:
            found = Memory.open(old, self.home)  # (through the pointer a rename leaves)
        except NotFound:
            found = None
        except PimemError as exc:  # (a pointer that cannot be read, say: looked at again next round)
            self._warn(old, f"memory '{old}' was moved: {exc}")
            return
        del self.targets[memory]
        target.mem.close()
        if found is not None and found.identity() == target.mem._identity:
            found.close()
            for tracked in self.files.values():
                if tracked.memory in (memory, old):
                    tracked.memory = found.name
            if self.name in (memory, old):
                self.name = found.name
            self.on_warning(f"memory '{old}' was renamed to '{found.name}'; following on into '{found.name}'")
            return
        if found is not None:
            found.close()
        if not target.held:  # a claim with nothing logged, let go of (an import of the project that logged nothing,
            for path, tracked in list(self.files.items()):  # a rename over it): its files' memory chosen again
                if tracked.memory in (memory, old):
                    self._forget(path, tracked)
                    self.failed.discard(path)
            return
        self.deleted.update((memory, old))
        for path, tracked in list(self.files.items()):
            if tracked.memory in (memory, old):
                self._leave(path)
        self.on_warning(f"memory '{old}' was deleted while followed; nothing more is imported into it until this "
                        "follower is started again (which reads its files on from where it stood)")

    def _leave(self, path: str) -> None:
        """Follow ``path`` no more (it fed a memory since deleted)."""
        tracked = self.files.pop(path, None)
        if tracked is not None and tracked.handle is not None:
            tracked.handle.close()
        self.open_order.pop(path, None)
        self.pending.pop(path, None)
        self.warned.pop(path, None)
        self.failed.discard(path)
        self.left.add(path)

    def _target(self, memory: str) -> _Target:
        if memory not in self.targets:
            dropped = self.dropped.pop(memory, None)
            if dropped is None:
                self.targets[memory] = _Target(Memory.at(memory, self.home))
            else:
                self.targets[memory] = _Target(dropped.reopened(pinned=True), held=True)
        return self.targets[memory]

    def _opened(self, path: str) -> None:
        """Keep at most ``OPEN_FILES`` files open: close the one that changed longest ago."""
        self.open_order.pop(path, None)
        self.open_order[path] = None
        while len(self.open_order) > OPEN_FILES:
            old, _ = self.open_order.popitem(last=False)
            tracked = self.files.get(old)
            if tracked is not None and tracked.handle is not None:
                tracked.handle.close()
                tracked.handle = None

    def _warn(self, path: str, text: str) -> None:
        if self.warned.get(path) != text:
            self.warned[path] = text
            self.on_warning(text)


def _cannot(path: str, exc: OSError) -> str:
    """One line for a file or directory that cannot be read now (the others are followed on)."""
    where = f": {exc.filename}" if exc.filename and str(exc.filename) != path else ""
    return f"{path}: {exc.strerror or exc}{where}{in_the_way(exc)}; following the others, trying it again"


def _gives_a_message(path: str, source: Source) -> bool:
    """Whether the first lines of ``path`` (up to ``PEEK_LINES``, what ``inspect_file`` looks through for a
    working directory) give a message to log, or fill that many lines."""
    parser = FORMATS[source.format](source.shown)
    with open(path, "rb") as f:
        for n, line in enumerate(read_lines(f, os.fstat(f.fileno()).st_size), 1):
            if n > PEEK_LINES:
                return True
            try:
                if parser.parse(n, line.removeprefix(decoder.BOM), decoder.loads(line.removeprefix(decoder.BOM))):
                    return True
            except (decoder.JSONDecodeError, Malformed):
                continue
    return False


def _ends_a_line(path: str) -> bool:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        if f.tell() == 0:
            return False
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"
