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
