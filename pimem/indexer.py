"""The parts of catching ``index.sqlite`` up that hold no SQL: the log's complete lines read from a byte offset,
parsed into batches (``Batch``: the ``msgs`` rows and the texts for each of the index's two files), and one
thread per file (``Writer``) writing each batch through ``index.write_batch`` while this thread parses the next.
``pimem.index`` owns the tables and every statement; it drives these.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Iterator

import orjson

from . import rankindex, when
from .errors import IntegrityError
from .index import KIND_CODE, SENTINEL, TABLES, connect_writer, table_of, write_batch
from .nofollow import open_binary

BATCH_MESSAGES = 20_000  # messages per committed catch-up transaction
BATCH_BYTES = 32 * 1024 * 1024  # (two writers each hold a batch and one queued: memory stays near 100 MB)
READ_CHUNK = 8 * 1024 * 1024


class Batch:
    """Rows parsed from the log and not yet written: for each of the index's two files, the texts to index
    and how far each log file (by name) has been read for it; the ``msgs`` rows go to the main file."""

    def __init__(self, total: int):
        self.total, self.seen = total, 0
        self.stamps: dict[str, tuple] = {}  # each log file's [mtime_ns, inode, edits] as it is read
        self.crcs: dict[str, int | None] = {}  # the CRC-32 of each log file's bytes read for the main file
        self.clear()

    def clear(self) -> None:
        self.rows: list[tuple] = []
        self.texts: tuple[dict[str, list], dict[str, list]] = ({t: [] for t in TABLES}, {t: [] for t in TABLES})
        self.reached: tuple[dict[str, int], dict[str, int]] = ({}, {})
        self.words = (rankindex.Pending(), rankindex.Pending())  # the ranker's rows for each file
        self.bytes = 0

    def add(self, fid: int, name: str, offset: int, line: bytes, main: bool, shard: bool) -> None:
        """A log line at ``offset``, for the main file and/or the second (each skips what it already has)."""
        end = offset + len(line) + 1
        self.seen += len(line) + 1
        if main:
            self.reached[0][name] = end
        if shard:
            self.reached[1][name] = end
        try:
            msg = orjson.loads(line)
            i, kind, text = msg["i"], msg["kind"], msg["text"]
            epoch = when.parse_stored(msg["date"]).timestamp() if main else 0
        except Exception:  # a damaged line, or a torn one sealed by a writer: the log skips it too
            return
        self.add_message(i, msg, epoch, fid, offset, len(line), main, shard)

    def add_message(self, i: int, msg: dict, epoch: float, fid: int, offset: int, length: int,
                    main: bool = True, shard: bool = True) -> None:
        kind, text = msg["kind"], msg["text"]
        if main:
            self.rows.append((i, fid, offset, length, KIND_CODE.get(kind, 0), epoch))
        wanted = shard if i % 2 else main  # odd-numbered messages' texts go to the second file
        if wanted:
            self.texts[i % 2][table_of(kind)].append((i, text.lower() + SENTINEL))
            self.words[i % 2].add(i, table_of(kind), msg)
            self.bytes += length

    def full(self) -> bool:
        return len(self.rows) >= BATCH_MESSAGES or self.bytes >= BATCH_BYTES

    def hand_over(self, writers: tuple["Writer", "Writer"], progress) -> int:
        """Queue each file's part for its writer and start a new batch; returns the messages handed over."""
        stamps = {name: (*stamp, self.crcs.get(name)) for name, stamp in self.stamps.items()}
        writers[0].put(self.rows, self.texts[0], self.reached[0], self.words[0], stamps)
        writers[1].put([], self.texts[1], self.reached[1], self.words[1], {})
        count = len(self.rows)
        self.clear()
        if progress:
            progress(self.seen, self.total)
        return count


class Writer:
    """Writes one of the index's files in a thread of its own, a transaction per batch (with how far it has
    read each log file, so a crash leaves it consistent), while the caller parses the next batch. ``close``
    returns once everything handed over is written, with what went wrong if anything did."""

    def __init__(self, path: Path, main: bool):
        import queue
        import threading

        self.path, self.main = path, main
        self.queue: queue.Queue = queue.Queue(maxsize=1)
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name=f"pimem-index-{path.name}", daemon=True)
        self.thread.start()

    def put(self, rows: list[tuple], texts: dict[str, list], reached: dict[str, int], words,
            stamps: dict[str, tuple]) -> None:
        if self.error is None:
            self.queue.put((rows, texts, reached, words, stamps))

    def close(self) -> BaseException | None:
        self.queue.put(None)
        self.thread.join()
        return self.error

    def _run(self) -> None:
        db = None
        try:
            db = connect_writer(self.path)
        except BaseException as exc:
            self.error = exc
        while True:
            item = self.queue.get()
            if item is None:
                break
            try:
                if self.error is None:  # after an error the rest is drained unwritten, and close() reports it
                    write_batch(db, self.main, *item)
            except sqlite3.IntegrityError:
                self.error = IntegrityError("the log holds a message number twice; run 'pimem fsck'")
            except BaseException as exc:
                self.error = exc
        if db is not None:
            db.close()


def complete_lines(path: Path, start: int, end: int) -> Iterator[tuple[int, bytes]]:
    """``(offset, line without newline)`` for each newline-terminated line between ``start`` and ``end``."""
    with open_binary(path, 0) as f:
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


def last_line_end(path: Path, start: int, end: int) -> int:
    """The byte just after the last newline in ``[start, end)`` (``start`` when there is none): the index
    stops there and reads a torn last line again once it is complete or sealed."""
    with open_binary(path, 0) as f:
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
