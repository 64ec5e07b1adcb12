"""Streaming files into a memory: parse line by line, validate each message, drop what the memory already
holds, and log the rest through ``Memory.append`` in batches (one fsync each).

A line that cannot be read is reported (file and line number) through ``on_warning`` and skipped; the rest
of the file is imported. A file read before is continued from where that import stopped when it is still
the same file (same inode) and the 64 KiB before that point are unchanged (it grew); otherwise it is read
again from the start and the keys decide what is new. Checking only that window keeps continuing a long
transcript cheap (a hook or a follower continues it on every change).
An unfinished last line (no newline, not JSON: the agent is still writing it) is left for the next import;
it is not a malformed line (``FileReport.unfinished``), nor is one over the line cap until it is whole.
Once an import has logged ``INDEX_MIN`` messages, each logged batch is indexed in a second thread from the
messages just logged, and the index is complete before ``run`` returns; a smaller import (a hook's or a
follower's few new lines) leaves the index to the next reader, as ``append`` does.
"""

from __future__ import annotations

import itertools
import os
import queue
import threading
import time
from dataclasses import dataclass
from typing import BinaryIO, Callable

import orjson

from .. import decoder, env, hashes, message as msgs, stopping, when
from ..errors import BadInput, as_error
from ..ingest import BATCH_BYTES, BATCH_LINES, bounded_lines, line_cap
from ..memory import Memory, Prepared
from .detect import FORMATS, Source
from .parser import Malformed, read_lines
from .state import ImportState, Unsaved, content_digest, content_key, key_of

PROGRESS_STEP = 1024 * 1024
INDEX_MIN = 1_000  # an import of fewer messages leaves the index to the next reader
RAISE_CAP = "raise max_text_bytes in config.json and import the file again to log it"
LIMITS_KEPT = 16  # reads with another cap for one line a file's position remembers (the last ones)
ANCHOR_BYTES = 64 * 1024  # the bytes before a saved position that must be unchanged to read on from it
NUL_SHOWN = "\u2400"  # ␀: a NUL in an imported text is logged as this, the message kept (the log holds no NUL)
READ_SHARE = 1 / 5  # of the time left to a deadline, the part a file's reading may take: logging and indexing
# what was read take up to four times as long (Claude Code's lines: 0.2 s of reading, then 0.2 of logging and 0.5
# of indexing); a caller that leaves the index to its next reader may give a larger ``read_share``


@dataclass
class FileReport:
    """What one file gave: messages logged, already present, malformed lines skipped, and the line reading
    started at (1 unless the file was continued from an earlier import); ``cut_short`` when the deadline
    stopped it before the file's end (not in ``as_dict``: ``import`` has no deadline); ``unfinished``, the
    number of a last line still being written (no newline, not JSON yet), left for the next import and
    neither malformed nor skipped (not in ``as_dict`` either: the next import reads it)."""

    file: str
    format: str
    imported: int = 0
    present: int = 0
    malformed: int = 0
    from_line: int = 1
    unchanged: bool = False
    cut_short: bool = False
    unfinished: int = 0

    def as_dict(self) -> dict:
        return {key: value for key, value in self.__dict__.items() if key not in ("cut_short", "unfinished")}


def run(
    mem: Memory,
    sources: list[Source],
    on_warning: Callable[[str], None] = lambda text: None,
    on_progress: Callable[[str, int, int], None] = lambda task, done, total: None,
    timeout: float | None = None,
    *,
    on_logged: Callable[[int], None] = lambda count: None,
    state: ImportState | None = None,
    deadline: float | None = None,
    open_file: Callable[[Source], BinaryIO] | None = None,
    index: bool = True,
    read_share: float = READ_SHARE,
    since: dict[str, dict] | None = None,
) -> list[FileReport]:
    """Import ``sources`` (as returned by ``plan``) into ``mem`` in their order; an import of at least
    ``INDEX_MIN`` messages also brings the search index up to date (one catch-up after a bulk import is
    cheaper than one at the first search). ``on_progress(task, done, total)`` reports bytes for the task
    ``import`` (source files); ``on_logged(count)`` each batch once it is durable. The memory records the
    sources' working directories as projects it holds (``projects.record``). A memory renamed or deleted
    while it runs stops it with ``NotFound`` (exit 3), what was logged before kept.

    For callers that import again and again (a hook, a follower): ``state`` is the memory's ``ImportState``
    to reuse (its keys are read once, then only what others logged since); with a ``deadline`` (a
    ``time.monotonic()`` value) each file is read for ``read_share`` of the time left (one line at least),
    what was read logged and its position recorded, so the next import reads on from there;
    ``open_file(source)`` opens a source instead of its path (a follower hands in the file it holds open, so a
    file rotated away is read to its end); ``index=False`` leaves the search index to its next reader however
    much is logged (a hook, whose time is bounded, starts its catch-up in a process of its own), so a larger
    ``read_share`` fits in the same time. ``since``: where to read a file the memory has imported nothing of on
    from (``{path: position}``, as ``imports.json`` records it: a deleted memory's, ``deleted_positions``), if
    it is still that file, grown."""
    from .. import projects

    mem.pin()
    cwds = [s.cwd for s in sources if s.cwd]  # (the projects the memory holds from now on: ``projects.record``)
    existed = mem.exists()
    if existed:
        projects.record(mem, cwds, timeout)
    state = state if state is not None else ImportState(mem)
    indexer = _Indexer(mem, INDEX_MIN if index else None)
    reports = []
    done, total = 0, sum(s.size for s in sources)

    def logged(start: int, messages: list[dict], written: list) -> None:
        on_logged(len(messages))
        indexer.logged(start, messages, written)

    try:
        try:
            for source in sources:
                step = lambda n, base=done: on_progress("import", base + n, total)  # noqa: E731
                job = _File(mem, state, source, on_warning, step, timeout, logged, deadline, read_share, since)
                try:
                    f = (open_file or _open)(source)
                except FileNotFoundError:  # (removed since it was listed: nothing left to read of it; the others are)
                    if open_file is not None:
                        raise
                    on_warning(f"{source.shown}: removed since it was listed; skipped")
                else:
                    with f:
                        reports.append(job.run(f))
                done += source.size
        finally:
            indexer.finish()
        if not existed and mem.exists():  # (made by this import)
            projects.record(mem, cwds, timeout)
    except Exception as exc:  # the memory renamed or deleted meanwhile: said as such (exit 3), as append says it
        if as_error(exc) is not None and mem.moved():  # (any other failure is raised as it is)
            raise mem._moved() from None
        raise
    on_progress("import", total, total)
    return reports


def _open(source: Source) -> BinaryIO:
    return open(source.path, "rb")


class _Indexer:
    """Indexes each logged batch in a second thread while the import parses on, from the very messages the
    import logged (``Index.add_logged``: nothing is read back from the log), then catches the index up once
    more at the end. SQLite builds the trigrams without holding the GIL, so indexing one batch overlaps
    parsing the next instead of following it."""

    def __init__(self, mem: Memory, least: int | None = INDEX_MIN):
        self.mem = mem
        self.least = least  # messages logged before the thread starts (None: never)
        self._queue: queue.Queue = queue.Queue(maxsize=1)  # (a batch waiting to be indexed holds its text)
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None
        self.count = 0

    def logged(self, start: int, messages: list[dict], written: list) -> None:
        """A batch is in the log (the thread starts once ``INDEX_MIN`` messages were logged: a smaller
        import, a hook's or a follower's few new lines, leaves the index to the next reader, as ``append``
        does, rather than open it for them)."""
        self.count += len(messages)
        if self._thread is None and (self.least is None or self.count < self.least):
            return
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="pimem-index", daemon=True)
            self._thread.start()
        self._queue.put((start, messages, written))

    def _loop(self) -> None:
        from ..index import Index
        from ..store import Log

        index = Index(self.mem.path, Log(self.mem.path / "main"))  # its own connection and file cache
        try:
            while (batch := self._queue.get()) is not None:
                if self._error is None:  # (after an error the rest is drained, and finish() raises it)
                    try:
                        index.add_logged(*batch)
                    except BaseException as exc:
                        self._error = exc
            if self._error is None:
                index.catch_up()
        except BaseException as exc:  # handed to the importing thread by finish()
            self._error = exc
        finally:
            index.close()

    def finish(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join()
        if self._error is not None:
            raise self._error


class _File:
    """One source file's import: read, parse, check, and log in batches."""

    def __init__(self, mem, state, source, on_warning, on_progress, timeout, on_logged, deadline=None, read_share=READ_SHARE,
                 since: dict[str, dict] | None = None):
        self.mem, self.state, self.source, self.since = mem, state, source, since or {}
        self.warn, self.progress, self.timeout, self.logged = on_warning, on_progress, timeout, on_logged
        self.file = source.shown  # (open() alone is given the path as the system spells it)
        self.report = FileReport(self.file, source.format)
        self.cap = int(mem.config.get("max_text_bytes", msgs.DEFAULT_CAP))
        self.stamp = when.rfc3339(env.now())
        self.batch: list[tuple[dict, bytes | None, bytes | None, int | None, int]] = []  # (message, key, content
        # key, the i an export's line names, its line's number)
        self.batch_bytes = 0
        self.prior: dict | None = None
        self.parser = None
        self.resumed: tuple[int, int] | None = None  # (offset, line) read on from, as an earlier import recorded them
        self.deadline: float | None = deadline
        self.read_share = read_share
        self.capped = False  # a message or line over the cap was skipped: said in the position, so that a
        # later import with a larger cap reads the file again from the start (the keys drop what is logged)
        self.limits: list = []  # [line, cap for one line] from which each read of the file with another cap began

    def run(self, f: BinaryIO) -> FileReport:
        offset, line_no, carry = self._resume(f)
        limit = line_cap(self.cap)
        limits = _limits(self.prior) if offset else []
        self.limits = limits if limits and limits[-1][1] == limit else [*limits, [line_no + 1, limit]][-LIMITS_KEPT:]
        parser = FORMATS[self.source.format](
            self.file, carry, earlier=self.state.counts_before(self.file, self.prior, f, offset),
            before=(lambda: _as_read(read_lines(f, offset), limits, limit)) if offset else None,
            held=lambda rec: self.state.holds(key_of(rec)))
        self.parser = parser
        self.report.from_line = line_no + 1
        self.report.unchanged = offset == self.source.size and offset > 0
        reported = offset
        now = time.monotonic()
        stop = None if self.deadline is None else now + max(0.0, self.deadline - now) * self.read_share
        for raw in bounded_lines(f, limit):
            line_no += 1
            if type(raw) is int:  # a line over the cap, read past without holding it
                if os.pread(f.fileno(), 1, offset + raw - 1) != b"\n":  # still being written: said once it is whole
                    self.report.unfinished = line_no
                    line_no -= 1
                    break
                self.capped = True
                self._malformed(line_no, f"a line of {raw:,} bytes is over the cap of {limit:,} for one line "
                                         f"({RAISE_CAP})")
                offset += raw
                continue
            line = raw[len(decoder.BOM):] if offset == 0 and raw.startswith(decoder.BOM) else raw  # (a BOM opening the file)
            if line.strip():
                try:
                    obj = decoder.loads(line)
                except decoder.JSONDecodeError:
                    if not raw.endswith(b"\n"):
                        self.report.unfinished = line_no  # (being written: no malformed line, nothing skipped)
                        line_no -= 1
                        break
                    obj = self._not_utf8(line_no, line)
                    if obj is None:
                        self._malformed(line_no, "not valid JSON")
                    else:
                        self._take(parser, line_no, line, obj)
                else:
                    self._take(parser, line_no, line, obj)
            offset += len(raw)
            if stop is not None and time.monotonic() >= stop:  # out of time: what was read is logged below, and the
                self.report.cut_short = offset < os.fstat(f.fileno()).st_size  # next import reads on from there
                break
            if len(self.batch) >= BATCH_LINES or self.batch_bytes >= BATCH_BYTES:
                self._flush(self._position(f, offset, line_no, parser))
            if offset - reported >= PROGRESS_STEP:
                self.progress(offset)
                reported = offset
        if self.resumed and offset == self.resumed[0]:  # (nothing read past it: its line count as recorded, not the
            line_no = self.resumed[1]  # one less ``_resume`` counts from when its last line lacked its newline)
        position = self._position(f, offset, line_no, parser)
        self._flush(position)
        self.state.keep_counts(self.file, position, parser)
        self.progress(self.source.size)
        return self.report

    def _resume(self, f: BinaryIO):
        """Where to start: after the part read by an earlier import (or the one ``since`` names, where the memory
        has imported nothing of it) if this is still that file, grown."""
        prior = self.prior = self.state.peek_file(self.file) or self.since.get(self.file)
        f.seek(0)  # (a file handed in may have been read before)
        if not prior or prior.get("format") != self.source.format or not isinstance(prior.get("offset"), int):
            return 0, 0, None
        offset = prior["offset"]
        capped = prior.get("capped")
        if type(capped) is int and self.cap > capped:  # (skipped over a cap since raised: read it all again)
            return 0, 0, None
        if 0 < offset <= os.fstat(f.fileno()).st_size and prior.get("anchor") == _anchor(f, offset):
            f.seek(offset)
            self.capped = type(capped) is int
            line = int(prior.get("line", 0))
            self.resumed = offset, line
            if line and os.pread(f.fileno(), 1, offset - 1) != b"\n":  # (read to a whole last line without its
                line -= 1  # newline: what the file has since goes on that line, its newline first)
            return offset, line, prior.get("state")
        return 0, 0, None

    def _position(self, f: BinaryIO, offset: int, line_no: int, parser) -> dict:
        return {
            "format": self.source.format,
            "offset": offset,
            "line": line_no,
            "anchor": _anchor(f, offset),
            "state": orjson.loads(orjson.dumps(parser.state)),  # a snapshot: the parser goes on changing it
            "limits": self.limits,
            **({"capped": self.cap} if self.capped else {}),
        }

    def _take(self, parser, line_no: int, raw: bytes, obj) -> None:
        try:
            records = parser.parse(line_no, raw, obj)
        except Malformed as exc:
            self._malformed(line_no, str(exc))
            return
        for note in parser.notes:
            self.warn(f"{self.file}:{line_no}: {note}")
        parser.notes.clear()
        for rec in records:
            text = rec.get("text")
            if isinstance(text, str) and "\x00" in text:  # (a tool's binary output, say: kept, its NULs shown)
                rec = {**rec, "text": text.replace("\x00", NUL_SHOWN)}
                self.warn(f"{self.file}:{line_no}: its NUL characters are logged as {NUL_SHOWN} (U+2400): the log holds no NUL")
            try:
                msg = msgs.normalise(rec, self.cap, self.stamp, raw)
            except msgs.OverCap as exc:
                self.capped = True
                self._malformed(line_no, f"{str(exc).partition('; ')[0]} ({RAISE_CAP})")
                continue
            except BadInput as exc:
                self._malformed(line_no, str(exc))
                continue
            self.batch.append((msg, key_of(msg), content_key(msg), rec.get("i") if type(rec.get("i")) is int else None, line_no))
            self.batch_bytes += msg["size"]

    def _not_utf8(self, line_no: int, line: bytes):
        """A JSON line holding bytes that are not UTF-8 (a text written in Latin-1, say): its object with each
        such byte read as U+FFFD, said in a warning, rather than the line skipped and its message lost; None for
        a line that is no JSON either way."""
        try:
            line.decode("utf-8")
            return None  # (UTF-8: not JSON for another reason)
        except UnicodeDecodeError as exc:
            start = exc.start
        try:
            obj = decoder.loads(line.decode("utf-8", "replace"))
        except decoder.JSONDecodeError:
            return None
        self.warn(f"{self.file}:{line_no}: not valid UTF-8 (byte {start}); each byte that is not logged as U+FFFD")
        return obj

    def _malformed(self, line_no: int, reason: str) -> None:
        self.report.malformed += 1
        self.warn(f"{self.file}:{line_no}: {reason}; skipped")

    @stopping.held()  # a signal waits for the batch, its position and its hand-over to the indexer
    def _flush(self, position: dict) -> None:
        """Log the batch's new messages and record how far the file has been read (under the writer lock)."""
        batch, self.batch, self.batch_bytes = self.batch, [], 0
        if not batch and position == self.prior:
            return  # nothing new since the last import: leave the state as it is
        self.prior = position
        if not self.mem.exists():
            if not batch:
                return  # nothing to import: a writer creates a memory only by logging something
            self.mem._make_dirs()  # (not again where the memory was renamed or deleted from)
        with self.mem.lock(self.timeout):
            self.state.sync()
            self.state.key_turns(getattr(self.parser, "parents", ()))
            batch = self._changed(batch)
            held = self._held(batch)
            fresh, keys, seen = [], [], set()
            known = lambda key: key is not None and (key in self.state.keys or key in seen)  # noqa: E731
            for msg, key, mark, at, _ in batch:
                if known(key) or known(mark) or at in held and held[at] == _same(msg):  # (a copy: its content key held)
                    self.report.present += 1
                    continue
                for new in (key, mark):
                    if new is not None and new not in seen and new not in self.state.keys:
                        seen.add(new)
                        keys.append(new)
                fresh.append(msg)
            self.mem.log.keep_written = True
            ids = self.mem.append(Prepared(fresh), self.timeout)  # (each message normalised as it was read)
            written, self.mem.log.written = self.mem.log.written, []
            self.report.imported += len(ids)
            total = ids[-1] + 1 if ids else self.state.covered
            try:
                self.state.commit(keys, total, self.file, position)
            except Unsaved:
                if ids:  # (in the log all the same: counted and indexed as logged)
                    self.logged(ids[0], fresh, written)
                raise
        if ids:
            self.logged(ids[0], fresh, written)

    def _changed(self, batch: list) -> list:
        """The batch with the messages of each line whose Claude Code uuid or pi entry id the memory holds (or an
        earlier line of the batch gave) with other content (``content_key``) under the entry ``UUID.HASH``, its
        content's hash, as a pi session's repeated id in one file is, and said; the same content again is that
        entry again. (A pi file edited after its import is read again from its start: its changed entry's id
        is held.) Caller holds the writer lock."""
        pi = self.source.format == "pi"  # (a pi session's own line: an export's may lack the date its content key holds)
        claude = lambda msg, mark: mark is not None and (msg["meta"]["source"] == "claude" or pi and msg["meta"]["source"] == "pi")  # noqa: E731
        # (an id that names one entry: a uuid, a pi entry's id; a pi v1 line's hash changes with the line)
        if not any(claude(msg, mark) for msg, _, mark, _, _ in batch):
            return batch
        out, given = [], set()
        held = lambda key: key in given or key in self.state.keys  # noqa: E731
        for line_no, items in itertools.groupby(batch, key=lambda item: item[4]):
            items = list(items)
            if any(claude(msg, mark) and held(key) and not held(mark) for msg, key, mark, _, _ in items):
                uuid = items[0][0]["meta"]["entry"].partition(".")[0]  # (an export's line may name a changed entry)
                entry = f"{uuid}.{content_digest([msg for msg, *_ in items])}"
                self.warn(f"{self.file}:{line_no}: entry id {uuid!r} was imported before with other content; logged as entry {entry}")
                for msg, *_ in items:
                    msg["meta"]["entry"] = entry
                items = [(msg, key_of(msg), mark, at, n) for msg, _, mark, at, n in items]  # (its content key is its uuid's)
            given.update(key for _, key, mark, _, _ in items for key in (key, mark) if key is not None)
            out += items
        return out

    def _held(self, batch: list) -> dict:
        """What the memory holds at the ``i`` of the batch's export lines, as ``_same`` sees it (so a memory's
        own export read back is found there, keyed or not). Caller holds the writer lock."""
        wanted = {at for _, _, _, at, _ in batch if at is not None and 0 <= at < self.state.covered}
        if not wanted:
            return {}
        return {msg["i"]: _same(msg) for msg in self.mem.messages(min(wanted), max(wanted) + 1) if msg["i"] in wanted}


def _as_read(lines, limits: list, limit: int):
    """``lines`` as the imports that took them read them: one over the cap for one line of the read that took it
    (``bounded_lines``), which it skipped unread, is blank (a Codex turn's repeats counted again would count it,
    the digest saved not given again), and one under it is whole, though ``max_text_bytes`` lowered since puts it
    over the cap now (left out of the count, the digest saved would not be given again either). ``limits``: where
    each read with another cap began (``_limits``); ``limit``, today's, for the lines no read recorded."""
    k = 0
    for n, line in enumerate(lines, 1):
        while k < len(limits) and limits[k][0] <= n:
            limit = limits[k][1]
            k += 1
        yield b"" if len(line) >= limit else line


def _limits(prior: dict | None) -> list:
    """Where each read of a file with another cap for one line began, as its saved position says: ``[line,
    cap]`` pairs in order ([] for a position a pimem before them saved)."""
    found = prior.get("limits") if isinstance(prior, dict) else None
    if not isinstance(found, list) or not all(isinstance(pair, list) and len(pair) == 2 and all(type(v) is int for v in pair)
                                              for pair in found):
        return []
    return [pair for k, pair in enumerate(found) if k == 0 or pair[0] > found[k - 1][0]]


def _same(msg: dict) -> tuple:
    return msg["kind"], msg["text"], msg["date"]


def _anchor(f: BinaryIO, offset: int) -> str:
    """What identifies the first ``offset`` bytes of an open file cheaply: its inode and a hash of the (up
    to) 64 KiB before ``offset``."""
    start = max(0, offset - ANCHOR_BYTES)
    data = os.pread(f.fileno(), offset - start, start)
    return f"{os.fstat(f.fileno()).st_ino}:{hashes.blake2b(data, digest_size=16).hexdigest()}"
