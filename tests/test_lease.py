"""The build lease's heartbeat against a writer lock held elsewhere (a real process holds it)."""

from __future__ import annotations

import subprocess
import sys
import threading

import orjson
import pytest

from pimem import Memory, lease
from pimem.errors import NotFound

from conftest import subprocess_env

HOLDER = """
import sys
from pimem import Memory
with Memory.at("main").lock():
    print("locked", flush=True)
    sys.stdin.read()
"""


def test_a_beat_never_waits_for_the_writer_lock_and_lands_once_it_is_free(home, monkeypatch):
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "hi"}])
    held = lease.Lease(mem).acquire()
    first = orjson.loads((mem.path / lease.FILE).read_bytes())["beat"]
    # were the beat to wait for the lock, it would wait for as long as the holder keeps it (stdin open)
    monkeypatch.setattr(lease, "BEAT", 3600.0)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], env=subprocess_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"locked\n"
        answers = []
        beating = threading.Thread(target=lambda: answers.append(held.beat(force=True)), daemon=True)
        beating.start()
        beating.join(60)  # (only so a regression fails instead of hanging the suite)
        assert answers == [True]  # still ours; the record is not rewritten while another holds the lock
        assert orjson.loads((mem.path / lease.FILE).read_bytes())["beat"] == first
    finally:
        proc.stdin.close()
        proc.wait()
    monkeypatch.setattr(lease.time, "time", lambda: first + 10.0)
    assert held.beat(force=True) is True
    assert orjson.loads((mem.path / lease.FILE).read_bytes())["beat"] == first + 10.0


def test_an_unreadable_lease_is_an_error_and_an_unreadable_watch_json_no_watcher(home):
    """The two records are read alike, but not their failures: a memory's ``lock.json`` that cannot be read (a
    directory there) is raised, not taken for a free lease; the home's ``watch.json``, which readers of every
    memory look at, counts as no watcher."""
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "hello"}])
    (mem.path / lease.FILE).mkdir()
    with pytest.raises(IsADirectoryError):
        lease.holder(mem)
    (home / lease.WATCHER).mkdir()
    assert lease.watcher(home) is None


def test_a_lease_file_deleted_is_not_a_lease_taken_over(home):
    """``rm -rf`` of a memory deletes its ``lock.json`` before its directory: a watcher's beat between the two
    said the lease was taken over (a ``lost`` event) where the memory was gone. A taker writes its record, so a
    file missing is no taker: the next beat, shortly after, finds the directory gone, or writes the record again
    (the file alone deleted)."""
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "hi"}])
    held = lease.Lease(mem).acquire()
    (mem.path / lease.FILE).unlink()
    assert held.beat(force=True) is True and held.owned()
    assert held.beat(force=True) is True  # the file alone was deleted: written again
    assert orjson.loads((mem.path / lease.FILE).read_bytes())["token"] == held.token
    (mem.path / lease.FILE).unlink()
    assert held.beat(force=True) is True
    subprocess.run(["rm", "-rf", str(mem.path)], check=True)
    with pytest.raises(NotFound, match="renamed or deleted"):
        held.beat(force=True)
    other = Memory.at("other")
    other.append([{"kind": "user", "text": "hi"}])
    mine = lease.Lease(other).acquire()
    (other.path / lease.FILE).write_bytes(orjson.dumps({**orjson.loads((other.path / lease.FILE).read_bytes()),
                                                        "token": "someone else"}))
    assert mine.beat(force=True) is False and not mine.owned()  # (taken over: as before)


def test_whether_a_process_is_alive_is_public_and_a_zombie_is_not(tmp_path):
    """``lease.pid_alive``: fsck asks it whether a temporary copy's writer is gone (it imported ``_pid_alive``, a
    private name of lease). A running process is alive; one killed and not yet reaped (a zombie) is not, nor
    once reaped, nor a pid that is no process's number."""
    import os
    import signal

    from pimem import fsck
    from pimem.lease import pid_alive

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert pid_alive(os.getpid()) and pid_alive(child.pid)
        child.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # (dead, not reaped: a zombie)
        assert not pid_alive(child.pid)
    finally:
        child.kill()
        child.wait()
    assert not pid_alive(child.pid) and not pid_alive(0) and not pid_alive(None) and not pid_alive("12")
    assert "_pid_alive" not in open(fsck.__file__).read()


def test_a_live_holder_on_this_host_keeps_its_lease_whatever_the_wall_clock_says(home):
    """A heartbeat is wall-clock time: a clock set forward by more than ``STALE`` made a second builder take over
    the lease of one still running (its beat looked 30 s old), and one set back left a dead holder's future beat
    live. On this host the holder's process decides: alive (a real process here, the one its record names), its
    lease is held, its beat a day in the past or the future; dead, it is free at once, its beat fresh. A pid used
    again by another process (after a reboot, the lease file kept) is no holder, whatever its beat. A record that
    cannot tell the process (an older pimem's, or written where ``/proc`` does not say) and another host's are
    told by their beat."""
    import socket
    import time

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "hi"}])
    here = socket.gethostname()
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        for beat in (time.time() - 86400, time.time() + 86400, time.time()):
            record = {"pid": child.pid, "token": "other", "host": here, "proc": lease.process(child.pid),
                      "started": "2026-12-07T00:00:00Z", "beat": beat, "command": "watch"}
            (mem.path / lease.FILE).write_bytes(orjson.dumps(record))
            assert lease.holder(mem)["pid"] == child.pid and lease.dead(mem) is None
            assert lease.Lease(mem).try_acquire()["token"] == "other"  # (not taken over)
            lease.beat_watcher(home, "mine", time.time(), [])
            (home / lease.WATCHER).write_bytes(orjson.dumps({**record, "scanned": beat, "refused": []}))
            lease.beat_watcher(home, "mine", time.time(), [])
            assert orjson.loads((home / lease.WATCHER).read_bytes())["token"] == "other"
        assert record["proc"] is not None  # (Linux: /proc tells)
        for beat in (time.time(), time.time() + 86400):  # the pid used again: another process
            (mem.path / lease.FILE).write_bytes(orjson.dumps({**record, "beat": beat, "proc": "another-boot:12"}))
            assert lease.holder(mem) is None and lease.dead(mem)["pid"] == child.pid
        unnamed = {k: v for k, v in record.items() if k != "proc"}  # its beat tells: fresh, held; late, free
        for beat, held in ((time.time(), True), (time.time() - lease.STALE - 5, False)):
            (mem.path / lease.FILE).write_bytes(orjson.dumps({**unnamed, "beat": beat}))
            assert (lease.holder(mem) is not None) is held
    finally:
        child.kill()
        child.wait()
    for beat in (time.time(), time.time() + 86400):  # (dead: taken over, whatever its beat)
        (mem.path / lease.FILE).write_bytes(orjson.dumps({**record, "beat": beat}))
        assert lease.holder(mem) is None and lease.dead(mem)["pid"] == child.pid
        taker = lease.Lease(mem)
        assert taker.try_acquire() is None
        taker.release()
    elsewhere = {**record, "host": here + "-elsewhere"}  # (another host's: its beat alone tells)
    for beat, held in ((time.time(), True), (time.time() - lease.STALE - 5, False)):
        (mem.path / lease.FILE).write_bytes(orjson.dumps({**elsewhere, "beat": beat}))
        assert (lease.holder(mem) is not None) is held


def test_a_holder_in_another_pid_namespace_is_told_by_its_beat_not_taken_for_dead(home):
    """A builder in a container sharing the home under the same host name (another pid namespace) was taken for
    dead, its pid meaning nothing here, and a second builder took its lease over while it went on building (or
    taken for whatever process has its pid here). Its record names its namespace: its beat tells, as another
    host's does; the record of this namespace, or of an older pimem that does not say, is told by its process."""
    import socket
    import time

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "hi"}])
    assert lease.pid_namespace().startswith("pid:[")  # (Linux: /proc tells)
    record = {"pid": 1, "token": "other", "host": socket.gethostname(), "proc": "another-boot:12", "pidns": "pid:[1]",
              "started": "2026-12-07T00:00:00Z", "beat": time.time(), "command": "watch"}
    (mem.path / lease.FILE).write_bytes(orjson.dumps(record))
    assert lease.holder(mem)["pid"] == 1 and lease.dead(mem) is None
    assert lease.described(record) == "a watcher (pid 1 in another pid namespace)"
    built = subprocess.run([sys.executable, "-m", "pimem", "build-tree", "main"], capture_output=True, env=subprocess_env())
    assert built.returncode == 4 and f"by pid 1 on {socket.gethostname()} in another pid namespace (a watcher, since" in built.stderr.decode()
    assert orjson.loads((mem.path / lease.FILE).read_bytes())["token"] == "other"  # (left to it)
    (mem.path / lease.FILE).write_bytes(orjson.dumps({**record, "beat": time.time() - lease.STALE - 5}))
    assert lease.holder(mem) is None and lease.dead(mem)["alive"] is False  # (its beat stopped: dead, taken over)
    built = subprocess.run([sys.executable, "-m", "pimem", "build-tree", "main"], capture_output=True, env=subprocess_env())
    assert built.returncode == 0, built.stderr
    for pidns in (lease.pid_namespace(), None):  # (this namespace's, or an older pimem's: pid 1 is not its process)
        said = {**record, "pidns": pidns} if pidns else {k: v for k, v in record.items() if k != "pidns"}
        (mem.path / lease.FILE).write_bytes(orjson.dumps(said))
        assert lease.holder(mem) is None
