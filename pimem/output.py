"""The one output bundle every read command uses: NDJSON for machines, plain lines for people, colour only
on a terminal; data to stdout, everything else to stderr."""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Callable

import orjson  # (as pimem starts, while a signal is only noted: orjson stopped as it loads crashes Python, SIGSEGV)

from . import env
from .errors import SHOWN, ExitStatus, PimemError, one_line, readable, shortened

_STYLES = {"dim": "2", "bold": "1", "green": "32", "yellow": "33", "cyan": "36", "red": "31", "match": "1;31"}


_writer = False  # the running command writes the store: see ``writing``
_lost = None  # why stdout refused what such a command printed (a full disk), once it did


class StdoutRefused(PimemError):
    """stdout refused what a read command printed (``pimem since … >/dev/full``): exit 7, naming stdout."""

    code = ExitStatus.SYSTEM

    def __init__(self, exc: OSError):
        super().__init__(f"output not written (stdout: {exc.strerror or exc})")


@contextlib.contextmanager
def writing(writes: bool = True):
    """While a command that writes the store runs, a reader of its stdout that goes away (``pimem append
    --ndjson < big | head -1``) ends the printing, not the writing: what it prints after goes nowhere, as to a
    closed stdout, and the command ends as it would have; so does a stdout that refuses it otherwise (a full
    disk), which ``finish`` says. A read command stops at its next line instead (``BrokenPipeError``, exit 0):
    it owes the reader nothing more; or with exit 7 naming stdout when stdout refused it."""
    global _writer, _lost
    was, _writer, _lost = _writer, writes, None
    try:
        yield
    finally:
        _writer = was


def read_only() -> None:
    """For a command that writes the store only with some options (``fsck --repair``, ``model PROVIDER/MODEL``,
    ``build-tree`` without ``--dry-run``), run without them: it is a read command (see ``writing``), its output
    all it does, so a stdout that refuses it is its failure (exit 7), not a warning."""
    global _writer
    _writer = False


def finish(done: bool = True) -> None:
    """The end of a command: what it printed still buffered is written out, or refused as above; a command that
    writes the store whose output stdout refused says so on stderr, and, when it ends well (``done``), that its
    work was done, so the exit status stays its own (0: a wrapper that retries would do it twice)."""
    flush()
    if _writer and _lost is not None:
        warn(f"output not written (stdout: {_lost})" + ("; the work was done" if done else ""))


def _refused(exc: OSError) -> None:
    """stdout refused a write: see ``writing``."""
    global _lost
    if _writer:
        if not isinstance(exc, BrokenPipeError) and _lost is None:
            _lost = exc.strerror or str(exc)
        quiet_stdout()
        return
    if isinstance(exc, BrokenPipeError):
        raise exc
    quiet_stdout()  # (what is still buffered for it goes nowhere, not into a second error at exit)
    raise StdoutRefused(exc) from None


def _write(data: bytes) -> None:
    try:
        env.current().stdout.buffer.write(data)
    except OSError as exc:
        _refused(exc)


def json_line(obj) -> None:
    """One JSON object on one line of stdout."""
    _write(orjson.dumps(obj) + b"\n")


def raw_line(data: bytes) -> None:
    _write(data if data.endswith(b"\n") else data + b"\n")


def line(text: str = "") -> None:
    _write(text.encode("utf-8", "surrogateescape") + b"\n")


class Lines:
    """Lines for stdout gathered into large writes: a million-line stream in a few thousand system calls."""

    def __init__(self, size: int = 1024 * 1024):
        stdout = env.current().stdout
        stdout.flush()
        self._out = stdout.buffer
        try:  # a large buffer straight over the descriptor; in-process test runners have none
            self._out = io.BufferedWriter(_Stdout(stdout.fileno(), "w", closefd=False), size)
        except (OSError, ValueError, AttributeError):
            pass
        self.add = self._out.write  # add(line): one line, ending in a newline

    def flush(self) -> None:
        self._out.flush()


class _Stdout(io.FileIO):
    """stdout's descriptor, whose refusals are told as ``_refused`` tells them."""

    def write(self, data) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            _refused(exc)
            return len(data)


class Taken:
    """Lines for a reader at the other end of a pipe, each written once the reader took the one before out of
    the pipe, for a cursor that must not move past a line the reader never read (``since --cursor … | head
    -1``: head reads all the pipe holds, uses one line and leaves). A wait per line, so only where a cursor
    needs it. Once the reader has gone, ``add`` raises ``BrokenPipeError`` and ``untaken`` is the mark of the
    first line it did not take. What a reader took but did not use (read into a buffer of its own) counts as
    taken: nothing here can know of it."""

    @classmethod
    def on_stdout(cls) -> "Taken | None":
        """A ``Taken`` over stdout when it is a pipe, else None."""
        fd = _stdout_pipe()
        if fd is None:
            return None
        env.current().stdout.flush()
        return cls(fd)

    def __init__(self, fd: int):
        import select

        self._fd = fd
        self._gone = select.poll()
        self._gone.register(fd, 0)  # (no event asked for: only POLLERR, which says the reader closed its end)
        self._last = None  # the mark of the line written last, until the reader took it
        self.untaken = None

    def add(self, line: bytes, mark) -> None:
        self.flush()
        self._last = mark
        view = memoryview(line)
        try:
            while view:
                view = view[os.write(self._fd, view) :]
        except BrokenPipeError:
            self.untaken = mark
            raise

    def flush(self) -> None:
        """Wait until the reader took the last line, or raise ``BrokenPipeError`` if it went away first."""
        # a reader waiting on the pipe takes a line within microseconds: look again at once for a while, then
        # less and less often (up to every 20 ms)
        looks = 0
        while self._last is not None and _unread(self._fd):
            looks += 1
            wait = 0 if looks < 50 else min(0.05 * 2 ** min(looks - 50, 10), 20.0)  # milliseconds
            if self._gone.poll(wait) and _unread(self._fd):  # (it may have read the line before it left)
                self.untaken = self._last
                raise BrokenPipeError(32, "the reader went away")
        self._last = None


def idle(seconds: float) -> None:
    """Wait ``seconds`` for more to print (``since --follow``), or raise ``BrokenPipeError`` as soon as the reader
    at the other end of stdout, a pipe, has gone: as ``tail -f`` does, a follower whose reader left ends then
    (exit 0), not when it next has a line to write."""
    import select
    import time

    fd = _stdout_pipe()
    if fd is None:
        time.sleep(seconds)
        return

    gone = select.poll()
    gone.register(fd, 0)  # (no event asked for: only POLLERR or POLLHUP, which say the reader closed its end)
    if gone.poll(seconds * 1000):
        raise BrokenPipeError(32, "the reader went away")


def _stdout_pipe() -> int | None:
    """The descriptor of stdout when it is a pipe, else None."""
    import stat

    try:
        fd = env.current().stdout.fileno()
        return fd if stat.S_ISFIFO(os.fstat(fd).st_mode) else None
    except (OSError, ValueError, AttributeError):  # (in-process test runners have no descriptor)
        return None


def _unread(fd: int) -> int:
    """The bytes in the pipe ``fd`` its reader has not read yet (0 where the system cannot say)."""
    import array
    import fcntl
    import termios

    count = array.array("i", [0])
    try:
        fcntl.ioctl(fd, termios.FIONREAD, count)
    except OSError:
        return 0
    return count[0]


def flush() -> None:
    try:
        env.current().stdout.flush()
    except OSError as exc:
        _refused(exc)


def log_to(path: str | None, what: str) -> None:
    """Send stderr (progress, notes, errors) to the end of the file ``path``, creating its directory (0700) and
    the file (0600), after a line saying when ``what`` started: a cron job's log needs no shell redirection."""
    if path is None:
        return
    import os
    from pathlib import Path

    from .errors import PimemError, translate
    from .home import FILE_MODE, ensure_dir
    from .when import rfc3339

    file = Path(path).expanduser()
    fd = None
    try:  # the first line written before stderr goes there: a log that refuses it is said where stderr is now
        ensure_dir(file.parent)
        fd = os.open(file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, FILE_MODE)
        os.write(fd, f"{rfc3339(env.now())} pimem {what}\n".encode())
    except OSError as exc:
        if fd is not None:
            os.close(fd)
        error = translate(exc)
        raise PimemError(f"--log {file}: {error}", error.code) from None
    sys.stderr.flush()
    try:
        real = sys.stderr.fileno() == 2
    except (AttributeError, ValueError, OSError):  # an in-process runner's stderr has no descriptor
        real = False
    if real:  # the descriptor itself, so that child processes (a command compactor) write there too
        os.dup2(fd, 2)
        os.close(fd)
    else:
        sys.stderr = open(fd, "a", encoding="utf-8", errors="backslashreplace", buffering=1)


def count(n: int, noun: str, plural: str | None = None) -> str:
    """``1 message``, ``2 messages``, ``10,000 messages``."""
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def info(text: str) -> None:
    """A message for the person, on stderr (a path that is not UTF-8 in it written as errors write it)."""
    env.stderr().write(f"{readable(text)}\n")


def note(text: str) -> None:
    """``pimem: TEXT`` on stderr: what a command the user typed is at, as a long catch-up of the search index it
    waits for (``Memory.patient``)."""
    info(f"pimem: {text}")


def warn(text: str) -> None:
    env.stderr().write(f"pimem: warning: {shortened(one_line(readable(text)))}\n")


def quiet_stdout() -> None:
    """The reader went away (``pimem since … | head``): what is still written goes nowhere, quietly."""
    _to_null(env.current().stdout.fileno())


def _to_null(fd: int) -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


class Unfailing:
    """stderr for a command (``boundary.begin`` puts it in place): a line it cannot take (a reader that went away,
    ``2>/dev/full``) and every line after go nowhere, quietly. A warning or a notice never stops the work,
    and an error that cannot be said still ends with its own exit status."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text: str) -> int:
        try:
            return self._stream.write(text)
        except OSError:
            self._quiet()
            return len(text)

    def flush(self) -> None:
        try:
            self._stream.flush()
        except OSError:
            self._quiet()

    def _quiet(self) -> None:
        try:
            _to_null(self._stream.fileno())
            self._stream.flush()  # (what it still held goes to /dev/null now)
        except (OSError, ValueError):
            pass

    def __getattr__(self, name: str):  # fileno, isatty, encoding… as the stream's
        return getattr(self._stream, name)


class Unread:
    """The memories a command over many could not read (one damaged, say): each said in one line as it is
    met, the others done; ``check()`` at the end exits with the worst status."""

    def __init__(self, also: Callable | None = None):
        self.code = 0
        self.said: list = []  # (memory, error) of each said
        self.also = also  # called with (memory, error) after each is said (a command's --json record of it)

    def run(self, mem, work):
        """``work()`` for ``mem``, or None when it failed in a way the command passes over (said here): a
        ``PimemError``, or an OS or SQLite failure (``errors.as_error``: a file it may not read); a bug is raised."""
        from .errors import as_error

        try:
            return work()
        except Exception as exc:
            if (error := as_error(exc)) is None:
                raise
            self(mem, error)
            return None

    def __call__(self, mem, exc) -> None:
        if not os.path.isdir(mem.path) and not os.path.islink(mem.path):  # renamed or deleted meanwhile, by
            return  # another command: no longer one of the memories to go over, nothing to say of it
        said = str(exc)
        self.said.append((mem, exc))
        env.stderr().write(f"pimem: error: {said if said.startswith(mem.name + ':') else f'{mem.name}: {said}'}\n")
        self.code = max(self.code, int(exc.code))
        if self.also:
            self.also(mem, exc)

    def check(self) -> None:
        if self.code:
            import typer

            raise typer.Exit(self.code)


def style(text: str, name: str) -> str:
    """``text`` in a colour when stdout is a terminal (and NO_COLOR is unset), else unchanged."""
    import os

    if not env.stdout_is_tty() or os.environ.get("NO_COLOR"):
        return text
    return f"\x1b[{_STYLES[name]}m{text}\x1b[0m"


# for a line a person reads: newlines and tabs are spaces, and the other control characters are shown, not
# obeyed, as ``cat -v`` shows them (``errors.SHOWN``; the bidirectional embeddings, overrides and isolates are
# left out before: ``tree.plain``)
_FLAT = SHOWN


def flatten(text: str) -> str:
    """One physical line of plain text: newlines and tabs become spaces, other control characters ``^[``, and
    the invisible format characters a view line leaves out (``tree.plain``) are left out."""
    from .tree import plain

    return plain(text, escapes=True).replace("\r\n", " ").translate(_FLAT)


def cut(text: str, cells: int) -> str:
    """``text`` within ``cells`` terminal columns, cut with ``…`` where it does not fit: East Asian wide
    characters and most emoji take two columns, combining marks none. A control character's marker (``^G``,
    ``flatten``) is cut before, not inside (a ``^`` alone; so is a caret the text held before such a letter)."""
    if text.isascii():
        return text if len(text) <= cells else _before_marker(text, cells - 1) + "…"
    import unicodedata

    widths = [0 if unicodedata.combining(ch) else 2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in text]
    if sum(widths) <= cells:
        return text
    used = end = 0
    while used + widths[end] <= cells - 1:
        used += widths[end]
        end += 1
    return _before_marker(text, end) + "…"


_MARKED = frozenset(shown[1] for shown in SHOWN.values() if len(shown) == 2)  # the letters after a ^ (G, [, ?)


def _before_marker(text: str, end: int) -> str:
    """``text[:end]``, without a last ``^`` that opens a marker ``text[end]`` ends."""
    if end and text[end - 1] == "^" and text[end] in _MARKED:
        end -= 1
    return text[:end]


def message_line(msg: dict, memory: str | None = None, width: int | None = None) -> str:
    """The human form of a message: ``[memory ]#i date kind: text`` on one line."""
    head = f"{memory} " if memory else ""
    text = flatten(msg["text"])
    if width is not None and len(text) > width:
        text = text[: width - 1] + "…"
    return f"{style(head + '#' + str(msg['i']), 'cyan')} {style(msg['date'], 'dim')} {style(msg['kind'] + ':', 'bold')} {text}"
