"""``index.sqlite``: a memory's derived search and lookup index, caught up from the log by whoever reads it.

What it holds (nothing the log does not):

- ``files``: for each log file, how many of its bytes are indexed (the index is caught up from there);
- ``msgs``: ``i → (file, byte offset, length, kind, date)``, so ``Memory.message(i)`` and ``since #i`` read one
  line instead of scanning the log;
- two FTS5 tables with the trigram tokenizer, ``talk`` (user, pi, work, note) and ``tools`` (tool, echo), so
  the default search never walks tool output it will not show. They are contentless (``content=''``) and
  ``detail=none``: the index only answers "which messages contain all these trigrams"; every candidate is
  then checked against the original line in the log, which also makes the index unable to show anything but
  the log's own text.

Texts are indexed lowercased by Python's ``str.lower`` (as queries are, so both sides fold alike; the
tokenizer is then case-sensitive, which is also faster) with two newlines appended, so every character
starts a trigram: a one- or two-character query becomes an OR of the index's trigrams that start with it
(read from ``fts5vocab``).

Writers never touch the index (``append --ndjson`` stays at full speed); readers catch it up. Catching up
runs inside an ``IMMEDIATE`` SQLite transaction and re-reads the indexed offsets once it holds it, so two
readers catching up at once never index a line twice, and a crash leaves the last committed batch, which
the next reader continues from. The memory's writer lock is never taken. A damaged index file is deleted and
rebuilt; deleting it loses nothing.
"""

from __future__ import annotations

import os
import sqlite3
import sys
import time
from pathlib import Path
from typing import Callable, Iterator

import orjson

from . import when
from .errors import Busy, IntegrityError
from .home import FILE_MODE
from .message import KINDS, TOOL_KINDS

FILENAME = "index.sqlite"
SCHEMA_VERSION = 2
TABLES = ("talk", "tools")
KIND_CODE = {kind: n for n, kind in enumerate(KINDS)}
SENTINEL = "\n\n"  # appended to every indexed text: each character then starts a trigram
BATCH_MESSAGES = 20_000  # messages per committed catch-up transaction
BATCH_BYTES = 64 * 1024 * 1024
READ_CHUNK = 8 * 1024 * 1024
BUSY_MS = int(float(os.environ.get("PIMEM_LOCK_TIMEOUT", "60")) * 1000)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS files (id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, done INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS msgs (
    i INTEGER PRIMARY KEY, file INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
    kind INTEGER NOT NULL, epoch REAL NOT NULL);
CREATE VIRTUAL TABLE IF NOT EXISTS talk USING fts5(
    text, tokenize='trigram case_sensitive 1', content='', detail=none, columnsize=0);
CREATE VIRTUAL TABLE IF NOT EXISTS tools USING fts5(
    text, tokenize='trigram case_sensitive 1', content='', detail=none, columnsize=0);
"""
# measured on the synthetic log: fewer, larger segments cut catch-up CPU by about a tenth
_FTS_CONFIG = {"automerge": 16, "hashsize": 16 * 1024 * 1024}


def table_of(kind: str) -> str:
    return "tools" if kind in TOOL_KINDS else "talk"


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """A corrupt or foreign file (a torn copy, a truncated file), as opposed to a busy one."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc)


def remove_files(path: Path) -> None:
    """Delete an index and its WAL companions (a missing file is fine)."""
    for suffix in ("-wal", "-shm", ""):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def use_wal(db: sqlite3.Connection) -> None:
    """Switch a connection's database to WAL. The switch needs the file to itself and SQLite does not wait
    for it (no busy handler), so two first connections to a new index (the tree's and the index's, in
    different threads or processes) retry here instead of failing with "database is locked"."""
    deadline = time.monotonic() + BUSY_MS / 1000
    while True:
        try:
            db.execute("PRAGMA journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Index:
    """The index of one memory: ``Index(mem.path, mem.log)``; ``catch_up()`` before asking it anything
    that must be complete."""

    def __init__(self, directory: Path, log):
        self.path = directory / FILENAME
        self.log = log
        self._db: sqlite3.Connection | None = None
        self._file_names: dict[int, str] = {}
        self._handles: dict[int, object] = {}

    # ---- connection --------------------------------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._connect()
        return self._db

    def _connect(self) -> sqlite3.Connection:
        if not self.path.exists():
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, FILE_MODE)  # SQLite gives its WAL the same mode
            os.close(fd)
        db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        db.execute(f"PRAGMA busy_timeout = {BUSY_MS}")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version not in (0, SCHEMA_VERSION):  # an index of an older pimem: derived, so build it anew
            db.close()
            remove_files(self.path)
            return self._connect()
        if version != SCHEMA_VERSION:
            self._create(db)
        db.execute("PRAGMA cache_size = -65536")
        return db

    @staticmethod
    def _create(db: sqlite3.Connection) -> None:
        use_wal(db)
        db.execute("BEGIN IMMEDIATE")
        try:
            if db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION:  # another process won the race
                db.execute("COMMIT")
                return
            for statement in filter(str.strip, _SCHEMA.split(";")):
                db.execute(statement)
            for table in TABLES:
                for key, value in _FTS_CONFIG.items():
                    db.execute(f"INSERT INTO {table} ({table}, rank) VALUES (?, ?)", (key, value))
            db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles.clear()
        if self._db is not None:
            self._db.close()
            self._db = None

    def guarded(self, work: Callable):
        """Run ``work()``; a damaged index file is deleted, rebuilt from the log, and ``work`` run again."""
        try:
            return work()
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                if "locked" in str(exc) or "busy" in str(exc):
                    raise Busy(f"{self.path} is busy; try again") from None
                raise
            sys.stderr.write(f"pimem: warning: {self.path} was damaged ({exc}); rebuilding it from the log\n")
            self.close()
            remove_files(self.path)
            return work()

    # ---- catching up -------------------------------------------------------------------------------------

    def _indexed(self) -> dict[str, tuple[int, int]]:
        return {name: (fid, done) for fid, name, done in self.db.execute("SELECT id, name, done FROM files")}

    def behind(self) -> list[tuple[Path, int]]:
        """Log files (with their sizes) holding bytes the index has not read yet: one directory scan."""
        indexed = self._indexed()
        out = []
        try:
            entries = list(os.scandir(self.log.dir))
        except FileNotFoundError:
            return []
        for entry in entries:
            name = entry.name
            if name.endswith(".jsonl") and not name.startswith("."):
                size = entry.stat().st_size
                if size != indexed.get(name, (0, 0))[1]:
                    out.append((Path(entry.path), size))
        return sorted(out, key=lambda item: item[0].name)

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Index every complete line the log has and the index lacks; returns how many messages were added.
        Cheap when nothing is new (a stat per log file)."""
        return self.guarded(lambda: self._catch_up(progress))

    def answer(self, question: Callable, progress: Callable[[int, int], None] | None = None):
        """Catch up, then return ``question()``; if the index file turns out damaged, it is rebuilt from the
        log and both run again."""
        return self.guarded(lambda: (self._catch_up(progress), question())[1])

    def _catch_up(self, progress) -> int:
        if not self.behind():
            return 0
        db = self.db
        added = 0
        db.execute("BEGIN IMMEDIATE")  # the index's own write lock; re-read everything under it
        try:
            indexed = self._indexed()
            todo = []
            for path, size in self.behind():
                fid, done = indexed.get(path.name, (None, 0))
                if size < done:
                    # the log lost bytes the index had read (a power cut after an unsynced write): the index
                    # must not hold them, so start over from the log
                    db.execute("ROLLBACK")
                    self.close()
                    remove_files(self.path)
                    return self._catch_up(progress)
                if fid is None:
                    fid = db.execute("INSERT INTO files (name, done) VALUES (?, 0)", (path.name,)).lastrowid
                todo.append((fid, path, done, size))
            batch = _Batch(sum(size - done for _, _, done, size in todo))
            for fid, path, done, size in todo:
                for offset, line in _complete_lines(path, done, size):
                    batch.add(fid, offset, line)
                    if batch.full():
                        added += self._commit(batch, progress)
                batch.reached[fid] = _last_line_end(path, done, size)
            added += self._commit(batch, progress, last=True)
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        return added

    def _commit(self, batch: "_Batch", progress, last: bool = False) -> int:
        """Write a batch with the offsets it reached, commit, and (unless ``last``) begin the next one."""
        db = self.db
        try:
            db.executemany("INSERT INTO msgs VALUES (?, ?, ?, ?, ?, ?)", batch.rows)
        except sqlite3.IntegrityError:
            raise IntegrityError("the log holds a message number twice; run 'pimem fsck'") from None
        for table, values in batch.texts.items():
            if values:
                db.executemany(f"INSERT INTO {table} (rowid, text) VALUES (?, ?)", values)
        db.executemany("UPDATE files SET done = ? WHERE id = ?", [(o, f) for f, o in batch.reached.items()])
        db.execute("COMMIT")
        count = len(batch.rows)
        batch.clear()
        if progress:
            progress(batch.seen, batch.total)
        if not last:
            db.execute("BEGIN IMMEDIATE")
        return count

    # ---- lookups -----------------------------------------------------------------------------------------

    def locate(self, i: int) -> tuple[Path, int, int] | None:
        """Where message ``i`` is stored: ``(file, byte offset, length)``, or None if not indexed (yet)."""
        row = self.db.execute("SELECT file, offset, length FROM msgs WHERE i = ?", (i,)).fetchone()
        if row is None:
            return None
        return self.log.dir / self._file_name(row[0]), row[1], row[2]

    def message(self, i: int) -> dict | None:
        """Message ``i`` read straight from its line, or None when the index cannot say (not indexed yet,
        or no index file); never a message other than ``i``."""
        found = self._checked(i)
        return found[1] if found else None

    def _checked(self, i: int) -> tuple[tuple[Path, int, int], dict] | None:
        """Where message ``i`` is and the message, read from the log and checked to be ``i``."""
        try:
            where = self.locate(i)
            msg = self.read(*where) if where is not None else None
        except (sqlite3.DatabaseError, OSError):
            return None
        return (where, msg) if msg is not None and msg.get("i") == i else None

    def _file_name(self, fid: int) -> str:
        name = self._file_names.get(fid)
        if name is None:
            self._file_names = {f: n for f, n in self.db.execute("SELECT id, name FROM files")}
            name = self._file_names[fid]
        return name

    def read(self, path: Path, offset: int, length: int) -> dict | None:
        """The message at a byte range of a log file (files stay open for the next read)."""
        handle = self._handles.get(path)
        if handle is None:
            handle = self._handles[path] = open(path, "rb", buffering=0)
        handle.seek(offset)
        try:
            msg = orjson.loads(handle.read(length))
        except orjson.JSONDecodeError:
            return None
        return msg if type(msg) is dict else None

    def read_row(self, fid: int, offset: int, length: int) -> dict | None:
        return self.read(self.log.dir / self._file_name(fid), offset, length)

    def terms_with_prefix(self, table: str, prefix: str, limit: int) -> list[str] | None:
        """The index's trigrams in ``table`` that start with ``prefix`` (already case-folded), or None when
        there are more than ``limit``."""
        self.db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{table}_vocab USING fts5vocab(main, {table}, row)")
        rows = self.db.execute(
            f"SELECT term FROM temp.{table}_vocab WHERE term >= ? AND term < ? LIMIT ?",
            (prefix, prefix + "\U0010ffff", limit + 1),
        ).fetchall()
        return None if len(rows) > limit else [row[0] for row in rows]


class _Batch:
    """Rows parsed from the log and not yet written, and how far each file has been read."""

    def __init__(self, total: int):
        self.total, self.seen = total, 0
        self.clear()

    def clear(self) -> None:
        self.rows: list[tuple] = []
        self.texts: dict[str, list] = {table: [] for table in TABLES}
        self.reached: dict[int, int] = {}
        self.bytes = 0

    def add(self, fid: int, offset: int, line: bytes) -> None:
        self.seen += len(line) + 1
        self.reached[fid] = offset + len(line) + 1
        try:
            msg = orjson.loads(line)
            i, kind, text = msg["i"], msg["kind"], msg["text"]
            epoch = when.parse_stored(msg["date"]).timestamp()
        except Exception:  # a damaged line, or a torn one sealed by a writer: the log skips it too
            return
        self.rows.append((i, fid, offset, len(line), KIND_CODE.get(kind, 0), epoch))
        self.texts[table_of(kind)].append((i, text.lower() + SENTINEL))
        self.bytes += len(line)

    def full(self) -> bool:
        return len(self.rows) >= BATCH_MESSAGES or self.bytes >= BATCH_BYTES


def _complete_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line without newline)`` for each newline-terminated line between ``start`` and ``end``."""
    with open(path, "rb", buffering=0) as f:
        f.seek(start)
        position = start
        rest = b""
        while position < end:
            chunk = f.read(min(READ_CHUNK, end - position))
            if not chunk:
                break
            data = rest + chunk
            offset = position - len(rest)
            position += len(chunk)
            lines = data.split(b"\n")
            rest = lines.pop()
            for line in lines:
                yield offset, line
                offset += len(line) + 1


def _last_line_end(path: Path, start: int, end: int) -> int:
    """The byte just after the last newline in ``[start, end)`` (``start`` when there is none): the index
    stops there and reads a torn last line again once it is complete or sealed."""
    with open(path, "rb", buffering=0) as f:
        low = start
        while end > low:
            span = min(end - low, 64 * 1024)
            f.seek(end - span)
            data = f.read(span)
            newline = data.rfind(b"\n")
            if newline >= 0:
                return end - span + newline + 1
            end -= span
        return start


def rebuild(directory: Path, log, progress=None) -> int:
    """Delete the index and build it again from the log; returns how many messages it holds."""
    remove_files(directory / FILENAME)
    index = Index(directory, log)
    try:
        return index.catch_up(progress)
    finally:
        index.close()


def stderr_progress(label: str) -> Callable[[int, int], None] | None:
    """A one-line progress report for long catch-ups, on a terminal only."""
    if not sys.stderr.isatty():
        return None
    started = time.monotonic()

    def report(done: int, total: int) -> None:
        if time.monotonic() - started > 1:
            end = "\n" if done >= total else ""
            sys.stderr.write(f"\rpimem: indexing {label}: {100 * done // max(total, 1)}%{end}")
            sys.stderr.flush()

    return report
