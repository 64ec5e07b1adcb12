"""The one error boundary every command runs in, without typer: the typer app (``pimem.cli``) runs its commands
in it, and so does ``python -m pimem hook claude-code``, which Claude Code runs every turn and which skips
typer and click (``pimem.__main__``).

A command's failure leaves as one line on stderr (``pimem: error: …``) and its own exit status; stderr never
fails a command; a stream the caller closed is ``/dev/null``; SIGTERM and SIGHUP end a command as Ctrl-C does
(a signal the caller ignored, as ``nohup`` does SIGHUP, stays ignored).
"""

from __future__ import annotations

import functools
import os
import signal
import sys

from . import env, errors, output
from .errors import ExitStatus, PimemError, translate


class Exit(Exception):
    """A status a command ends with (what ``typer.Exit`` is to the typer app's commands)."""

    def __init__(self, code: int = 0):
        super().__init__(code)
        self.exit_code = code


ARGS: list[str] = []  # the command's arguments (``begin``), for what its error line adds (``when.unquoted``)


def begin(args: list[str] | None = None) -> None:
    """The streams every command starts with: a closed one is ``/dev/null``, stderr is ``output.Unfailing``;
    ``args``: the command's arguments."""
    ARGS[:] = args or []
    if None in (sys.stdin, sys.stdout, sys.stderr):
        _closed_streams()
    sys.stderr = output.Unfailing(sys.stderr)


# the stopping signals pimem's caller ignored, as they were when it started (``nohup``: SIGHUP, so that closing the
# terminal leaves the command running; a shell script's background job: SIGINT): no command takes them (when
# ``pimem.__main__`` noted the others first, ``stopping.defer``, they are the ones still ignored)
IGNORED = frozenset(s for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP) if signal.getsignal(s) == signal.SIG_IGN)


def stoppers(*signals: int) -> tuple:
    """Those of ``signals`` a command may take to stop on: not one its caller ignored (``IGNORED``)."""
    return tuple(s for s in signals if s not in IGNORED)


def take_signals() -> None:
    """SIGINT, SIGTERM and SIGHUP end a command that does not take them itself (``KeyboardInterrupt``,
    ``Terminated``, ``HungUp``: one line, exit 130, 143 or 129), unless its caller ignored them (``IGNORED``).
    The first one ends it: another, while it ends, changes nothing (no second line, no traceback, no cleanup cut
    short). The first that came while pimem started (noted since ``pimem.__main__``'s first line:
    ``stopping.defer``) is taken now, as the command's boundary begins: nothing has been written yet."""
    from . import stopping

    for sig in stoppers(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, _stop)
    early = stopping.take_deferred()
    if early is not None:
        _stop(early, None)


def guarded(func, writes: bool = False, exit=Exit):
    """The error boundary: every failure leaves as ``exit`` (``Exit``, or ``typer.Exit`` in the typer app)
    carrying an ``ExitStatus``; a ``PimemError`` becomes ``pimem: error: …`` on stderr and its own status. A
    command that ``writes`` the store outlives the reader of its stdout."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        try:
            with output.writing(writes), errors.command():  # (the system's refusals reach it as they are: below)
                try:
                    result = func(*args, **kwargs)
                except exit as exc:  # (a status the command chose)
                    output.finish(done=exc.exit_code == 0)
                    raise
                output.finish()
                return result
        except PimemError as exc:
            _flush_stdout()
            env.stderr().write(f"pimem: error: {exc}{_unquoted(str(exc))}\n")
            raise exit(ExitStatus(exc.code)) from None
        except BrokenPipeError:
            output.quiet_stdout()
            raise exit(ExitStatus.OK) from None
        except KeyboardInterrupt as exc:  # (SIGTERM too: see take_signals)
            raise exit(_interrupted_line(exc)) from None
        except Exception as exc:  # the disk is full, a directory is not ours, SQLite refused: say so, no traceback
            error = translate(exc)
            if error is None:
                raise
            _flush_stdout()
            env.stderr().write(f"pimem: error: {error}\n")
            raise exit(ExitStatus(error.code)) from None

    return wrapper


def _unquoted(said: str) -> str:
    """What an error line adds for a date of several words given unquoted (``when.unquoted``)."""
    if not ARGS:
        return ""
    from .when import unquoted

    return unquoted(ARGS, said)


# what ``ended`` says of a failure outside a command's own boundary (a reader gone, stdout refusing the help or
# the version, a signal before the command began or after it ended)
ENDINGS = (OSError, output.StdoutRefused, KeyboardInterrupt)


def ended(exc: BaseException) -> ExitStatus:
    """The status for one of ``ENDINGS``, said in one line (none for a reader that went away)."""
    if isinstance(exc, BrokenPipeError):
        output.quiet_stdout()
        return ExitStatus.OK
    if isinstance(exc, KeyboardInterrupt):
        return _interrupted_line(exc)
    return _refused(exc if isinstance(exc, output.StdoutRefused) else output.StdoutRefused(exc))


def leave(code, now: bool = False) -> None:
    """Exit with ``code`` (an int; anything else is 0), ``now`` without the interpreter's teardown."""
    status = int(code) if isinstance(code, int) else ExitStatus.OK
    if now:
        _exit_now(status)
    sys.exit(status)


def _flush_stdout() -> None:
    """What was printed before an error, ahead of its line; a reader that went away, or a stdout that refuses
    it (a full disk), does not hide the error."""
    try:
        env.current().stdout.flush()
    except OSError:
        output.quiet_stdout()


class Terminated(KeyboardInterrupt):
    """SIGTERM where a command does not take it itself (``watch``, ``build-tree``, ``import`` and ``append
    --ndjson`` do): the command stops as at Ctrl-C, with one line and exit 143, not silently."""


class HungUp(KeyboardInterrupt):
    """SIGHUP (the terminal closed) where a command does not take it itself: as SIGTERM, exit 129."""


# what a stopping signal raises where a command does not take it itself (``take_signals``)
_RAISES = {signal.SIGINT: KeyboardInterrupt, signal.SIGTERM: Terminated, signal.SIGHUP: HungUp}


class _Stop:
    untold: KeyboardInterrupt | None = None  # what ``_stop`` raised, until its line is said


def _stop(signum, _frame, why: str = "") -> None:
    for sig in stoppers(signal.SIGINT, signal.SIGTERM, signal.SIGHUP):  # (the command ends: see take_signals)
        signal.signal(sig, signal.SIG_IGN)
    _Stop.untold = _RAISES[signum](*[why] if why else [])
    raise _Stop.untold


def stop(signum: int, why: str = "") -> None:
    """End the command for ``signum`` as ``take_signals``'s handler does, for one that took it itself and stopped
    (``pimem mcp``: ``mcp_server.serve``); ``why``, when given, follows ``pimem: interrupted`` on its line (what
    stopping left undone)."""
    _stop(signum, None, why)


def untold() -> KeyboardInterrupt | None:
    """The signal that stopped the command, if its line was not said: typer turns one it meets outside the
    command (parsing the arguments, printing the help) into a silent exit 130, SIGTERM's and SIGHUP's too."""
    return _Stop.untold


def _interrupted_line(exc: KeyboardInterrupt) -> ExitStatus:
    """``pimem: interrupted`` on stderr; the status for ``exc``."""
    env.stderr().write(f"pimem: interrupted{f'; {exc}' if str(exc) else ''}\n")
    _Stop.untold = None
    return _interrupted(exc)


def _interrupted(exc: KeyboardInterrupt) -> ExitStatus:
    if isinstance(exc, HungUp):
        return ExitStatus.HANGUP
    return ExitStatus.TERMINATED if isinstance(exc, Terminated) else ExitStatus.INTERRUPTED


def _closed_streams() -> None:
    """A standard stream the caller closed (``>&-``) is ``/dev/null`` instead: what the command writes there
    goes nowhere, as to a reader that went away, and no file opened later takes its number."""
    for fd, name in enumerate(("stdin", "stdout", "stderr")):
        if getattr(sys, name) is None:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)
            setattr(sys, name, open(fd, "r" if fd == 0 else "w", encoding="utf-8", errors="surrogateescape", closefd=False))


def _exit_now(status: int) -> None:
    """End the process without the interpreter's teardown (freeing every module and object costs Claude Code's
    hook, which runs every turn, about 15 ms of CPU): what ``atexit`` holds runs first (a view left to save),
    the streams are flushed. Everything the hook wrote is durable or committed by now; a live thread that is
    not a daemon gets the ordinary exit instead."""
    import atexit
    import threading

    if any(t is not threading.main_thread() and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(status)
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(status)


def _refused(exc: output.StdoutRefused) -> ExitStatus:
    """stdout refused the help or the version: one line, exit 7, as for a command's output."""
    output.quiet_stdout()
    env.stderr().write(f"pimem: error: {exc}\n")
    return ExitStatus(exc.code)
