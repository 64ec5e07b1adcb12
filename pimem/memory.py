"""``Memory``: the library API that every command, test and agent wrapper uses.

A message travels one road: ``Memory.append`` → validation of the whole batch → the writer lock → the log
(durable, fsync'd) → derived state. Nothing is written unless the whole batch is valid.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import stat
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterable, Iterator, Sequence

import orjson

from . import config as configs, env, home as homes, message as msgs, when
from .errors import (BadInput, Busy, IntegrityError, NotFound, PimemError, as_error, library, library_context,
                     library_items, said_as, shown)
from .lock import Moved, WriterLock
from .numbers import MAX_I, MAX_SECONDS
from .store import Log
from .nofollow import check_dir, planted

SPAN_CANDIDATES = 64  # index candidates ``span_holds`` checks against the log before it gives up
FLAT_KEPT = 4096  # messages whose folded texts ``span_holds`` keeps for its next questions
SPAN_READ = 1024  # messages of a span (tool messages, or the others) ``span_holds`` reads rather than asking the index
# what a hurried reader's mask does without the index (``span_holds``)
MASK_UNASKED = "lines over long spans are shown as [tool output hidden]"
MASK_MEANWHILE = f"{MASK_UNASKED} until it is done"
# where ``_index_terms`` splits a word in other scripts than ASCII (compiled when first asked: re caches it)
_UNSURE = r"[^\w]+|[_σμ]+"
# what Claude Code writes as a user line when the user stops a turn: its words, not the user's (imported as
# ``user``, marked ``meta.marker``; known by this text when logged before that mark)
CLAUDE_MARKERS = frozenset({"[Request interrupted by user]", "[Request interrupted by user for tool use]"})


@contextlib.contextmanager
def collector_resting():
    """The cycle collector off for a bulk stream: its batches are many small, acyclic objects held for a moment
    (and the views a line per message), which it would keep walking for nothing (a tenth of the CPU)."""
    import gc

    collecting = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if collecting:
            gc.enable()


def _index_terms(text: str) -> list[str | tuple[str, ...]]:
    """What the index is asked for a text the tool-text mask folded (``privacy.flat``): the words every message
    holding it holds as the index reads messages (lowercased, not folded), in any script.
    Split at what a JSON escape writes apart too (a quote's `"x"` is `\\"x\\"` in a call's arguments), and at
    the quotes and dashes the fold writes plain (`it's` is `it’s` in gcc's output, `2024-2025` `2024–2025`); a
    word with other characters than ASCII is split at its punctuation as well (a Chinese text's full-width `，`
    folds to `,`) and at `σ` and `μ` (a final `ς`, the micro sign fold to them), and is asked composed or
    decomposed (`é`, a Hangul syllable: a file name listed on macOS is decomposed)."""
    import unicodedata

    terms: list[str | tuple[str, ...]] = []
    for word in dict.fromkeys(re.split(r'[\s"\\/\'-]+', text)):
        if not word.isascii():
            for piece in re.split(_UNSURE, word):
                if piece:
                    decomposed = unicodedata.normalize("NFD", piece)
                    terms.append(piece if decomposed == piece else (piece, decomposed))
        elif word:
            terms.append(word)
    return list(dict.fromkeys(terms))


def check_timeout(timeout) -> None:
    """``BadInput`` unless ``timeout`` is None or seconds from 0 to a year, as ``--timeout`` takes them."""
    if timeout is not None and not (type(timeout) in (int, float) and 0 <= timeout <= MAX_SECONDS):
        raise BadInput(f"timeout is seconds from 0 to {MAX_SECONDS:,.0f} (a year), or None, not {shown(timeout):.40}")


def _number(value, name: str, what: str = "a message number") -> None:
    """``BadInput`` naming argument ``name`` unless ``value`` is a whole number from 0 to 2^63−1 (not a bool)."""
    if type(value) is not int or not 0 <= value <= MAX_I:
        raise BadInput(f"{name} is {what} (0 to {MAX_I}), not {shown(value):.40}")


def _flag(value, name: str) -> None:
    if type(value) is not bool:
        raise BadInput(f"{name} is True or False, not {shown(value):.40}")


def _moment(value, name: str) -> None:
    if not (isinstance(value, datetime) and value.utcoffset() is not None):
        raise BadInput(f"{name} must be a datetime with its UTC offset (an aware datetime), not {shown(value):.60}")
    try:
        value.astimezone(timezone.utc)  # (datetime.max at -14:00 is past year 9999 there: dates are compared in UTC)
    except OverflowError:
        raise BadInput(f"{name} {value.isoformat()} is out of the range of dates (years 1 to 9999, in UTC too)") from None


def _root(home) -> Path:
    """The home directory a caller named (``home``), else the environment's."""
    if home is not None and not isinstance(home, (str, os.PathLike)):
        raise BadInput(f"home is a directory's path (a str or a Path) or None, not {shown(home):.40}")
    return env.home(home)


def _reading(method):
    """A public reader of ``Memory``, checked once it has read (``Memory._here``: one stat): a memory renamed or
    deleted while the object had it open is said as a writer says it, also where the read failed on it."""

    @functools.wraps(method)
    def read(self, *args, **kwargs):
        with self._failed_where_moved():
            out = method(self, *args, **kwargs)
        self._here()
        return out

    return read


class _Hurry:
    """A hurried reader's state (``Memory.hurried``): what takes its note, the index as first looked at
    (``index.Look``), and whether the index is not asked any more."""

    __slots__ = ("note", "look", "unasked")

    def __init__(self, note: Callable[[str], None] | None):
        self.note, self.look, self.unasked = note, None, False


class _Checked(dict):
    """A message (or a meta's object) ``prepare`` checked: read-only, as its batch is logged as it was checked."""

    def _refuse(self, *_, **__):
        raise TypeError("a prepared message cannot be changed: prepare the batch again")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse


def _frozen(value):
    """A meta's value that cannot be changed: its objects read-only, its arrays tuples (logged alike)."""
    if isinstance(value, dict):  # (most metas hold strings alone: nothing below them to copy)
        return _Checked({key: v if type(v) is str else _frozen(v) for key, v in value.items()})
    if isinstance(value, list):
        return tuple(map(_frozen, value))
    return value


class Prepared(tuple):
    """A batch ``Memory.prepare`` checked and normalised: ``append`` and ``append_stream`` log it as it is,
    without checking it again (a bulk import's hot path). Any other batch is checked first. It cannot be
    changed: a tuple of read-only messages, their metas copied (what the caller changes afterwards is not
    logged)."""


class Memory:
    """One named memory under a home directory."""

    def __init__(self, name: str, path: Path, home: Path):
        self.name = name
        self.path = path
        self.home = home
        self.log = Log(path / "main")
        self._lock = None
        self._identity: tuple[int, int] | None = None  # the directory's, once locked (``identity``)
        self._config: dict | None = None
        self._tree = None  # pimem.tree.Tree, on first use
        self._views = None  # pimem.viewfile.ViewFile, on first use
        self._index = None
        self._flat: dict[tuple, tuple[str, ...]] = {}  # a logged message's texts as the mask compares them
        # a reader that may not wait for a long catch-up of the index (a turn's context): what takes the note saying
        # why the tool-text mask did not ask it (``span_holds``); None: the index is caught up whatever it takes
        self._hurry = _Hurry(None)  # (``hurried``, as every thread sees it but one ``hurrying``)
        self._hurrying = threading.local()  # (a thread's own within ``hurrying``: ``state``)
        # told once what a reader that waits for the index's catch-up waits for, when that is long (a command the
        # user typed: a line on stderr; ``waits_for_index``)
        self.patient: Callable[[str], None] | None = None
        self._told = False
        # the derived state's caches (tree, views) are changed by readers too (catching up): one thread at a
        # time, so threads may share this object (a writer takes it under the writer lock; a reader never
        # waits for that lock while holding it)
        self._derived = threading.RLock()

    # ---- opening -----------------------------------------------------------------------------------------

    @classmethod
    def at(cls, name: str, home: str | os.PathLike | None = None) -> "Memory":
        """Memory ``name``, whether or not it exists yet; nothing is created until a writer appends. A bad
        ``$PIMEM_LOCK_TIMEOUT`` is refused here, before a writer creates anything."""
        if not isinstance(name, str):  # (None was named '' in the error)
            raise BadInput(f"name is a memory's name (a str), not {shown(name):.40}")
        root = _root(home)
        path = homes.resolve(root, name)
        env.lock_timeout()
        return cls(path.name, path, root)

    @classmethod
    def open(cls, name: str, home: str | os.PathLike | None = None) -> "Memory":
        """An existing memory, or one ``claimed`` with nothing logged yet (read as a memory of no messages, writing
        nothing there); unknown names raise ``NotFound`` (exit 3) and create nothing."""
        mem = cls.at(name, home)
        if not (mem.exists() or mem.claimed()):
            mem.log.files()  # (a pipe or a file where its log's directory goes is said as itself)
            raise NotFound(f"no memory named '{name}' in {mem.home} (see 'pimem list')",
                           tools=f"no memory named '{name}' in {mem.home} (see list_memories)")
        mem.pin()
        return mem

    @classmethod
    def named(cls, names: Iterable[str], home: str | os.PathLike | None = None) -> list["Memory"]:
        """The existing (or ``claimed``) memories ``names``, each once (a name given twice, or two names of one
        memory: an old name's rename pointer and the new one); unknown names raise ``NotFound``."""
        if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
            raise BadInput(f"names is a list of memories' names, not {shown(names):.40}")
        found: dict[Path, Memory] = {}
        for name in names:
            mem = cls.open(name, home)
            found.setdefault(mem.path, mem)
        return list(found.values())

    def exists(self) -> bool:
        return check_dir(self.path / "main")

    def claimed(self) -> bool:
        """Whether this is a memory claimed for a project with nothing logged in it yet: its directory holds the
        lock and the project list (``pimem.projects.claim``), no ``main/``. Opened as a memory of no messages
        (``open``); a writer's first append makes it one."""
        return not self.exists() and check_dir(self.path) and homes.claimed(self.path)

    def identity(self) -> tuple[int, int] | None:
        """The directory's device and inode (the same memory after a rename), None when it is not there."""
        try:
            found = os.stat(self.path, follow_symlinks=False)
        except OSError:
            return None
        return (found.st_dev, found.st_ino) if stat.S_ISDIR(found.st_mode) else None

    def pin(self) -> None:
        """Hold this object to the directory now at its path (if there is one), as its first write does: a
        later write finds that memory renamed or deleted (``NotFound``, exit 3), and ``moved`` says so, rather
        than writing to whatever is at the path then."""
        if self._identity is None:
            self._identity = self.identity()

    def moved(self) -> bool:
        """Whether the directory this object read, wrote in (or was pinned to) is no longer at its path."""
        return self._identity is not None and self.identity() != self._identity

    def _here(self) -> None:
        """After a read: ``NotFound`` (exit 3) when the memory this object had open was renamed or deleted
        meanwhile, rather than what reading at its path found (no messages, a pointer file's error, another
        memory that took the name). The first read pins the object, as ``open`` and a first write do."""
        if self.moved():
            raise self._moved()
        self.pin()

    @contextlib.contextmanager
    def _failed_where_moved(self):
        """A read that failed on a memory renamed or deleted meanwhile (the system's error there, or no message
        found) says that, as a writer does."""
        try:
            yield
        except Exception as exc:
            if as_error(exc) is not None and self.moved():
                raise self._moved() from None
            raise

    def _read_here(self, read: Iterator):
        """``read`` (a generator over the log), checked as ``_reading`` checks a reader once it ends."""
        with self._failed_where_moved():
            yield from read
        self._here()

    def reopened(self, pinned: bool = False) -> "Memory":
        """This memory as a new object with caches of its own (its tree, views and index, its settings read
        again), for another thread; not pinned (``watch`` takes a memory made again at the path so), unless
        ``pinned``: held to the directory this one was (a move since is noticed, as if this one had stayed open)."""
        mem = Memory(self.name, self.path, self.home)
        if pinned:
            mem._identity = self._identity
        return mem

    @classmethod
    def all(cls, home: str | os.PathLike | None = None, refused=None, claims: bool = False) -> list["Memory"]:
        """Every memory under the home (with ``claims``, the ``claimed`` ones too). One whose ``main/`` is
        refused (a link) raises, or with ``refused`` is handed to ``refused(mem, error)`` and left out (a
        command over many names it and goes on)."""
        if refused is not None and not callable(refused):
            raise BadInput(f"refused is a function of (memory, error) or None, not {shown(refused):.40}")
        root = _root(home)
        out = []
        for name in homes.names(root, claims):
            mem = cls(name, root / name, root)
            try:
                if mem.path.is_symlink():  # (a memory's directory that is a link: named, never followed)
                    raise planted(mem.path)
                mem.exists()
                mem.pin()
            except PimemError as exc:
                if refused is None:
                    raise
                refused(mem, exc)
                continue
            out.append(mem)
        return out

    # ---- configuration -----------------------------------------------------------------------------------

    @property
    def config(self) -> dict:
        """Defaults, overlaid by ``<home>/config.json`` (defaults for new memories), then the memory's own
        (``pimem.config``)."""
        if self._config is None:
            self._config = configs.of_memory(self.path, self.home)
        return self._config

    @_reading
    def save_config(self, changes: dict) -> None:
        """Merge ``changes`` into the memory's ``config.json``; ``BadInput`` (nothing written) when the settings
        would not read back (``pimem.config.save``); ``NotFound`` before the memory's first append (as
        ``save_cursor``)."""
        if not isinstance(changes, dict):
            raise BadInput(f"the settings to save are a dict (as config.json holds them), not a {type(changes).__name__}")
        if not self.path.is_dir():
            raise NotFound(f"no memory named '{self.name}' in {self.home}: a memory is made by its first append")
        self._here()  # (not into a memory that took the name since)
        configs.save(self.path, self.home, changes)
        self._config = None

    # ---- the writer lock ---------------------------------------------------------------------------------

    @contextlib.contextmanager
    def lock(self, timeout: float | None = None):
        """The writer lock (reentrant within this object); ``Busy`` (exit 4) after ``timeout`` seconds."""
        check_timeout(timeout)
        if self._lock is None:
            self._lock = WriterLock(self.path / "write.lock")
        try:
            acquired = self._lock.acquire(env.lock_timeout() if timeout is None else timeout)
        except (Moved, FileNotFoundError, NotADirectoryError) as exc:
            if not isinstance(exc, Moved) and self.path.is_dir():
                raise  # (not a move: the system's own error)
            raise self._moved() from None
        if not acquired:
            locked = f"memory '{self.name}' is locked by another writer; try again"
            raise Busy(f"{locked} or raise {said_as('--timeout', 'timeout=')}", tools=f"{locked} in a moment")
        identity = self.identity()  # the directory this object first wrote in, not one made since at its path
        if self._identity is None:
            self._identity = identity
        elif identity != self._identity:
            self._lock.release()
            raise self._moved()
        try:
            yield self
        except BaseException:
            self.unmake()
            raise
        finally:
            self._lock.release()

    def unmake(self) -> None:
        """After a failed write, under the lock: a directory that holds nothing but ``write.lock`` (a first write
        the disk refused, its day files and ``main/`` removed) is removed too, so it leaves no memory-to-be in the
        way of a name (``rename`` refused it as taken); the lock file last, so a writer waiting on it finds it gone
        (``Moved``). This object may write again, making it afresh."""
        try:
            if os.listdir(self.path) != ["write.lock"]:
                return
            os.unlink(self.path / "write.lock")
            os.rmdir(self.path)
        except OSError:
            return
        self._identity = None

    def _make_dirs(self) -> None:
        """The memory's directories, made for a first write; not again where this object's memory was moved
        away from (a rename or delete while an ``append --ndjson`` stream runs)."""
        if self._identity is not None and self.identity() != self._identity:
            raise self._moved()
        homes.ensure_dir(self.path / "main")

    def _moved(self) -> NotFound:
        return NotFound(f"memory '{self.name}' was renamed or deleted while this had it open; nothing more was "
                        "written: run again")

    # ---- writing -----------------------------------------------------------------------------------------

    @property
    def text_cap(self) -> int:
        """Bytes of text above which a message is refused (``max_text_bytes``; tool output is trimmed)."""
        return int(self.config.get("max_text_bytes", msgs.DEFAULT_CAP))

    def prepare(self, records: Iterable[dict], labels: Sequence[str] | None = None) -> "Prepared":
        """Validate and normalise input records; ``BadInput`` names the bad one (by ``labels[n]`` if given)
        before anything is written. Records without a date get one timestamp for the whole batch. The batch
        (a ``Prepared``, which cannot be changed) is logged by ``append`` and ``append_stream`` without being checked again."""
        cap = self.text_cap
        if isinstance(records, (str, bytes, dict)) or not hasattr(records, "__iter__"):
            raise BadInput(f"the records to log are a list of messages ({{kind, text, …}}), not a {type(records).__name__}")
        records = records if isinstance(records, list) else list(records)
        if labels is not None and (isinstance(labels, (str, bytes, dict)) or not hasattr(labels, "__getitem__")):
            raise BadInput(f"labels are a list of the records' names, not a {type(labels).__name__}")
        stamp = when.rfc3339(env.now())
        normalise = msgs.normalise
        out = []
        try:
            for record in records:
                msg = normalise(record, cap, stamp)
                if "meta" in msg:  # (a library caller's: non-string keys, a set, a lone surrogate are JSON's refusals)
                    try:
                        orjson.dumps(msg["meta"])
                    except TypeError as exc:
                        raise BadInput(f"meta cannot be stored as JSON: {exc}") from None
                    msg["meta"] = _frozen(msg["meta"])
                out.append(_Checked(msg))
        except BadInput as exc:
            n = len(out)
            try:
                label = labels[n] if labels is not None else None
            except IndexError:  # (fewer labels than records: numbered instead)
                label = None
            if label is None and len(records) > 1:
                label = f"message {n + 1}"
            raise BadInput(f"{label}: {exc}" if label else str(exc)) from None
        return Prepared(out)

    def append(self, records: Iterable[dict], timeout: float | None = None) -> list[int]:
        """Log messages durably and return their ``i``. The batch is written whole or not at all; it is
        checked first (``prepare``) unless ``prepare`` made it."""
        check_timeout(timeout)
        batch = records if type(records) is Prepared else self.prepare(records)
        if not batch:
            return []
        self._make_dirs()
        with self.lock(timeout), self._derived:
            start = self._ready()
            ids = self.log.write(batch, start)
            self._after_append(start, batch)
        return ids

    def append_encoded(self, runs: list[tuple[str, int]], lines, batch: Sequence[dict],
                       timeout: float | None = None) -> list[int]:
        """``append`` for a batch validated and encoded elsewhere (``pimem.bulk``): ``runs`` are its day runs
        ``(day, count)``, ``lines(start, first, stop)`` the stored lines of its messages ``first…stop-1``
        numbered from ``start``, ``batch`` its messages as the derived state reads them."""
        check_timeout(timeout)
        self._make_dirs()
        with self.lock(timeout), self._derived:
            start = self._ready()
            ids = self.log.write_runs(runs, start, lambda first, stop: lines(start, first, stop))
            self._after_append(start, batch)
        return ids

    def append_stream(self, batches: Iterable[list[dict]], timeout: float | None = None) -> Iterator[list[int]]:
        """Log a stream of batches of messages, yielding each batch's ``i`` once it is durable. A batch
        ``prepare`` made is logged as it is; any other is checked here first, as ``append`` checks it.

        While one batch is being written and fsync'd, the next is pulled from ``batches`` (read and
        validated), so disk time overlaps parsing. Each batch is still written whole or not at all, in order.
        When pulling a batch raises (bad input), the batch already being written is finished and yielded
        first, then the error propagates."""
        from concurrent.futures import ThreadPoolExecutor

        check_timeout(timeout)
        if isinstance(batches, (str, bytes, dict)) or not hasattr(batches, "__iter__"):
            raise BadInput(f"the batches to log are an iterable of lists of messages, not a {type(batches).__name__}")
        source = iter(batches)
        with collector_resting():
            with ThreadPoolExecutor(1, thread_name_prefix="pimem-append") as writer:
                pending = None
                while True:
                    try:
                        batch = next(source)
                        if type(batch) is not Prepared:
                            batch = self.prepare(batch)
                    except StopIteration:
                        break
                    except BaseException:
                        if pending is not None:
                            yield pending.result()
                        raise
                    if pending is not None:
                        yield pending.result()
                    pending = writer.submit(self.append, batch, timeout)
                if pending is not None:
                    yield pending.result()

    def _ready(self) -> int:
        """Under the writer lock, before a batch is written: the log sealed and the derived state the append
        brings forward (the views, the tree files they read) loaded, so that what would refuse it there (a
        planted link: exit 5) refuses it before anything is logged. The ``i`` the batch starts at."""
        start = self.log.seal()
        self.views.current(upto=start, save=False)
        return start

    def _after_append(self, start: int, batch: list[dict]) -> None:
        """Bring derived state (tree, view) forward after a durable write; called under the writer lock. The
        messages are logged whatever happens here: when the system refuses (a full disk), the view is left
        behind, to be caught up from the log by the next command, and the append still succeeds (failing it
        would have the caller log the messages again)."""
        try:
            self.views.push(start, batch)
        except OSError as exc:
            from .output import warn

            warn(f"logged, but view.json was left behind ({exc.strerror or exc}); the next command catches it up")

    # ---- reading -----------------------------------------------------------------------------------------

    @_reading
    def count(self) -> int:
        return self.log.count()

    def messages(self, start: int = 0, stop: int | None = None) -> Iterator[dict]:
        return (msg for msg, _ in self.entries(start, stop))

    def entries(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[dict, bytes]]:
        """``(message, stored line)`` pairs in ``i`` order, for readers that copy messages out verbatim."""
        _number(start, "start")
        if stop is not None:
            _number(stop, "stop")
        self._here()
        return self._read_here(self.log.entries(start, stop))

    @_reading
    def message(self, i: int) -> dict:
        """Message ``i`` whole; ``NotFound`` (exit 3) when it does not exist. One read through the index
        when there is one, else a scan of the log file that holds ``i``."""
        if type(i) is not int:
            raise BadInput(f"i is a message number (a whole number), not {shown(i):.40}")
        if not 0 <= i <= MAX_I:  # (no message can have it: bad input, exit 2, as the CLI says of it)
            raise BadInput(f"bad message number {shown(i)}: use a whole number from 0 to {MAX_I}")
        if self.has_index():  # (the log looked at first as every reader looks at it: a change behind pimem's back
            self.log.count()  # or messages lost from its end stop the read, exit 5, as they stop the index's)
            with self._derived:  # (not while another thread closes the connection: the interpreter would crash)
                msg = self.index().message(i)
            if msg is not None:
                return msg
        for msg in self.log.read(i, i + 1):
            return msg
        total = self.count()
        has = f"{total:,} message{'s' if total != 1 else ''} (0…{total - 1})" if total else "no messages"
        raise NotFound(f"no message {i} in '{self.name}': it has {has}")

    # ---- the derived index (index.sqlite) ----------------------------------------------------------------

    def index(self):
        """The search and lookup index (``pimem.index.Index``); callers catch it up when they need it whole."""
        if self._index is None:
            from .index import Index

            self._index = Index(self.path, self.log)
        return self._index

    def leaf_line(self, i: int, l: int = 0) -> str | None:
        """The line a compactor wrote for message ``i`` (a long one's), or for node ``(l, i)``, or None."""
        _number(i, "i", "a node's index")
        _number(l, "l", "a node's level")
        with self._derived:
            return self.tree.stored(l, i)

    def span_holds(self, start: int, stop: int) -> Callable[[str, bool], bool]:
        """What the tool-text mask asks of a line over messages ``[start, stop)`` it does not read: ``holds(text,
        tools)``, whether a message in the span holds ``text`` (as the mask compares, ``privacy.flat``: case,
        width and white space aside): among the tool calls and results if ``tools``, else among the other
        messages; ``holds(text, tools, written)`` asks the index for ``written`` too, the text as the line wrote
        it, when the fold changed its words. A tool text is read as the mask reads it (``privacy.readings``: its
        JSON escapes, without colours).
        Asks the index (caught up for the first question) for the messages holding the text's words
        (``_index_terms``) and checks them against the log; past ``SPAN_CANDIDATES`` unconfirmed ones it
        reads the span's messages of that side (tool messages, or the others) instead, once, if there are at
        most ``SPAN_READ`` (as the mask over a short span reads them), else answers ``tools`` (so the
        tool-text mask errs on the side of hiding). A span with no tool message holds no tool text (the
        index's kinds say so). An answer is kept for the same question again.
        A ``hurried`` reader's mask does not ask an index that lacks over ``index.LAG_BYTES`` of the log, nor one
        another process is catching up, nor one found damaged or that cannot be caught up here (read-only): each
        question is answered ``tools``, so a line is hidden whole (``holds.guessed``, not to be kept as the line's
        text), ``hurried`` is told why once, and a process of its own catches the index up (``index.Look``)."""
        from .index import Filters
        from .message import KINDS, TOOL_KINDS
        from .privacy import flat, readings

        index = self.index()
        unasked = object()  # (what a question gives when the index is not asked)
        answer = index.answers((lambda: unasked) if self.hurried is not None else None)
        answers: dict[tuple[str, bool], bool] = {}
        few: dict[bool, str] = {}  # a side's texts folded, once read ("" for tool messages when the span has none)
        looked: set[tuple[bool, int]] = set()  # (side, at most how many messages) looked for

        def holds(text: str, tools: bool, written: str | None = None) -> bool:
            if self.hurried is not None and not self._index_askable():
                holds.guessed = True
                return tools
            if (known := answers.get((text, tools, written))) is None:
                if self.hurried is None:
                    self.waits_for_index()
                try:
                    if tools and (tools, 0) not in looked and answer(lambda: read(tools, 0)) is unasked:
                        return holds(text, tools, written)  # (found damaged and deleted, not rebuilt here)
                    known = answer(lambda: question(text, tools, written))
                except PimemError as exc:  # (a read-only memory whose index lags, a lock held past its timeout)
                    if self.hurried is None:
                        raise
                    self._leave_index(f"{exc}; {MASK_UNASKED}")
                    return holds(text, tools, written)
                if known is unasked:
                    return holds(text, tools, written)
                answers[text, tools, written] = known
            return known

        holds.guessed = False

        def read(tools: bool, most: int) -> str | None:
            if (tools, most) not in looked:
                looked.add((tools, most))
                if (rows := index.rows_of(kinds(tools), start, stop, most)) is not None:
                    few[tools] = "\0".join(form for row in rows for form in folded(row, tools))
            return few.get(tools)

        def kinds(tools: bool) -> set[str]:
            return set(TOOL_KINDS) if tools else set(KINDS) - TOOL_KINDS

        def folded(c, tools: bool) -> tuple[str, ...]:
            key = (c.file, c.offset, c.length, tools)
            if (forms := self._flat.get(key)) is None:  # (a view's lines ask of the same messages again and again)
                msg = index.read_row(c.file, c.offset, c.length)
                forms = () if msg is None else tuple(map(flat, readings(msg["text"]) if tools else [msg["text"]]))
                if len(self._flat) >= FLAT_KEPT:
                    self._flat.clear()
                self._flat[key] = forms
            return forms

        def question(text: str, tools: bool, written: str | None) -> bool:
            # (a space at either end counts, as where the mask reads the span: `flat` drops it)
            text = " " * text[:1].isspace() + flat(text) + " " * text[-1:].isspace()
            if (texts := few.get(tools)) is not None:
                return text in texts
            asked = [terms := _index_terms(text)]
            if written is not None and (own := _index_terms(" ".join(written.lower().split()))) != terms:
                asked.append(own)  # (the words as written, when the fold changed them: straße, ２０２４)
            for terms in asked:
                found = index.candidates(terms, False, Filters(kinds(tools), None, None, stop, start))
                for n, c in enumerate(found):
                    if n == SPAN_CANDIDATES:  # (in doubt: the span's texts of this side, if they are few)
                        return tools if (texts := read(tools, SPAN_READ)) is None else text in texts
                    if any(text in form for form in folded(c, tools)):
                        return True
            return False

        return holds

    def _hurried_state(self) -> "_Hurry":
        return getattr(self._hurrying, "state", None) or self._hurry

    @property
    def hurried(self) -> Callable[[str], None] | None:
        return self._hurried_state().note

    @hurried.setter
    def hurried(self, note: Callable[[str], None] | None) -> None:
        self._hurry = _Hurry(note)

    @contextlib.contextmanager
    def hurrying(self, note: Callable[[str], None] | None):
        """Within it the reader is ``hurried`` with ``note`` (None: not hurried), the index looked at afresh: a
        program that keeps a memory open asks each turn how far it is behind, not once for all turns. In this
        thread only: another sharing the memory meanwhile is as it was."""
        saved = getattr(self._hurrying, "state", None)
        self._hurrying.state = _Hurry(note)
        try:
            yield self
        finally:
            self._hurrying.state = saved

    def index_look(self):
        """How far the index is behind the log (``index.Look``), looked at once, for a ``hurried`` reader."""
        from .index import Look

        state = self._hurried_state()
        if state.look is None:
            state.look = Look(self.index(), self.name)
        return state.look

    def waits_for_index(self) -> None:
        """Before the index is caught up for a reader that waits for it (not ``hurried``): ``patient``, when set,
        is told once what it waits for if that is long (``index.Look.waited``: over ``index.LAG_BYTES`` of the
        log, or another process at it)."""
        from .index import Look

        if self.patient is None or self._told:
            return
        self._told = True
        try:
            note = Look(self.index(), self.name).waited()
        except PimemError:  # (a read-only memory with no index: the question says so)
            return
        if note is not None:
            self.patient(note)

    def _index_askable(self) -> bool:
        """For a ``hurried`` reader: whether the tool-text mask may ask the index (``span_holds``), looked at
        (``index_look``) before the first question, and again after each (one found damaged is deleted)."""
        state = self._hurried_state()
        if not state.unasked:
            try:
                look = self.index_look()
            except PimemError as exc:  # (a read-only memory with no index)
                self._leave_index(f"{exc}; {MASK_UNASKED}")
                return False
            if look.left():
                self._leave_index(look.hand_over(MASK_MEANWHILE))
            elif look.busy:
                self._leave_index(f"the search index of memory '{self.name}' is being caught up by another process, so "
                                  f"{MASK_MEANWHILE}")
        return not state.unasked

    def _leave_index(self, why: str) -> None:
        state = self._hurried_state()
        state.unasked = True
        state.note(why)

    def close(self) -> None:
        """Close the database connections, files and mappings held for derived state (reopened on next use). It
        waits for another thread's reader or writer of them (``_derived``), whose connection it would close
        under a query in flight."""
        with self._derived:
            if self._index is not None:
                self._index.close()
            if self._tree is not None:
                self._tree.close()
            if self._views is not None:
                self._views.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def has_index(self) -> bool:
        return self._index is not None or (self.path / "index.sqlite").exists()

    @_reading
    def first_at(self, moment: datetime) -> int | None:
        """The first ``i`` whose date is at or after ``moment``."""
        for msg, _ in self.since_entries(moment):
            return msg["i"]
        return None

    def since(self, moment: datetime, until: datetime | None = None) -> Iterator[dict]:
        """Messages dated at or after ``moment`` (and before ``until``), in ``i`` order."""
        for msg, _ in self.since_entries(moment, until):
            yield msg

    def since_entries(self, moment: datetime, until: datetime | None = None) -> Iterator[tuple[dict, bytes]]:
        """``since`` as ``(message, stored line)`` pairs."""
        _moment(moment, "moment")
        if until is not None:
            _moment(until, "until")
        low = when.Threshold(moment)
        high = when.Threshold(until) if until is not None else None
        for entry in self.entries(self._start_near(low), self.end_before(until) if until is not None else None):
            date = entry[0]["date"]
            if low.reached_by(date) and (high is None or not high.reached_by(date)):
                yield entry

    def _start_near(self, low: when.Threshold) -> int:
        """The lowest ``i`` in any file that could hold dates at or after the threshold."""
        cutoff = low.first_day()
        firsts = [first for first, _, name in self.log.ranges() if name[:10] >= cutoff]
        return min(firsts) if firsts else self.count()

    @_reading
    def end_before(self, until: datetime) -> int:
        """One past the highest ``i`` in any file that could hold dates before ``until``: every message from
        there on is dated at or after it. (Below it the dates need not be in ``i`` order: a session imported
        after a later one.)"""
        _moment(until, "until")
        cutoff = when.Threshold(until).reached_day()
        lasts = [last for _, last, name in self.log.ranges() if name[:10] < cutoff]
        return max(lasts) + 1 if lasts else 0

    # ---- cursors: where a named consumer of ``since`` stopped -------------------------------------------

    @_reading
    def cursor(self, consumer: str) -> int | None:
        """The next ``i`` the consumer has not seen, or None for a new consumer."""
        homes.validate_name(consumer, "consumer")
        at = self._cursors(consumer).get(consumer)
        if at is not None and (type(at) is not int or at < 0):
            raise IntegrityError(f"cursors.json: consumer {consumer!r} is at {orjson.dumps(at).decode()[:40]}, not a "
                                 "message number; fix it or remove the entry (the consumer then starts at WHEN)")
        if at is not None and at > (count := self.count()):  # it would wait there, skipping all that comes first
            raise IntegrityError(f"cursors.json: consumer {consumer!r} is at #{at}, past the log's {count:,} messages "
                                 "(a log restored from an older copy?); fix it or remove the entry (the consumer then "
                                 "starts at WHEN)")
        return at

    @_reading
    def save_cursor(self, consumer: str, next_i: int) -> None:
        """Record where ``consumer`` stopped. Consumers of one memory may save at once: each read, change and
        replace of ``cursors.json`` holds its own lock (not the writer's: a reader never waits for writers),
        so no consumer's cursor is lost to another's save. A claimed memory's consumer at #0 saves nothing."""
        homes.validate_name(consumer, "consumer")
        if type(next_i) is not int or next_i < 0:
            raise BadInput(f"next_i is a message number (where the consumer goes on), not {shown(next_i):.40}")
        if not self.exists():
            if next_i == 0 and self.claimed():  # (nothing logged, nothing seen: a claim is read writing nothing)
                return
            raise NotFound(f"no memory named '{self.name}' in {self.home} (see 'pimem list')",
                           tools=f"no memory named '{self.name}' in {self.home} (see list_memories)")
        if next_i > (count := self.count()):  # (a consumer cannot have seen what is not logged yet)
            raise BadInput(f"a cursor is at most the log's {count:,} messages, not #{shown(next_i)}")
        lock = WriterLock(self.path / "cursors.lock")
        if not lock.acquire(env.lock_timeout()):
            raise Busy(f"the cursors of memory '{self.name}' are locked by another consumer; try again")
        try:
            self._here()  # (not into a memory that took the name since)
            cursors = self._cursors(consumer)
            cursors[consumer] = next_i
            homes.write_atomic(self.path / "cursors.json", orjson.dumps(cursors, option=orjson.OPT_SORT_KEYS) + b"\n")
        finally:
            lock.release()

    def _cursors(self, consumer: str) -> dict:
        try:
            cursors = configs.read_json(self.path / "cursors.json", {})
        except orjson.JSONDecodeError:
            cursors = None
        if not isinstance(cursors, dict):
            raise IntegrityError(f"cursors.json is not a JSON object of consumers, so where consumer {consumer!r} "
                                 "stopped cannot be read; fix it or remove it (every consumer then starts at WHEN)")
        return cursors

    # ---- summaries ---------------------------------------------------------------------------------------

    @_reading
    def last_of_kind(self, kind: str, before: int | None = None) -> dict | None:
        """The newest message of ``kind`` before ``before`` (default: the end), looking back in growing windows;
        a sub-agent's (``meta.sidechain``: its prompt is the agent's, not the user's words) is passed over, as is
        a harness's marker (``meta.marker``, or the text of one of ``CLAUDE_MARKERS`` from Claude Code) and a
        message that shows nothing (white space, the padding a model writes before a tool call; invisible
        characters or escape sequences alone: ``_blank``)."""
        if type(kind) is not str:
            raise BadInput(f"kind is a message's kind (a str such as user), not {shown(kind):.40}")
        if before is not None:
            _number(before, "before")
        end = self.count() if before is None else before
        window = 64
        while end > 0:
            start = max(0, end - window)
            found = None
            for msg in self.log.read(start, end):
                if msg["kind"] == kind and not _not_said(msg) and not _blank(msg["text"]):
                    found = msg
            if found is not None:
                return found
            end, window = start, window * 4
        return None

    @_reading
    def summary(self) -> dict:
        """Name, message count, first and last dates, and the last thing the user said. The first date is the
        earliest in the earliest day file, the last the latest in the latest one (not those of messages 0 and
        n-1, nor of a day file's first and last lines: an older session, or an earlier message of a day, may be
        logged after a newer one); those two files are read whole."""
        total = self.count()
        days = sorted(name for _, _, name in self.log.ranges()) if total else []
        earliest = self._dates(days[0]) if days else []
        latest = (earliest if days[-1] == days[0] else self._dates(days[-1])) if days else []
        user = self.last_of_kind("user")
        return {
            "name": self.name,
            "messages": total,
            "first": min(earliest, key=_instant) if earliest else None,
            "last": max(latest, key=_instant) if latest else None,
            "last_user": user["text"] if user else None,
        }

    def _dates(self, name: str) -> list[str]:
        """The dates of the messages in day file ``name``, as logged."""
        return [msg["date"] for _, _, msg in self.log.read_offsets(self.log.dir / name) if isinstance(msg.get("date"), str)]

    # ---- the tree and the view (pimem.tree, pimem.viewfile; DESIGN.md §2) -----------------------------

    @property
    def tree(self):
        """The summary tree (``pimem.tree.Tree``): node texts, free nodes, the stored nodes."""
        if self._tree is None:
            from .tree import Tree

            self._tree = Tree(self.path, self.log.count, self.log.read, int(self.config["line_bytes"]))
        return self._tree

    @property
    def views(self):
        """The view files (``pimem.viewfile.ViewFile``): ``views.current()`` gives both views (``.view`` and
        ``.cview``), caught up with the log and the tree; readers never wait for the writer lock (the caught-up
        view is saved only if the lock is free)."""
        if self._views is None:
            from .viewfile import ViewFile

            self._views = ViewFile(self.path, self.log, self.tree, self.lock, lambda: self.config, self.span_holds)
        return self._views

    def write_node(self, l: int, i: int, text: str, meta: dict | None = None, timeout: float | None = None) -> None:
        """Store a node the compactor built and run the view batch. ``BadInput`` (exit 2) if the text is empty
        or over ``line_bytes``, the node is already built (free or stored), a half of a merge is unbuilt, or
        ``meta`` reuses a node field; ``NotFound`` (exit 3) if the node ends past the log."""
        self.write_nodes([(l, i, text, meta)], timeout, check_halves=True)

    def write_nodes(self, nodes: list[tuple[int, int, str, dict | None]], timeout: float | None = None,
                    check_halves: bool = False) -> None:
        """Store many built nodes ``(l, i, text, meta)`` in order, with one fsync and one view save (what a
        scheduler does). Checked as ``write_node`` does, except that unless ``check_halves`` the caller
        vouches that each merge's halves are built and that the node is not free (those checks derive free
        nodes from the log). Nothing is written unless every node passes."""
        from . import naming, tree as trees

        check_timeout(timeout)
        _flag(check_halves, "check_halves")
        if not isinstance(nodes, list) or not all(isinstance(node, tuple) and len(node) == 4 for node in nodes):
            raise BadInput("the nodes to store are a list of (level, index, text, meta) tuples")
        limit = int(self.config["line_bytes"])
        checked = []
        for l, i, text, meta in nodes:
            # (a node covers 2^l messages from i·2^l, which its label writes out: a level past 63 covers more
            # messages than a log can hold, and 2^(2^33) alone is a gigabyte)
            if type(l) is not int or type(i) is not int or not 0 <= l <= 63 or not 0 <= i <= MAX_I:
                raise BadInput(f"bad node ({shown(l):.40}, {shown(i):.40}): the level is an integer from 0 to 63, "
                               f"the index one from 0 to {MAX_I}")
            if not isinstance(text, str) or not text.strip():
                raise BadInput(f"node {trees.label(l, i)}: empty text")
            if not naming.is_utf8(text):
                raise BadInput(f"node {trees.label(l, i)}: text is not valid UTF-8 (it holds a lone surrogate)")
            if trees.byte_size(text) > limit:
                raise BadInput(f"node {trees.label(l, i)}: {trees.byte_size(text)} bytes, over the {limit}-byte line")
            if meta is not None and not isinstance(meta, dict):
                raise BadInput(f"node {trees.label(l, i)}: meta is a dict, not a {type(meta).__name__}")
            try:
                msgs.check_meta(meta or {})  # (what the tree file could not store as given, refused before the lock)
            except BadInput as exc:
                raise BadInput(f"node {trees.label(l, i)}: {exc}") from None
            meta = dict(meta or {})
            clash = set(meta) & set(trees.NODE_KEYS)
            if clash:
                raise BadInput(f"node {trees.label(l, i)}: meta may not set {sorted(clash)[0]!r}")
            checked.append((l, i, text, meta))
        if not checked:
            return
        with self.lock(timeout), self._derived:
            views = self.views.current(save=False)
            count = views.T
            tree = self.tree
            tree.catch_up()
            stored = tree.stored_among([(l, i) for l, i, _, _ in checked], count)
            seen: set[tuple[int, int]] = set()
            for l, i, _, _ in checked:
                trees.parse_label(trees.label(l, i), count)
                built = (l, i) in seen or (l, i) in stored
                if built or (check_halves and tree.text(l, i, count) is not None):
                    raise BadInput(f"node {trees.label(l, i)} is already built (each node is built once)")
                if check_halves and l and (tree.text(l - 1, 2 * i, count) is None
                                           or tree.text(l - 1, 2 * i + 1, count) is None):
                    raise BadInput(f"node {trees.label(l, i)}: its halves {trees.label(l - 1, 2 * i)} and "
                                   f"{trees.label(l - 1, 2 * i + 1)} must be built first")
                seen.add((l, i))
            date = _now_text()
            tree.append_many([(l, i, text, {"date": date, **meta}) for l, i, text, meta in checked])
            self.views.built(views, checked)

    @_reading
    def view_lines(self, compactor: bool = False, end: int | None = None, include_tools: bool = False) -> list[str]:
        """The rendered view, one ``id+n|text`` line each (placeholders for unbuilt leaves). ``compactor``:
        the compactor's view, cut at its first unbuilt line and (with ``end``) at lines ending after message
        ``end`` (exclusive; ``pimem.tree.context_end(l, i)`` gives it for building node ``(l, i)``). Tool calls
        and results are markers, and tool output a summary quotes is masked, unless ``include_tools``, as
        ``pimem view`` shows them."""
        _flag(compactor, "compactor")
        if end is not None:
            _number(end, "end")
        _flag(include_tools, "include_tools")
        self._here()  # (lines.json is not written into a memory that took the name since)
        with self._derived:
            return self.views.lines(compactor, end, include_tools)

    def held(self, i: int, include_tools: bool = False) -> dict | None:
        """How the view holds message ``i`` today: ``{"held": "verbatim"|"summarized"|"pending"|"inside",
        "label": "id+n", "n": n, "line": rendered line}``; ``pending`` is a leaf not summarised yet (shown as a
        placeholder). None when no view exists yet or ``i`` is not in it. The line's tool traffic is taken out
        unless ``include_tools``, as ``view_lines`` does."""
        _number(i, "i")  # (before held_each, which names its own ids)
        return self.held_each([i], include_tools=include_tools)[i]

    @_reading
    def held_each(self, ids: list[int], sizes: dict[int, int] | None = None,
                  lines: bool = True, include_tools: bool = False) -> dict[int, dict | None]:
        """``held`` for several messages (search and recall report it per hit), costing what they cost, not
        what the view costs: read from ``view.json`` around each message where it is current, else from the
        view caught up once for this object. ``sizes``: the messages' ``size`` where the caller has them
        (else each is read); ``lines=False`` leaves ``line`` out (no text is read); each line's tool traffic
        is taken out unless ``include_tools``."""
        if not isinstance(ids, list) or not all(type(i) is int and 0 <= i <= MAX_I for i in ids):
            raise BadInput(f"ids are a list of message numbers (0 to {MAX_I}), not {shown(ids):.40}")
        if sizes is not None and not isinstance(sizes, dict):
            raise BadInput(f"sizes is a dict of the messages' sizes or None, not {shown(sizes):.40}")
        _flag(lines, "lines")
        _flag(include_tools, "include_tools")
        sizes = sizes or {}
        with self._derived:
            found = self.views.held(ids, lambda i: sizes[i] if i in sizes else self.message(i)["size"], lines)
            if lines and not include_tools:
                from .privacy import hide_tools
                from .tree import parse_label
                from .view import render_line

                rendered: dict[str, str] = {}  # (each line worked out once)
                for held in found.values():
                    if held is not None and held["label"] not in rendered:
                        l, i = parse_label(held["label"])
                        shown_as = render_line(l, i, None)  # (a placeholder: a span standing in may be built all the same)
                        text = self.tree.text(l, i) if held["held"] != "pending" and held["line"] != shown_as else None
                        hidden = hide_tools(self.log.read, [(l, i, text)], holds=self.span_holds,
                                            stored=self.leaf_line, line_bytes=self.tree.line_bytes)
                        rendered[held["label"]] = render_line(l, i, hidden[0])
                    if held is not None:
                        held["line"] = rendered[held["label"]]
            return found

    @_reading
    def zoom(self, node: str, include_tools: bool = False) -> dict:
        """Expand a node ``id+n``: n=1 → ``{"label", "message"}`` (the original, whole); n>1 →
        ``{"label", "children": [{"label", "level", "index", "text"|None}, …]}`` (the two halves, any
        aligned node, as a reader is shown them: tool traffic taken out unless ``include_tools``, as
        ``view_lines`` does). Malformed or misaligned ids raise ``BadInput``, ids past the log ``NotFound``;
        a tool call or result (n=1) needs ``include_tools``."""
        from . import tree as trees
        from .message import is_tool

        _flag(include_tools, "include_tools")
        count = self.count()
        l, i = trees.parse_label(node, count)
        if l == 0:
            msg = self.message(i)
            if is_tool(msg) and not include_tools:
                what = "tool call" if msg["kind"] == "tool" else "tool result"
                raise BadInput(f"message {i} is a {what}; add {said_as('--include-tools', 'include_tools=True')} to show it",
                               tools=f"message {i} is a {what}; ask again with include_tools to show it")
            return {"label": trees.label(0, i), "message": msg}
        from .privacy import hide_tools

        with self._derived:
            halves = [(l - 1, k, self.tree.text(l - 1, k, count)) for k in (2 * i, 2 * i + 1)]
            texts = hide_tools(self.log.read, halves, holds=self.span_holds, stored=self.leaf_line,
                               line_bytes=self.tree.line_bytes, hide=not include_tools)
        if not include_tools:  # (a long tool message not summarised yet: its marker, as the view shows it)
            from .privacy import marker

            for n, (hl, k, _) in enumerate(halves):
                if texts[n] is None and hl == 0 and is_tool(msg := self.message(k)):
                    texts[n] = marker(msg, most=len(trees.PLACEHOLDER))
        children = [{"label": trees.label(hl, k), "level": hl, "index": k, "text": text}
                    for (hl, k, _), text in zip(halves, texts)]
        return {"label": trees.label(l, i), "children": children}


# Memory's readers that hand back a generator (what the system refuses while it is read comes then), and its
# context managers (what it refuses as one is entered)
_ITERATING = {"messages", "entries", "since", "since_entries", "append_stream"}
_ENTERING = {"lock", "hurrying"}


def _refusals_said(cls: type) -> None:
    """Each public method and property of ``cls`` (``Memory``) raising what the system refused (a file where a
    directory should be, a link loop, a full disk) as a ``SystemRefused``, a ``PimemError`` as every failure of
    the library is (``errors.library``); a command's boundary says the ``OSError`` itself."""
    for name, member in list(vars(cls).items()):
        if name.startswith("_"):
            continue
        if isinstance(member, property):
            setattr(cls, name, property(library(member.fget), member.fset, member.fdel, member.__doc__))
        elif isinstance(member, classmethod):
            setattr(cls, name, classmethod(library(member.__func__)))
        elif callable(member):
            setattr(cls, name, _iterating(member) if name in _ITERATING else _entering(member) if name in _ENTERING
                    else library(member))


def _iterating(method):
    begin = library(method)

    @functools.wraps(method)
    def read(*args, **kwargs):
        return library_items(begin(*args, **kwargs))

    return read


def _entering(method):
    make = library(method)

    @functools.wraps(method)
    def enter(*args, **kwargs):
        return library_context(make(*args, **kwargs))

    return enter


_refusals_said(Memory)


def _now_text() -> str:
    return when.rfc3339(env.now())


def _instant(date: str) -> datetime:
    """A logged date as a moment, to compare dates written with other offsets (one that is none sorts first)."""
    try:
        moment = datetime.fromisoformat(date)
    except ValueError:
        return datetime.min.replace(tzinfo=timezone.utc)
    return moment if moment.tzinfo is not None else moment.astimezone()


def _blank(text: str) -> bool:
    """Whether ``text`` shows nothing: white space, invisible characters (a zero-width space, a BOM) and escape
    sequences alone, as ``tree.plain`` leaves them out (imported only for a text that may hold them)."""
    if text.isascii() and "\x1b" not in text:
        return not text.strip()
    from .tree import plain

    return not plain(text).strip()


def _not_said(msg: dict) -> bool:
    """Whether a message is not the user's words though logged as theirs: a sub-agent's prompt, a harness's
    marker (``Memory.last_of_kind``)."""
    meta = msg.get("meta") or {}
    return bool(meta.get("sidechain") or meta.get("marker")
                or meta.get("source") == "claude" and msg["text"].strip() in CLAUDE_MARKERS)
