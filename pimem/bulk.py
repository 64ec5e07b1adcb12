"""Bulk NDJSON appends on two cores: a reader process parses, validates and encodes the stream while this
process writes the batches it sends.

Python runs one thread at a time, and a bulk append is mostly parsing, checking and encoding messages (about
two thirds of its work) with writing, flushing and the view's upkeep as the rest. A forked reader does the
first part: it reads stdin in the same batches as ``ingest.ndjson_batches``, checks each record as
``Memory.prepare`` does, and sends each batch over a pipe as stored lines without their ``i`` (the writer
numbers them under the lock, as ever), with each message's size and the batch's day runs. The reader never
touches the memory's files, the lock or stdout, so everything that makes an append safe stays in one process:
a bad line refuses its whole batch (the reader sends the error in its place, after the batches before it),
each batch is written in ``i`` order with one flush per day file, and acknowledged only when durable. Where
``fork`` does not exist, ``Memory.append_stream`` does the same with a thread.
"""

from __future__ import annotations

import os
import struct
from typing import BinaryIO, Iterator, Sequence

import orjson

from . import env, ingest, stopping, when
from .errors import BadInput, ExitStatus, PimemError, refused
from .memory import collector_resting
from .message import name_bytes, normalise

dumps = orjson.dumps

_HEADER = struct.Struct("<QQ")  # lines bytes, meta bytes
_PIPE_BYTES = 1 << 20  # the pipe's capacity, if the system allows: fewer switches between the two processes


def available() -> bool:
    return hasattr(os, "fork")


class EncodedBatch(Sequence):
    """A batch as the reader sent it: stored lines without ``i`` (``{"kind":…}`` and a newline each) in one
    buffer, with each message's size and, for those naming their speaker, what the name adds to a line
    (``names``: ``message.name_bytes`` by position); a message is decoded only when asked for (the view asks
    rarely)."""

    def __init__(self, data: bytes, ends: list[int], sizes: list[int], names: dict[int, int] | None = None):
        self.data, self.ends, self.sizes = data, ends, sizes
        self.names = names or {}

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, k: int) -> dict:
        return orjson.loads(memoryview(self.data)[self.ends[k - 1] if k else 0 : self.ends[k]])

    def lines(self, start: int, first: int, stop: int) -> bytes:
        """The stored lines of messages ``first…stop-1`` of the batch, numbered from ``start``."""
        data, ends = memoryview(self.data), self.ends
        parts = []
        add = parts.append
        begin = ends[first - 1] + 1 if first else 1  # (each line's own "{" is replaced by the prefix)
        for n in range(first, stop):
            add(b'{"i":%d,' % (start + n))
            add(data[begin : ends[n]])
            begin = ends[n] + 1
        return b"".join(parts)


def append_ndjson(mem, stream: BinaryIO, timeout: float | None = None) -> Iterator[list[int]]:
    """Log an NDJSON stream batch by batch (see the module's note), yielding each batch's ``i`` once it is
    durable. A bad batch raises ``BadInput`` after every batch before it was logged and yielded."""
    read_end, write_end = os.pipe()
    try:
        import fcntl

        fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
    except (ImportError, AttributeError, OSError):
        pass  # a smaller pipe only means more switches
    writer = os.getpid()
    pid = os.fork()
    if pid == 0:  # the reader: whatever happens, it ends here and never returns into the caller
        status = 1
        try:
            stopping.child()
            os.close(read_end)
            _end_with(writer)
            status = _read(mem, stream, write_end)
        finally:
            os._exit(status)
    os.close(write_end)
    finished = False
    try:
        with collector_resting(), open(read_end, "rb", buffering=0) as pipe:
            while True:
                frame = _receive(pipe)
                if frame is None:
                    raise PimemError(f"the process reading stdin (pid {pid}) ended without a word (killed?); the rest "
                                     "of stdin was not logged", ExitStatus.SYSTEM)
                data, meta = frame
                if "error" in meta:
                    if meta.get("bad"):
                        raise BadInput(meta["error"])
                    if meta.get("errno") is not None:
                        raise refused(OSError(meta["errno"], meta["strerror"], "stdin"))
                    raise RuntimeError(f"the NDJSON reader failed: {meta['error']}")
                if meta.get("end"):
                    finished = True
                    return
                batch = EncodedBatch(data, meta["ends"], meta["sizes"], dict(meta.get("names") or ()))
                runs = [(day, count) for day, count in meta["runs"]]
                with stopping.held():  # a signal stops the stream only after this batch is durable and printed
                    yield mem.append_encoded(runs, batch.lines, batch, timeout)
    finally:
        if not finished:
            import signal

            try:
                os.kill(pid, signal.SIGTERM)  # it writes nothing durable: stopping it loses nothing
            except ProcessLookupError:
                pass
        os.waitpid(pid, 0)


def _end_with(writer: int) -> None:
    """Have the kernel end this reader if the writer dies (killed, say, while stdin stays open), so it does
    not linger waiting for input nobody will log. Linux only; elsewhere it ends at its next send."""
    try:
        import ctypes
        import signal

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (ImportError, OSError, AttributeError):
        return
    if os.getppid() != writer:  # it died before that took effect
        os._exit(1)


def _read(mem, stream: BinaryIO, out: int) -> int:
    """The reader's work: each batch checked whole and sent, or the reason it was refused; 0 when done."""
    import gc

    gc.disable()  # (see memory.collector_resting)
    encoder = _Encoder(mem.text_cap)
    try:
        try:
            for data, meta in ingest.read_batches(stream, encoder.take, encoder.batch, mem.text_cap):
                _send(out, data, meta)
        except BadInput as exc:
            _send(out, b"", {"error": str(exc), "bad": True})
            return 0
        except (BrokenPipeError, KeyboardInterrupt):
            return 1  # the writer has gone: nothing to tell
        except OSError as exc:  # (stdin unreadable: a terminal gone, say) the writer says it as the system's refusal
            _send(out, b"", {"error": str(exc), "errno": exc.errno, "strerror": exc.strerror})
            return 1
        except Exception as exc:  # the writer reports it
            _send(out, b"", {"error": f"{type(exc).__name__}: {exc}"})
            return 1
        _send(out, b"", {"end": True})
        return 0
    except (BrokenPipeError, KeyboardInterrupt):
        return 1


class _Encoder:
    """One batch as ``Memory.prepare`` checks it (one date stamp for the batch's undated records, the first
    bad record named by its line), encoded as it is read: each record's stored line without ``i`` goes
    straight into one buffer, so no record outlives its line."""

    def __init__(self, cap: int):
        self.cap = cap
        self._start()

    def _start(self) -> None:
        self.data = bytearray()
        self.ends: list[int] = []
        self.sizes: list[int] = []
        self.names: list[list[int]] = []  # [position, bytes] of each message naming its speaker (``name_bytes``)
        self.runs: list[list] = []  # [day, count]
        self.day = None
        self.stamp = None
        self.error = None

    def take(self, record: dict, line_no: int, raw: bytes) -> None:
        if self.error is not None:
            return  # the batch is refused; the rest of it is only parsed (a later unparsable line is named first)
        if self.stamp is None:
            self.stamp = when.rfc3339(env.now())
        try:
            msg = normalise(record, self.cap, self.stamp, raw)
        except BadInput as exc:
            self.error = f"line {line_no}: {exc}"
            return
        self.data += dumps(msg, option=orjson.OPT_APPEND_NEWLINE)
        self.ends.append(len(self.data))
        self.sizes.append(msg["size"])
        if "meta" in msg:
            named = name_bytes(msg)
            if named:
                self.names.append([len(self.sizes) - 1, named])
        day = msg["date"][:10]
        if day != self.day:
            self.day = day
            self.runs.append([day, 0])
        self.runs[-1][1] += 1

    def batch(self) -> tuple[bytearray, dict]:
        if self.error is not None:
            raise BadInput(self.error)
        done = self.data, {"ends": self.ends, "sizes": self.sizes, "runs": self.runs, "names": self.names}
        self._start()
        return done


def _send(out: int, data: bytes, meta: dict) -> None:
    encoded = orjson.dumps(meta)
    for chunk in (_HEADER.pack(len(data), len(encoded)), encoded, data):
        view = memoryview(chunk)
        while view:
            view = view[os.write(out, view) :]


def _receive(pipe) -> tuple[bytes, dict] | None:
    header = _read_exactly(pipe, _HEADER.size)
    if header is None:
        return None
    size, meta_size = _HEADER.unpack(header)
    meta = _read_exactly(pipe, meta_size)
    data = _read_exactly(pipe, size) if size else b""
    if meta is None or data is None:
        return None
    return data, orjson.loads(meta)


def _read_exactly(pipe, size: int) -> bytes | None:
    """``size`` bytes from the pipe, or None if it ends first."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    got = 0
    while got < size:
        n = pipe.readinto(view[got:])
        if not n:
            return None
        got += n
    return bytes(buffer) if size < 4096 else buffer
