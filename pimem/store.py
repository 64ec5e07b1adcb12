"""The verbatim message log: ``main/YYYY-MM-DD.jsonl``, append-only, fsync'd before acknowledging.

Messages carry a permanent, contiguous ``i``. A message goes to the file named by the date part of its own
date, so imported history can land in an older day's file; the log is read back in ``i`` order by chaining
the files (or merging those whose ranges overlap). Torn last lines are skipped on read and sealed with a
newline before the next write; a gap or duplicate ``i`` is an integrity error, never repaired silently.

Writers must hold the memory's writer lock (``Memory.lock``); readers take no lock.
"""

from __future__ import annotations

import contextlib
import heapq
import mmap
import os
from pathlib import Path
from typing import Callable, Iterable, Iterator
from zlib import crc32

import orjson

from .errors import IntegrityError
from .home import FILE_MODE, cut_back, ensure_dir, sync_dir, write_all, write_atomic
from .nofollow import kind, lstat, not_a_dir, open_binary, open_fd, read_bytes

_PROBE = 8 * 1024  # first read when looking for a file's first or last line; grows 4x while lines are longer
_READ_BUFFER = 1024 * 1024  # for streaming whole files
_SKIP_MIN = 64 * 1024  # a file's head shorter than this is read rather than bisected


def _parse(line: bytes) -> dict | None:
    """A stored line as a message, or None for a torn or damaged line."""
    try:
        msg = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(msg) is not dict or type(msg.get("i")) is not int:
        return None
    return msg


def _lines(path: Path, start_offset: int = 0) -> Iterator[tuple[int, bytes]]:
    """Complete lines of a file with their byte offsets; a final fragment without newline is not yielded."""
    with open_binary(path, _READ_BUFFER) as f:
        if start_offset:
            f.seek(start_offset)
        offset = start_offset
        for line in f:
            if not line.endswith(b"\n"):
                return
            yield offset, line
            offset += len(line)


def _entries(path: Path, offset: int = 0) -> Iterator[tuple[dict, bytes]]:
    """``(message, stored line)`` for each valid line of a file from byte ``offset``, in file order
    (``_parse`` inlined: this loop runs once per message read)."""
    loads, error = orjson.loads, orjson.JSONDecodeError
    with open_binary(path, _READ_BUFFER) as f:
        if offset:
            f.seek(offset)
        for line in f:
            if line[-1:] != b"\n":
                return  # a torn last line
            try:
                msg = loads(line)
            except error:
                continue
            if type(msg) is dict and type(msg.get("i")) is int:
                yield msg, line


def _groups(ranges: list[tuple[int, int, str]]) -> list[list[tuple[int, str]]]:
    """Files in ``i`` order as ``(first_i, name)``: runs of files whose ranges overlap (imported history) form
    one group, read by merging; every other file is a group of its own."""
    groups: list[list[tuple[int, str]]] = []
    group_last = -1
    for first, last, name in ranges:
        if groups and first <= group_last:
            groups[-1].append((first, name))
        else:
            groups.append([(first, name)])
        group_last = max(group_last, last)
    return groups


def _offset_below(path: Path, start: int) -> int:
    """A line-start offset in a day file before which every message has ``i < start`` (found by bisecting
    on the ``{"i":N,`` every stored line begins with), so reading the end of a long file skips its head.
    0 when nothing can be skipped; a line not in that form just stops the search early."""
    lo = 0
    with open_binary(path, 0) as f:
        hi = os.fstat(f.fileno()).st_size
        while hi - lo > _SKIP_MIN:
            mid = (lo + hi) // 2
            f.seek(mid)
            probe = f.read(_PROBE)
            nl = probe.find(b"\n")
            line_start = mid + nl + 1
            if nl < 0 or line_start >= hi:
                hi = mid  # a long line: look lower
                continue
            head = probe[nl + 1 : nl + 32]
            comma = head.find(b",")
            if not head.startswith(b'{"i":') or comma < 0 or not head[5:comma].isdigit():
                break
            if int(head[5:comma]) < start:
                lo = line_start
            else:
                hi = mid
    return lo


def _end(rows: dict) -> int:
    """T as the rows of ranges.json record it: one past the last message of any file."""
    return max((info.last + 1 for info in rows.values() if info.last is not None), default=0)


class _FileInfo:
    """What a file's head and tail say: first and last valid ``i`` and whether its last line is torn.
    Valid while the file's size is unchanged (the log only grows). ``stamp`` is its ``(mtime_ns, inode)``
    when known: a file changed behind pimem's back (edited, replaced, restored) differs in it even at the
    same size. ``edits``: how many times a writer found it so changed (ranges.json carries the count on).
    ``crc``: the CRC-32 of its ``size`` bytes when known (carried on by each write from the bytes written), so
    a file whose stamp alone moved (touched, copied back) is told from one edited at the same size."""

    __slots__ = ("size", "first", "last", "torn", "stamp", "edits", "crc")

    def __init__(self, size: int, first: int | None, last: int | None, torn: bool, stamp: tuple | None = None,
                 edits: int = 0, crc: int | None = None):
        self.size, self.first, self.last, self.torn, self.stamp, self.edits = size, first, last, torn, stamp, edits
        self.crc = crc

    def matches(self, st: os.stat_result) -> bool:
        """Whether the file, as ``st`` finds it now, is as this record says."""
        return st.st_size == self.size and (self.stamp is None or self.stamp == (st.st_mtime_ns, st.st_ino))


def _stamp(st: os.stat_result) -> tuple[int, int]:
    return st.st_mtime_ns, st.st_ino


RANGES = "ranges.json"  # beside main/: each file's size and first/last i, so a new process need not open them
WRITING = "ranges.writing"  # beside it while a writer changes day files: ranges.json may be behind them


def _boot_id() -> str | None:
    """This boot of the machine (Linux), or None: a ranges.json written before a power cut is not trusted."""
    global _BOOT
    if _BOOT is False:
        try:
            with open("/proc/sys/kernel/random/boot_id", "rb") as f:
                _BOOT = f.read().strip().decode() or None
        except OSError:
            _BOOT = None
    return _BOOT


_BOOT: str | None | bool = False


class Log:
    """One memory's ``main/`` directory.

    ``ranges.json`` records each day file's size and first and last ``i`` as the last writer left them. A
    reader normally checks every file's size against it (a ``stat`` each). It trusts it without doing so when
    it can prove nobody wrote since: a writer creates ``ranges.writing`` before it touches a day file and
    removes it only after replacing ``ranges.json``, and ``ranges.json`` names the boot it was written in. So
    the file is trusted if the marker is absent (checked after reading it, so a write that began meanwhile
    leaves the reader at the state before that write, as if it had run a moment earlier), the boot is this one
    (no power cut since, which could have undone the non-fsync'd replace), and it names exactly the files
    there are. A writer that crashed leaves the marker, and readers check sizes until the next write."""

    def __init__(self, directory: Path):
        self.dir = directory
        self._info: dict[str, _FileInfo] = {}
        self._loaded = False
        self._saved: tuple[tuple, dict[str, _FileInfo], bool] | None = None  # (stamp, rows, trustworthy)
        self._known: tuple[int, list] | None = None  # (T, ranges) as last listed, see ``entries``
        self._checked: tuple | None = None  # the files found changed behind pimem's back, once checked
        self._texts_stale = False  # such a change, until a writer has recorded it (see ``edited``)
        self.explaining = False  # fsck: it reads a changed log to explain it, never stops at the change
        self._unlooked = False  # the files' sizes came from ranges.json: a file read is checked as it is opened
        # with keep_written, the last write as (file name, offset, bytes) per run (an importer indexes from it)
        self.keep_written, self.written = False, []
        self._edited: set[str] = set()  # the files found changed behind pimem's back since ranges.json was read
        self._crcs: dict[str, tuple] = {}  # file name -> ((size, mtime_ns, inode), CRC-32) as last read whole
        self._stale: tuple | None = None  # the ranges.json (its stat) found otherwise than the files: not trusted
        self._saved_end = 0  # T as ranges.json records it

    def _read_saved(self) -> tuple[dict[str, _FileInfo], bool]:
        """ranges.json's rows and whether it was written complete in this boot (re-read when it changed)."""
        path = self.dir.parent / RANGES
        try:
            st = os.stat(path)
        except OSError:  # (gone: what it said is forgotten too, or a memory renamed away claims a loss)
            self._saved, self._saved_end = None, 0
            return {}, False
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        if self._saved is None or self._saved[0] != stamp:
            rows, boot = {}, None
            try:
                saved = orjson.loads(read_bytes(path))
            except (OSError, orjson.JSONDecodeError):
                saved = None
            if type(saved) is dict and type(saved.get("files")) is dict:
                boot, none = saved.get("boot"), type(None)
                for name, row in saved["files"].items():
                    if type(row) is list and len(row) in (4, 6, 7, 8):
                        size, first, last, torn = row[:4]
                        seen = tuple(row[4:6]) if len(row) >= 6 and all(type(v) is int for v in row[4:]) else None
                        edits = row[6] if len(row) >= 7 and seen is not None else 0
                        crc = row[7] if len(row) == 8 and seen is not None else None
                        if type(size) is int and type(first) in (int, none) and type(last) in (int, none) and type(torn) is bool:
                            rows[name] = _FileInfo(size, first, last, torn, seen, edits, crc)
            self._saved = (stamp, rows, boot is not None and boot == _boot_id())
            self._saved_end = _end(rows)
        return self._saved[1], self._saved[2]

    def _load_ranges(self) -> None:
        """Start from what the last writer knew of each file (valid only while a file's size is unchanged):
        with a year of daily files, every command would otherwise open each file to find its ends."""
        self._loaded = True
        rows, _ = self._read_saved()
        for name, info in rows.items():
            self._info.setdefault(name, info)

    def _baseline(self) -> dict[str, _FileInfo]:
        """ranges.json's rows when they claim to be the files as they are (written in this boot, no writer at
        work): a file that differs from its row then changed behind pimem's back. Empty otherwise."""
        rows, this_boot = self._read_saved()
        if not this_boot or os.path.exists(self.dir.parent / WRITING):
            return {}
        return rows

    def _trusted(self, names: list[str]) -> bool:
        """Whether ranges.json can stand for the files' sizes right now (see the class's note), the newest day
        file (where appends go) checked against its row; if so its rows are taken as this process's knowledge
        of the files."""
        rows = self._baseline()
        if not rows or len(rows) != len(names) or any(name not in rows for name in names) or self._saved[0] == self._stale:
            return False  # (its rows would undo what was learned of the files since)
        if names and not self._as_recorded(names[-1], rows[names[-1]], lstat(f"{self.dir}/{names[-1]}")):
            return False  # (sizes() looks at every file and checks the log)
        self._info.update(rows)
        self._loaded = self._unlooked = True
        return True

    def _as_recorded(self, name: str, info: _FileInfo, st: os.stat_result) -> bool:
        """Whether a day file, as ``st`` finds it, is as ``info`` records it: the same size and stamp, or the
        same size and bytes with only the stamp moved (touched, or copied back from a backup: a new inode),
        whose new stamp is then taken as recorded (the next write records it). Only a file whose stamp
        moved is read, once per process."""
        if info.matches(st):
            return True
        if info.crc is None or st.st_size != info.size or self.content_crc(name, st) != info.crc:
            return False
        info.stamp = _stamp(st)
        return True

    def content_crc(self, name: str, st: os.stat_result) -> int | None:
        """The CRC-32 of a day file's ``st.st_size`` bytes (None if it cannot be read), remembered while
        its stamp and size are the same."""
        key = (st.st_size, st.st_mtime_ns, st.st_ino)
        known = self._crcs.get(name)
        if known is not None and known[0] == key:
            return known[1]
        crc, left = 0, st.st_size
        try:
            with open_binary(f"{self.dir}/{name}", 0) as f:
                while left:
                    data = f.read(min(left, _READ_BUFFER))
                    if not data:
                        return None  # (shortened since)
                    crc, left = crc32(data, crc), left - len(data)
        except OSError:
            return None
        self._crcs[name] = (key, crc)
        return crc

    def _changed_behind(self, changed: list[str]) -> None:
        """Day files differ from what the last writer recorded with no writer at work: something else wrote
        them. Check the whole log (every ``i`` once, none missing) before anything is read or written;
        ``IntegrityError`` (exit 5) names a gap or duplicate. Once per change in this process."""
        key = tuple(sorted(changed))
        if key == self._checked or self.explaining:
            return
        rows, _ = self._read_saved()  # (read before the files: a write meanwhile only adds to them)
        end = self.check_whole(f"{', '.join(changed[:3])}{' …' if len(changed) > 3 else ''} changed behind pimem's back")
        self._refuse_lost_end(rows, end, checked=True)
        self._checked, self._texts_stale = key, True

    @property
    def edited(self) -> bool:
        """Whether this process found the log changed behind pimem's back (a valid change: else it stopped): the
        texts of the lines last shown (lines.json) may quote what was changed, a secret masked by hand, and are
        read again from the log. The writer that records the change removes them (``save_ranges``, and fsck's
        ``rewrite_ranges``); a reader writes nothing for it (the MCP server writes nothing at all)."""
        return self._checked is not None

    def lost_end(self, end: int, rows: dict[str, _FileInfo] | None = None) -> tuple[int, int, list[str]] | None:
        """The messages ranges.json (``rows``, read before the files were looked at) records at or past ``end``,
        the log's T as found now: lost from the log's end (a day file deleted or cut short, an older copy put
        back), as ``(first, last, day files)``; None when nothing is. Its rows are written only after the
        lines they count were flushed, so in any boot they never claim more than was logged."""
        if rows is None:
            rows, _ = self._read_saved()
        past = sorted(name for name, info in rows.items() if info.last is not None and info.last >= end)
        if not past:
            return None
        return end, max(rows[name].last for name in past), past

    def past_unsealed(self, end: int, names: list[str]) -> int:
        """``end``, or past the messages ``end…`` that sit whole on the last line of one of these day files
        with only its newline missing: readers skip such a line as torn, and the next write seals it, so it
        is no more lost than the message before it (rare: read only when the log ends early)."""
        for name in names:
            tail = b""
            try:
                with open_binary(f"{self.dir}/{name}", 0) as f:
                    size = os.fstat(f.fileno()).st_size
                    f.seek(max(0, size - _PROBE))
                    data = f.read()
                    while size > len(data) and b"\n" not in data:  # (a long line: read back to its start)
                        f.seek(max(0, size - 4 * len(data)))
                        data = f.read()
                    tail = data[data.rfind(b"\n") + 1:]
            except OSError:
                continue
            msg = _parse(tail) if tail else None
            if msg is not None and msg["i"] == end:
                end += 1
        return end

    def _refuse_lost_end(self, rows: dict[str, _FileInfo], end: int, checked: bool = False) -> None:
        """``IntegrityError`` (exit 5) when ranges.json (``rows``, read before the files) records messages past
        ``end``: a writer would number new messages from where the log now ends, giving their numbers to other
        messages. Unless ``end`` came from checking the whole log, the log is checked first (a T found from the
        files' ends is short when lines are out of order, and a gap or line out of order is named as such)."""
        if not rows or (end >= self._saved_end and self._saved is not None and rows is self._saved[1]):
            return  # (the common case, without a look at each row)
        lost = self.lost_end(end, rows)
        if lost is not None and not checked:
            lost = self.lost_end(end := self.check_whole("the log ends before ranges.json records it"), rows)
        if lost is not None:
            lost = self.lost_end(self.past_unsealed(end, lost[2]), rows)
        if lost is not None:
            raise IntegrityError(f"{self._whose()}{lost_words(*lost)}; put {'it' if len(lost[2]) == 1 else 'them'} "
                                 f"back, or see 'pimem fsck {self.dir.parent.name}'")

    def check_whole(self, why: str) -> int:
        """Read every valid line's ``i``: they must be ``0…T-1``, each once, rising within each file (readers
        read a file in its order). Returns T; ``IntegrityError`` names the first duplicate, line out of order or
        gap."""
        seen = bytearray()
        for name in self._names():
            before, crc, read = -1, 0, 0
            try:
                st = lstat(f"{self.dir}/{name}")
            except OSError:
                st = None
            for _, line in _lines(self.dir / name):
                crc, read = crc32(line, crc), read + len(line)  # (so a file whose stamp alone moves is known)
                # (every line parsed, as readers parse it: its head alone is no proof, a torn line sealed by a
                # writer or an edit by hand may keep ``{"i":N,`` and end in ``}`` and be no message)
                msg = _parse(line)
                if msg is None or msg["i"] < 0:
                    continue  # a damaged line: readers skip it (fsck reports it)
                i = msg["i"]
                if i >= len(seen):
                    seen.extend(bytes(i + 1 - len(seen)))
                if seen[i]:
                    raise IntegrityError(f"{self._whose()}{why}: duplicate in the log: i={i} twice (again in main/{name}); {self._fsck()}")
                if i < before:
                    raise IntegrityError(f"{self._whose()}{why}: lines out of order in the log: i={i} after i={before} in main/{name}; {self._fsck()}")
                seen[i], before = 1, i
            if st is not None and read == st.st_size:
                self._crcs[name] = ((st.st_size, st.st_mtime_ns, st.st_ino), crc)
        missing = seen.find(0)
        if missing >= 0:
            raise IntegrityError(f"{self._whose()}{why}: gap in the log: i={missing} is missing; {self._fsck()}")
        return len(seen)

    def _whose(self) -> str:
        """``memory: `` for an error that names this log (many memories may be read in one command)."""
        return f"{self.dir.parent.name}: "

    def _fsck(self) -> str:
        return f"run 'pimem fsck {self.dir.parent.name}'"

    def begin_write(self) -> None:
        """Before a writer changes any day file: ranges.json is no longer to be trusted blindly."""
        try:
            os.close(open_fd(self.dir.parent / WRITING, os.O_WRONLY | os.O_CREAT, FILE_MODE))
        except OSError:
            pass  # (the directory may not exist yet: then no reader can have trusted anything in it)

    def save_ranges(self) -> None:
        """Record the files' ends for the next process (writers only, under the writer lock), then lift the
        marker. Derived (and never trusted across a reboot), so it is replaced without an fsync."""
        edits, crcs = self.edit_counts(), self._crcs
        saved = {name: _FileInfo(i.size, i.first, i.last, i.torn, i.stamp, edits.get(name, 0) if i.stamp else 0,
                                 i.crc if i.crc is not None or not crcs else self._crc_read(name, i.size, i.stamp))
                 for name, i in self._info.items()}
        rows = {name: [i.size, i.first, i.last, i.torn, *(i.stamp or ()),
                       *((i.edits, i.crc) if i.stamp and i.crc is not None else (i.edits,) if i.edits else ())]
                for name, i in saved.items()}
        path = self.dir.parent / RANGES
        try:
            write_atomic(path, orjson.dumps({"boot": _boot_id(), "files": rows}), durable=False)
            os.unlink(self.dir.parent / WRITING)
            st = os.stat(path)
            self._saved = ((st.st_ino, st.st_mtime_ns, st.st_size), saved, _boot_id() is not None)
            self._saved_end = _end(saved)
            self._edited.clear()  # (recorded)
        except OSError:
            return  # only a cache: the next process reads the files' ends instead
        if self._texts_stale:  # (the change is recorded: no reader finds it again)
            with contextlib.suppress(OSError):
                os.unlink(self.dir.parent / "lines.json")
            self._texts_stale = False

    def _crc_read(self, name: str, size: int, stamp: tuple | None) -> int | None:
        """The CRC-32 found when the file was last read whole (checking the log), if it then had this size
        and stamp."""
        known = self._crcs.get(name)
        if known is None or stamp is None or known[0] != (size, *stamp):
            return None
        return known[1]

    def edit_counts(self) -> dict[str, int]:
        """How many times each day file was found changed behind pimem's back at the size it had, as
        ranges.json counts them (the index, which records the count it read, starts over when it grows: such an
        edit before a write that grew the file would otherwise go unseen); a file found so here counts once
        more (found by the last ``stats``)."""
        rows, _ = self._read_saved()
        counts = {name: info.edits for name, info in rows.items() if info.edits}
        for name in self._edited:
            counts[name] = counts.get(name, 0) + 1
        return counts

    def stale_ranges(self) -> tuple[list[str], list[str]]:
        """The day files that ranges.json records otherwise than they are while it claims to be current, and
        those it records that are gone (for fsck: until a write records them afresh, every command checks the
        whole log; every file is looked at afresh). A file gone that it records messages past the log's end
        in is not named: those messages are lost (``lost_end``), and ranges.json is what still knows it."""
        names = self._names()
        recorded = Log(self.dir)._baseline()
        if not recorded:
            return [], []
        fresh = Log(self.dir)
        fresh._loaded = True  # nothing from ranges.json: stat and read each file's ends
        wrong = []
        for name in names:
            now, then = fresh._file_info(name), recorded.get(name)
            if then is None or (now.size, now.first, now.last) != (then.size, then.first, then.last) \
                    or (then.stamp is not None and now.stamp != then.stamp  # (an edit that kept the size)
                        and not fresh._as_recorded(name, then, lstat(f"{self.dir}/{name}"))):
                wrong.append(name)
        end = _end(fresh._info)
        gone = [name for name, then in recorded.items()
                if name not in fresh._info and (then.last is None or then.last < end)]
        return wrong, sorted(gone)

    def rewrite_ranges(self) -> None:
        """Write ranges.json again from the day files themselves (writers only, under the writer lock): they
        were changed otherwise (fsck), so the texts of the lines last shown go too (see ``edited``)."""
        self._info, self._loaded, self._texts_stale = {}, True, True
        for name in self._names():
            info = self._file_info(name)
            st = lstat(f"{self.dir}/{name}")
            if (st.st_size, _stamp(st)) == (info.size, info.stamp):
                info.crc = self.content_crc(name, st)
        self.begin_write()
        self.save_ranges()

    # ---- files -------------------------------------------------------------------------------------------

    def files(self) -> list[Path]:
        return [self.dir / n for n in self._names()]

    def _names(self) -> list[str]:
        """The day files' names, sorted (strings, not Paths: a year of files costs a millisecond less)."""
        try:
            listed = os.listdir(self.dir)
        except (FileNotFoundError, NotADirectoryError):
            if kind(self.dir) == "file":  # (a pipe or a file where the log's directory goes: no log that lost its files)
                raise not_a_dir(self.dir) from None
            return []  # (none yet, or a renamed memory's pointer where its directory was)
        return sorted(n for n in listed if n.endswith(".jsonl") and not n.startswith("."))

    def _file_info(self, name: str, size: int | None = None) -> _FileInfo:
        """First and last valid ``i`` of a file (of ``size`` bytes, if the caller knows), cached while its size
        is unchanged. Reads a few KB at each end, not the file."""
        if not self._loaded:
            self._load_ranges()
        path = f"{self.dir}/{name}"
        stamp = None
        if size is None:
            st = lstat(path)
            size, stamp = st.st_size, _stamp(st)
        info = self._info.get(name)
        if info is not None and info.size == size:
            return info
        with open_binary(path, 0) as f:
            if stamp is None:
                st = os.fstat(f.fileno())
                size, stamp = st.st_size, _stamp(st)
            last, torn = _last_i(f, size)
            first = None
            if last is not None:
                first = info.first if info is not None and info.first is not None else _first_i(f, size)
        info = self._info[name] = _FileInfo(size, first, last, torn, stamp)
        if self._crcs:
            info.crc = self._crc_read(name, size, stamp)
        return info

    def sizes(self, every: bool = False) -> dict[str, int]:
        """Each day file's size in bytes: from ranges.json when it can be trusted, else a ``stat`` each.
        ``every``: a ``stat`` each all the same, so a file edited behind pimem's back is noticed wherever it
        is (writers and the index, which has read every file, ask so; a command that reads only recent files
        need not)."""
        names = self._names()
        if not every and self._trusted(names):
            return {name: self._info[name].size for name in names}
        return {name: st.st_size for name, st in self.stats(names).items()}

    def stats(self, names: list[str] | None = None) -> dict[str, os.stat_result]:
        """Each day file as a ``stat`` finds it now. One whose size, mtime or inode differs from its row in
        ranges.json (while that claims to be current) changed behind pimem's back: the whole log is checked
        (``IntegrityError`` on a gap, duplicate or line out of order), then the file's ends are read afresh,
        so the next write records it as it is."""
        folder, baseline = f"{self.dir}/", self._baseline()
        out, changed = {}, []
        for name in self._names() if names is None else names:
            st = out[name] = lstat(folder + name)
            if baseline and not (name in baseline and self._as_recorded(name, baseline[name], st)):
                changed.append(name)
        changed += [name for name in baseline if name not in out]  # (deleted)
        # the edits counted (one that grew is read on from where the index stopped, which checks its lines did
        # not move): the same in every process until a write records them
        self._edited = {name for name in changed if name in out and name in baseline and out[name].st_size == baseline[name].size}
        if changed:
            self._stale = self._saved[0] if baseline else None
            self._changed_behind(changed)
            if not self._loaded:
                self._load_ranges()
            for name in changed:
                info = self._info.get(name)
                if info is not None and name in out and not self._as_recorded(name, info, out[name]):
                    del self._info[name]
        return out

    def ranges(self) -> list[tuple[int, int, str]]:
        """``(first_i, last_i, file name)`` for every file holding at least one message, by first ``i``."""
        if not self._loaded:
            self._load_ranges()
        out, known = [], self._info
        for name, size in self.sizes().items():
            info = known.get(name)
            if info is None or info.size != size:
                info = self._file_info(name, size)
            if info.first is not None:
                out.append((info.first, info.last, name))
        out.sort()
        self._known = (max(r[1] for r in out) + 1 if out else 0, out)
        if self._known[0] < self._saved_end and not self.explaining:
            self._check_end(self._known[0])
        return out

    def _check_end(self, end: int) -> None:
        """A reader found the log ending before ranges.json does (in any boot; in this one, and with no writer
        at work, ``stats`` has checked already): ``IntegrityError`` names what is lost, once the whole log, read
        after ranges.json was (a write since then only adds), is found to end there too."""
        self._refuse_lost_end(self._saved[1], end)

    def count(self) -> int:
        """T: one more than the highest ``i`` in the log (0 when empty)."""
        lasts = [last for _, last, _ in self.ranges()]
        return max(lasts) + 1 if lasts else 0

    # ---- writing (caller holds the writer lock) ---------------------------------------------------------

    def seal(self) -> int:
        """Terminate any torn last line with a newline so the next write starts on a line of its own, and
        return T. For writers, under the writer lock: nothing else changes the files meanwhile, so each file
        is looked at once."""
        last, sealed = -1, False
        sizes = self.sizes(every=True)  # (an older file edited by hand is noticed too)
        rows, _ = self._read_saved()  # (as read before the files were: any boot's serves, see lost_end)
        for name in self._info.keys() - sizes.keys():  # a day file gone (a loss accepted): recorded no more
            del self._info[name]
        for name, size in sizes.items():
            info = self._file_info(name, size)
            if info.torn:  # (rare: after a crash, a file read whole is no cost worth sparing)
                crc = info.crc if info.crc is not None else self.content_crc(name, lstat(f"{self.dir}/{name}"))
                self.begin_write()
                sealed = True
                fd = open_fd(self.dir / name, os.O_WRONLY | os.O_APPEND)
                try:
                    write_all(fd, b"\n", path=self.dir / name)
                finally:
                    os.close(fd)
                self._info.pop(name, None)
                info = self._file_info(name)
                if crc is not None and info.size == size + 1:
                    info.crc = crc32(b"\n", crc)
            if info.last is not None and info.last > last:
                last = info.last
        if not self.explaining:
            self._refuse_lost_end(rows, last + 1)  # (never number new messages from where the log now ends)
        if sealed:
            self.save_ranges()
        return last + 1

    def write(self, messages: list[dict], start: int) -> list[int]:
        """Write normalised messages as ``start, start+1, …`` and fsync every file touched.

        Consecutive messages of one day are written with one ``write``; runs are written in ``i`` order so a
        crash leaves a prefix of the batch, never a gap. Returns the ``i`` of each message."""
        dumps = orjson.dumps

        def lines(first: int, stop: int) -> bytes:
            run = [b'{"i":%d,' % (start + n) + dumps(messages[n])[1:] for n in range(first, stop)]
            run.append(b"")  # join() then ends the data with a newline without copying it again
            return b"\n".join(run)

        return self.write_runs(day_runs(msg["date"] for msg in messages), start, lines)

    def write_runs(self, runs: list[tuple[str, int]], start: int, lines: Callable[[int, int], bytes]) -> list[int]:
        """``write`` for messages given as day runs ``(day, count)`` in order, where ``lines(first, stop)``
        gives the stored lines of the batch's messages ``first…stop-1`` (numbered from ``start``). A day that
        is not ``YYYY-MM-DD`` (a batch changed after it was checked) is refused before anything is written: it
        names the file."""
        for day, _ in runs:
            digits = day[:4] + day[5:7] + day[8:]
            if not (len(day) == 10 and day[4] == day[7] == "-" and digits.isascii() and digits.isdigit()):
                from .errors import BadInput

                raise BadInput(f"bad date {day!r}: a message's date starts with its day, YYYY-MM-DD")
        ensure_dir(self.dir)
        fds: dict[str, int] = {}
        created: set[str] = set()
        spans: dict[str, list[int]] = {}  # day -> [first, last] i written there
        stamps: dict[str, os.stat_result] = {}  # each file as this write left it
        made: set[str] = set()  # the files this write created
        before: dict[str, os.stat_result] = {}  # each file there before, as it was then
        crcs: dict[str, int | None] = {}  # each file's CRC-32 as far as it is written, where known
        began = False
        try:
            # open every file first, so the new ones' names are made durable with one directory flush; the
            # ones there are first, each checked as it is held open (a file changed behind pimem's back stops
            # the write before anything, the marker included, is written)
            days = list(dict.fromkeys(day for day, _ in runs))
            for day in days:
                try:
                    fds[day] = open_fd(f"{self.dir}/{day}.jsonl", os.O_WRONLY | os.O_APPEND)
                except FileNotFoundError:
                    created.add(day)
                    continue
                known, st = self._info.get(f"{day}.jsonl"), os.fstat(fds[day])
                recorded = known is not None and self._as_recorded(f"{day}.jsonl", known, st)
                if known is not None and not recorded:
                    self._changed_behind([f"{day}.jsonl"])
                    if st.st_size == known.size:
                        self._edited.add(f"{day}.jsonl")
                before[day] = st
                # (the CRC recorded goes on only from the bytes it was of: a file edited at its size has others)
                crcs[day] = known.crc if recorded else self._crc_read(f"{day}.jsonl", st.st_size, _stamp(st))
            self.begin_write()
            began = True
            for day in created:
                fds[day] = open_fd(f"{self.dir}/{day}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_EXCL, FILE_MODE)
                made.add(day)
                crcs[day] = 0
            if created:
                sync_dir(self.dir)
            n, self.written = 0, []
            for day, count in runs:
                # a later file must never keep messages whose predecessors an earlier file lost in a power cut:
                # each run is durable before the next file is written
                data = lines(n, n + count)
                if self.keep_written:
                    self.written.append((f"{day}.jsonl", os.fstat(fds[day]).st_size, data))
                write_all(fds[day], data, path=f"{self.dir}/{day}.jsonl")
                stamps[day] = os.fstat(fds[day])
                if crcs[day] is not None:
                    crcs[day] = crc32(data, crcs[day])
                spans.setdefault(day, [start + n, 0])[1] = start + n + count - 1
                n += count
        except BaseException:  # all or nothing: no message of a batch that failed stays for a retry to log twice
            for day, st in before.items():
                cut_back(fds[day], st.st_size)
                try:  # as it was, its mtime too: nothing that records it (ranges.json, the index) takes it for an edit
                    if os.fstat(fds[day]).st_size == st.st_size:
                        os.utime(fds[day], ns=(st.st_atime_ns, st.st_mtime_ns))
                    info = self._info.get(f"{day}.jsonl")
                    if info is not None and info.size == st.st_size:  # (recorded as it is now all the same)
                        info.stamp = _stamp(os.fstat(fds[day]))
                except OSError:
                    pass
            self._undo_created(made, start == 0)
            if began and self.dir.is_dir():
                self.save_ranges()  # the files as recorded again, the marker lifted (on a full disk it may stay)
            raise
        finally:
            for fd in fds.values():
                os.close(fd)
        # we appended the highest i's there are, so a touched file's range is known without reading it
        for day, (first, last) in spans.items():
            name = f"{day}.jsonl"
            info = self._info.pop(name, None)
            if info is None and day not in created:
                self._file_info(name)  # a file we knew nothing about: its ends read now, so ranges.json names it
                continue
            if info is not None and info.first is not None:
                first = info.first  # (else it held no message before, a sealed torn line at most: ours is first)
            st = stamps[day]
            self._info[name] = _FileInfo(st.st_size, first, last, False, _stamp(st), crc=crcs[day])
        self.save_ranges()
        return list(range(start, start + n))

    def _undo_created(self, days: set[str], first_write: bool) -> None:
        """After a failed write (the disk full, say): remove the day files it created (none of their messages
        was acknowledged), and after a memory's first write its ``main/`` too, so a failed first append leaves
        no empty memory behind."""
        for day in days:
            try:
                os.unlink(self.dir / f"{day}.jsonl")
            except OSError:
                pass
            self._info.pop(f"{day}.jsonl", None)
        if first_write and not self._names():
            for remove in (lambda: os.rmdir(self.dir), lambda: os.unlink(self.dir.parent / WRITING)):
                try:
                    remove()
                except OSError:
                    pass

    # ---- reading -----------------------------------------------------------------------------------------

    def look_at(self, name: str) -> None:
        """Check a day file about to be read, as listed (``ranges``): when the sizes were taken on trust from
        ranges.json, each file read is looked at, and one changed behind pimem's back checks the whole log."""
        info = self._info.get(name)
        if self._unlooked and info is not None and not self._as_recorded(name, info, lstat(f"{self.dir}/{name}")):
            self._changed_behind([name])

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[dict]:
        """Messages ``start <= i < stop`` in ``i`` order; an ``IntegrityError`` on a gap or duplicate."""
        for msg, _ in self.entries(start, stop):
            yield msg

    def entries(self, start: int = 0, stop: int | None = None) -> Iterator[tuple[dict, bytes]]:
        """``(message, stored line)`` for ``start <= i < stop`` in ``i`` order: readers that copy messages
        out pass the line through instead of encoding the message again. A file holding ``start`` past its
        first line is entered by bisection, not read from its beginning."""
        # Messages below a T already seen never move, and whatever was logged since has a higher i: reading
        # below it, the files as last listed serve (a file may have grown since, past ``stop``: see below)
        known = self._known
        listed = known[1] if known is not None and stop is not None and stop <= known[0] else self.ranges()
        ranges = [r for r in listed if r[1] >= start and (stop is None or r[0] < stop)]
        expected = start

        def opened(first: int, name: str) -> Iterator[tuple[dict, bytes]]:
            path = self.dir / name
            self.look_at(name)
            return _entries(path, _offset_below(path, start) if start > first else 0)

        for group in _groups(ranges):
            if len(group) == 1:
                stream = opened(*group[0])
            else:
                stream = heapq.merge(*(opened(*f) for f in group), key=lambda entry: entry[0]["i"])
            for entry in stream:
                i = entry[0]["i"]
                if stop is not None and i >= stop:
                    break  # (the next group may still hold messages below stop if this file grew since listed)
                if i != expected:
                    if i < start:
                        continue
                    what = "duplicate" if i < expected else "gap"
                    raise IntegrityError(f"{self._whose()}{what} in the log: found i={i} where i={expected} was expected; {self._fsck()}")
                expected += 1
                yield entry

    def holding(self, needles: list[bytes], keep: Callable[[dict], dict] | None = None) -> list[dict]:
        """The messages whose stored lines hold one of ``needles``, in ``i`` order: a byte search through each
        day file, only the lines it finds parsed. For a lookup by a value as the log stores it (a source entry
        id, ``orjson``-encoded): the caller checks each message, and a value written otherwise is not found.
        ``keep``: what is kept of each message (its ``i`` included), for a search finding many."""
        found: dict[int, dict] = {}
        for _, _, name in self.ranges():
            with open_binary(self.dir / name, 0) as f:
                if not os.fstat(f.fileno()).st_size:
                    continue  # (emptied since it was listed: nothing to map)
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            with data:
                for needle in needles:
                    at = data.find(needle)
                    while at >= 0:
                        end = data.find(b"\n", at)
                        if end < 0:
                            break  # a torn last line
                        msg = _parse(data[data.rfind(b"\n", 0, at) + 1 : end + 1])
                        if msg is not None:
                            found.setdefault(msg["i"], msg if keep is None else keep(msg))
                        at = data.find(needle, end)
        return [found[i] for i in sorted(found)]

    def read_offsets(self, path: Path, start_offset: int = 0) -> Iterator[tuple[int, int, dict]]:
        """``(offset, length, message)`` for each valid line of one file from ``start_offset`` (for indexes)."""
        for offset, line in _lines(path, start_offset):
            msg = _parse(line)
            if msg is not None:
                yield offset, len(line), msg

    @staticmethod
    def read_at(path: Path, offset: int, length: int) -> dict:
        """The message stored at a known byte range (as recorded by an index)."""
        with open_binary(path) as f:
            f.seek(offset)
            msg = _parse(f.read(length))
        if msg is None:
            raise IntegrityError(f"{path.name} at byte {offset} is not a message; run 'pimem reindex'")
        return msg


def _first_i(f, size: int) -> int | None:
    """The ``i`` of the first valid line, reading from the start in growing chunks."""
    chunk = _PROBE
    while True:
        f.seek(0)
        data = f.read(min(chunk, size))
        end = data.rfind(b"\n")
        for line in data[: end + 1].split(b"\n")[:-1] if end >= 0 else []:
            msg = _parse(line)
            if msg is not None:
                return msg["i"]
        if len(data) >= size:
            return None
        chunk *= 4


def _last_i(f, size: int) -> tuple[int | None, bool]:
    """The ``i`` of the last complete, valid line, reading backwards from the end in growing chunks, and
    whether the file ends in a torn fragment (no final newline)."""
    chunk = _PROBE
    torn = None
    while size:
        start = max(0, size - chunk)
        f.seek(start)
        data = f.read(size - start)
        if torn is None:
            torn = not data.endswith(b"\n")
        end = data.rfind(b"\n")  # anything after the last newline is a torn fragment
        lines = data[: end + 1].split(b"\n")[:-1] if end >= 0 else []
        complete = lines if start == 0 else lines[1:]  # the first piece may be partial
        for line in reversed(complete):
            msg = _parse(line)
            if msg is not None:
                return msg["i"], torn
        if start == 0:
            break
        chunk *= 4
    return None, bool(torn)


def lost_words(first: int, last: int, names: list[str]) -> str:
    """``messages lost from the end of the log: #8…#11, 2026-11-03.jsonl``, as every command says it."""
    span = f"#{first}" if first == last else f"#{first}…#{last}"
    files = (", " + ", ".join(names[:3]) + (" …" if len(names) > 3 else "")) if names else ""
    return f"{'a message' if first == last else 'messages'} lost from the end of the log: {span}{files}"


def day_runs(dates: Iterable[str]) -> list[tuple[str, int]]:
    """``(day, count)`` for each run of consecutive messages whose dates fall on one day (the file they go to
    is named by the date part of the date string)."""
    runs: list[tuple[str, int]] = []
    day, count = None, 0
    for date in dates:
        if date[:10] != day:
            if count:
                runs.append((day, count))
            day, count = date[:10], 0
        count += 1
    if count:
        runs.append((day, count))
    return runs
