"""SIGINT, SIGTERM and SIGHUP during a long write (``append --ndjson``, ``import``): stop, but never mid-batch.

``armed()`` turns each signal into ``Interrupted`` in the main thread, at once while the command waits or
parses; a batch being made durable (``held()``) is finished and acknowledged first. The command then says
what was kept in one line and exits 130, 143 or 129 (128 + the signal, as shells expect).
"""

from __future__ import annotations

import contextlib
import signal
import threading


class Interrupted(Exception):
    """A signal stopped the command; ``code`` is its exit status."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.code = 128 + signum


class Flag:
    """A ``threading.Event`` that a signal handler may set. An Event's lock is not reentrant, and the main thread
    holds it inside the event's own ``wait`` (just before and just after the timed wait): a handler that sets the
    event there waits for itself, for ever (``watch`` hung on a SIGTERM sent as it woke from SIGSTOP). Here the
    lock is reentrant, and a handler's ``set`` is seen by the ``wait`` it interrupted."""

    def __init__(self) -> None:
        self._set = False
        self._cond = threading.Condition(threading.RLock())

    def is_set(self) -> bool:
        return self._set

    def set(self) -> None:
        with self._cond:
            self._set = True
            self._cond.notify_all()

    def wait(self, timeout: float | None = None) -> bool:
        with self._cond:
            return self._cond.wait_for(self.is_set, timeout)


class _State:
    holding = 0  # how many held() are open
    pending: int | None = None  # the first signal that arrived while one was


def _handle(signum, _frame) -> None:
    if _State.holding:
        _State.pending = _State.pending or signum
        return
    raise Interrupted(signum)


class _Early:
    signum: int | None = None  # the first signal ``defer`` noted
    noting = False  # since ``defer``, until ``take_deferred``


def _note(signum, _frame) -> None:
    _Early.signum = _Early.signum or signum


def defer() -> None:
    """SIGINT, SIGTERM and SIGHUP are only noted (``deferred``) until the command takes them, so that none stops
    pimem in the middle of an import (with Python's traceback, or silently): from the first line of
    ``pimem.__main__`` to the command's boundary (``boundary.take_signals``), which takes the first of them as it
    begins, or to ``watch``'s scheduler, which stops at once for it: a daemon stopped while it starts exits 0, as
    it does later (main thread only). One the caller ignored (nohup) stays ignored; noting already, it does
    nothing (``pimem.cli.main`` calls it too, for a caller of its own)."""
    if _Early.noting:
        return
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        if signal.getsignal(sig) != signal.SIG_IGN:  # (boundary.IGNORED, which may not be imported yet)
            signal.signal(sig, _note)
    _Early.noting = True


def deferred() -> int | None:
    """The first signal ``defer`` noted, if one came."""
    return _Early.signum


def take_deferred() -> int | None:
    """The first signal ``defer`` noted, if one came, now taken (forgotten): the command takes the signals."""
    signum, _Early.signum, _Early.noting = _Early.signum, None, False
    return signum


@contextlib.contextmanager
def deferring():
    """SIGINT, SIGTERM and SIGHUP only noted while code loads that a signal must not stop midway, the first then
    taken by the handler the command had (as ``defer`` does while pimem starts): ``pimem mcp`` loading the MCP SDK
    after the boundary took the signals, where pydantic's Rust core turned one while it built a model into its
    own error (a traceback). One the caller ignored stays ignored (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from .boundary import stoppers

    came: list[int] = []
    saved = [(sig, signal.signal(sig, lambda signum, _frame: came.append(signum)))
             for sig in stoppers(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    try:
        yield
    finally:
        for sig, handler in saved:
            signal.signal(sig, handler)
        if came:
            signal.raise_signal(came[0])


@contextlib.contextmanager
def armed():
    """SIGINT, SIGTERM and SIGHUP raise ``Interrupted`` while this lasts (only the main thread can take
    signals)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    from .boundary import stoppers

    saved = [(sig, signal.signal(sig, _handle)) for sig in stoppers(signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    try:
        yield
    finally:
        for sig, handler in saved:
            signal.signal(sig, handler)
        _State.pending = None


@contextlib.contextmanager
def held():
    """A write that must finish once begun (and be acknowledged: a generator may yield inside): a signal
    arriving meanwhile is raised when it ends."""
    _State.holding += 1
    try:
        yield
    finally:
        _State.holding -= 1
    if not _State.holding and _State.pending:
        signum, _State.pending = _State.pending, None
        raise Interrupted(signum)


def child() -> None:
    """In a forked helper (the NDJSON reader): the writer decides when to stop, and ends it with SIGTERM."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
