"""What a memory already holds from imports, so re-importing adds nothing twice and a grown file is read on
from where it stopped.

Every imported message carries its source ids in ``meta`` (``source``, ``session``, ``entry``, and
``call_id`` where one entry gave several messages); its *key* is a 16-byte hash of those and its kind (a
Claude Code entry's whose id is a UUID without its session: the entry's wherever it is written, and a resumed
session, a new session id, writes the earlier entries again under their uuids). Such a message also has a
*content key*, of its uuid, kind, call id and text, so an entry written again with other content is told
from a copy: it is logged under the entry ``UUID.HASH`` (``content_digest``), as a pi session's repeated id
is. pi and Codex copy too, under a new session id (pi's /fork writes the entries it starts from again, ids and
times kept; ``codex fork`` writes the parent rollout's lines again, each with the fork's time), so their
messages have a content key that leaves the session and the line out (``content_key``): a message whose
content key the memory holds is a copy. The log is the truth; two derived files in the memory directory make
the check cheap:

- ``imports.keys``: the keys of the keyed messages in ``[0, covered)``, 16 bytes each, in log order (a
  message imported by pimem before version 2 of this file, from a line without ids, also has the key that
  line gives now: ``alias_of``; a message with a content key that too);
- ``imports.json``: ``{"version": 5, "journal": J, "covered": T, "keys": n, "files": {path: {offset, line, anchor,
  format, state}}}``,
  where a file's ``anchor`` is its inode and a hash of the 64 KiB before ``offset`` (so a file that was
  replaced or rewritten, not grown, is read again from the start), ``state`` is its parser's carry-over
  (session id, cwd, unanswered calls) and ``limits`` the ``[line, cap for one line]`` from which each read
  with another cap began (a Codex turn counted again skips a line only where the read that took it did);
- ``imports.journal``: what changed since ``imports.json`` was written, so that a batch costs what it changed,
  not the whole state (a year of Codex sessions: 2,000 files, 3 MB): a line ``{"journal": J}`` naming the
  ``imports.json`` it follows, then a line ``{"covered": T, "keys": n, "files": {path: position}}`` a batch, the
  files it read. The state is ``imports.json`` with those lines applied in order, up to the first that is torn
  (a write killed halfway: cut off by the next). Once the journal is larger than ``imports.json`` (and
  ``JOURNAL_MIN``), and when a follower stops, it is folded in: ``imports.json`` written whole under a new J,
  then a journal naming J; a crash between the two leaves a journal naming another J, which is ignored. An
  older pimem reads ``imports.json`` alone and rewrites it without J: a state behind, whose lines are read
  again and found held (the keys, caught up from the log), as after a crash.

All are written only under the writer lock. Messages logged by anyone else since ``covered``
are caught up from the log; a missing or inconsistent state is rebuilt from the log's meta; a crash
between the log write and the state write leaves extra key bytes that are cut off on the next write.
Deleting both files loses nothing; a state of an earlier version has its keys rebuilt from the log once
(the files' positions are kept). A Codex message logged without its turn (by a pimem before ``meta.turn``)
has no content key in the log: a fork naming its session gets it from the parent's rollout (``key_turns``).
"""

from __future__ import annotations

import errno
import os
import re
import time
from pathlib import Path

import orjson

from .. import hashes, home as homes
from ..config import read_json
from ..errors import PimemError, as_error
from ..memory import Memory
from ..nofollow import kind, open_binary, open_fd, read_bytes
from .parser import line_counts

KEY_BYTES = 16
STATE = "imports.json"
KEYS = "imports.keys"
JOURNAL = "imports.journal"
JOURNAL_MIN = 64 * 1024  # bytes: a journal is folded into imports.json once past this and imports.json's size
COUNTS_KEPT = 32  # files whose line counts a long-lived state (a follower's) keeps between reads
SETTLED = 2.0  # seconds: a state file written longer ago than this is parsed again only once its stat changes


VERSION = 5  # 5: the content keys of pi's and Codex's messages; 4: the content keys of Claude Code's entries; 3: Claude
# Code's keys without the session; 2: the keys of lines without ids are their hashes; 1 (no version) keyed them by line
# number too
_UUID = re.compile(r"([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})(\.[0-9a-f]{12})?")  # Claude Code's
# entry ids, and a changed entry's (its uuid and its content's hash)
_NUMBERED = re.compile(r"(\d+)-([0-9a-f]{12})")  # a line's entry as version 1 wrote it: its number and hash
_REPEATED = re.compile(r"(.+)\.[0-9a-f]{12}")  # a pi entry whose id an earlier line of its file gave: ID.HASH


class Unsaved(PimemError):
    """A batch is in the log, but the import state that records it could not be written (``commit``): nothing
    is lost, the next import finds its messages held (from the log) and reads its file again from the last
    position saved. Its code is the failure's (exit 7: a full disk, a file the user may not write)."""


def key_of(message: dict, entry=None) -> bytes | None:
    """The dedup key of an imported message (None for messages that did not come from an import); with
    ``entry``, the key it would have with that entry instead."""
    meta = message.get("meta")
    if not isinstance(meta, dict) or not meta.get("source") or meta.get("entry") is None:
        return None
    session = None if _uuid(meta) else meta.get("session")  # (a uuid is one entry in any session)
    ident = orjson.dumps([meta["source"], session, entry or meta["entry"], message["kind"], meta.get("call_id")])
    return hashes.blake2b(ident, digest_size=KEY_BYTES).digest()


def content_key(message: dict) -> bytes | None:
    """The key of what a message says where a copy under another session says it too, without what a copy
    changes (its session, file, line, cwd; Codex's dates): its kind, call id and text, and
    - a Claude Code entry's uuid (so an entry written again with other content is told from a copy);
    - a pi entry's id and date (``ID.HASH``'s id, as the one copy of the two a fork holds may be either; pi
      draws ids of 8 hex digits, which two sessions may share, and a copy keeps the time), or for an entry
      that gives no time (``meta.undated``: its message has the file's last date, which a copy need not
      share) its parent's id, which a copy keeps too; a v1 line's hash (the line's own bytes, its time among
      them: only a copy says it again);
    - the Codex turn the message was said in and, but for a call or an output (its call id tells it apart),
      how often that turn said the same before (``meta.turn``, ``meta.repeat``, which the parser gives where
      the rollout names its turn by a UUID: a call id alone may be a provider's count, the same in two
      sessions).
    None for other messages (a line of another format without ids is its own: a copy of it is logged again)."""
    meta = message.get("meta")
    if not isinstance(meta, dict):
        return None
    source, call = meta.get("source"), meta.get("call_id")
    if source == "claude":
        scope = _uuid(meta)
        if scope is None:
            return None
    elif source == "pi" and isinstance(meta.get("entry"), str):  # (and its date: ids of 8 hex digits recur)
        repeated = _REPEATED.fullmatch(meta["entry"])
        when = ["parent", meta.get("parent")] if meta.get("undated") else message.get("date")  # (not a date the importer gave)
        scope = [repeated.group(1) if repeated else meta["entry"], when]
    elif source == "codex" and isinstance(meta.get("turn"), str):
        scope = meta["turn"]
    else:
        return None
    said = ["content", source, scope, message["kind"], call, message["text"]]
    if source == "codex" and not call and meta.get("repeat"):
        said.append(meta["repeat"])
    return hashes.blake2b(orjson.dumps(said), digest_size=KEY_BYTES).digest()


def content_digest(messages: list[dict]) -> str:
    """The hash of what one entry's messages say, for the entry ``UUID.HASH`` of a changed one (as long
    as a line's hash, which a pi session's repeated id gets)."""
    said = [[m["kind"], m["text"], m["meta"].get("call_id")] for m in messages]
    return hashes.blake2b(orjson.dumps(said), digest_size=6).hexdigest()


def _uuid(meta: dict) -> str | None:
    """The uuid of a Claude Code message's entry (a changed entry's too), else None."""
    entry = meta.get("entry")
    found = _UUID.fullmatch(entry) if meta.get("source") == "claude" and isinstance(entry, str) else None
    return found.group(1) if found else None


def alias_of(message: dict, repeats: dict) -> bytes | None:
    """For a message imported by version 1 from a line without ids (its entry the line's number and hash),
    the key that line gives now (its hash, ``.n`` for the n-th repeat of the same line in the file:
    ``repeats`` counts them in log order), so a file read again after an upgrade finds what it gave."""
    meta = message.get("meta")
    entry = meta.get("entry") if isinstance(meta, dict) else None
    found = _NUMBERED.fullmatch(entry) if isinstance(entry, str) else None
    if found is None:
        return None
    digest = found.group(2)
    line = (meta.get("source"), meta.get("session"), meta.get("file"), digest, entry)
    if line[:4] not in repeats:
        repeats[line[:4]] = {}
    seen = repeats[line[:4]]  # the lines of that hash seen so far (one line may have given several messages)
    n = seen.setdefault(entry, len(seen))
    return key_of(message, digest if n == 0 else f"{digest}.{n}")


class KeySet:
    """The keys of ``imports.keys`` (its bytes, 16 a key) and those added since: a set once it is asked
    often, a scan of the bytes before (a hook or a follower checks a few keys against a memory of a
    hundred thousand, where building the set would cost more than the scans)."""

    SCANS = 64  # lookups answered by scanning the bytes before the set is built

    def __init__(self, data: bytes = b""):
        self._data, self._set, self._added, self._asked = data, None, set(), 0

    def __contains__(self, key: bytes) -> bool:
        if key in self._added:
            return True
        if self._set is None:
            self._asked += 1
            if self._asked <= self.SCANS:
                return _holds(self._data, key)
            self._set = {self._data[n : n + KEY_BYTES] for n in range(0, len(self._data), KEY_BYTES)}
        return key in self._set

    def add(self, key: bytes) -> None:
        self._added.add(key)

    def update(self, keys) -> None:
        self._added.update(keys)


def _holds(data: bytes, key: bytes) -> bool:
    """Is ``key`` one of the 16-byte records of ``data`` (a match across two records does not count)?"""
    at = data.find(key)
    while at >= 0:
        if at % KEY_BYTES == 0:
            return True
        at = data.find(key, at + 1)
    return False


class ImportState:
    """The keys a memory holds and the read position of each imported file. Call ``sync`` under the
    writer lock before filtering a batch, and ``commit`` after logging it."""

    def __init__(self, mem: Memory):
        self.mem = mem
        self.keys = KeySet()
        self.covered = 0
        self.count = 0
        self.files: dict[str, dict] = {}
        self._loaded = None  # (covered, count) of the state on disk when we last read it
        self._counts: dict[str, tuple] = {}  # path -> ((offset, anchor), its line counts): ``counts_before``
        self._lent: dict[str, dict] = {}
        self._peeked = False  # the keys on disk were read by ``holds`` before any ``sync``
        self._turned: set[str] = set()  # Codex sessions ``key_turns`` looked at
        self._view: dict | None = None  # the state on disk as last read or written (``_disk``)
        self._appendable = False  # the state held here is the view's, so a batch may be journaled (``_write``)

    def counts_before(self, path: str, prior: dict | None, f, offset: int):
        """What ``Parser.line_entry`` needs when ``path`` is read on from ``offset`` (``prior``, its saved
        position): the line counts of the part read before, as the last read left them if this state did
        it (a follower), else counted from the file when first asked for."""
        kept = self._counts.pop(path, None)  # (lent to this read: kept again by ``keep_counts`` if it ends well)
        self._lent.pop(path, None)
        if not offset:
            return None
        if kept is not None and prior is not None and kept[0] == (prior.get("offset"), prior.get("anchor")):
            self._lent[path] = kept[1]
            return lambda: kept[1]
        return lambda: line_counts(f, offset)

    def keep_counts(self, path: str, position: dict, parser) -> None:
        """Keep the line counts of a file read to ``position`` for the next read of it (the last few files;
        a read that asked for none leaves those it was lent as they were, and as true)."""
        counts = parser.counted if parser.counted is not None else self._lent.get(path)
        self._lent.pop(path, None)
        if counts is not None:
            self._counts[path] = ((position["offset"], position["anchor"]), counts)
            while len(self._counts) > COUNTS_KEPT:
                del self._counts[next(iter(self._counts))]

    @property
    def _state_path(self):
        return self.mem.path / STATE

    @property
    def _keys_path(self):
        return self.mem.path / KEYS

    @property
    def _journal_path(self):
        return self.mem.path / JOURNAL

    def peek_file(self, path: str) -> dict | None:
        """Where an earlier import of ``path`` stopped (read without the lock: only a hint, keys decide); a copy,
        which the caller's parser may change (``_hint`` keeps the state parsed for the next read)."""
        state = self._hint()
        files = state.get("files") if state is not None else None
        entry = files.get(path) if isinstance(files, dict) else None
        return orjson.loads(orjson.dumps(entry)) if isinstance(entry, dict) else None

    def holds(self, key: bytes | None) -> bool:
        """Whether the memory holds a message with ``key``, as far as the state tells before ``sync`` (read
        without the lock: only a hint)."""
        if key is None:
            return False
        if self._loaded is None and not self._peeked:
            self._peeked = True
            state = self._disk() if self.mem.exists() else None
            if state is not None and state["version"] == VERSION and self._keys_path.exists():
                self.keys = KeySet(read_bytes(self._keys_path)[: state["keys"] * KEY_BYTES])
        return key in self.keys

    def leaves(self) -> dict[tuple, str]:
        """Where each tree-shaped session read so far ends, by ``(source, session)``: the last entry of its
        file that became a message or lies after one (its parser's ``leaf``; read without the lock)."""
        state = self._hint()
        out = {}
        for position in (state["files"] if state is not None else {}).values():
            carried = position.get("state") if isinstance(position, dict) else None
            if isinstance(carried, dict) and isinstance(carried.get("leaf"), str) and isinstance(carried.get("session"), str):
                out[(position.get("format"), carried["session"])] = carried["leaf"]
        return out

    def sync(self) -> None:
        """Bring the key set up to the log's end (caller holds the writer lock). A link or a directory at the
        journal is refused here, before anything is written, even where ``imports.json`` names none (which
        ``_disk`` reads alone): its fold would write over a link, or fail only after writing ``imports.json``."""
        disk = self._disk()
        if kind(self._journal_path) == "dir":
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(self._journal_path))
        if disk is None:
            self._reset()
        elif disk["version"] != VERSION:  # written by an earlier pimem: the keys again from the log, positions kept
            self._reset()
            self.files = dict(disk["files"])
        elif _mark(disk) != self._loaded:
            data = read_bytes(self._keys_path) if self._keys_path.exists() or self._keys_path.is_symlink() else b""
            if len(data) < disk["keys"] * KEY_BYTES:
                self._reset()
            else:
                self.keys = KeySet(data[: disk["keys"] * KEY_BYTES])
                self.covered, self.count, self.files = disk["covered"], disk["keys"], disk["files"]
                self._loaded, self._appendable = _mark(disk), True
        total = self.mem.count()
        if total < self.covered:  # the memory was replaced under us: start over from its log
            self._reset()
        fresh, repeats = bytearray(), {}
        for msg in self.mem.messages(self.covered, total):
            for key in (key_of(msg), alias_of(msg, repeats), content_key(msg)):
                if key is not None and key not in self.keys:
                    self.keys.add(key)
                    fresh += key
        if fresh or total != self.covered:
            self._write(bytes(fresh), total, {})

    def key_turns(self, sessions) -> None:
        """The content keys of the messages of Codex ``sessions`` (a fork's parents) that the memory holds
        without a turn (logged by a pimem before ``meta.turn``), their turns read again from the rollouts this
        state names for those sessions, so the fork's copy of them adds nothing. Each session once (caller
        holds the writer lock, after ``sync``)."""
        for session in set(sessions) - self._turned:
            self._turned.add(session)
            turnless = [m for m in self.mem.log.holding([orjson.dumps(session)]) if _turnless(m, session)]
            turns: dict = {}
            for path, position in self.files.items() if turnless else ():
                carried = position.get("state") if isinstance(position, dict) else None
                if (position.get("format") == "codex" and isinstance(carried, dict) and carried.get("session") == session
                        and isinstance(position.get("offset"), int)):
                    turns.update(_turns_of(path, position["offset"]))
            fresh = bytearray()
            for msg in turnless:
                found = turns.get(key_of(msg))
                mark = content_key({**msg, "meta": {**msg["meta"], "turn": found[0], "repeat": found[1]}}) if found else None
                if mark is not None and mark not in self.keys:
                    self.keys.add(mark)
                    fresh += mark
            if fresh:
                self._write(bytes(fresh), self.covered, {})

    def _hint(self) -> dict | None:
        """The state on disk for the readers without the lock (``peek_file``, ``leaves``)."""
        return self._disk() if self.mem.exists() else None

    def _disk(self) -> dict | None:
        """The state on disk (``imports.json`` and its journal's lines), read again only where it changed: a
        follower checks each file it finds against it. While ``imports.json`` is the one read last (it starts
        with the same journal's name, drawn anew at each write of it) only the journal's new lines are read; an
        older pimem's, without one, is parsed again once its stat changes, or every time while it was written in
        the last ``SETTLED`` seconds (a write since may have left its inode, size and time stamps as they were)."""
        view = self._view
        if view is not None and view["journal"] is not None:
            if _starts(self._state_path, _head(view["journal"])) and self._replay(view):
                return view
        elif view is not None and view["settled"] and view["stamp"] == _stamp(self._state_path):
            return view
        view = self._read_state()
        if view is not None and not self._replay(view):
            view = None
        self._view = view
        return view

    def _read_state(self) -> dict | None:
        """``imports.json`` alone, as a view for ``_replay`` to bring forward."""
        stamp = _stamp(self._state_path)
        try:
            state = read_json(self._state_path, None)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(state, dict):
            return None
        covered, count, files = state.get("covered"), state.get("keys"), state.get("files", {})
        if type(covered) is not int or type(count) is not int or not isinstance(files, dict) or min(covered, count) < 0:
            return None
        journal = state.get("journal")
        return {"covered": covered, "keys": count, "files": files, "version": state.get("version", 1),
                "journal": journal if isinstance(journal, str) and state.get("version") == VERSION else None,
                "stamp": stamp, "settled": stamp is not None and time.time_ns() - stamp[2] > SETTLED * 1e9,
                "base": stamp[1] if stamp else 0, "at": 0, "ino": None, "end": 0}

    def _replay(self, view: dict) -> bool:
        """Apply to ``view`` the journal's lines past ``view["at"]`` (none unless it names ``view``'s journal);
        False when the journal is not the one read so far (replaced or cut short: read again from the start)."""
        if view["journal"] is None:
            return True
        try:
            f = open_binary(self._journal_path)  # (a directory there: named by its path, the descriptor closed)
        except FileNotFoundError:
            return view["at"] == 0
        with f:
            st = os.fstat(f.fileno())
            if view["at"] and (st.st_ino != view["ino"] or st.st_size < view["at"]):
                return False
            f.seek(view["at"])
            data = f.read()
        view["ino"], view["end"] = st.st_ino, view["at"] + len(data)
        at = view["at"]
        for raw in data.split(b"\n")[:-1]:  # (the last piece: a line not ended, or nothing)
            try:
                entry = orjson.loads(raw)
            except orjson.JSONDecodeError:
                break
            if at == 0:
                if not isinstance(entry, dict) or entry.get("journal") != view["journal"]:
                    break  # (another imports.json's: a write of this one was cut short before its journal's)
            elif not _entry(entry):
                break
            else:
                view["covered"], view["keys"] = entry["covered"], entry["keys"]
                view["files"].update(entry["files"])
            at += len(raw) + 1
        view["at"] = at
        return True

    def _reset(self) -> None:
        self.keys, self.covered, self.count, self._loaded = KeySet(), 0, 0, None
        self.files, self._appendable = {}, False

    def commit(self, keys: list[bytes], total: int, file: str | None = None, position: dict | None = None) -> None:
        """Record the keys of a batch just logged (the log now ends at ``total``) and, if given, how far
        ``file`` has been read. Caller holds the writer lock. A state that could not be written (a full disk)
        raises ``Unsaved``, and what is held here is let go of: its next ``sync`` reads the state on disk and
        catches up from the log (kept, the batch's keys would not be written with the next batch's, whose state
        would say the log covered)."""
        try:
            self.keys.update(keys)
            changed = {}
            if file is not None and position is not None:
                self.files[file] = changed[file] = position
            self._write(b"".join(keys), total, changed)
        except BaseException as exc:
            self._reset()
            error = as_error(exc)
            if error is None:
                raise
            raise Unsaved(f"the import state could not be saved ({error.message})", error.code) from None

    def settle(self, timeout: float | None = 0) -> None:
        """Fold the journal into ``imports.json`` (a follower stopping: the next reader parses one file), under the
        writer lock, waiting up to ``timeout`` seconds for it (``Busy`` after that)."""
        if not self.mem.exists():
            return
        with self.mem.lock(timeout):
            self.sync()
            view = self._view  # (an older pimem's imports.json, without a journal, is whole as it is)
            if view is not None and view["journal"] is not None and max(view["end"], view["at"]) > len(_header(view["journal"])):
                self._fold()

    def _write(self, digests: bytes, total: int, changed: dict) -> None:
        homes.ensure_dir(self.mem.path)
        fd = open_fd(self._keys_path, os.O_RDWR | os.O_CREAT, homes.FILE_MODE)
        try:
            os.ftruncate(fd, self.count * KEY_BYTES)  # drop keys a crashed import wrote after its last state
            os.lseek(fd, 0, os.SEEK_END)
            homes.write_all(fd, digests, durable=False, path=self._keys_path)
        finally:
            os.close(fd)
        self.count += len(digests) // KEY_BYTES
        self.covered = total
        view = self._view
        if (self._appendable and view is not None and view["journal"] is not None and view["at"] > 0
                and view["files"] is self.files and view["at"] < max(JOURNAL_MIN, view["base"])):
            line = orjson.dumps({"covered": self.covered, "keys": self.count, "files": changed}) + b"\n"
            try:
                fd = open_fd(self._journal_path, os.O_WRONLY)
            except FileNotFoundError:  # (deleted: written again whole)
                return self._fold()
            try:
                if os.fstat(fd).st_ino == view["ino"]:
                    os.ftruncate(fd, view["at"])  # (a line a killed write left torn)
                    os.lseek(fd, view["at"], os.SEEK_SET)
                    try:
                        homes.write_all(fd, line, path=self._journal_path)
                    except BaseException:  # (the disk full, say: the part written cut off, as a failed append is)
                        homes.cut_back(fd, view["at"])
                        raise
                    view["at"] = view["end"] = view["at"] + len(line)
                    view["covered"], view["keys"] = self.covered, self.count
                    self._loaded = _mark(view)
                    return
            finally:
                os.close(fd)
        self._fold()

    def _fold(self) -> None:
        """Write the state held here whole, as ``imports.json`` under a new journal name, and an empty journal
        naming it (caller holds the writer lock)."""
        homes.ensure_dir(self.mem.path)
        journal = os.urandom(16).hex()
        data = orjson.dumps({"version": VERSION, "journal": journal, "covered": self.covered, "keys": self.count,
                             "files": self.files}) + b"\n"
        homes.write_atomic(self._state_path, data)
        header = _header(journal)
        homes.write_atomic(self._journal_path, header)
        self._view = {"version": VERSION, "journal": journal, "covered": self.covered, "keys": self.count,
                      "files": self.files, "stamp": None, "settled": False, "base": len(data), "at": len(header),
                      "ino": os.stat(self._journal_path, follow_symlinks=False).st_ino, "end": len(header)}
        self._loaded, self._appendable = _mark(self._view), True


def journal_left(directory) -> str | None:
    """What of the memory at ``directory``'s ``imports.journal`` its state leaves out (``fsck``): ``another``, a
    journal naming another ``imports.json`` than the one there (a fold killed between its two writes, or an older
    pimem's write of ``imports.json``), ``torn``, a line at its end that a write killed halfway left, or None."""
    if not os.path.lexists(Path(directory) / JOURNAL):
        return None
    view = ImportState(_At(Path(directory)))._disk()
    if view is None or view["journal"] is None or view["at"] == 0:
        return "another"
    return "torn" if view["end"] > view["at"] else None


def refold(mem: Memory) -> None:
    """``mem``'s import state written whole again, its journal folded in (``fsck --repair``; caller holds the
    writer lock)."""
    state = ImportState(mem)
    state.sync()
    state._fold()


def read_state(directory) -> dict | None:
    """The import state of the memory at ``directory`` as its files hold it (``imports.json`` and its journal):
    ``{"version", "covered", "keys", "files"}``, or None without one (read without the lock: a reader's)."""
    view = ImportState(_At(Path(directory)))._disk()
    return {k: view[k] for k in ("version", "covered", "keys", "files")} if view is not None else None


_TRASHED = re.compile(r".+-(\d{8}T\d{6})(?:-(\d+))?")  # a deleted memory's directory in the trash: NAME-STAMP[-N]


def deleted_positions(home: Path, paths: list[str] | None = None) -> dict[str, dict]:
    """Where the import of each of ``paths`` (None: of every file) stood in the memory deleted last that imported
    it (``pimem delete``: the memories in ``<home>/.trash``): ``{path: position}`` for those found. A hint read
    without a lock, from directories that are no memory any more; one that cannot be read is passed over."""
    try:
        entries = [e for e in os.scandir(Path(home) / homes.TRASH) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return {}
    dated = sorted(((m.group(1), int(m.group(2) or 1)), e.path) for e in entries if (m := _TRASHED.fullmatch(e.name)))
    found: dict[str, dict] = {}
    wanted = None if paths is None else {path: orjson.dumps(path) for path in paths}
    for _, directory in reversed(dated):  # (the newest first)
        try:
            if wanted is not None:  # (the common case, read cheaply: not a memory that imported any of them)
                raw = b"".join(read_bytes(Path(directory) / name) for name in (STATE, JOURNAL)
                               if kind(Path(directory) / name) == "file")
                if not any(said in raw for path, said in wanted.items() if path not in found):
                    continue
            state = read_state(directory)
        except (OSError, PimemError):
            continue
        files = state.get("files") if state is not None else None
        for path, position in (files.items() if isinstance(files, dict) else ()):
            if isinstance(position, dict) and (wanted is None or path in wanted):
                found.setdefault(path, position)
        if wanted is not None and len(found) == len(wanted):
            break
    return found


def trash_stamp(home: Path) -> tuple | None:
    """What changes when a memory is deleted into ``<home>/.trash`` or taken out of it (a follower's
    ``deleted_positions`` of every file is read again then), or None while there is none."""
    try:
        st = os.stat(Path(home) / homes.TRASH, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns


class _At:
    """A memory's directory where ``ImportState`` needs only its path (``read_state``)."""

    def __init__(self, path: Path):
        self.path = path


def _header(journal: str) -> bytes:
    return orjson.dumps({"journal": journal}) + b"\n"


def _head(journal: str) -> bytes:
    """How an ``imports.json`` written with ``journal`` starts (``_fold`` puts these keys first)."""
    return orjson.dumps({"version": VERSION, "journal": journal})[:-1] + b","


def _starts(path, head: bytes) -> bool:
    try:
        fd = open_fd(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        return os.pread(fd, len(head), 0) == head
    finally:
        os.close(fd)


def _stamp(path) -> tuple | None:
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def _mark(view: dict) -> tuple:
    """What tells one state on disk from another: its journal, how far it was read, its counts."""
    return view["journal"], view["at"], view["covered"], view["keys"]


def _entry(entry) -> bool:
    """Whether a journal line is a batch's: its counts and the positions of the files it read."""
    return (isinstance(entry, dict) and type(entry.get("covered")) is int and type(entry.get("keys")) is int
            and min(entry["covered"], entry["keys"]) >= 0 and isinstance(entry.get("files"), dict))


def _turnless(msg: dict, session: str) -> bool:
    meta = msg.get("meta")
    return isinstance(meta, dict) and meta.get("source") == "codex" and meta.get("session") == session and "turn" not in meta


def _turns_of(path: str, stop: int) -> dict:
    """``key_of`` -> ``(turn, repeat)`` of the messages the first ``stop`` bytes of Codex rollout ``path``
    give where it names their turn (nothing where it cannot be read)."""
    from .. import decoder
    from .codex import CodexParser
    from .parser import Malformed, read_lines

    parser, out = CodexParser(path), {}
    try:
        f = open(path, "rb")
    except OSError:
        return out
    with f:
        for n, line in enumerate(read_lines(f, stop), 1):
            line = line.removeprefix(decoder.BOM) if n == 1 else line
            if not line.strip():
                continue
            try:
                records = parser.parse(n, line, decoder.loads(line))
            except (decoder.JSONDecodeError, Malformed):
                continue
            for rec in records:
                if rec["meta"].get("turn"):
                    out[key_of(rec)] = (rec["meta"]["turn"], rec["meta"].get("repeat"))
    return out
