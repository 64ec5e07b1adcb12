"""``index.sqlite``: a memory's derived search and lookup index, caught up from the log by whoever reads it.

What it holds (nothing the log does not):

- ``files``: for each log file, how many of its bytes are indexed (the index is caught up from there), and
  its mtime and inode when they were read (an edit by hand that kept the file's size changes them), how
  many times a writer had found it changed behind pimem's back (``Log.edit_counts``: such an edit followed by
  a write that grew the file) and the CRC-32 of the bytes read (a file whose mtime or inode alone moved,
  touched or copied back, is told from one edited);
- ``msgs``: ``i → (file, byte offset, length, kind, date)``, so ``Memory.message(i)`` and ``zoom`` read one
  line instead of scanning the log;
- two FTS5 tables with the trigram tokenizer, ``talk`` (user, pi, work, note) and ``tools`` (tool, echo), so
  the default search never walks tool output it will not show. They are contentless (``content=''``) and
  ``detail=none``: the index only answers "which messages contain all these trigrams"; every candidate is
  then checked against the original line in the log, which also makes the index unable to show anything but
  the log's own text. They hold even-numbered messages; ``index-1.sqlite`` (attached as ``shard``) holds the
  same two tables for odd-numbered ones, with its own ``files`` progress;
- the ranker's tables, beside the trigram tables in both files (``pimem.rankindex``, a module this one owns:
  each message's distinct terms in FTS5, its length and conversation, the totals; ``Index.ranked`` hands the
  ranker its ``Source`` over them);
- ``tree_nodes`` and ``tree_files``: the text of each node a compactor stored, by ``(l, i)``, and how many bytes
  of each tree file are in it (``TreeNodes``; the tree catches them up from its files).

The SQL that reads them is here too: ``Index.candidates`` turns a search's folded terms and filters into one
FTS5 statement and returns named rows (``Candidate``), as a table that owns its FTS schema builds its search
SQL; ``pimem.search`` only validates, calls and checks the candidates against the log.

Texts are indexed lowercased by Python's ``str.lower`` (as queries are, so both sides fold alike; the
tokenizer is then case-sensitive, which is also faster) with two newlines appended, so every character
starts a trigram: a one- or two-character query becomes an OR of the index's trigrams that start with it
(read from ``fts5vocab``).

Writers never touch the index (``append --ndjson`` stays at full speed); readers catch it up, holding
``index.lock`` and re-reading the indexed offsets once they hold it, so two readers catching up at once never
index a line twice. One thread parses, one thread writes each file, each batch in one transaction together
with how far that file has read each log file, so a crash leaves each file at its last committed batch and
the next reader continues each from there. The memory's writer lock is never taken. A damaged index file is
deleted and rebuilt; deleting it loses nothing.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
import weakref
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, NamedTuple
from zlib import crc32

import orjson

from . import env, rankindex, when
from .errors import Busy, ExitStatus, IntegrityError, PimemError
from .home import FILE_MODE
from .message import KINDS, TOOL_KINDS
from .nofollow import check_database, open_binary, open_fd

FILENAME = "index.sqlite"
SCHEMA_VERSION = 8  # 3: odd-numbered messages' texts in the second file; 4: the ranker's tables; 5: first-person terms; 6, 7: files' mtime, inode, edits; 8: their CRC-32
# older versions brought up to this one in place rather than built anew: a statement for each file (main, shard)
UPGRADES = {7: ("ALTER TABLE main.files ADD COLUMN crc INTEGER", "")}  # (a NULL crc: not known, see changed_since)
TABLES = ("talk", "tools")
KIND_CODE = {kind: n for n, kind in enumerate(KINDS)}
SENTINEL = "\n\n"  # appended to every indexed text: each character then starts a trigram

_FTS_SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS {schema}.talk USING fts5(
    text, tokenize='trigram case_sensitive 1', content='', detail=none, columnsize=0);
CREATE VIRTUAL TABLE IF NOT EXISTS {schema}.tools USING fts5(
    text, tokenize='trigram case_sensitive 1', content='', detail=none, columnsize=0);
"""
_SCHEMA = """
CREATE TABLE IF NOT EXISTS main.files (
    id INTEGER PRIMARY KEY, name TEXT NOT NULL UNIQUE, done INTEGER NOT NULL,
    mtime INTEGER NOT NULL DEFAULT 0, inode INTEGER NOT NULL DEFAULT 0, edits INTEGER NOT NULL DEFAULT 0, crc INTEGER);
CREATE TABLE IF NOT EXISTS main.msgs (
    i INTEGER PRIMARY KEY, file INTEGER NOT NULL, offset INTEGER NOT NULL, length INTEGER NOT NULL,
    kind INTEGER NOT NULL, epoch REAL NOT NULL);
""" + _FTS_SCHEMA.replace("{schema}", "main") + rankindex.schema("main")
_SHARD_SCHEMA = """
CREATE TABLE IF NOT EXISTS shard.files (name TEXT PRIMARY KEY, done INTEGER NOT NULL);
""" + _FTS_SCHEMA.replace("{schema}", "shard") + rankindex.schema("shard")
# The texts of odd-numbered messages are indexed in a second file by a second thread: building FTS5's
# trigrams is most of the work and SQLite does it without the GIL, so it runs on two cores (on this 2-core
# machine catching up a million messages took 0.7x the time). Queries look in both (``SCHEMAS``); each file
# records how far it has read each log file.
SHARD_FILENAME = "index-1.sqlite"
SCHEMAS = ("main", "shard")
CATCH_UP_LOCK = "index.lock"
# measured on the synthetic log: fewer, larger segments cut catch-up CPU by about a tenth
_FTS_CONFIG = {"automerge": 16, "hashsize": 16 * 1024 * 1024}
_TREE_SCHEMA = """
CREATE TABLE IF NOT EXISTS tree_nodes (
    l INTEGER NOT NULL, i INTEGER NOT NULL, text TEXT NOT NULL, size INTEGER NOT NULL,
    PRIMARY KEY (l, i)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS tree_files (name TEXT PRIMARY KEY, bytes INTEGER NOT NULL);
"""
PREFIX_TERMS = 500  # a short term expanding to more trigrams than this is found by scanning instead
_NOTHING = object()  # a term that cannot occur in a table at all


def table_of(kind: str) -> str:
    return "tools" if kind in TOOL_KINDS else "talk"


def _damaged(exc: sqlite3.DatabaseError) -> bool:
    """A corrupt or foreign file (a torn copy, a truncated file), as opposed to a busy one."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    return name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in str(exc)


def remove_files(path: Path) -> None:
    """Delete an index (``index.sqlite`` and its second file) with their WAL companions (missing is fine)."""
    _remove_db(path)
    _remove_db(path.with_name(SHARD_FILENAME))


def _remove_db(path: Path) -> None:
    for suffix in ("-wal", "-shm", ""):
        try:
            os.unlink(f"{path}{suffix}")
        except FileNotFoundError:
            pass


def _tune(db: sqlite3.Connection) -> None:
    """Settings of every connection that writes the index. Commits are not fsync'd (WAL with synchronous
    NORMAL): the index is derived, a power cut can only lose its last batches, which are read again from the
    log, and an import or a search then pays no flush per batch."""
    db.execute(f"PRAGMA busy_timeout = {int(env.lock_timeout() * 1000)}")
    db.execute("PRAGMA synchronous = NORMAL")
    db.execute("PRAGMA cache_size = -65536")
    # a checkpoint flushes twice; letting the WAL reach 64 MB first spares an import of a few MB any but the
    # one when the last connection closes
    db.execute("PRAGMA wal_autocheckpoint = 16384")


def _create_file(path: Path) -> None:
    """Create an empty database file with pimem's mode (SQLite gives its WAL the same mode)."""
    check_database(path)
    if not path.exists():
        os.close(open_fd(path, os.O_WRONLY | os.O_CREAT, FILE_MODE))


def file_uri(path: Path) -> str:
    """``path`` as a ``file:`` URI (its connection opened with ``uri=True``): its bytes percent-encoded, so
    SQLite gets them as they are, those that are not UTF-8 too (a home under a directory named in another
    encoding), which a name given to ATTACH as text cannot carry."""
    return Path(os.path.abspath(path)).as_uri()


def read_only_uri(path: Path) -> str:
    """The URI that opens a database where nothing may be written: without a WAL file to read, SQLite is
    told the file is immutable, so it makes no shared-memory file either."""
    return f"{file_uri(path)}?mode=ro" + ("" if os.path.exists(f"{path}-wal") else "&immutable=1")


def use_wal(db: sqlite3.Connection, schema: str = "main") -> None:
    """Switch a connection's database to WAL. The switch needs the file to itself and SQLite does not wait
    for it (no busy handler), so two first connections to a new index (the tree's and the index's, in
    different threads or processes) retry here instead of failing with "database is locked"."""
    deadline = time.monotonic() + env.lock_timeout()
    while True:
        try:
            db.execute(f"PRAGMA {schema}.journal_mode = WAL")
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or time.monotonic() > deadline:
                raise
            time.sleep(0.01)


class Candidate(NamedTuple):
    """A message that may match a search: its ``i``, where its line is (``Index.read_row(file, offset,
    length)``), its kind's code and its date as a POSIX timestamp."""

    i: int
    file: int
    offset: int
    length: int
    kind: int
    epoch: float


class Filters:
    """What a search is restricted to: kinds (by name), dates (``since`` inclusive, ``until`` exclusive) and
    messages below ``before`` (and from ``start`` on)."""

    def __init__(self, kinds: set[str], since: datetime | None, until: datetime | None, before: int | None,
                 start: int | None = None):
        self.kinds = kinds
        self.since = since.timestamp() if since else None
        self.until = until.timestamp() if until else None
        self.before = before
        self.start = start

    def narrows(self) -> bool:
        """Whether the filters leave out messages of the tables their kinds are in (or none)."""
        tables = {table_of(k) for k in self.kinds}
        return (any(k not in self.kinds for k in KINDS if table_of(k) in tables)
                or self.before is not None or self.start is not None or self.since is not None
                or self.until is not None)

    def sql(self, table: str | None, column: str) -> tuple[str, list]:
        """``WHERE`` conditions on ``msgs m`` (and the FTS ``rowid`` column) and their parameters."""
        codes = sorted(KIND_CODE[k] for k in self.kinds if table is None or table_of(k) == table)
        where = [f"m.kind IN ({','.join(map(str, codes))})"]
        params: list = []
        if self.before is not None:
            where.append(f"{column} < ?")
            params.append(self.before)
        if self.start is not None:
            where.append(f"{column} >= ?")
            params.append(self.start)
        if self.since is not None:
            where.append("m.epoch >= ?")
            params.append(self.since)
        if self.until is not None:
            where.append("m.epoch < ?")
            params.append(self.until)
        return " AND ".join(where), params


class Index:
    """The index of one memory: ``Index(mem.path, mem.log)``; ``catch_up()`` before asking it anything
    that must be complete."""

    def __init__(self, directory: Path, log):
        self.path = directory / FILENAME
        self.shard_path = directory / SHARD_FILENAME
        self.log = log
        self._db: sqlite3.Connection | None = None
        self._files: tuple = ()  # the index files the connection opened (``_identities``)
        self._file_names: dict[int, str] = {}
        self._fds: dict[int, int] = {}  # open log files by file id (closed with the index, or once it is collected:
        weakref.finalize(self, _close_all, self._fds)  # a command run in a caller's process may not close it)
        self.read_only = False  # the memory's directory cannot be written: the index is read as it is
        self.in_memory = False  # nothing logged yet: an empty index made in memory (``_connect_empty``)
        self._crc = "crc"  # the column of the CRC-32 of the bytes read ("NULL" in a read-only index of schema 7)
        self.rebuilds = 0  # how many times ``guarded`` found the index damaged and started it over
        self._prefixes: dict | None = None  # ``terms_with_prefix``'s answers, during a run of ``answers``
        self.moved: list[tuple] = []  # files found by ``behind`` whose stamp alone moved: (name, done, then, now)

    # ---- connection --------------------------------------------------------------------------------------

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._connect()
            # what it opened (see _holding_lock); nothing when made in memory, so a catch-up connects again
            self._files = () if self.in_memory else self._identities()
        return self._db

    def _connect(self) -> sqlite3.Connection:
        self.in_memory = not os.path.isdir(self.log.dir)
        if self.in_memory:
            return self._connect_empty()
        if not os.access(self.path.parent, os.W_OK):
            return self._connect_read_only()
        self.read_only, self._crc = False, "crc"  # (a directory read-only when last connected may be writable now)
        _create_file(self.path)
        db = sqlite3.connect(file_uri(self.path), uri=True, isolation_level=None, check_same_thread=False)
        _tune(db)
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version in UPGRADES:
            version = self._upgrade(db, "main")
        if version not in (0, SCHEMA_VERSION):  # an index of an older pimem: derived, so build it anew
            db.close()
            remove_files(self.path)
            return self._connect()
        if version != SCHEMA_VERSION:
            self._create(db, "main", _SCHEMA)
        _create_file(self.shard_path)
        db.execute("ATTACH DATABASE ? AS shard", (file_uri(self.shard_path),))
        version = db.execute("PRAGMA shard.user_version").fetchone()[0]
        if version in UPGRADES:
            version = self._upgrade(db, "shard")
        if version not in (0, SCHEMA_VERSION):  # (only a file left by another pimem could be)
            db.execute("DETACH DATABASE shard")
            _remove_db(self.shard_path)
            _create_file(self.shard_path)
            db.execute("ATTACH DATABASE ? AS shard", (file_uri(self.shard_path),))
        if version != SCHEMA_VERSION:
            self._create(db, "shard", _SHARD_SCHEMA)
        for schema in SCHEMAS:
            db.execute(f"PRAGMA {schema}.synchronous = NORMAL")
        return db

    def _connect_empty(self) -> sqlite3.Connection:
        """The index of a memory with nothing logged yet (no log directory: one claimed for a project), empty and
        made in memory, so that reading it writes nothing there; its files are made when there is a log to
        index (the first catch-up connects again)."""
        self.read_only, self._crc = False, "crc"
        db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        db.execute("ATTACH DATABASE ':memory:' AS shard")
        self._create(db, "main", _SCHEMA)
        self._create(db, "shard", _SHARD_SCHEMA)
        return db

    def _connect_read_only(self) -> sqlite3.Connection:
        """The index of a memory whose directory cannot be written (a read-only mount, a backup, another
        account's memory), read as it is: never created, caught up or rebuilt here."""
        self.read_only = True
        for path in (self.path, self.shard_path):
            check_database(path)
            if not path.exists():
                raise self._unwritable("has no search index yet")
        db = sqlite3.connect(read_only_uri(self.path), uri=True, isolation_level=None, check_same_thread=False)
        db.execute("ATTACH DATABASE ? AS shard", (read_only_uri(self.shard_path),))
        versions = [db.execute(f"PRAGMA {schema}.user_version").fetchone()[0] for schema in SCHEMAS]
        if any(version != SCHEMA_VERSION and version not in UPGRADES for version in versions):
            db.close()
            raise self._unwritable("has an index of another pimem version")
        # (one of schema 7 cannot be upgraded here: no CRC-32, not known)
        self._crc = "crc" if versions[0] == SCHEMA_VERSION else "NULL"
        return db

    def _unwritable(self, why: str) -> PimemError:
        return PimemError(f"{self.path.parent}: this memory {why} and its directory cannot be written (read-only): "
                          "search it where it can be written, or run 'pimem reindex' there", ExitStatus.SYSTEM)

    def _upgrade(self, db: sqlite3.Connection, schema: str) -> int:
        """Bring one of the index's files from a version in ``UPGRADES`` to this one in place, in one
        transaction under ``index.lock`` (a crash leaves it at either version: the next reader upgrades it or
        finds it current); returns its version then."""
        with _catch_up_lock(self.path.with_name(CATCH_UP_LOCK)):
            db.execute("BEGIN IMMEDIATE")
            try:
                version = db.execute(f"PRAGMA {schema}.user_version").fetchone()[0]
                if version in UPGRADES:  # (unless another reader did it meanwhile)
                    statement = UPGRADES[version][SCHEMAS.index(schema)]
                    if statement:
                        db.execute(statement)
                    db.execute(f"PRAGMA {schema}.user_version = {SCHEMA_VERSION}")
                    version = SCHEMA_VERSION
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise
        return version

    @staticmethod
    def _create(db: sqlite3.Connection, schema: str, statements: str) -> None:
        """Create the tables of one of the index's files (not flushed to disk: a file a crash leaves half made
        is rebuilt like any damaged index)."""
        db.execute(f"PRAGMA {schema}.synchronous = OFF")
        use_wal(db, schema)
        db.execute("BEGIN IMMEDIATE")
        try:
            version = db.execute(f"PRAGMA {schema}.user_version").fetchone()[0]
            if version == SCHEMA_VERSION:  # another process won the race
                db.execute("COMMIT")
                return
            for statement in filter(str.strip, statements.split(";")):
                db.execute(statement)
            for table in (*TABLES, *rankindex.WORD_TABLES.values()):
                for key, value in _FTS_CONFIG.items():
                    db.execute(f"INSERT INTO {schema}.{table} ({table}, rank) VALUES (?, ?)", (key, value))
            db.execute(f"PRAGMA {schema}.user_version = {SCHEMA_VERSION}")
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def close(self) -> None:
        _close_all(self._fds)
        if self._db is not None:
            self._db.close()
            self._db = None

    def guarded(self, work: Callable, again: Callable | None = None):
        """Run ``work()``; a damaged index file is deleted, rebuilt from the log, and ``work`` run again (or
        ``again()``: what a reader that may not wait for the rebuild gives instead; ``rebuilds`` counts it)."""
        try:
            return work()
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                if "locked" in str(exc) or "busy" in str(exc):
                    raise Busy(f"{self.path} is busy; try again") from None
                raise
            env.stderr().write(f"pimem: warning: {self.path} was damaged ({exc}); rebuilding it from the log\n")
            self.close()
            with _catch_up_lock(self.path.with_name(CATCH_UP_LOCK)):
                remove_files(self.path)
            self.rebuilds += 1
            return (again or work)()

    def empty(self) -> None:
        """Take every message out of the search index (both files, one transaction); the tree's tables stay."""
        db = self.db
        if self.read_only:
            raise self._unwritable("cannot have its search index rebuilt")
        db.execute("BEGIN IMMEDIATE")
        try:
            for schema in SCHEMAS:
                for table in (*TABLES, *rankindex.WORD_TABLES.values()):  # (contentless FTS5: emptied so)
                    db.execute(f"INSERT INTO {schema}.{table} ({table}) VALUES ('delete-all')")
                for table in ("files", "word_docs", "word_stats", *(("msgs",) if schema == "main" else ())):
                    db.execute(f"DELETE FROM {schema}.{table}")
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    # ---- catching up -------------------------------------------------------------------------------------

    def _indexed(self) -> dict[str, tuple[int, int, int, tuple]]:
        """For each log file either file knows: its id in the main file (None if not there yet), how many of
        its bytes the main file and the second file hold (each file may have been deleted on its own), and its
        ``[mtime_ns, inode, edits, crc]`` when the main file read them."""
        shard = dict(self.db.execute("SELECT name, done FROM shard.files"))
        main = {name: (fid, done, stamp) for fid, name, done, *stamp
                in self.db.execute(f"SELECT id, name, done, mtime, inode, edits, {self._crc} FROM files")}
        return {name: (*main.get(name, (None, 0, None))[:2], shard.get(name, 0), main.get(name, (None, 0, None))[2])
                for name in main.keys() | shard.keys()}

    def behind(self, indexed: dict | None = None) -> list[tuple[Path, int, tuple, bool]]:
        """Log files (with their sizes, ``[mtime_ns, inode, edits]`` and whether what the index read of them
        was changed since, ``changed_since``) holding bytes the index has not read yet or changed since it read
        them all, by name, and those it has read that are gone (size -1). Every file is looked at (a ``stat``
        each, not ranges.json's word): one edited by hand may be any of them, however old. One whose mtime or
        inode alone moved, its bytes those the index read (touched, copied back), is not behind: it goes to
        ``moved``, for a catch-up to record its new stamp. ``indexed``: the index's progress, if just read."""
        indexed = self._indexed() if indexed is None else indexed
        stats, edits = self.log.stats(), self.log.edit_counts()
        out, self.moved = [], []
        for name, st in stats.items():
            size, stamp = st.st_size, [st.st_mtime_ns, st.st_ino, edits.get(name, 0)]
            _, done, done_shard, read = indexed.get(name, (None, 0, 0, None))
            # (the file's bytes are read, to compare, only when it is the size the index read)
            edited = changed_since(done, read, size, stamp, lambda: self.log.content_crc(name, st))
            if size != done or size != done_shard or edited:
                out.append((self.log.dir / name, size, stamp, edited))
            elif read is not None and read[:2] != stamp[:2]:
                self.moved.append((name, done, read[:2], stamp[:2]))
        for name, (_, done, done_shard, _) in indexed.items():
            if name not in stats and (done or done_shard):
                out.append((self.log.dir / name, -1, None, False))
        return out

    def catch_up(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Index every complete line the log has and the index lacks; returns how many messages were added.
        Cheap when nothing is new (the log files' sizes, from ranges.json when it can be trusted)."""
        return self.guarded(lambda: self._catch_up(progress))

    def lag(self) -> int:
        """How many bytes of the log a catch-up would read now: those the index lacks, or the whole log when it
        must start over (a file edited, shortened or gone since it was read); a damaged index is deleted first
        (``guarded``). For a reader that may not wait for a long catch-up (the Claude Code hook)."""
        return self.guarded(self._lag)

    def _lag(self) -> int:
        indexed = self._indexed()
        lag = 0
        for path, size, _, edited in self.behind(indexed):
            fid, done, done_shard, _ = indexed.get(path.name, (None, 0, 0, None))
            if edited or size < max(done, done_shard) or not self._reads_on(fid, path, min(done, done_shard)):
                return sum(st.st_size for st in self.log.stats().values())  # (``_catch_up_locked`` starts over)
            lag += size - min(done, done_shard)
        return lag

    def being_caught_up(self) -> bool:
        """Whether another process holds ``index.lock`` now (a catch-up, a rebuild), asked without waiting."""
        import fcntl

        try:
            fd = open_fd(self.path.with_name(CATCH_UP_LOCK), os.O_RDWR | os.O_CREAT, FILE_MODE)
        except OSError:  # (a read-only memory: nobody catches it up)
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        finally:
            os.close(fd)  # (which releases the lock, if it was taken)
        return False

    def answer(self, question: Callable, progress: Callable[[int, int], None] | None = None, again: Callable | None = None):
        """Catch up, then return ``question()``; if the index file turns out damaged, it is rebuilt from the
        log and both run again (``again``: see ``guarded``)."""
        return self.guarded(lambda: (self._catch_up(progress), question())[1], again)

    def answers(self, again: Callable | None = None) -> Callable[[Callable], object]:
        """``answer`` for a run of questions about messages logged already (one command's): the index is caught
        up before the first, and again only after ``guarded`` rebuilt it (``again``: see ``guarded``); the
        trigrams a short term starts (``terms_with_prefix``) are read once for the run (the messages it asks
        about are all indexed)."""
        caught = [None]
        prefixes: dict[tuple[str, str, int], list[str] | None] = {}

        def answer(question: Callable):
            def work():
                if caught[0] != self.rebuilds:
                    self._catch_up(None)
                    caught[0] = self.rebuilds
                    prefixes.clear()
                self._prefixes = prefixes
                try:
                    return question()
                finally:
                    self._prefixes = None

            return self.guarded(work, again)

        return answer

    def rows_of(self, kinds: set[str], start: int, stop: int, limit: int) -> list[Candidate] | None:
        """The messages of these kinds in ``[start, stop)`` the index holds, or None when there are more than
        ``limit``."""
        codes = ",".join(str(KIND_CODE[k]) for k in sorted(kinds)) or "NULL"
        sql = (f"SELECT i, file, offset, length, kind, epoch FROM msgs WHERE i >= ? AND i < ? AND kind IN ({codes}) "
               "ORDER BY i LIMIT ?")
        rows = list(map(Candidate._make, self.db.execute(sql, (start, stop, limit + 1))))
        return rows if len(rows) <= limit else None

    def _catch_up(self, progress) -> int:
        if not self.behind():
            if self.moved and not self.read_only:
                self._holding_lock(self._record_moved)
            return 0
        if self.read_only:
            raise self._unwritable("has messages its search index lacks")
        return self._holding_lock(lambda: self._catch_up_locked(progress))

    def _record_moved(self) -> int:
        """Record the new mtime and inode of the files ``behind`` found touched or copied back (unless the
        index changed meanwhile), so the next reader need not read them again."""
        self.db.executemany("UPDATE files SET mtime = ?, inode = ? WHERE name = ? AND done = ? AND mtime = ? AND inode = ?",
                            [(*now, name, done, *then) for name, done, then, now in self.moved])
        return 0

    def add_logged(self, start: int, messages: list[dict], written: list[tuple[str, int, bytes]]) -> int:
        """Index a batch this process has just logged, from the messages themselves instead of reading them
        back: ``messages`` were logged as ``start, start+1, …`` and ``written`` says where, as ``(file name,
        offset, the bytes written there)`` in order. Only when the index holds exactly what precedes those
        bytes in every file; otherwise (another writer, a lagging index) it catches up from the log."""
        return self.guarded(lambda: self._holding_lock(lambda: self._add_logged(start, messages, written)))

    def _holding_lock(self, work: Callable[[], int]) -> int:
        """One catch-up at a time (two files are written, so SQLite's own write lock is not enough): the
        holder re-reads how far each file got once it holds this, so nothing is indexed twice, from the files
        now at the index's paths (a rebuild may have replaced those this connection opened)."""
        with _catch_up_lock(self.path.with_name(CATCH_UP_LOCK)):
            if self._db is not None and self._files != self._identities():
                self.close()  # (the next use of db connects to the files there now)
            return work()

    def _identities(self) -> tuple:
        """The index files now at its paths, as (device, inode), None where there is none."""
        out = []
        for path in (self.path, self.shard_path):
            try:
                st = os.stat(path)
                out.append((st.st_dev, st.st_ino))
            except FileNotFoundError:
                out.append(None)
        return tuple(out)

    def _add_logged(self, start: int, messages: list[dict], written: list[tuple[str, int, bytes]]) -> int:
        from .indexer import Batch

        indexed = self._indexed()
        if any(indexed.get(name, (None, 0, 0))[1:3] != (offset, offset) for name, offset, _ in written) \
                or len({name for name, _, _ in written}) != len(written):
            return self._catch_up_locked(None)
        batch = Batch(0)
        k, edits = 0, self.log.edit_counts()
        for name, offset, data in written:
            fid, read = indexed.get(name, (None,))[0], indexed.get(name, (None, 0, 0, None))[3]
            if fid is None:
                fid = self.db.execute("INSERT INTO files (name, done) VALUES (?, 0)", (name,)).lastrowid
            begin = 0
            while begin < len(data):
                end = data.index(b"\n", begin)
                msg = messages[k]
                batch.add_message(start + k, msg, when.parse_stored(msg["date"]).timestamp(),
                                  fid, offset + begin, end - begin)
                begin, k = end + 1, k + 1
            batch.reached[0][name] = batch.reached[1][name] = offset + len(data)
            st = os.stat(f"{self.log.dir}/{name}")  # (grown since by another writer: read on from here next time)
            batch.stamps[name] = [st.st_mtime_ns if st.st_size == offset + len(data) else 0, st.st_ino,
                                  edits.get(name, 0)]
            crc = 0 if offset == 0 else read[3] if read is not None else None
            batch.crcs[name] = crc32(data, crc) if crc is not None else None
        if k != len(messages):
            raise ValueError(f"{len(messages)} messages logged in {k} lines")
        return self._with_writers(lambda writers: batch.hand_over(writers, None))

    def _with_writers(self, work: Callable[[tuple], int]) -> int:
        """``work(writers)`` with one writer thread per file (SQLite builds the trigrams without the GIL while
        this thread parses on); returns once both have written everything, or raises what one raised."""
        from .indexer import Writer

        writers = (Writer(self.path, main=True), Writer(self.shard_path, main=False))
        try:
            result = work(writers)
        finally:
            errors = [writer.close() for writer in writers]
        for error in errors:
            if error is not None:
                raise error
        return result

    def _catch_up_locked(self, progress) -> int:
        from .indexer import Batch, complete_lines, last_line_end

        todo, batch = [], Batch(0)
        indexed = self._indexed()
        behind = self.behind(indexed)
        if self.moved:
            self._record_moved()
        for path, size, stamp, edited in behind:
            fid, done, done_shard, read = indexed.get(path.name, (None, 0, 0, None))
            if edited or size < max(done, done_shard) or not self._reads_on(fid, path, min(done, done_shard)):
                # what the index read was changed (an edit by hand moved the lines or kept the size, the file
                # was deleted) or lost (a power cut after an unsynced write): the index must not hold it, so
                # start over
                what = ("is gone" if size < 0 else "is shorter than the index had read" if size < max(done, done_shard)
                        else "was changed since the index read it" if edited
                        else "was changed before the end the index had read")
                env.stderr().write(f"pimem: warning: {path} {what}; rebuilding the index from the log\n")
                self.close()
                remove_files(self.path)
                return self._catch_up_locked(progress)
            if fid is None:
                fid = self.db.execute("INSERT INTO files (name, done) VALUES (?, 0)", (path.name,)).lastrowid
            todo.append((fid, path, done, done_shard, size))
            batch.stamps[path.name] = stamp
            batch.crcs[path.name] = 0 if done == 0 else read[3] if read is not None else None
        batch.total = sum(size - min(done, done_shard) for _, _, done, done_shard, size in todo)

        def work(writers) -> int:
            added = 0
            for fid, path, done, done_shard, size in todo:
                start, name = min(done, done_shard), path.name
                crc = batch.crcs[name]
                for offset, line in complete_lines(path, start, size):
                    if crc is not None and offset >= done:  # (the CRC-32 of what the main file has read)
                        batch.crcs[name] = crc = crc32(b"\n", crc32(line, crc))
                    batch.add(fid, name, offset, line, offset >= done, offset >= done_shard)
                    if batch.full():
                        added += batch.hand_over(writers, progress)
                batch.reached[0][name] = batch.reached[1][name] = last_line_end(path, start, size)
            return added + batch.hand_over(writers, progress)

        return self._with_writers(work)

    def _reads_on(self, fid: int | None, path: Path, done: int) -> bool:
        """Whether the index, having read ``path`` up to ``done``, can read on from there: a line ends there and
        the last message it holds from the file is still where it was read (else the bytes before it were
        changed since, and the lines moved). Looked at when a file grew, not on every search."""
        if done == 0:
            return True
        last = None
        if fid is not None:  # (the highest i the file holds is among the last rows: imports append there too)
            last = self.db.execute("SELECT i, offset, length FROM msgs WHERE file = ? ORDER BY i DESC LIMIT 1",
                                   (fid,)).fetchone()
        try:
            with open_binary(path) as f:
                f.seek(done - 1)
                if f.read(1) != b"\n":
                    return False
                if last is None:
                    return True
                f.seek(last[1])
                line = f.read(last[2] + 1)
        except OSError:
            return True  # (said by the read that follows)
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            return False
        return line.endswith(b"\n") and type(msg) is dict and msg.get("i") == last[0]

    # ---- lookups -----------------------------------------------------------------------------------------

    def message(self, i: int) -> dict | None:
        """Message ``i`` read straight from its line, or None when the index cannot say (not indexed yet,
        or no index file); never a message other than ``i``."""
        try:
            row = self.db.execute("SELECT file, offset, length FROM msgs WHERE i = ?", (i,)).fetchone()
            if row is not None:  # (its file looked at as the log's readers look at each file they read)
                self.log.look_at(self._file_name(row[0]))
            msg = self.read_row(*row) if row is not None else None
        except (sqlite3.DatabaseError, OSError):
            return None
        return msg if msg is not None and msg.get("i") == i else None

    def _file_name(self, fid: int) -> str:
        name = self._file_names.get(fid)
        if name is None:
            self._file_names = {f: n for f, n in self.db.execute("SELECT id, name FROM files")}
            name = self._file_names[fid]
        return name

    def read_row(self, fid: int, offset: int, length: int) -> dict | None:
        """The message at a byte range of the log file with id ``fid`` (files stay open for the next read; a
        search reads thousands of candidates), None unless it is still a whole line, its newline after it."""
        fd = self._fds.get(fid)
        if fd is None:
            fd = self._fds[fid] = open_fd(f"{self.log.dir}/{self._file_name(fid)}", os.O_RDONLY)
        line = os.pread(fd, length + 1, offset)
        if line[length:] != b"\n":
            return None  # (its newline gone since it was indexed: a torn line, which readers skip)
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        return msg if type(msg) is dict else None

    def terms_with_prefix(self, table: str, prefix: str, limit: int) -> list[str] | None:
        """The index's trigrams in ``table`` that start with ``prefix`` (already case-folded), or None when
        there are more than ``limit``."""
        if self._prefixes is None:
            return self._terms_with_prefix(table, prefix, limit)
        if (table, prefix, limit) not in self._prefixes:
            self._prefixes[table, prefix, limit] = self._terms_with_prefix(table, prefix, limit)
        return self._prefixes[table, prefix, limit]

    def _terms_with_prefix(self, table: str, prefix: str, limit: int) -> list[str] | None:
        terms: dict[str, None] = {}
        for schema in SCHEMAS:
            vocab = f"{schema}_{table}_vocab"
            self.db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab({schema}, {table}, row)")
            rows = self.db.execute(
                f"SELECT term FROM temp.{vocab} WHERE term >= ? AND term < ? LIMIT ?",
                (prefix, prefix + "\U0010ffff", limit + 1),
            ).fetchall()
            terms.update(dict.fromkeys(row[0] for row in rows))
        return None if len(terms) > limit else list(terms)

    def ranked(self, filters: Filters, pool: int | None = None) -> rankindex.Postings:
        """The ranker's ``Source`` over the messages ``filters`` allow (``pimem.rankindex``); ``pool`` bounds
        the postings read per term (``Postings.postings``)."""
        tables = sorted({table_of(k) for k in filters.kinds})
        where = filters.sql(None, "m.i") if filters.narrows() else None
        return rankindex.Postings(self.db, tables, SCHEMAS, where, pool, self.texts)

    def count_kinds(self, kinds: set[str]) -> int:
        """How many messages the index holds of these kinds."""
        codes = ",".join(str(KIND_CODE[k]) for k in sorted(kinds)) or "NULL"
        return self.db.execute(f"SELECT count(*) FROM msgs WHERE kind IN ({codes})").fetchone()[0]

    def texts(self, ids: list[int]) -> dict[int, str]:
        """The texts the ranker ranks messages ``ids`` by (``ranker.ranked_text``), read from the log."""
        from .ranker import ranked_text

        found = {i: self.message(i) for i in ids}
        return {i: ranked_text(msg) for i, msg in found.items() if msg is not None}

    def row(self, i: int) -> Candidate | None:
        """Where message ``i``'s line is, or None when the index does not hold it."""
        found = self.db.execute("SELECT i, file, offset, length, kind, epoch FROM msgs WHERE i = ?", (i,)).fetchone()
        return Candidate._make(found) if found is not None else None

    def candidates(self, folded: list[str | tuple[str, ...]], any_term: bool, filters: Filters) -> Iterator[Candidate]:
        """The messages that may hold all the terms (``any_term``: one of them), already case-folded, within
        ``filters``, highest ``i`` first: those whose texts hold the terms' trigrams (a term of one or two
        characters: a trigram starting with it), or every message in the filters when the index cannot
        narrow the search down. Only a superset: the caller checks each against its line in the log."""
        tables = sorted({table_of(k) for k in filters.kinds})
        parts, params = [], []
        for table in tables:
            expr = self._table_expr(table, folded, any_term)
            if expr is _NOTHING:
                continue
            if expr is None:  # no usable index filter: walk the messages, newest first
                where, params = filters.sql(None, "m.i")
                sql = f"SELECT m.i, m.file, m.offset, m.length, m.kind, m.epoch FROM msgs m WHERE {where} ORDER BY m.i DESC"
                return map(Candidate._make, self.db.execute(sql, params))
            where, where_params = filters.sql(table, "f.rowid")
            for schema in SCHEMAS:  # each message's text is in one of the index's two files
                parts.append(f"SELECT f.rowid, m.file, m.offset, m.length, m.kind, m.epoch FROM {schema}.{table} AS f "
                             f"JOIN main.msgs m ON m.i = f.rowid WHERE f.{table} MATCH ? AND {where}")
                params += [expr, *where_params]
        if not parts:
            return iter(())
        # one statement: each part comes from FTS5 in rowid order, so SQLite merges them instead of sorting
        return map(Candidate._make, self.db.execute(" UNION ALL ".join(parts) + " ORDER BY 1 DESC", params))

    def _table_expr(self, table: str, folded: list[str], any_term: bool):
        """An FTS5 MATCH expression every matching message in ``table`` satisfies; None when the index cannot
        narrow the search down, ``_NOTHING`` when nothing in the table can match."""
        exprs = [self._term_expr(table, term) for term in folded]
        if any_term:
            if any(e is None for e in exprs):
                return None
            parts = [e for e in exprs if e is not _NOTHING]
            return " OR ".join(f"({e})" for e in parts) if parts else _NOTHING
        if any(e is _NOTHING for e in exprs):
            return _NOTHING
        parts = [e for e in exprs if e is not None]
        return " AND ".join(f"({e})" for e in parts) if parts else None

    def _term_expr(self, table: str, term: str | tuple[str, ...]):
        """What the index knows about one folded term: a term of three or more characters needs all its
        trigrams (those spanning spaces make phrases selective); a shorter one needs a trigram starting with
        it; a tuple of terms, one of them (a word composed or decomposed)."""
        if type(term) is tuple:
            return self._table_expr(table, list(term), True)
        if "\x00" in term:  # (no logged text holds one, and FTS5's syntax would end the expression there)
            return _NOTHING
        if len(term) >= 3:
            return " AND ".join(map(_quote, dict.fromkeys(term[k : k + 3] for k in range(len(term) - 2))))
        trigrams = self.terms_with_prefix(table, term, PREFIX_TERMS)
        if trigrams is None:
            return None
        if not trigrams:
            return _NOTHING
        return " OR ".join(map(_quote, trigrams))


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


class TreeNodes:
    """The tree's lookup tables in a memory's ``index.sqlite``: ``tree_nodes`` (the text of each stored node
    by ``(l, i)``) and ``tree_files`` (how many bytes of each tree file they hold). ``pimem.tree.Tree`` catches
    them up from its files and asks them for nodes; the connection is opened on first use."""

    def __init__(self, directory: Path):
        self.path = directory / FILENAME
        self._db: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            try:
                self._db = self._open()
            except sqlite3.DatabaseError as exc:
                if not _damaged(exc):
                    raise
                self._rebuild(exc)
                self._db = self._open()
        return self._db

    def _open(self) -> sqlite3.Connection:
        if not os.access(self.path.parent, os.W_OK):  # a memory that cannot be written: the tables are
            db = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)  # made in memory
        else:  # (from the tree files, as for a new index)
            _create_file(self.path)
            check_database(self.path)
            db = sqlite3.connect(self.path, timeout=30, isolation_level=None, check_same_thread=False)
            try:
                use_wal(db)
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_TREE_SCHEMA)
            except BaseException:
                db.close()
                raise
            return db
        db.executescript(_TREE_SCHEMA)
        return db

    def _rebuild(self, exc: sqlite3.DatabaseError) -> None:
        """A damaged index file: deleted (under the catch-up lock), to be made again, the tree's tables from the
        tree files and the search index from the log (as a search rebuilds it), with a warning."""
        env.stderr().write(f"pimem: warning: {self.path} was damaged ({exc}); rebuilding it from the log\n")
        self.close()
        with _catch_up_lock(self.path.with_name(CATCH_UP_LOCK)):
            remove_files(self.path)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def files(self) -> dict[str, int]:
        """Bytes of each tree file whose nodes the tables hold (a damaged file found only now: rebuilt)."""
        try:
            return dict(self.db.execute("SELECT name, bytes FROM tree_files").fetchall())
        except sqlite3.DatabaseError as exc:
            if not _damaged(exc):
                raise
            self._rebuild(exc)
            return dict(self.db.execute("SELECT name, bytes FROM tree_files").fetchall())

    def clear(self) -> None:
        self.db.executescript("DELETE FROM tree_nodes; DELETE FROM tree_files;")

    def add(self, nodes: list[tuple[int, int, str, int]], files: dict[str, int], most: int) -> None:
        """Nodes ``(l, i, text, size)`` read from the tree files, and how far each file was read, in one
        transaction. A node already there is kept (each is written once), unless it is over ``most`` bytes
        (built before ``line_bytes`` was lowered, and built again since) and the new line is shorter."""
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT INTO tree_nodes (l, i, text, size) VALUES (?, ?, ?, ?) ON CONFLICT (l, i) DO UPDATE "
                           "SET text = excluded.text, size = excluded.size "
                           "WHERE tree_nodes.size > ? AND excluded.size < tree_nodes.size",
                           [(*node, most) for node in nodes])
            db.executemany("INSERT OR REPLACE INTO tree_files (name, bytes) VALUES (?, ?)", files.items())
            db.execute("COMMIT")
        except BaseException:
            _rollback(db)
            raise

    def text(self, l: int, i: int, most: int) -> str | None:
        """The text of stored node ``(l, i)``, if it is at most ``most`` bytes (a longer one waits to be built
        again for a lowered ``line_bytes``)."""
        row = self.db.execute("SELECT text FROM tree_nodes WHERE l = ? AND i = ? AND size <= ?", (l, i, most)).fetchone()
        return row[0] if row else None

    def among(self, keys: list[tuple[int, int]], most: int) -> set[tuple[int, int]]:
        """Which of the nodes ``keys`` (``(l, i)``, 64-bit) are stored within ``most`` bytes, in one query."""
        return set(self.db.execute("SELECT l, i FROM tree_nodes WHERE (l, i) IN (SELECT json_extract(value, '$[0]'), "
                                   "json_extract(value, '$[1]') FROM json_each(?)) AND size <= ?",
                                   (orjson.dumps(keys).decode(), most)))

    def keys(self, most: int) -> list[tuple[int, int]]:
        """``(l, i)`` of every node stored within ``most`` bytes."""
        return self.db.execute("SELECT l, i FROM tree_nodes WHERE size <= ?", (most,)).fetchall()




def changed_since(done: int, read: list | None, size: int, stamp: list, content: Callable[[], int | None]) -> bool:
    """Whether a log file the index has read (``done`` bytes, ``read`` its ``[mtime_ns, inode, edits, crc]``
    then) was changed since other than by growing (an edit by hand: lines swapped, a text masked): read to its
    end and now of that size with another mtime or inode and other bytes (``content()``: the CRC-32 of its
    bytes now; a file touched or copied back has the bytes it had), or found changed by a writer since
    (``edits``: the writer may have grown it since). pimem's own writes only grow a file (one that failed is
    cut back with its mtime put back)."""
    if done <= 0 or read is None:
        return False
    if read[2] != stamp[2]:
        return True
    return size == done and read[:2] != stamp[:2] and (read[3] is None or content() != read[3])


def _rollback(db: sqlite3.Connection) -> None:
    """Undo the transaction a failure interrupted, if SQLite has not already (it does on a full disk, and a
    ROLLBACK then would hide the error that matters behind "no transaction is active")."""
    if db.in_transaction:
        db.execute("ROLLBACK")


def connect_writer(path: Path) -> sqlite3.Connection:
    """A connection for an ``indexer.Writer`` to one of the index's files."""
    check_database(path)
    db = sqlite3.connect(path, isolation_level=None)
    _tune(db)
    return db


def write_batch(db: sqlite3.Connection, main: bool, rows: list[tuple], texts: dict[str, list],
                reached: dict[str, int], words: rankindex.Pending, stamps: dict[str, tuple]) -> None:
    """One batch of an ``indexer.Writer`` in one transaction: ``msgs`` rows (main file only), texts by FTS
    table, and how far each log file has been read for this file (``main``: the main file, else the second)."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if rows:
            db.executemany("INSERT INTO msgs VALUES (?, ?, ?, ?, ?, ?)", rows)
        # the texts are handed over as one JSON array and inserted by one statement: SQLite releases the
        # GIL during each step of a statement, and executemany takes a step per row, handing the GIL back
        # and forth with the parsing thread; one statement builds a whole batch's trigrams without it
        for table, values in texts.items():
            if values:
                db.execute(f"INSERT INTO {table} (rowid, text) SELECT json_extract(value, '$[0]'), "
                           "json_extract(value, '$[1]') FROM json_each(?)",
                           (orjson.dumps(values).decode(),))
        words.write(db)
        if main:  # (with the file's mtime and inode as it was when read, and the CRC-32 of what was read)
            db.executemany("UPDATE files SET done = ?, mtime = ?, inode = ?, edits = ?, crc = ? WHERE name = ?",
                           [(o, *stamps.get(n, (0, 0, 0, None)), n) for n, o in reached.items()])
        else:
            db.executemany("INSERT INTO files (name, done) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET "
                           "done = excluded.done", list(reached.items()))
        db.execute("COMMIT")
    except BaseException:
        _rollback(db)
        raise


def rebuild(directory: Path, log, progress=None) -> int:
    """Build the search index again from the log; returns how many messages it holds. It is emptied in one
    transaction while ``index.lock`` is held, not deleted: readers that have it open go on reading it (a
    file deleted under them would fail their next query); a damaged one is deleted, under the lock too (a
    reader that opened it notices, once it holds the lock, and opens the new files). Nothing is made for a
    memory with nothing logged yet (no log directory: one claimed for a project)."""
    if not os.path.isdir(log.dir):
        return 0
    index = Index(directory, log)
    try:
        with _catch_up_lock(directory / CATCH_UP_LOCK):
            try:
                index.empty()
            except (sqlite3.DatabaseError, IntegrityError) as exc:  # damaged, or a link planted in its place
                if isinstance(exc, sqlite3.DatabaseError) and not _damaged(exc):
                    raise
                index.close()
                remove_files(directory / FILENAME)
        return index.catch_up(progress)
    finally:
        index.close()


LAG_BYTES = 8 * 1024 * 1024  # of the log the search index may lack for a reader that may not wait (a prompt's hook,
# a turn's context) to catch it up itself (~0.5 s); more (a deleted or damaged index, a big backlog imported), and a
# process of its own does it, the reader answering without it meanwhile: a turn's time is the user's


class Look:
    """How far an index is behind the log, for a reader that may not wait for a long catch-up (the Claude Code
    hook, ``pimem context``): ``lag`` (``Index.lag``: a damaged index deleted first), ``busy`` (another process
    holds ``index.lock``, a catch-up or a rebuild: not waited for, it may take many seconds), ``far`` (over
    ``LAG_BYTES``: left to a process of its own, ``hand_over``)."""

    def __init__(self, index: Index, name: str):
        self.index, self.name = index, name
        self.lag = index.lag()
        self.busy = self.lag > 0 and index.being_caught_up()
        self.far = self.lag > LAG_BYTES
        self._rebuilds = index.rebuilds

    def left(self) -> bool:
        """Whether the index is left to a process of its own: far behind, or found damaged since (and deleted,
        not rebuilt: ``guarded``'s ``again``)."""
        return self.far or self.index.rebuilds != self._rebuilds

    def waited(self) -> str | None:
        """The note for a reader that waits for the catch-up (a command the user typed: search, recall, view):
        what it waits for when that is long (far behind, or another process at it), else None."""
        if self.far:
            return f"the search index of memory '{self.name}' lacks {self.lag / (1 << 20):,.0f} MiB of its log; catching it up first"
        if self.busy:
            return f"the search index of memory '{self.name}' is being caught up by another process; waiting for it"
        return None

    def hand_over(self, meanwhile: str) -> str:
        """Start the catch-up in a process of its own (``catch_up_in_background``), unless another process is at
        it already, and return the note that says why the reader went without the index: what it does
        ``meanwhile``. A read-only memory's is left as it is: a process of its own could not write it either (it
        would die at once, and the next reader start another), so the note says so, without what ``meanwhile``
        says of the wait (its parenthesis, 'until it is done')."""
        lacks = f"lacks {self.lag / (1 << 20):,.0f} MiB of its log" if self.index.rebuilds == self._rebuilds else "was damaged"
        if self.index.read_only:
            return (f"the search index of memory '{self.name}' {lacks} and its directory cannot be written (read-only), so "
                    f"{meanwhile.partition(' (')[0].removesuffix(' until it is done')}; run 'pimem reindex' where it can be written")
        if not self.busy:
            catch_up_in_background(self.index.path.parent)
            self.busy = True  # (that process is at it now: one is enough)
        return f"the search index of memory '{self.name}' {lacks}; a process of its own is catching it up, so {meanwhile}"


# (the caller's pimem: its directory first on the path unless the path holds it already, as site-packages: put
# before the standard library, a module there named as one of its own would shadow it)
_DETACHED = ("import os, sys; os.path.realpath(sys.argv[3]) in map(os.path.realpath, sys.path) or sys.path.insert(0, sys.argv[3]); "
             "from pimem.index import catch_up_detached; catch_up_detached(sys.argv[1], int(sys.argv[2]))")


def catch_up_in_background(directory: Path) -> None:
    """Start a process that catches up the index of the memory at ``directory`` and exits, for a reader that
    cannot wait for it (the Claude Code hook, whose output Claude Code waits for): in a session of its own and
    with no standard stream of the caller's, so that neither waits for it; this pimem, whatever the caller's
    path. A kill leaves the index at its last committed batch, as any catch-up does (the next reader goes on).
    It is handed ``index.lock``, taken here, so that a reader asking ``Index.being_caught_up`` while it starts
    (a fifth of a second) finds it at work and starts no other; none is started while another process holds it."""
    import fcntl
    import subprocess
    import sys

    fd = open_fd(directory / CATCH_UP_LOCK, os.O_RDWR | os.O_CREAT, FILE_MODE)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return
        package_parent = str(Path(__file__).resolve().parent.parent)
        started = subprocess.Popen([sys.executable, "-P", "-c", _DETACHED, os.fsencode(directory), str(fd), package_parent],
                                   stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   start_new_session=True, cwd="/", pass_fds=(fd,))
        # waited for as it ends, so that a long-lived caller (the MCP server) keeps no zombie of it; a daemon thread,
        # so that a short one (the hook) exits without waiting for it
        threading.Thread(target=started.wait, name="pimem-catch-up-reaper", daemon=True).start()
    finally:
        os.close(fd)  # (the lock stays with the process's copy of it)


def catch_up_detached(directory: str, held: int | None = None) -> None:
    """The process ``catch_up_in_background`` starts: catch-ups at a low priority (the user's agent runs beside
    them) until one finds nothing new (a hook logs on meanwhile, and finds this one at work, so starts no other);
    another process catching up already is waited for, as any reader waits. ``held``: the descriptor of the
    ``index.lock`` it was handed, held on to until it is done (let go before its own catch-up took the lock, as
    it connected to the index, readers asking then started one more process each)."""
    from .lock import WriterLock
    from .store import Log

    with contextlib.suppress(OSError):
        os.nice(10)
    index = Index(Path(directory), Log(Path(directory) / "main"))
    lock = None
    if held is not None:  # (the lock ``_catch_up_lock`` finds and takes again, as its holder)
        with _LOCKS_MADE:
            lock = _LOCKS[str(index.path.with_name(CATCH_UP_LOCK))] = WriterLock(index.path.with_name(CATCH_UP_LOCK))
        lock.adopt(held)
    try:
        while index.catch_up():
            pass
    finally:
        index.close()
        if lock is not None:
            lock.release()


# one WriterLock per index.lock path, so a thread holding it may take it again (an upgrade of the index's files
# when a catch-up or a rebuild opens them); kept while a thread holds it or waits for it, dropped after (a watch
# over many memories keeps none of those it is done with)
_LOCKS: weakref.WeakValueDictionary = weakref.WeakValueDictionary()
_LOCKS_MADE = threading.Lock()  # (two threads finding none make one, not one each)


@contextlib.contextmanager
def _catch_up_lock(path: Path):
    from .lock import WriterLock

    with _LOCKS_MADE:
        lock = _LOCKS.get(str(path))
        if lock is None:
            lock = _LOCKS[str(path)] = WriterLock(path)
    if not lock.acquire(env.lock_timeout()):
        raise Busy(f"{path.with_name(FILENAME)} is being caught up by another process; try again")
    try:
        yield
    finally:
        lock.release()


def stderr_progress(label: str) -> Callable[[int, int], None] | None:
    """A one-line progress report for long catch-ups, on a terminal only."""
    if not env.stderr_is_tty():
        return None
    stderr = env.stderr()
    started = time.monotonic()

    def report(done: int, total: int) -> None:
        if time.monotonic() - started > 1:
            end = "\n" if done >= total else ""
            stderr.write(f"\rpimem: indexing {label}: {100 * done // max(total, 1)}%{end}")
            stderr.flush()

    return report


def _close_all(fds: dict[int, int]) -> None:
    """Close the log files an index holds open (``read_row``)."""
    for fd in fds.values():
        os.close(fd)
    fds.clear()
