"""Reading message streams from stdin: whole text, or NDJSON in batches that are validated whole before
any of their lines is written."""

from __future__ import annotations

import select
from typing import BinaryIO, Callable, Iterator, TypeVar

import orjson

from .errors import BadInput

BATCH_LINES = 10_000
BATCH_BYTES = 32 * 1024 * 1024
_READ = 4 * 1024 * 1024
T = TypeVar("T")


def _reader(stream: BinaryIO):
    """A read function that returns what is available now (one system call), not a full buffer."""
    return getattr(stream, "read1", stream.read)


def read_text(stream: BinaryIO) -> str:
    """All of a binary stream as UTF-8 text."""
    data = stream.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise BadInput(f"stdin is not valid UTF-8 (byte {exc.start})") from None


class LineLabels:
    """``labels[n]`` names the ``n``-th record of a batch by its input line ("line 12"); built only when an
    error needs it, so a million-line stream does not format a million labels."""

    def __init__(self, numbers: list[int]):
        self.numbers = numbers

    def __getitem__(self, n: int) -> str:
        return f"line {self.numbers[n]}"


def _more_waiting(stream: BinaryIO, seconds: float = 0.01) -> bool:
    """Whether more input arrives within ``seconds``: a pipe from a fast producer keeps filling one batch,
    while a live stream that has gone quiet is logged at once."""
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    return bool(poller.poll(seconds * 1000))


def ndjson_batches(stream: BinaryIO) -> Iterator[tuple[list[dict], LineLabels]]:
    """``(records, labels)`` batches from an NDJSON stream (see ``read_batches``)."""
    records: list[dict] = []
    numbers: list[int] = []

    def take(record: dict, line_no: int) -> None:
        records.append(record)
        numbers.append(line_no)

    def batch() -> tuple[list[dict], LineLabels]:
        nonlocal records, numbers
        done = records, LineLabels(numbers)
        records, numbers = [], []
        return done

    return read_batches(stream, take, batch)


def read_batches(stream: BinaryIO, take: Callable[[dict, int], None], batch: Callable[[], T]) -> Iterator[T]:
    """Parse an NDJSON stream, handing each record to ``take(record, line_no)`` and yielding ``batch()`` at the
    end of each batch: at 10,000 lines, 32 MiB, end of input, or whenever the input has gone quiet after a
    whole line (so a live stream is logged as it arrives). Blank lines are skipped; a line that is not a JSON
    object raises ``BadInput`` with its number."""
    pending = b""
    line_no = 0
    taken = 0
    batch_bytes = 0
    read = _reader(stream)
    loads, error = orjson.loads, orjson.JSONDecodeError
    while True:
        data = read(_READ)
        eof = not data
        pending += data
        if eof and pending and not pending.endswith(b"\n"):
            pending += b"\n"
        lines = pending.split(b"\n")
        pending = lines.pop()
        for raw in lines:
            line_no += 1
            if not raw or raw.isspace():
                continue
            try:
                record = loads(raw)
            except error as exc:
                reason = "not valid UTF-8" if "utf-8" in str(exc).lower() else "not valid JSON"
                raise BadInput(f"line {line_no}: {reason}") from None
            if type(record) is not dict:
                raise BadInput(f"line {line_no}: expected a JSON object with kind and text")
            take(record, line_no)
            taken += 1
            batch_bytes += len(raw)
            if taken >= BATCH_LINES or batch_bytes >= BATCH_BYTES:
                yield batch()
                taken, batch_bytes = 0, 0
        # a live stream is logged as it arrives, but never while a line is half-written: its writer is mid-line
        if taken and (eof or (len(data) < _READ and not pending and not _more_waiting(stream))):
            yield batch()
            taken, batch_bytes = 0, 0
        if eof:
            return
