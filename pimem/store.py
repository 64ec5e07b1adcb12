"""The verbatim message log: ``main/YYYY-MM-DD.jsonl``, append-only, fsync'd before acknowledging.

Messages carry a permanent, contiguous ``i``. A message goes to the file named by the date part of its own
date, so imported history can land in an older day's file; the log is read back in ``i`` order by chaining
the files (or merging those whose ranges overlap). Torn last lines are skipped on read and sealed with a
newline before the next write; a gap or duplicate ``i`` is an integrity error, never repaired silently.

Writers must hold the memory's writer lock (``Memory.lock``); readers take no lock.
"""

from __future__ import annotations

import heapq
import os
from pathlib import Path
from typing import Iterator

import orjson

from .errors import IntegrityError
from .home import FILE_MODE, ensure_dir
from .message import day_of

_TAIL_CHUNK = 64 * 1024


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
    with open(path, "rb", buffering=1024 * 1024) as f:
        if start_offset:
            f.seek(start_offset)
        offset = start_offset
        for line in f:
            if not line.endswith(b"\n"):
                return
            yield offset, line
            offset += len(line)


class _FileInfo:
    __slots__ = ("size", "first", "last")

    def __init__(self, size: int, first: int | None, last: int | None):
        self.size, self.first, self.last = size, first, last


class Log:
    """One memory's ``main/`` directory."""

    def __init__(self, directory: Path):
        self.dir = directory
        self._info: dict[str, _FileInfo] = {}

    # ---- files -------------------------------------------------------------------------------------------

    def files(self) -> list[Path]:
        if not self.dir.is_dir():
            return []
        return sorted(p for p in self.dir.iterdir() if p.name.endswith(".jsonl") and not p.name.startswith("."))

    def _file_info(self, path: Path) -> _FileInfo:
        """First and last valid ``i`` of a file, cached while its size is unchanged."""
        size = path.stat().st_size
        info = self._info.get(path.name)
        if info is not None and info.size == size:
            return info
        first = info.first if info is not None and info.first is not None else self._first_i(path)
        info = _FileInfo(size, first, self._last_i(path, size) if first is not None else None)
        self._info[path.name] = info
        return info

    @staticmethod
    def _first_i(path: Path) -> int | None:
        for _, line in _lines(path):
            msg = _parse(line)
            if msg is not None:
                return msg["i"]
        return None

    @staticmethod
    def _last_i(path: Path, size: int) -> int | None:
        """Read backwards from the end until a complete, valid line is found."""
        with open(path, "rb") as f:
            chunk = _TAIL_CHUNK
            while True:
                start = max(0, size - chunk)
                f.seek(start)
                data = f.read(size - start)
                end = data.rfind(b"\n")  # anything after the last newline is a torn fragment
                lines = data[: end + 1].split(b"\n")[:-1] if end >= 0 else []
                complete = lines if start == 0 else lines[1:]  # the first piece may be partial
                for line in reversed(complete):
                    msg = _parse(line)
                    if msg is not None:
                        return msg["i"]
                if start == 0:
                    return None
                chunk *= 4

    def ranges(self) -> list[tuple[int, int, Path]]:
        """``(first_i, last_i, path)`` for every file holding at least one message, by first ``i``."""
        out = []
        for path in self.files():
            info = self._file_info(path)
            if info.first is not None:
                out.append((info.first, info.last, path))
        out.sort()
        return out

    def count(self) -> int:
        """T: one more than the highest ``i`` in the log (0 when empty)."""
        lasts = [last for _, last, _ in self.ranges()]
        return max(lasts) + 1 if lasts else 0

    # ---- writing (caller holds the writer lock) ---------------------------------------------------------

    def seal(self) -> None:
        """Terminate any torn last line with a newline so the next write starts on a line of its own."""
        for path in self.files():
            size = path.stat().st_size
            if not size:
                continue
            with open(path, "rb") as f:
                f.seek(size - 1)
                last = f.read(1)
            if last != b"\n":
                fd = os.open(path, os.O_WRONLY | os.O_APPEND)
                try:
                    os.write(fd, b"\n")
                    os.fsync(fd)
                finally:
                    os.close(fd)
                self._info.pop(path.name, None)

    def write(self, messages: list[dict], start: int) -> list[int]:
        """Write normalised messages as ``start, start+1, …`` and fsync every file touched.

        Consecutive messages of one day are written with one ``write``; runs are written in ``i`` order so a
        crash leaves a prefix of the batch, never a gap. Returns the ``i`` of each message."""
        ensure_dir(self.dir)
        fds: dict[str, int] = {}
        created = False
        try:
            run_day, run = None, []
            for n, msg in enumerate(messages):
                day = day_of(msg["date"])
                if day != run_day and run:
                    created |= self._write_run(fds, run_day, run)
                    run = []
                run_day = day
                run.append(orjson.dumps({"i": start + n, **msg}))
            if run:
                created |= self._write_run(fds, run_day, run)
            for fd in fds.values():
                os.fsync(fd)
            if created:
                _fsync_dir(self.dir)
        finally:
            for fd in fds.values():
                os.close(fd)
        # we appended the highest i's there are, so each touched file's range is known without reading it
        days: dict[str, list[int]] = {}
        for n, msg in enumerate(messages):
            days.setdefault(day_of(msg["date"]), []).append(start + n)
        for day, ids in days.items():
            name = f"{day}.jsonl"
            info = self._info.get(name)
            first = info.first if info is not None and info.first is not None else ids[0]
            self._info[name] = _FileInfo((self.dir / name).stat().st_size, first, ids[-1])
        return list(range(start, start + len(messages)))

    def _write_run(self, fds: dict[str, int], day: str, lines: list[bytes]) -> bool:
        created = False
        fd = fds.get(day)
        if fd is None:
            path = self.dir / f"{day}.jsonl"
            created = not path.exists()
            fd = fds[day] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        data = b"\n".join(lines) + b"\n"
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        return created

    # ---- reading -----------------------------------------------------------------------------------------

    def read(self, start: int = 0, stop: int | None = None) -> Iterator[dict]:
        """Messages ``start <= i < stop`` in ``i`` order; an ``IntegrityError`` on a gap or duplicate."""
        ranges = [r for r in self.ranges() if r[1] >= start and (stop is None or r[0] < stop)]
        expected = None
        for msg in self._ordered(ranges):
            i = msg["i"]
            if i < start:
                continue
            if stop is not None and i >= stop:
                return
            if expected is None:
                expected = start
            if i != expected:
                what = "duplicate" if i < expected else "gap"
                raise IntegrityError(f"{what} in the log: found i={i} where i={expected} was expected; run 'pimem fsck'")
            expected += 1
            yield msg

    @staticmethod
    def _iter_file(path: Path) -> Iterator[dict]:
        for _, line in _lines(path):
            msg = _parse(line)
            if msg is not None:
                yield msg

    def _ordered(self, ranges: list[tuple[int, int, Path]]) -> Iterator[dict]:
        """Chain files whose ranges do not overlap; merge the groups that do."""
        group: list[Path] = []
        group_last = -1
        for first, last, path in ranges:
            if group and first > group_last:
                yield from self._group(group)
                group = []
            group.append(path)
            group_last = max(group_last, last)
        if group:
            yield from self._group(group)

    def _group(self, paths: list[Path]) -> Iterator[dict]:
        if len(paths) == 1:
            return self._iter_file(paths[0])
        return heapq.merge(*(self._iter_file(p) for p in paths), key=lambda m: m["i"])

    def read_offsets(self, path: Path, start_offset: int = 0) -> Iterator[tuple[int, int, dict]]:
        """``(offset, length, message)`` for each valid line of one file from ``start_offset`` (for indexes)."""
        for offset, line in _lines(path, start_offset):
            msg = _parse(line)
            if msg is not None:
                yield offset, len(line), msg

    @staticmethod
    def read_at(path: Path, offset: int, length: int) -> dict:
        """The message stored at a known byte range (as recorded by an index)."""
        with open(path, "rb") as f:
            f.seek(offset)
            msg = _parse(f.read(length))
        if msg is None:
            raise IntegrityError(f"{path.name} at byte {offset} is not a message; run 'pimem reindex'")
        return msg


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
