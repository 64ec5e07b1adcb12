"""Reading message streams from stdin: whole text, or NDJSON in batches that are validated whole before
any of their lines is written."""

from __future__ import annotations

import select
from typing import BinaryIO, Callable, Iterator, TypeVar

from . import decoder
from .errors import BadInput
from .message import ECHO_KEEP

BATCH_LINES = 10_000
BATCH_BYTES = 32 * 1024 * 1024
_READ = 4 * 1024 * 1024
T = TypeVar("T")


def _reader(stream: BinaryIO):
    """A read function that returns what is available now (one system call), not a full buffer."""
    return getattr(stream, "read1", stream.read)


def _without_bom(read: Callable[[int], bytes]) -> Callable[[int], bytes]:
    """``read`` with a UTF-8 BOM at the very start of the stream left out (some Windows tools write one)."""
    started, ended = False, False

    def read_on(size: int) -> bytes:
        nonlocal started, ended
        if ended:
            return b""
        data = read(size)
        if started:
            return data
        while data and len(data) < len(decoder.BOM) and decoder.BOM.startswith(data):  # (a pipe's first bytes)
            more = read(size)
            if not more:
                ended = True
                break
            data += more
        started = True
        if data.startswith(decoder.BOM):
            data = data[len(decoder.BOM):]
            if not data and not ended:
                return read(size)  # (empty would say the stream ended)
        return data

    return read_on


ESCAPED = 6  # the most bytes JSON writes for one byte (or character) of text: a control character as \u0001
_ECHO_CHARS = ECHO_KEEP + 100  # trimmed tool output with its marker, characters at most


def line_cap(text_cap: int) -> int:
    """The most bytes one input line may hold (NDJSON, a session file's line): room for any line pimem
    writes (``since``) for a message it accepts, whose text is at most ``text_cap`` bytes (or trimmed tool
    output) even if every one is a control character written in six, and 64 KiB for its other fields. A
    longer line is refused once that much is read."""
    return ESCAPED * max(text_cap, _ECHO_CHARS) + 64 * 1024


def read_text(stream: BinaryIO, cap: int, advice: str = "split it into several messages") -> str:
    """All of a binary stream as UTF-8 text (a byte order mark first read past, as an editor may have put it
    there), refused as soon as it passes ``cap`` bytes (nothing more is read: a runaway producer costs ``cap``
    bytes of memory, not all it writes)."""
    data = stream.read(cap + 1)
    if len(data) > cap:
        raise BadInput(f"text on stdin is over the cap of {cap} bytes (reading stopped there); {advice}")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise BadInput(f"stdin is not valid UTF-8 (byte {exc.start})") from None


def bounded_lines(f: BinaryIO, cap: int) -> Iterator[bytes | int]:
    """The lines of a file (the last may lack its newline), each of at most ``cap`` bytes. A longer line is
    never held whole: it is read past in pieces, and its length is yielded instead of its bytes."""
    readline = f.readline
    while True:
        raw = readline(cap + 1)
        if len(raw) <= cap:
            if not raw:
                return
            yield raw
            continue
        skipped = len(raw)
        while not raw.endswith(b"\n"):
            raw = readline(_READ)
            if not raw:
                break
            skipped += len(raw)
        yield skipped


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


def ndjson_batches(stream: BinaryIO, cap: int) -> Iterator[tuple[list[dict], LineLabels]]:
    """``(records, labels)`` batches from an NDJSON stream (see ``read_batches``)."""
    from .message import check_numbers

    records: list[dict] = []
    numbers: list[int] = []

    def take(record: dict, line_no: int, raw: bytes) -> None:
        try:
            check_numbers(record, raw)  # (the batch's records are checked whole later, without their lines)
        except BadInput as exc:
            raise BadInput(f"line {line_no}: {exc}") from None
        records.append(record)
        numbers.append(line_no)

    def batch() -> tuple[list[dict], LineLabels]:
        nonlocal records, numbers
        done = records, LineLabels(numbers)
        records, numbers = [], []
        return done

    return read_batches(stream, take, batch, cap)


def read_batches(stream: BinaryIO, take: Callable[[dict, int, bytes], None], batch: Callable[[], T], cap: int) -> Iterator[T]:
    """Parse an NDJSON stream, handing each record to ``take(record, line_no, raw)`` (``raw``: its line) and
    yielding ``batch()`` at the end of each batch: at 10,000 lines, 32 MiB, end of input, or whenever the input
    has gone quiet after a whole line (so a live stream is logged as it arrives). Blank lines are skipped, and
    a BOM opening the stream; a line that is not a JSON object (``pimem.decoder`` reads it), or that passes
    ``line_cap(cap)`` bytes (refused as soon as it does), raises ``BadInput`` with its number."""
    limit = line_cap(cap)
    pending: list[bytes] = []  # the pieces of an unfinished line, joined once its end arrives
    pending_bytes = 0
    line_no = 0
    taken = 0
    batch_bytes = 0
    read = _without_bom(_reader(stream))
    loads, error = decoder.loads, decoder.JSONDecodeError
    while True:
        data = read(_READ)
        eof = not data
        if eof and pending:
            data = b"\n"
        lines = data.split(b"\n")
        tail = lines.pop()
        if pending and lines:
            lines[0] = b"".join(pending) + lines[0]
            pending, pending_bytes = [], 0
        if tail:
            pending.append(tail)
            pending_bytes += len(tail)
            if pending_bytes > limit:
                raise BadInput(f"line {line_no + len(lines) + 1}: longer than {limit:,} bytes, the cap for one input line")
        if pending_bytes + len(data) > limit:  # only then can a whole line here be over the cap
            for n, raw in enumerate(lines):
                if len(raw) > limit:
                    raise BadInput(f"line {line_no + n + 1}: longer than {limit:,} bytes, the cap for one input line")
        for raw in lines:
            line_no += 1
            if not raw or raw.isspace():
                continue
            try:
                record = loads(raw)
            except error as exc:
                raise BadInput(f"line {line_no}: {decoder.refusal(exc)}") from None
            if type(record) is not dict:
                raise BadInput(f"line {line_no}: expected a JSON object with kind and text")
            take(record, line_no, raw)
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
