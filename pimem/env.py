"""The injected environment: home directory, clock, streams, their terminal flags and the lock timeout come
from here and nowhere else, read when asked (never at import time).

As httpie's ``Environment``: an object whose attributes default to the process's own (``sys.stderr``,
``$PIMEM_HOME``, ``$PIMEM_LOCK_TIMEOUT``, the wall clock) and that tests build with keyword overrides and
install with ``using(…)`` instead of patching globals. The module functions (``home()``, ``now()``,
``stderr()``, ``stderr_is_tty()``, ``lock_timeout()``…) ask the current one. Tests also point ``PIMEM_HOME``
at a temporary directory and may freeze the clock with ``PIMEM_NOW`` (an RFC 3339 date-time).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, TextIO

LOCK_TIMEOUT = 60.0  # seconds a writer waits for a lock, unless $PIMEM_LOCK_TIMEOUT says otherwise


class Environment:
    """Where pimem runs. Every argument left out is read from the process when asked, so an ``Environment()``
    follows ``sys.stdout`` being replaced (as CliRunner does) and variables set after it was made."""

    def __init__(self, *, home: str | os.PathLike | None = None, now: Callable[[], datetime] | None = None,
                 stdin: TextIO | None = None, stdout: TextIO | None = None, stderr: TextIO | None = None,
                 stdin_isatty: bool | None = None, stdout_isatty: bool | None = None,
                 stderr_isatty: bool | None = None, lock_timeout: float | None = None):
        self._home, self._now = home, now
        self._stdin, self._stdout, self._stderr = stdin, stdout, stderr
        self._isatty = {"stdin": stdin_isatty, "stdout": stdout_isatty, "stderr": stderr_isatty}
        self._lock_timeout = lock_timeout

    def home(self, explicit: str | os.PathLike | None = None) -> Path:
        """The store home: ``--home``, then this environment's, ``$PIMEM_HOME``, ``$PI_MEM_HOME``,
        ``~/.pi/memory``. An empty ``explicit`` is refused (``given``)."""
        if explicit is not None:
            given(os.fspath(explicit))
        for source, candidate in (("home", explicit), ("home", self._home), ("$PIMEM_HOME", os.environ.get("PIMEM_HOME")),
                                  ("$PI_MEM_HOME", os.environ.get("PI_MEM_HOME"))):
            if candidate:
                return _resolved(os.fspath(candidate), source)
        return _resolved(os.path.join(user_home(), ".pi", "memory"))

    def now(self) -> datetime:
        """The current local time with its UTC offset (``$PIMEM_NOW`` overrides the wall clock, for tests)."""
        if self._now is not None:
            return self._now()
        frozen = os.environ.get("PIMEM_NOW")
        if frozen:
            import re

            try:  # RFC 3339 only: a date alone, or a time with no offset, would be a guess
                if not re.fullmatch(r"\d{4}-\d\d-\d\d[Tt ]\d\d:\d\d:\d\d(\.\d+)?([Zz]|[+-]\d\d:\d\d)", frozen):
                    raise ValueError
                moment = datetime.fromisoformat(frozen.upper())
                moment.astimezone(timezone.utc)  # (the log could not store it as a message's date: the year 10000 in UTC)
                return moment
            except ValueError:
                from .errors import BadInput

                raise BadInput(f"bad $PIMEM_NOW {frozen!r}: use an RFC 3339 date-time such as 2026-10-08T09:30:00+08:00") from None
            except OverflowError:
                from .errors import BadInput

                raise BadInput(f"bad $PIMEM_NOW {frozen!r}: out of the range of dates (years 1 to 9999, in UTC too)") from None
        return datetime.now().astimezone()

    @property
    def stdin(self) -> TextIO:
        return self._stdin or sys.stdin

    @property
    def stdout(self) -> TextIO:
        return self._stdout or sys.stdout

    @property
    def stderr(self) -> TextIO:
        return self._stderr or sys.stderr

    def isatty(self, stream: str) -> bool:
        """Whether ``stream`` ("stdin", "stdout" or "stderr") is a terminal."""
        flag = self._isatty[stream]
        if flag is not None:
            return flag
        try:
            return getattr(self, stream).isatty()
        except (AttributeError, ValueError):  # a closed or a fake stream
            return False

    @property
    def lock_timeout(self) -> float:
        """Seconds a writer or an index reader waits for a lock when no ``--timeout`` says otherwise;
        ``$PIMEM_LOCK_TIMEOUT`` is held to the rule of ``--timeout`` (``BadInput`` naming it otherwise)."""
        if self._lock_timeout is not None:
            return self._lock_timeout
        given = os.environ.get("PIMEM_LOCK_TIMEOUT")
        if not given:
            return LOCK_TIMEOUT
        from .numbers import seconds

        return seconds(given, "$PIMEM_LOCK_TIMEOUT")


_current = Environment()


def current() -> Environment:
    return _current


@contextlib.contextmanager
def using(environment: Environment):
    """Run with ``environment`` in place of the current one (for tests and embedding programs)."""
    global _current
    saved, _current = _current, environment
    try:
        yield environment
    finally:
        _current = saved


def home(explicit: str | os.PathLike | None = None) -> Path:
    return _current.home(explicit)


def user_home() -> str:
    """``$HOME`` when it is an absolute path, else the account's home directory: an empty or relative ``$HOME``
    (as some service managers leave it) would put the memory at ``/`` or under the working directory."""
    home = os.environ.get("HOME", "")
    if os.path.isabs(home):
        return home
    import pwd

    try:
        return pwd.getpwuid(os.getuid()).pw_dir
    except KeyError:
        from .errors import BadInput

        raise BadInput("$HOME is not an absolute path and this account has no home directory: "
                       "set PIMEM_HOME (or --home)") from None


def given(home: str) -> None:
    """``BadInput`` when the home given is empty (``--home ''``, ``home=""``): it is not one not given."""
    if not home:
        from .errors import BadInput

        raise BadInput("empty home: give the store's directory, or none for $PIMEM_HOME or ~/.pi/memory")


def absolute(home: str, source: str) -> None:
    """``BadInput`` when ``home``, given by ``source`` (``$PIMEM_HOME``; the hook's ``--home``: it runs in the
    session's directory, not the user's), is a relative path: read from every directory a command runs in, it
    would name a home in each."""
    given(home)
    if not os.path.isabs(os.path.expanduser(home)):
        from .errors import BadInput

        raise BadInput(f"{source} is a relative path ({home!r:.60}): set it to an absolute one (it would name another "
                       "home in each directory a command runs in)")


def _resolved(home: str, source: str = "home") -> Path:
    """The home with its links resolved, once (``_real``). A home that is there and no directory is refused
    (exit 7, as the system refuses to make anything under it): every command would fail on it, ``list`` saying
    no memory was there. That is asked each time: a long-lived process (``pimem mcp``) whose home was replaced
    by a file listed no memories."""
    import stat

    path = _real(home, source)
    try:
        is_dir = stat.S_ISDIR(os.stat(path).st_mode)
    except (OSError, ValueError):  # (not there: a home nothing was logged in yet)
        is_dir = True
    if not is_dir:  # (a SystemRefused: the library's caller may catch NotADirectoryError, as deeper down)
        import errno

        from .errors import refused

        raise refused(NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), str(path)),
                      f"the home {path} is not a directory: set --home or $PIMEM_HOME to one")
    return path


@functools.lru_cache(maxsize=64)
def _real(home: str, source: str) -> Path:
    """``home`` with its links resolved: the home itself may be a link (the user's), while nothing under it is
    ever followed (``pimem.nofollow``). A relative path from the environment (``source``: ``$PIMEM_HOME``) is
    refused (exit 2): it is read from every directory a command runs in (a hook's, cron's, an MCP client's),
    each of which would hold a home of its own; ``--home`` (``home``) is taken from the working directory, as
    any path on a command line."""
    if "\x00" in home:  # (no path holds one; the system would raise ValueError)
        from .errors import BadInput

        raise BadInput(f"{source} is a directory's path, which holds no NUL byte, not {home!r:.60}")
    if source != "home":
        absolute(home, source)
    return Path(os.path.realpath(os.path.expanduser(home)))


def now() -> datetime:
    return _current.now()


def stderr() -> TextIO:
    return _current.stderr


def stdout_is_tty() -> bool:
    return _current.isatty("stdout")


def stderr_is_tty() -> bool:
    return _current.isatty("stderr")


def stdin_is_tty() -> bool:
    return _current.isatty("stdin")


def lock_timeout() -> float:
    return _current.lock_timeout
