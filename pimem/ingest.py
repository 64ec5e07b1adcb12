"""Reading message streams from stdin: whole text, or NDJSON in batches that are validated whole before
any of their lines is written."""

from __future__ import annotations

from typing import BinaryIO, Iterator

import orjson

from .errors import BadInput

BATCH_LINES = 10_000
BATCH_BYTES = 32 * 1024 * 1024
_READ = 4 * 1024 * 1024


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


def ndjson_batches(stream: BinaryIO) -> Iterator[tuple[int, list]]:
    """``(first line number, records)`` batches from an NDJSON stream. A batch ends at 10,000 lines,
    32 MiB, end of input, or whenever the input has momentarily run dry (so a live stream is logged as it
    arrives). Blank lines are skipped; a line that is not a JSON object raises ``BadInput`` with its number."""
    pending = b""
    line_no = 0
    batch: list = []
    batch_bytes = 0
    first = 1
    read = _reader(stream)
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
            if not raw.strip():
                continue
            try:
                record = orjson.loads(raw)
            except orjson.JSONDecodeError as exc:
                reason = "not valid UTF-8" if "utf-8" in str(exc).lower() else "not valid JSON"
                raise BadInput(f"line {line_no}: {reason}") from None
            if not isinstance(record, dict):
                raise BadInput(f"line {line_no}: expected a JSON object with kind and text")
            if not batch:
                first = line_no
            batch.append((line_no, record))
            batch_bytes += len(raw)
            if len(batch) >= BATCH_LINES or batch_bytes >= BATCH_BYTES:
                yield first, batch
                batch, batch_bytes = [], 0
        if batch and (eof or len(data) < _READ):
            yield first, batch
            batch, batch_bytes = [], 0
        if eof:
            return
