"""Exit statuses (DESIGN.md §4) and the exceptions that carry them.

``ExitStatus`` is the one exit-code table: the README's table, the man pages and ``--help`` are generated from
or checked against it. Commands raise the exceptions below; the one boundary (``pimem.boundary``; usage errors:
``pimem.cli``) maps every failure (these, usage errors, the system's refusals, a closed pipe, Ctrl-C) to
``pimem: error: …`` on stderr and a status of this enum. Library users catch ``PimemError``.
"""

import errno
import os
import stat
from enum import IntEnum


class ExitStatus(IntEnum):
    OK = 0
    NOTHING_FOUND = 1
    USAGE = 2
    NOT_FOUND = 3
    BUSY = 4
    INTEGRITY = 5
    PROVIDER = 6
    SYSTEM = 7
    HANGUP = 129  # 128 + SIGHUP: the terminal closed
    INTERRUPTED = 130  # Ctrl-C (128 + SIGINT), as shells report it
    TERMINATED = 143  # 128 + SIGTERM

    @property
    def meaning(self) -> str:
        return _MEANINGS[self]


_MEANINGS = {
    ExitStatus.OK: "ok",
    ExitStatus.NOTHING_FOUND: "nothing found (like grep)",
    ExitStatus.USAGE: "bad usage or bad input: one line on stderr names what was wrong; nothing was written",
    ExitStatus.NOT_FOUND: "no such memory, message or node",
    ExitStatus.BUSY: "busy: a lock or lease was held past `--timeout`, or a builder's lease was taken over",
    ExitStatus.INTEGRITY: "integrity error: run `pimem fsck`",
    ExitStatus.PROVIDER: "compactor or provider failure",
    ExitStatus.SYSTEM: "the system refused: disk full, permission denied, a read-only file system (one line names it)",
    ExitStatus.HANGUP: "stopped by SIGHUP (its terminal closed): the same",
    ExitStatus.INTERRUPTED: "interrupted (Ctrl-C, SIGINT): what was durable stays, one line says what",
    ExitStatus.TERMINATED: "stopped by SIGTERM: the same",
}

# the table as the README and the man pages print it
EXIT_CODES = {int(status): status.meaning for status in ExitStatus}


class PimemError(Exception):
    """A failure the user can act on; ``code`` is the process exit status (an ``ExitStatus``). ``tools`` is the
    message as an MCP client's model reads it, where its advice differs (``(see list_memories)``, the tool to
    call, where the CLI says ``(see 'pimem list')``); ``for_tools`` gives it (the message, where not given)."""

    code = ExitStatus.USAGE

    def __init__(self, message: str, code: ExitStatus | None = None, *, tools: str | None = None):
        super().__init__(shortened(one_line(readable(message))))
        if code is not None:
            self.code = ExitStatus(code)
        self._tools = None if tools is None else shortened(one_line(readable(tools)))

    @property
    def for_tools(self) -> str:
        return str(self) if self._tools is None else self._tools

    @property
    def message(self) -> str:
        return str(self)


class NothingFound(PimemError):
    code = ExitStatus.NOTHING_FOUND


class BadInput(PimemError):
    code = ExitStatus.USAGE


class NotFound(PimemError):
    code = ExitStatus.NOT_FOUND


class Busy(PimemError):
    code = ExitStatus.BUSY


class LeaseLost(PimemError):
    """Another process took this memory's lease: stop building it (nothing more is written). Not a ``Busy``,
    which a builder waits out; this one it does not."""

    code = ExitStatus.BUSY


class IntegrityError(PimemError):
    code = ExitStatus.INTEGRITY


class ProviderError(PimemError):
    code = ExitStatus.PROVIDER


class SystemRefused(PimemError, OSError):
    """What the system refused the library (a file where a directory should be, a link loop, a path too long, a
    full disk): a ``PimemError`` (exit 7) whose message is the line the CLI prints (``Not a directory:
    /x/config.json``), and the ``OSError`` it stands for, of its very type (``refused`` makes a
    ``NotADirectoryError`` one for a ``NotADirectoryError``), its ``errno``, ``strerror`` and ``filename`` kept:
    a caller's ``except OSError`` (or ``except FileNotFoundError``) takes it as before."""

    code = ExitStatus.SYSTEM

    def __str__(self) -> str:  # (the line, not OSError's ``[Errno 20] …``)
        return str(self.args[0])

    def __reduce__(self):  # (OSError's own would hand its numbers to __init__)
        return _refused_again, (_kind(self), str(self), self.errno, self.strerror, self.filename, self.filename2)


class SQLiteFailed(PimemError):
    """What SQLite refused the library in a memory's index (a disk I/O error, a full disk; a database locked
    past its timeout, one damaged): a ``PimemError`` in the line the CLI prints (``translate``: exit 7, 4 or 5),
    and the ``sqlite3`` error it stands for, of its type, its ``sqlite_errorcode`` and ``sqlite_errorname`` kept."""

    code = ExitStatus.SYSTEM

    def __reduce__(self):
        return _failed_again, (_kind(self), str(self), self.code, getattr(self, "sqlite_errorcode", None),
                               getattr(self, "sqlite_errorname", None))


def refused(exc: OSError, said: str | None = None) -> SystemRefused:
    """``exc`` as a ``SystemRefused`` of its type, saying what ``translate`` says of it (or ``said``)."""
    if isinstance(exc, SystemRefused):
        return exc
    return _refused_again(type(exc), said or _said(exc), exc.errno, exc.strerror, exc.filename, exc.filename2)


def _refused_again(kind: type, message: str, number, strerror, filename, filename2) -> SystemRefused:
    out = _made(SystemRefused, kind, message)
    out.errno, out.strerror, out.filename, out.filename2 = number, strerror, filename, filename2
    return out


def _sqlite_failed(exc: Exception) -> SQLiteFailed:
    """``exc``, a ``sqlite3`` error, as an ``SQLiteFailed`` of its type, saying what ``translate`` says of it."""
    said = translate(exc)
    return _failed_again(type(exc), str(said), said.code, getattr(exc, "sqlite_errorcode", None),
                         getattr(exc, "sqlite_errorname", None))


def _failed_again(kind: type, message: str, code, number, name) -> SQLiteFailed:
    out = _made(SQLiteFailed, kind, message, code)
    out.sqlite_errorcode, out.sqlite_errorname = number, name
    return out


def _made(base: type, kind: type, *args) -> PimemError:
    """A ``base`` (``SystemRefused``, ``SQLiteFailed``) made of ``args`` that is a ``kind`` too (one class for
    each kind, found by pickle at its qualname), or a plain one where ``kind`` cannot be a base or takes other
    arguments."""
    made = base if kind in base.__mro__ else getattr(base, kind.__name__, None)
    if made is None or kind not in made.__mro__:
        try:
            made = type(kind.__name__, (base, kind),
                        {"__module__": __name__, "__qualname__": f"{base.__name__}.{kind.__name__}"})
        except TypeError:
            made = base
        else:
            setattr(base, kind.__name__, made)
    try:
        return made(*args)
    except TypeError:  # (a kind whose own __init__ takes other arguments)
        return base(*args)


def _kind(exc: PimemError) -> type:
    """The error of the system or of SQLite a ``SystemRefused`` or an ``SQLiteFailed`` stands for."""
    return next(k for k in type(exc).__mro__[1:] if not issubclass(k, PimemError))


def _said(exc: OSError) -> str:
    """What the CLI says of an OS failure: its reason and the file it names (and, where that is a path through
    something that is no directory, what is in the way: ``in_the_way``)."""
    where = f": {exc.filename}" if exc.filename else ""
    return f"{exc.strerror or exc}{where}{in_the_way(exc)}"


def in_the_way(exc: OSError) -> str:
    """For an ``ENOTDIR`` naming a path through something that is no directory, what stands where one of its
    directories goes (`` (/etc/passwd is a file)`` for ``/etc/passwd/x/config.json``); else "" (the path named is
    then itself what is in the way)."""
    if exc.errno != errno.ENOTDIR or not isinstance(exc.filename, str):
        return ""
    parent = os.path.dirname(exc.filename)
    while parent != os.path.dirname(parent):
        try:
            mode = os.lstat(parent).st_mode
        except OSError:
            parent = os.path.dirname(parent)
            continue
        return "" if stat.S_ISDIR(mode) else f" ({parent} is {'a file' if stat.S_ISREG(mode) else 'no directory'})"
    return ""


# the commands running in pimem's own error boundary (``boundary.guarded``), which says what the system refused
# itself: inside one, the library's public functions let an ``OSError`` (or SQLite's error) through as it is
_COMMANDS: list[int] = []


class command:
    """The span of one command in pimem's boundary (``boundary.guarded``): see ``library``."""

    def __enter__(self) -> None:
        _COMMANDS.append(1)

    def __exit__(self, *exc) -> None:
        _COMMANDS.pop()


def in_command() -> bool:
    """Whether a command runs in pimem's boundary (not a Python caller's process)."""
    return bool(_COMMANDS)


def said_as(option: str, argument: str) -> str:
    """How a message names a setting of the call: its command's ``option`` (``--timeout``) inside a command, the
    library's ``argument`` (``timeout=``) in a Python caller's."""
    return option if in_command() else argument


def _for_caller(exc: Exception) -> Exception:
    """What a public function of the library raises for ``exc``: an ``OSError`` as a ``SystemRefused``, a
    ``sqlite3`` error as an ``SQLiteFailed``; anything else, and anything inside a command, as it is."""
    if _COMMANDS or isinstance(exc, PimemError):
        return exc
    if isinstance(exc, OSError):
        return refused(exc)
    return _sqlite_failed(exc) if type(exc).__module__ == "sqlite3" else exc


def _reraise(exc: Exception) -> None:
    """In the ``except`` that caught ``exc``: raise it as a library caller meets it (``_for_caller``)."""
    error = _for_caller(exc)
    if error is exc:
        raise  # (as it is, with its traceback)
    raise error from exc


def library(func):
    """``func``, a public function of the library (``Memory``'s methods, ``pimem.api``), raising what the system
    or SQLite refused as the ``SystemRefused`` or ``SQLiteFailed`` it stands for: every failure a library caller
    meets is a ``PimemError``, as the README says. Inside a command (``command``), whose boundary says it, the
    error goes on as it is, so that no command's handling of one changes."""
    import functools

    @functools.wraps(func)
    def call(*args, **kwargs):
        try:
            return func(*args, **kwargs)
        except Exception as exc:
            _reraise(exc)

    return call


def library_items(items):
    """The items of ``items`` (a reader's generator), what the system refused while they are read raised as
    ``library`` raises it."""
    try:
        yield from items
    except Exception as exc:
        _reraise(exc)


class library_context:
    """``context`` (a context manager: the writer lock), what the system refused as it is entered or left raised
    as ``library`` raises it; what the block raises goes on as it is."""

    def __init__(self, context):
        self.context = context

    def __enter__(self):
        return library(self.context.__enter__)()

    def __exit__(self, kind, exc, tb):
        try:
            return self.context.__exit__(kind, exc, tb)
        except Exception as failed:
            if failed is exc:  # (the block's own)
                raise
            _reraise(failed)


def escaped(path: str) -> str:
    """``path`` as the memory keeps it (an imported file's ``meta.file``, the import state) and JSON and
    messages write it: a name holding bytes that are not UTF-8 (a directory named in another encoding) has
    them as ``\\xff`` escapes, since the log and JSON hold only UTF-8, and its backslashes doubled; so has a
    UTF-8 name that spells such an escape itself (``\\xff``: two names never share one form). Any other path
    is as it is."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        pass
    else:
        import re

        if not re.search(r"\\x[89a-f][0-9a-f]", path):  # how a byte that is not UTF-8 is written here
            return path
    doubled = path.replace("\\", "\\\\")
    return doubled.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def readable(text: str) -> str:
    """A message for the person: one holding a path under a directory named in another encoding (bytes that
    are not UTF-8) with them written as JSON keeps the path (``escaped``: ``\\xff``, not ``\\udcff``); any
    other as it is."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return escaped(text)
    return text


# what a line for a person shows of a control character (a message's, or a path's: a home named with a newline
# or an ESC), as ``cat -v`` shows it, so that it stays one line and steers nothing (an ESC must not recolour the
# terminal, a BEL ring it): newlines and tabs are spaces, other C0 controls ``^[``, DEL ``^?``, a C1 control �
SHOWN = {**{c: f"^{chr(c + 64)}" for c in range(32)}, 9: " ", 10: " ", 13: " ", 127: "^?",
         **{c: "\ufffd" for c in range(0x80, 0xA0)}}


def one_line(text: str) -> str:
    """``text`` with its control characters shown as ``SHOWN`` says (an error's or a warning's line)."""
    return text.translate(SHOWN) if any(ord(ch) < 32 or 127 <= ord(ch) < 160 for ch in text) else text


LONG, QUOTED = 200, 60  # a piece of the user's input an error quotes is long past LONG characters; it shows QUOTED


def shortened(message: str, given: tuple[str, ...] = ()) -> str:
    """``message`` with each quoted piece of it longer than ``LONG`` characters (the user's input, as errors
    quote it: a 5,000-character node id) cut to its first ``QUOTED`` and ``…``, its length said after it
    (``'4+1aaaa…' (5,003 characters)``), and so each long string of ``given`` it holds unquoted (the arguments
    a usage error names: ``no such option: --bogusaaa… (5,007 characters)``): one line stays readable. A
    shorter piece, a path say, is quoted whole."""
    if len(message) <= LONG + 2:
        return message
    import re

    def cut(match) -> str:
        quote, inner = match[0][0], match[0][1:-1]
        if len(inner) <= LONG:
            return match[0]
        return f"{quote}{inner[:QUOTED]}…{quote} ({_length(match[0]):,} characters)"

    message = re.sub(r"""(?<!\w)(?:'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*")""", cut, message)
    for text in given:
        if len(text) > LONG and text in message:
            message = message.replace(text, f"{text[:QUOTED]}… ({len(text):,} characters)")
    return message


def _length(quoted: str) -> int:
    """The length of the text a quoted piece stands for: a Python literal's (``repr`` escapes), else as shown."""
    import ast

    try:
        text = ast.literal_eval(quoted)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return len(quoted) - 2
    return len(text) if isinstance(text, str) else len(quoted) - 2


def shown(value) -> str:
    """``repr(value)`` for an error's line, which quotes what the caller gave: an integer past the 4,300 digits
    Python writes in decimal (a ``ValueError`` there) is said by its number of digits, and a container holding
    one by its type, so the error says what was wrong rather than failing to say it."""
    try:
        return repr(value)
    except ValueError:
        if type(value) is int or isinstance(value, int) and not isinstance(value, bool):
            import math

            size = abs(value)
            digits = int(math.log10(size)) + 1  # (a float's log: put right below where it is off by one)
            digits += (10**digits <= size) - (10 ** (digits - 1) > size)
            return f"an integer of {digits:,} digits"
        return f"a {type(value).__name__} too long to write out"


NOT_UTF8 = "not valid UTF-8: an argument (or a file's name) holds bytes UTF-8 cannot; give it as UTF-8"


def translate(exc: BaseException) -> PimemError | None:
    """The error an OS or SQLite failure stands for, with one line naming it (disk full, permission denied:
    exit 7; a database busy past its timeout: 4; a damaged one: 5; text that is not UTF-8 where it must be:
    2), or None for anything else. The CLI's
    boundary and the MCP server both use it, so a client reads the same reason a shell user does."""
    if isinstance(exc, OSError):
        return PimemError(_said(exc), ExitStatus.SYSTEM)
    if isinstance(exc, UnicodeEncodeError) or (isinstance(exc, TypeError) and "surrogates not allowed" in str(exc)):
        return BadInput(NOT_UTF8)
    if type(exc).__module__ == "sqlite3":  # (sqlite3 is never imported just to ask)
        text = str(exc)
        code = ExitStatus.BUSY if "locked" in text or "busy" in text else ExitStatus.INTEGRITY if "malformed" in text or "not a database" in text else ExitStatus.SYSTEM
        if getattr(exc, "sqlite_errorname", "").startswith(("SQLITE_IOERR", "SQLITE_FULL")):
            text += " in index.sqlite, the memory's derived index (is the disk full? the log is not affected)"
        return PimemError(f"SQLite: {text}", code)
    return None


def as_error(exc: BaseException) -> PimemError | None:
    """``exc`` as the ``PimemError`` it stands for (an OS or SQLite failure translated: a file the user may
    not read is exit 7), or None for anything else (a bug, to be raised): for commands over many memories,
    which name a memory they cannot read and go on with the others."""
    return exc if isinstance(exc, PimemError) else translate(exc)
