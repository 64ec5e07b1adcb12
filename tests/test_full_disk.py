"""A real full file system (a small tmpfs mounted for the test; skipped where mounting is not allowed): every
write that fails says so in one line (exit 7) and leaves nothing behind, and rename and delete are all or
nothing."""

from __future__ import annotations

import errno
import os
import subprocess

import orjson
import pytest

from conftest import snapshot
from pimem import Memory, home as homes


@pytest.fixture
def disk(tmp_path, monkeypatch):
    """A 2 MiB tmpfs as the store home; ``disk.fill()`` fills it to the last byte, ``disk.free()`` frees it,
    ``disk.resize("64m")`` changes its size."""
    mount = tmp_path / "fs"
    mount.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m,mode=0700", "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")

    class Disk:
        home = mount / "home"

        def fill(self, leave: int = 0):
            """Fill the disk, then (``leave``) free that many bytes again."""
            fd = os.open(mount / "filler", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
            try:
                for size in (1 << 16, 4096, 512, 64, 1):
                    try:
                        while True:
                            os.write(fd, b"x" * size)
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC
                if leave:
                    os.ftruncate(fd, os.fstat(fd).st_size - leave)
            finally:
                os.close(fd)

        def free(self):
            os.unlink(mount / "filler")

        def resize(self, size: str):
            subprocess.run(["mount", "-o", f"remount,size={size}", str(mount)], check=True)

    monkeypatch.setenv("PIMEM_HOME", str(Disk.home))
    yield Disk()
    subprocess.run(["umount", "-l", str(mount)], check=False)


def one_line_exit_7(out) -> str:
    err = out.stderr.decode()
    assert out.returncode == 7, err
    assert err.count("\n") == 1 and err.startswith("pimem: error: ") and "Traceback" not in err
    return err


def no_temp_files(path) -> list[str]:
    return [p.name for p in path.rglob("*.tmp")] + [p.name for p in path.rglob(".*.pointer-*")]


def test_a_failed_first_append_leaves_no_memory(sh, disk):
    assert sh("append", "kept", "one").returncode == 0
    disk.fill()
    before = snapshot(disk.home)
    err = one_line_exit_7(sh("append", "fresh", "lost to a full disk"))
    assert "No space left on device" in err
    assert not (disk.home / "fresh" / "main").exists()
    assert sh("list").stdout.decode().split()[:1] == ["kept"] and b"fresh" not in sh("list").stdout
    assert snapshot(disk.home).keys() == before.keys()  # (its write.lock, in a directory of its own, stood in the
    mem = Memory.at("later")  # way of `rename kept fresh`: the name taken by a memory that never was)
    with pytest.raises(OSError):
        mem.append([{"kind": "user", "text": "lost to a full disk too"}])
    assert snapshot(disk.home).keys() == before.keys()
    disk.free()
    assert sh("append", "fresh", "now it fits").stdout == b"0\n"
    assert mem.append([{"kind": "user", "text": "the same object, once there is room"}]) == [0]  # (made afresh)


def test_a_demo_on_a_full_disk_leaves_no_memory_and_runs_once_there_is_room(sh, disk):
    assert sh("append", "kept", "one").returncode == 0
    disk.fill(leave=4096)  # room for the demo's config.json, not for its messages
    before = snapshot(disk.home)
    one_line_exit_7(sh("demo"))
    assert snapshot(disk.home).keys() == before.keys()  # no config.json left, nor a directory for it
    assert b"demo" not in sh("list").stdout
    disk.free()
    out = sh("demo")
    assert out.returncode == 0 and b"logged 20 sample messages" in out.stderr
    assert orjson.loads((disk.home / "demo" / "config.json").read_bytes())["view"] == {"hi": 2000, "lo": 1000}


def test_a_batch_that_fits_in_part_leaves_exactly_the_acknowledged_messages_and_a_retry_logs_the_rest_once(sh, disk):
    assert sh("append", "m", "first").returncode == 0
    lines = [orjson.dumps({"kind": "user", "text": f"batch line {n} " + "y" * 60}) + b"\n" for n in range(3000)]
    disk.fill(leave=48 * 1024)
    out = sh("append", "m", "--ndjson", input=b"".join(lines))
    assert "No space left on device: " in one_line_exit_7(out) and "/m/main/" in out.stderr.decode()  # the file named
    acked = out.stdout.split()
    assert acked == [str(i).encode() for i in range(1, 1 + len(acked))] and len(acked) < 3000
    day = next((disk.home / "m" / "main").glob("*.jsonl"))
    assert day.read_bytes().endswith(b"\n") and day.read_bytes().count(b"\n") == 1 + len(acked)  # no torn line
    assert not (disk.home / "m" / "ranges.writing").exists()  # the files recorded as they are again
    assert Memory.open("m").count() == 1 + len(acked) and sh("fsck", "m").returncode == 0
    before = snapshot(disk.home / "m")
    one_line_exit_7(sh("remember", "m", "-", input=b"z" * 200_000))  # the memory log too: as it was (here: never made)
    assert snapshot(disk.home / "m").keys() - before.keys() <= {"write.lock"} and not (disk.home / "m" / "memory.jsonl").exists()
    disk.free()
    assert sh("append", "m", "--ndjson", input=b"".join(lines[len(acked):])).returncode == 0
    texts = [m["text"] for m in Memory.open("m").messages()]
    assert texts == ["first"] + [f"batch line {n} " + "y" * 60 for n in range(3000)]  # each once


def test_an_import_a_full_disk_stops_says_how_many_went_in_and_the_same_import_reads_on(sh, disk, tmp_path):
    session = tmp_path / "s.jsonl"
    texts = [f"imported {n}" for n in range(25_000)]  # batches of 10,000: the disk is full in the second or third
    disk.resize("3m")
    session.write_bytes(b"".join(orjson.dumps({"kind": "user", "text": text}) + b"\n" for text in texts))
    err = one_line_exit_7(sh("import", str(session), "-n", "m"))
    logged = Memory.open("m").count()
    assert 0 < logged < len(texts), err
    assert err.endswith(f"; {logged:,} messages imported; the same import again reads on from where this one stopped\n"), err
    disk.resize("64m")
    out = sh("import", str(session), "-n", "m")
    assert out.returncode == 0 and f"{len(texts) - logged:,} imported".encode() in out.stdout, out.stderr
    assert [m["text"] for m in Memory.open("m").messages()] == texts  # each once
    assert sh("fsck", "m").returncode == 0


def test_failed_writes_leave_no_temp_files(sh, disk, tmp_path):
    assert sh("append", "m", "a message worth keeping").returncode == 0
    session = tmp_path / "s.jsonl"
    session.write_bytes(b"".join(orjson.dumps({"kind": "user", "text": f"imported {n} " + "y" * 200}) + b"\n" for n in range(50)))
    disk.fill()
    before = snapshot(disk.home)
    for argv in (["model", "m", "extractive"], ["import", str(session), "-n", "m"], ["build-tree", "m"]):
        out = sh(*argv)
        assert out.returncode in (0, 7), (argv, out.stderr)
        if out.returncode == 7:
            one_line_exit_7(out)
        assert no_temp_files(disk.home) == [], argv
    assert Memory.open("m").count() in (1, 51)  # the import went in whole or not at all
    disk.free()
    if Memory.open("m").count() == 1:
        assert snapshot(disk.home)["m/main/" + next(iter(os.listdir(disk.home / "m" / "main")))] == \
            before["m/main/" + next(iter(os.listdir(disk.home / "m" / "main")))]


def test_search_and_reindex_on_a_full_disk_say_so(sh, disk):
    Memory.at("m").append([{"kind": "user", "text": f"message {n} about the staging database " * 4} for n in range(3000)])
    disk.fill()
    for argv in (["reindex", "m"], ["search", "staging", "m"]):
        err = one_line_exit_7(sh(*argv))
        assert "full" in err or "No space" in err, err
    disk.free()
    assert sh("search", "staging", "m", "--limit", "1").returncode == 0


def test_fsck_on_a_full_disk_blames_the_disk_not_the_index(sh, disk):
    Memory.at("m").append([{"kind": "user", "text": f"message {n}"} for n in range(2000)])
    assert sh("search", "message", "m", "--limit", "1").returncode == 0  # the index built
    disk.fill()
    before = snapshot(disk.home)
    err = one_line_exit_7(sh("fsck", "m"))  # SQLite cannot make its WAL files: a disk I/O error
    assert "index.sqlite" in err and "is the disk full?" in err and "--repair" not in err, err
    after = snapshot(disk.home)  # (SQLite may have made an empty WAL file before it ran out of room)
    assert {k: v for k, v in after.items() if not k.endswith(("-wal", "-shm"))} == {k: v for k, v in before.items() if not k.endswith(("-wal", "-shm"))}
    disk.free()
    assert sh("fsck", "m").stdout == b"m: ok (2000 messages)\n"


def test_rename_on_a_full_disk_is_all_or_nothing(sh, disk):
    assert sh("append", "old", "first").returncode == 0
    disk.fill()
    before = snapshot(disk.home)
    one_line_exit_7(sh("rename", "old", "new"))
    assert snapshot(disk.home) == before  # nothing moved, no pointer half-written
    assert b"first" in sh("since", "old", "#0").stdout  # old is still the memory
    disk.free()
    assert sh("append", "old", "second").stdout == b"1\n"  # the same history, not a second one
    assert sh("rename", "old", "new").returncode == 0
    assert sh("append", "old", "third").stdout == b"2\n"
    assert [m["text"] for m in Memory.open("new").messages(0)] == ["first", "second", "third"]


def test_delete_on_a_full_disk_is_all_or_nothing(sh, disk):
    assert sh("append", "gone", "first").returncode == 0
    assert sh("rename", "gone", "gone2").returncode == 0
    disk.fill()
    out = sh("delete", "gone2")
    if out.returncode == 0:  # a move needs no space: done whole
        assert not (disk.home / "gone2").exists() and not (disk.home / "gone").exists()
        assert sh("since", "gone", "#0").returncode == 3
    else:
        one_line_exit_7(out)
        assert [m["text"] for m in Memory.open("gone").messages(0)] == ["first"]


def test_a_rename_stopped_between_its_steps_still_leads_to_the_memory(sh, home):
    """The state a crash after the move and before the pointer is in place leaves: the pointer written first
    (``.old.renaming``) is followed, so the next append continues the history instead of starting another."""
    assert sh("append", "old", "first").returncode == 0
    homes.write_atomic(homes.rename_intent(home, "old"), orjson.dumps({"renamedTo": "new"}))
    os.rename(home / "old", home / "new")
    assert sh("append", "old", "second").stdout == b"1\n"
    assert [m["text"] for m in Memory.open("new").messages(0)] == ["first", "second"]
    assert sh("list").stdout.decode().split()[0] == "new"


def test_a_pointer_left_by_a_stopped_delete_leads_nowhere(sh, home):
    assert sh("append", "a", "first").returncode == 0
    assert sh("rename", "a", "b").returncode == 0
    os.rename(home / "b", home / "elsewhere")  # the move into the trash done, the pointer not yet removed
    for argv in (["append", "a", "into a memory that was deleted"], ["since", "a", "#0"]):
        out = sh(*argv)
        assert out.returncode == 3 and b"was deleted" in out.stderr
    assert not (home / "b").exists()


def test_a_home_that_is_a_file_is_refused_and_not_chmodded(sh, tmp_path):
    blocker = tmp_path / "home-file"
    blocker.write_text("not a directory")
    blocker.chmod(0o644)
    one_line_exit_7(sh("append", "m", "hi", "--home", str(blocker)))
    assert oct(blocker.stat().st_mode & 0o777) == "0o644" and blocker.read_text() == "not a directory"


def test_an_sqlite_disk_error_names_the_index_and_the_likely_cause():
    import sqlite3

    from pimem.errors import translate

    exc = sqlite3.OperationalError("disk I/O error")
    exc.sqlite_errorname = "SQLITE_IOERR_WRITE"  # (as SQLite sets it when a write of the index fails)
    error = translate(exc)
    assert error.code == 7 and str(error) == ("SQLite: disk I/O error in index.sqlite, the memory's derived index "
                                              "(is the disk full? the log is not affected)")
    assert str(translate(sqlite3.OperationalError("no such table: x"))) == "SQLite: no such table: x"


def test_an_append_a_full_disk_cut_back_leaves_the_index_as_it_was(sh, disk):
    """The failed write is cut back and the file's mtime put back: the index, which records each file's mtime
    to notice an edit by hand that kept its size, is not rebuilt for it."""
    assert sh("append", "m", "one about the staging db").returncode == 0
    assert sh("search", "staging", "m").returncode == 0
    day = next((disk.home / "m" / "main").glob("*.jsonl"))
    before = day.read_bytes()
    disk.fill(leave=4096)
    one_line_exit_7(sh("append", "m", "too long for the disk " * 2000))
    assert day.read_bytes() == before
    disk.free()
    out = sh("search", "staging", "m")
    assert out.returncode == 0 and out.stderr == b"", out.stderr
    assert sh("fsck", "m").returncode == 0



def test_build_tree_on_a_full_disk_counts_only_the_lines_it_wrote(sh, disk):
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda omicron".split()
    lines = b"".join(orjson.dumps({"kind": "user", "text": f"message {n}: " + " ".join(words[(n + k) % 12] for k in range(60))})
                     + b"\n" for n in range(300))
    assert sh("append", "m", "--ndjson", input=lines).returncode == 0

    def on_disk() -> int:
        return sum(len(p.read_bytes().splitlines()) for p in (disk.home / "m" / "tree").glob("*.jsonl"))

    disk.fill(leave=4096)
    out = sh("build-tree", "m")
    err = out.stderr.decode().splitlines()
    assert out.returncode == 7 and on_disk() == 0, err
    assert err[0].startswith("m: 0 written by extractive, 0 free; ") and "built but not written (the next run builds them" \
        " again)" in err[0] and err[1].startswith("pimem: error: m: ") and len(err) == 2, err
    out = sh("build-tree", "m", "--json")
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    (done,) = [e for e in events if e["event"] == "done"]
    assert out.returncode == 7 and on_disk() == 0 and not [e for e in events if e["event"] == "built"]
    assert done["calls"] == done["free"] == done["failed"] == 0 and done["unwritten"] > 0, done
    disk.free()
    out = sh("build-tree", "m", "--json")
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    (done,) = [e for e in events if e["event"] == "done"]
    assert out.returncode == 0 and done["calls"] == len([e for e in events if e["event"] == "built"]) == on_disk() > 0
    assert done["unwritten"] == 0 and done["free"] > 0
