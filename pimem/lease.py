"""``lock.json``: the lease of the one process building a memory's tree (``watch`` or ``build-tree``).

The record is ``{"pid", "token", "host", "started", "beat", "command"}``; ``beat`` is the holder's last heartbeat
in Unix seconds, refreshed every ``BEAT`` seconds; ``command``, ``watch`` or ``build-tree``, is what ``described``
says (a record an older pimem wrote has none); ``proc``, where Linux's ``/proc`` tells it, is the holder's process
as this boot knows it (``process``). A lease is live while its holder is: on this host while its pid exists and is
still that process (its beat is not looked at: the wall clock may jump; a pid used again, after a reboot say, is
another process), or, without ``proc`` to tell, while its beat is younger than ``STALE`` seconds, as on another host
and in another pid namespace (``pidns``: a container sharing the home under the same host name).
A dead holder's lease is taken over; a live one's on this host never is (one stopped with ``SIGSTOP`` too).
Taking, beating and releasing happen under the memory's writer lock, so two processes never both think they
hold it; a holder that finds another token in the file has lost the lease and stops building. The holder
keeps the memory's directory open, so that a memory moved behind its back (``mv``, ``rm -rf``) is noticed and
its lease let go of where it went.

Readers (``view --wait``, ``status``) call ``holder(mem)`` to learn whether a live builder is at work.

A watcher of the whole home (``watch`` without names) also beats in the home's ``watch.json``, ``{"pid", "token",
"host", "beat", "scanned", "refused"}``: when its last look for new memories began, and the memories it refused. A
memory created since is one it will take at its next look (every 2 s), so a reader waits for that too: ``builder``
names the lease's holder or that watcher, and ``wait_for_builder`` (``context`` and ``view --wait``) waits while
there is one. One watcher beats there at a time: a second one leaves a live one's file alone, and takes it over
once its holder is dead, as a lease.
"""

from __future__ import annotations

import fcntl
import functools
import os
import time
import uuid

import orjson

from . import env, when
from .errors import Busy
from .home import write_atomic
from .nofollow import NOFOLLOW, read_bytes

FILE = "lock.json"
WATCHER = "watch.json"  # in the home: the heartbeat of a watcher of all its memories
BEAT = 2.0  # seconds between heartbeats
RETRY = 0.1  # seconds before a heartbeat that found the writer lock held is tried again
STALE = 30.0  # seconds: a heartbeat older than this means the holder is dead
KINDS = {"watch": "a watcher", "build-tree": "a build-tree"}  # a lease's ``command``, as messages say it
QUIET = 3 * BEAT  # seconds: a heartbeat this late (three missed) means the holder is not answering (stopped,
# say): a reader waits for it no more, though a builder takes its memory over only once it is STALE


def _host() -> str:
    """This host's name, as a lease records it. ``socket`` (~1.5 ms to import) is imported when a record is
    first compared: ``context`` and ``view`` look for a builder every turn, and mostly find none."""
    import socket

    return socket.gethostname()


def _load(path, quiet: type[OSError] = FileNotFoundError) -> dict | None:
    """The record (a JSON object) in ``path``, or None when it is missing, torn or no object; ``quiet``: the
    errors reading it that count as no record too (any other is raised)."""
    try:
        record = orjson.loads(read_bytes(path))
    except (quiet, orjson.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def _read(mem) -> dict | None:
    """``mem``'s lease record; one that cannot be read (a directory there, say) is an error, raised: not taken
    for a free lease and written over."""
    return _load(mem.path / FILE)


def pid_alive(pid) -> bool:
    """Whether ``pid`` (an int) is a running process of this host: one that is dead but not yet reaped (a
    zombie) is not; one of another user's is (the system refuses the signal, the process is there)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _zombie(pid)


def _stat(pid: int) -> list[bytes]:
    """The fields of Linux's ``/proc/PID/stat`` from the third (the state) on, or [] where there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read()
    except OSError:
        return []
    return fields[fields.rfind(b")") + 2:].split()  # (the state follows the name, which may hold anything)


def _zombie(pid: int) -> bool:
    """Whether process ``pid`` is dead but not yet waited for by its parent (a builder killed by a program that
    started it and never reaps it: its pid is still there); Linux's ``/proc`` says so, elsewhere never."""
    return _stat(pid)[:1] == [b"Z"]


@functools.cache
def pid_namespace() -> str | None:
    """This process's pid namespace as Linux names it (``pid:[4026531836]``), or None where ``/proc`` does not
    say: a lease records it, so that a holder in another namespace (a container sharing the home, under the same
    host name) is not taken for dead because its pid means nothing here, nor for another process that has it."""
    try:
        return os.readlink("/proc/self/ns/pid")
    except OSError:
        return None


def _here(record: dict) -> bool:
    """Whether the holder of ``record`` is a process this one can look at: on this host, in this pid namespace
    (a record an older pimem wrote, which does not say, is taken to be)."""
    return record.get("host") == _host() and record.get("pidns") in (None, pid_namespace())


def process(pid: int) -> str | None:
    """Which process ``pid`` is: this boot's id and the process's start time (clock ticks since boot), the same
    for its whole life and never for another process of any boot; None where Linux's ``/proc`` does not say."""
    fields = _stat(pid)
    try:
        with open("/proc/sys/kernel/random/boot_id") as boot:
            return f"{boot.read().strip()}:{int(fields[19])}"
    except (OSError, IndexError, ValueError):
        return None


def live(record: dict | None, stale: float = STALE) -> bool:
    """Whether the lease ``record`` belongs to a process that is still building. On this host its process
    decides (``proc``: its pid, used again by another process after a reboot, is not enough), whatever its
    heartbeat says (a heartbeat is wall-clock time, which may jump: a clock set forward by more than ``STALE``
    would have a second builder take over from one still running), unless ``stale`` is below ``STALE``
    (``QUIET``: a reader about to wait for it, which waits for no holder whose heartbeat is that late, one
    stopped with ``SIGSTOP`` say); on another host, or where the record or ``/proc`` cannot tell the process,
    its pid (on this host) and its heartbeat, at most ``stale`` seconds late."""
    if not record:
        return False
    beat = record.get("beat")
    fresh = isinstance(beat, (int, float)) and time.time() - beat <= stale
    if _here(record):
        pid, proc = record.get("pid"), record.get("proc")
        if not pid_alive(pid):
            return False
        if isinstance(proc, str) and (now := process(pid)) is not None:
            return proc == now and (fresh or stale >= STALE)
    return fresh


def quiet(record: dict) -> float | None:
    """How many seconds late the heartbeat of ``record``, a live holder's, is once it is not answering (three
    beats missed, ``QUIET``: frozen with SIGSTOP, say), else None."""
    if live(record, QUIET):
        return None
    beat = record.get("beat")
    return max(0.0, time.time() - beat) if isinstance(beat, (int, float)) else 0.0


def not_answering(late: float) -> str:
    """A holder ``late`` seconds late (``quiet``), as a message says it."""
    return f"which is not answering (stopped?: its last heartbeat was {late:.0f} s ago)"


def resume(record: dict) -> str:
    """What to do about the holder ``record`` that is not answering, as a message says it."""
    host = record.get("host")
    there = f" on {host}" if host and host != _host() else ""
    return f"resume it (fg, or kill -CONT {record.get('pid')}{there})"


def holder(mem, stale: float = STALE) -> dict | None:
    """The live lease on ``mem`` (who is building its tree), or None; ``stale``: ``QUIET`` for a reader about
    to wait for it."""
    record = _read(mem)
    return record if live(record, stale) else None


def described(record: dict) -> str:
    """Who holds the lease ``record``, as a message says it: ``a watcher (pid 12)``, ``a build-tree (pid 12 on
    other-host)``, or ``pid 12`` when the record does not say which command (an older pimem's)."""
    host = record.get("host")
    where = f"pid {record.get('pid')}" + (f" on {host}" if host and host != _host() else
                                          "" if _here(record) else " in another pid namespace")
    kind = KINDS.get(record.get("command"))
    return f"{kind} ({where})" if kind else where


def dead(mem) -> dict | None:
    """The lease on ``mem`` of a builder that died holding it (killed or crashed: one that stops releases it),
    or None; the next builder takes it over. ``alive``: its pid is still there on this host, its heartbeat is stale
    and its record cannot tell whether the pid is still its process (an older pimem's, or no ``/proc``): stopped
    with ``SIGSTOP``, say (a holder the record names keeps its lease: ``live``)."""
    record = _read(mem)
    if live(record) or not record or not all(isinstance(record.get(k), t) for k, t in
                                             (("pid", int), ("host", str), ("started", str), ("beat", (int, float)))):
        return None
    proc, now = record.get("proc"), process(record["pid"])
    alive = _here(record) and pid_alive(record["pid"]) and (proc is None or proc == now or now is None)
    return {**{k: record[k] for k in ("pid", "host", "started", "beat")}, "alive": alive}


def _watcher_record(home) -> dict | None:
    """``home``'s ``watch.json``; one that cannot be read counts as none: readers of every memory look at it, and
    a turn never fails for it (a link there is refused all the same: ``nofollow``)."""
    return _load(home / WATCHER, OSError)


def watcher(home) -> dict | None:
    """The record of a live watcher of every memory of ``home`` (``watch.json``) that answers (its heartbeat
    at most ``QUIET`` seconds late), or None: a file left by a watcher that was killed counts as none."""
    record = _watcher_record(home)
    return record if live(record, QUIET) else None


def builder(mem, since: float, stale: float = QUIET) -> dict | None:
    """Who builds ``mem``'s tree: the live lease's holder (``holder``), else a live watcher of the whole home
    (its ``watch.json``, which has ``scanned``) that will take ``mem`` at its next look, or None. That watcher
    counts unless it refused ``mem`` or began a look after ``since`` (Unix seconds: when a wait began) and left
    it (held by another builder that let go since, say). ``stale``: as for ``holder``; the default, ``QUIET``,
    is a reader's, which waits for neither that is not answering."""
    found = holder(mem, stale)
    if found is not None:
        return found
    record = _watcher_record(mem.path.parent)
    if not live(record, stale):
        return None
    refused, scanned = record.get("refused"), record.get("scanned")
    if not isinstance(scanned, (int, float)) or isinstance(refused, list) and mem.name in refused:
        return None
    if scanned > since:  # (its look took ``mem`` before it wrote this file, unless another held it)
        return holder(mem, stale)
    return record


def wait_for_builder(mem, seconds: float, ready, poll: float = 0.1) -> bool:
    """Wait up to ``seconds`` for ``ready(left)`` (``left``: the seconds left of the wait) while ``builder``
    names one (a live holder of ``mem``'s lease that answers, or a watcher of the home about to take it: without
    either nothing would change, so nothing is waited for); True once it is ready."""
    since = time.time()
    deadline = time.monotonic() + seconds
    while not ready(deadline - time.monotonic()):
        if time.monotonic() >= deadline or builder(mem, since) is None:
            return False
        time.sleep(poll)
    return True


def beat_watcher(home, token: str, scanned: float, refused) -> None:
    """Write the ``watch.json`` of the watcher ``token`` (its own, drawn at its start) of every memory of
    ``home``: its last look for new ones began at ``scanned`` (Unix seconds) and left out the memories
    ``refused`` (a home that cannot be written: readers wait only for memories whose lease is held). Another
    live watcher's file is left as it is (a second watcher standing by for its memories would otherwise speak
    for it, and remove its file on stopping); one whose holder is dead or ``STALE`` is taken over, as a lease
    is. Two watchers that start together may both write: the one overwritten finds the other's file at its
    next beat and writes no more."""
    current = _watcher_record(home)
    if current is not None and current.get("token") != token and live(current):
        return
    try:
        write_atomic(home / WATCHER, orjson.dumps({"pid": os.getpid(), "token": token, "host": _host(),
                                                   "proc": process(os.getpid()), "pidns": pid_namespace(),
                                                   "beat": time.time(), "scanned": scanned,
                                                   "refused": sorted(refused)}), durable=False)
    except OSError:
        pass


def end_watcher(home, token: str) -> None:
    """Remove ``watch.json`` if the watcher ``token`` wrote it (another's is left to it)."""
    record = _watcher_record(home)
    if record is not None and record.get("token") == token:
        try:
            os.unlink(home / WATCHER)
        except OSError:
            pass


class Lease:
    """This process's lease on one memory. ``acquire`` raises ``Busy`` while another live process holds it.
    ``command``: the one taking it (``watch`` or ``build-tree``), written in the record for others to say."""

    def __init__(self, mem, command: str = "build-tree"):
        self.mem = mem
        self.command = command
        self.token = uuid.uuid4().hex
        self.held = False
        self._due = 0.0  # when the next heartbeat is (monotonic seconds)
        self._dir: int | None = None  # the memory's directory, open while held (``moved``)
        self._gone = False  # the last beat found no lease file
        self._proc = process(os.getpid())  # (read once: a beat writes it under the writer lock every BEAT seconds)

    def _record(self) -> dict:
        return {"pid": os.getpid(), "token": self.token, "host": _host(), "proc": self._proc, "pidns": pid_namespace(),
                "started": self._started, "beat": time.time(), "command": self.command}

    def try_acquire(self) -> dict | None:
        """Take the lease if it is free or its holder is dead; otherwise return the live holder's record."""
        with self.mem.lock():
            current = _read(self.mem)
            if live(current) and current.get("token") != self.token:
                return current
            self._started = when.rfc3339(env.now())
            write_atomic(self.mem.path / FILE, orjson.dumps(self._record()) + b"\n")
            self._close()
            self._dir = os.open(self.mem.path, os.O_RDONLY | os.O_DIRECTORY | NOFOLLOW)
        self.held = True
        self._due = time.monotonic() + BEAT
        return None

    def acquire(self, wait: float | None = 0.0, poll: float = 0.5, stop=None, on_wait=None) -> "Lease | None":
        """Take the lease, waiting up to ``wait`` seconds (None: for ever) for a live holder to go away; None
        once ``stop`` (a ``stopping.Flag``: a signal's) is set while waiting. ``on_wait(record)``: told of the
        holder as the wait begins, and again when another holds it or it stops or starts answering (``quiet``:
        frozen with SIGSTOP, a holder on this host keeps its lease for as long as it is stopped)."""
        deadline = None if wait is None else time.monotonic() + wait
        told = None
        while True:
            other = self.try_acquire()
            if other is None:
                return self
            late = quiet(other)
            if deadline is not None and time.monotonic() >= deadline:
                then = f"still after waiting {wait:g} s" if wait else "use --wait to wait for it"
                if late is not None and not wait:
                    then = f"{resume(other)} or stop it, or use --wait to stand by until it lets go"
                kind = KINDS.get(other.get("command"))
                apart = " in another pid namespace" if other.get("host") == _host() and not _here(other) else ""
                raise Busy(f"memory '{self.mem.name}' is being built by pid {other.get('pid')} on {other.get('host')}{apart} "
                           f"({kind + ', ' if kind else ''}since {other.get('started')})"
                           f"{'' if late is None else ', ' + not_answering(late)}; {then}")
            if on_wait is not None and told != (other.get("token"), late is None):
                told = (other.get("token"), late is None)
                on_wait(other)
            pause = poll if deadline is None else max(0.0, min(poll, deadline - time.monotonic()))
            if stop is None:
                time.sleep(pause)
            elif stop.wait(pause):
                return None

    def beat(self, force: bool = False) -> bool:
        """Refresh the heartbeat (every ``BEAT`` seconds); False once the lease was taken by someone else."""
        if not self.held:
            return False
        if not force and time.monotonic() < self._due:
            return True
        if self.moved():
            raise self.mem._moved()
        # without waiting: the lock's holder is most often this very builder's writer thread, and the
        # scheduler's thread would stand idle while it syncs
        try:
            with self.mem.lock(timeout=0):
                current = _read(self.mem)
                if current is None and not self._gone:  # (no taker: one writes its record. ``rm -rf`` of the
                    self._gone = True  # memory, under way? the next beat, shortly, finds its directory gone)
                    self._due = time.monotonic() + RETRY
                    return True
                self._gone = False
                if current is not None and current.get("token") != self.token:
                    self.held = False
                    return False
                write_atomic(self.mem.path / FILE, orjson.dumps(self._record()) + b"\n")  # (again, if deleted)
        except Busy:  # a write holds the writer lock: again shortly
            self._due = time.monotonic() + RETRY
            return True
        self._due = time.monotonic() + BEAT
        return True

    def owned(self) -> bool:
        """Whether the file still names this lease (checked before writing what was built)."""
        if self.held and self.moved():
            raise self.mem._moved()
        current = _read(self.mem)  # (none: deleted, not taken over; the next beat writes it again)
        self.held = self.held and (current is None or current.get("token") == self.token)
        return self.held

    def moved(self) -> bool:
        """Whether the directory this lease was taken in is no longer at the memory's path (renamed or deleted
        behind pimem's back)."""
        try:
            held = os.fstat(self._dir)
        except (OSError, TypeError):  # (not held, or let go of meanwhile by the scheduler's thread)
            return False
        try:
            here = os.stat(self.mem.path, follow_symlinks=False)
        except OSError:
            return True
        return (here.st_dev, here.st_ino) != (held.st_dev, held.st_ino)

    def release(self) -> None:
        if not self.held:
            self._close()
            return
        self.held = False
        try:
            if self.moved():
                self._let_go_where_moved()
                return
            with self.mem.lock():
                current = _read(self.mem)
                if current and current.get("token") == self.token:
                    (self.mem.path / FILE).unlink(missing_ok=True)
        finally:
            self._close()

    def _let_go_where_moved(self) -> None:
        """Remove this lease from the directory the memory was moved to, under its writer lock (given up after
        ``BEAT`` seconds: the lease is then stale within ``STALE``); nothing to do where it was deleted."""
        try:
            fd = os.open("write.lock", os.O_RDWR | NOFOLLOW, dir_fd=self._dir)
        except OSError:
            return
        try:
            deadline = time.monotonic() + BEAT
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() >= deadline:
                        return
                    time.sleep(RETRY)
            with os.fdopen(os.open(FILE, os.O_RDONLY | os.O_NONBLOCK | NOFOLLOW, dir_fd=self._dir), "rb") as f:  # (a pipe: read as empty)
                current = orjson.loads(f.read())
            if isinstance(current, dict) and current.get("token") == self.token:
                os.unlink(FILE, dir_fd=self._dir)
        except (OSError, orjson.JSONDecodeError):
            pass
        finally:
            os.close(fd)  # (the lock with it)

    def _close(self) -> None:
        if self._dir is not None:
            os.close(self._dir)
            self._dir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()
