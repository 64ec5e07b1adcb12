"""``index.lock``: one catch-up of a memory's index at a time, taken again by the thread holding it."""

from __future__ import annotations

import threading

from pimem import Memory, index
from pimem.errors import Busy


def test_a_process_catching_up_many_memories_keeps_no_lock_of_those_it_is_done_with(home):
    """A long ``watch`` or server catches up one memory after another: the lock of each is dropped with its
    catch-up, not kept for the life of the process."""
    for n in range(5):
        mem = Memory.at(f"m{n}", home)
        mem.append([{"kind": "user", "text": f"note {n}"}])
        with mem:
            assert mem.index().catch_up() == 1
    assert not [path for path in list(index._LOCKS.keys()) if path.startswith(str(home))]


def test_the_lock_is_taken_again_by_its_holder_and_waited_for_by_other_threads(home, monkeypatch):
    monkeypatch.setenv("PIMEM_LOCK_TIMEOUT", "0.2")
    path = Memory.at("m", home).path / index.CATCH_UP_LOCK
    path.parent.mkdir(parents=True)
    held, done = threading.Event(), threading.Event()
    refused = []

    def other():
        held.wait()
        try:  # (the holder lets go only once this gave up)
            with index._catch_up_lock(path):
                refused.append("taken")
        except Busy as exc:
            refused.append(str(exc))
        done.set()

    thread = threading.Thread(target=other)
    thread.start()
    with index._catch_up_lock(path):
        with index._catch_up_lock(path):  # (an upgrade of the index's files when a catch-up opens them)
            held.set()
            done.wait()
    thread.join()
    assert refused == [f"{path.with_name(index.FILENAME)} is being caught up by another process; try again"]
    with index._catch_up_lock(path):  # let go, it is taken again
        assert str(path) in index._LOCKS
    assert str(path) not in index._LOCKS


def test_a_read_only_memory_far_behind_is_not_handed_to_a_process_that_cannot_write_it(home, monkeypatch):
    """A memory whose directory cannot be written (a backup, another account's) with an index far behind its log:
    each prompt, turn or MCP call started a process to catch it up, which died at once (it cannot write it
    either), and said that one was catching it up ('… once it is done'). None is started, and the note says why."""
    import os

    mem = Memory.at("m", home)
    mem.append([{"kind": "user", "text": "note 0"}])
    with mem:
        mem.index().catch_up()
    mem.append([{"kind": "user", "text": f"note {n} " + "word " * 2000} for n in range(1, 1001)])  # (9.5 MiB)
    access = os.access
    monkeypatch.setattr(index.os, "access", lambda path, mode, *a, **k: False if mode == os.W_OK and str(path) == str(mem.path)
                        else access(path, mode, *a, **k))  # (as root, every directory can be written)
    started = []
    monkeypatch.setattr(index, "catch_up_in_background", started.append)
    with Memory.open("m", home) as read:
        look = index.Look(read.index(), "m")
        assert look.far and read.index().read_only
        note = look.hand_over("this search did not read the messages it lacks (ask again once it is done)")
    assert started == []
    assert note == ("the search index of memory 'm' lacks 10 MiB of its log and its directory cannot be written "
                    "(read-only), so this search did not read the messages it lacks; run 'pimem reindex' where it can "
                    "be written")


def test_a_catch_up_started_in_a_process_of_its_own_is_reaped_when_it_ends(home):
    """A long-lived process that starts catch-ups (the MCP server) kept each one, once ended, as a zombie until it
    started the next: nothing waited for it. It is waited for as it ends."""
    import os
    import time

    mem = Memory.at("m", home)
    mem.append([{"kind": "user", "text": f"note {n}"} for n in range(10)])
    index.catch_up_in_background(mem.path)
    started = []
    for task in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{task}/children") as f:
            started += f.read().split()
    started = [pid for pid in started if b"catch_up_detached" in open(f"/proc/{pid}/cmdline", "rb").read()]
    assert len(started) == 1

    def state() -> str | None:
        try:
            with open(f"/proc/{started[0]}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            return None  # (ended and waited for)

    waited = time.monotonic()
    while state() is not None and time.monotonic() - waited < 60:
        time.sleep(0.05)
    assert state() is None, "the ended catch-up is left a zombie"
    with Memory.open("m", home) as read:
        assert read.index().lag() == 0


def test_readers_asking_while_a_catch_up_process_starts_start_no_other(home):
    """The process ``catch_up_in_background`` starts was handed ``index.lock`` and let it go before its own
    catch-up took it again (as it connected to the index: tens of milliseconds), so readers asking then (MCP
    calls, a prompt and a turn's context) each started one more (3 in the first 0.12 s of asking every 2 ms).
    While the first lives, none is started. The first is kept alive through the asking by holding the index's
    files' write locks (its catch-up waits for them, holding ``index.lock``): one that ended as it was asked
    (a fast machine indexes these 12 MiB within the second) let a second start, rightly, and failed the test."""
    import os
    import signal
    import sqlite3
    import time

    mem = Memory.at("m", home)
    mem.append([{"kind": "user", "text": "first"}])
    mem.index().catch_up()  # (the index's files, to hold)
    mem.close()
    mem.append([{"kind": "user", "text": f"note {n} " + "word " * 60} for n in range(40_000)])  # (12 MiB)
    holding = [sqlite3.connect(mem.path / name, isolation_level=None) for name in (index.FILENAME, index.SHARD_FILENAME)]
    for db in holding:
        db.execute("BEGIN IMMEDIATE")

    def children() -> list[str]:
        found = []
        for task in os.listdir("/proc/self/task"):
            with open(f"/proc/self/task/{task}/children") as f:
                found += f.read().split()
        return found

    def alive(pid: str) -> bool:
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] != "Z"
        except FileNotFoundError:
            return False

    before = set(children())
    started: list[str] = []
    try:
        asked = time.monotonic()
        while time.monotonic() - asked < 1.0:
            index.catch_up_in_background(mem.path)
            started += [pid for pid in children() if pid not in before and pid not in started]
            time.sleep(0.002)
        assert len(started) == 1, started
        assert alive(started[0])  # (still waiting for the index's files: the asking was all while it lived)
    finally:
        for db in holding:
            db.close()
        for pid in started:
            try:
                os.kill(int(pid), signal.SIGKILL)
            except ProcessLookupError:
                pass
        for pid in started:
            while alive(pid):
                time.sleep(0.01)
