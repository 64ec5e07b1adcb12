"""What a memory already holds from imports, so re-importing adds nothing twice and a grown file is read on
from where it stopped.

Every imported message carries its source ids in ``meta`` (``source``, ``session``, ``entry``, and
``call_id`` where one entry gave several messages); its *key* is a 16-byte hash of those and its kind. The
log is the truth; two derived files in the memory directory make the check cheap:

- ``imports.keys``: the keys of the keyed messages in ``[0, covered)``, 16 bytes each, in log order;
- ``imports.json``: ``{"covered": T, "keys": n, "files": {path: {offset, line, anchor, format, state}}}``,
  where a file's ``anchor`` is its inode and a hash of the 64 KiB before ``offset`` (so a file that was
  replaced or rewritten, not grown, is read again from the start) and ``state`` is its parser's carry-over
  (session id, cwd, unanswered calls).

Both are read and written only under the writer lock. Messages logged by anyone else since ``covered``
are caught up from the log; a missing or inconsistent state is rebuilt from the log's meta; a crash
between the log write and the state write leaves extra key bytes that are cut off on the next write.
Deleting both files loses nothing.
"""

from __future__ import annotations

import os

import orjson

from .. import hashes, home as homes
from ..config import read_json
from ..memory import Memory
from ..nofollow import open_fd, read_bytes

KEY_BYTES = 16
STATE = "imports.json"
KEYS = "imports.keys"


def key_of(message: dict) -> bytes | None:
    """The dedup key of an imported message (None for messages that did not come from an import)."""
    meta = message.get("meta")
    if not isinstance(meta, dict) or not meta.get("source") or meta.get("entry") is None:
        return None
    ident = orjson.dumps([meta["source"], meta.get("session"), meta["entry"], message["kind"], meta.get("call_id")])
    return hashes.blake2b(ident, digest_size=KEY_BYTES).digest()


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

    @property
    def _state_path(self):
        return self.mem.path / STATE

    @property
    def _keys_path(self):
        return self.mem.path / KEYS

    def peek_file(self, path: str) -> dict | None:
        """Where an earlier import of ``path`` stopped (read without the lock: only a hint, keys decide)."""
        state = self._read_state() if self.mem.exists() else None
        files = state.get("files") if state is not None else None
        entry = files.get(path) if isinstance(files, dict) else None
        return entry if isinstance(entry, dict) else None

    def sync(self) -> None:
        """Bring the key set up to the log's end (caller holds the writer lock)."""
        disk = self._read_state()
        if disk is None:
            self._reset()
        elif (disk["covered"], disk["keys"]) != self._loaded:
            data = read_bytes(self._keys_path) if self._keys_path.exists() or self._keys_path.is_symlink() else b""
            if len(data) < disk["keys"] * KEY_BYTES:
                self._reset()
            else:
                self.keys = KeySet(data[: disk["keys"] * KEY_BYTES])
                self.covered, self.count, self.files = disk["covered"], disk["keys"], disk["files"]
                self._loaded = (self.covered, self.count)
        total = self.mem.count()
        if total < self.covered:  # the memory was replaced under us: start over from its log
            self._reset()
        fresh = bytearray()
        for msg in self.mem.messages(self.covered, total):
            key = key_of(msg)
            if key is not None and key not in self.keys:
                self.keys.add(key)
                fresh += key
        if fresh or total != self.covered:
            self._write(bytes(fresh), total)

    def _read_state(self) -> dict | None:
        try:
            state = read_json(self._state_path, None)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(state, dict):
            return None
        covered, count, files = state.get("covered"), state.get("keys"), state.get("files", {})
        if type(covered) is not int or type(count) is not int or not isinstance(files, dict) or min(covered, count) < 0:
            return None
        return {"covered": covered, "keys": count, "files": files}

    def _reset(self) -> None:
        self.keys, self.covered, self.count, self._loaded = KeySet(), 0, 0, None
        self.files = {}

    def commit(self, keys: list[bytes], total: int, file: str | None = None, position: dict | None = None) -> None:
        """Record the keys of a batch just logged (the log now ends at ``total``) and, if given, how far
        ``file`` has been read. Caller holds the writer lock."""
        self.keys.update(keys)
        if file is not None and position is not None:
            self.files[file] = position
        self._write(b"".join(keys), total)

    def _write(self, digests: bytes, total: int) -> None:
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
        state = {"covered": self.covered, "keys": self.count, "files": self.files}
        homes.write_atomic(self._state_path, orjson.dumps(state) + b"\n")
        self._loaded = (self.covered, self.count)
