"""A log changed behind pimem's back (an editor, a sync tool, a restore) is noticed before any command answers
or writes: readers and writers check the newest day file, and the files they read or append to, against
ranges.json, and on any difference check the whole log. A valid change is seen; a gap or duplicate is exit 5,
and ``append`` then writes nothing. Real processes throughout."""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import tempfile
import zlib

import orjson
import pytest

from conftest import snapshot

DAYS = ["2026-10-06", "2026-10-07", "2026-10-08"]


@pytest.fixture
def log(sh, home):
    """Nine messages over three day files, derived state caught up (view, index)."""
    records = [{"kind": "user", "text": f"message {n} about the staging db", "date": f"{DAYS[n // 3]}T09:0{n % 3}:00+08:00"}
               for n in range(9)]
    assert sh("append", "m", "--ndjson", input=b"".join(orjson.dumps(r) + b"\n" for r in records)).returncode == 0
    assert sh("search", "staging", "m").returncode == 0 and sh("view", "m").returncode == 0
    return home / "m" / "main"


def line(i: int, text: str, day: str = DAYS[-1]) -> bytes:
    msg = {"kind": "user", "text": text, "size": 6 + len(text), "date": f"{day}T10:00:00+08:00"}
    return b'{"i":%d,' % i + orjson.dumps(msg)[1:] + b"\n"


def append_behind(path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


def test_a_valid_line_added_behind_its_back_is_seen_by_every_reader_and_writer(sh, log):
    append_behind(log / f"{DAYS[-1]}.jsonl", line(9, "restored by a sync tool"))
    assert sh("search", "restored", "m").stdout.decode().startswith("m #9 ")
    assert b"restored by a sync tool" in sh("since", "m", "#9").stdout
    assert sh("message", "m", "9").stdout == b"restored by a sync tool\n"
    assert b"restored by a sync tool" in sh("view", "m").stdout
    assert sh("append", "m", "next").stdout == b"10\n"
    assert sh("fsck", "m").returncode == 0


def test_a_valid_line_added_behind_its_back_after_a_sealed_torn_line_is_seen(sh, log):
    """A crash tore the last line; the next append sealed it (it keeps the head ``{"i":9,``) and logged #9
    itself: a line then added by hand is a change like any other, not a duplicate of the torn head."""
    day = log / f"{DAYS[-1]}.jsonl"
    append_behind(day, line(9, "torn by a crash")[:-20])
    assert sh("append", "m", "after the crash").stdout == b"9\n"
    append_behind(day, line(10, "restored by a sync tool"))
    assert b"restored by a sync tool" in sh("since", "m", "#10").stdout
    assert sh("append", "m", "next").stdout == b"11\n" and sh("fsck", "m").returncode == 0


@pytest.mark.parametrize("wrong,what", [(11, "gap"), (4, "duplicate")])
def test_a_gap_or_duplicate_added_behind_its_back_stops_every_command(sh, log, wrong, what):
    append_behind(log / f"{DAYS[-1]}.jsonl", line(wrong, "written by an editor"))
    before = snapshot(log.parent)
    out = sh("append", "m", "must not be logged")
    err = out.stderr.decode()
    assert out.returncode == 5 and err.count("\n") == 1 and f"{what} in the log" in err and "changed behind" in err
    assert snapshot(log.parent) == before  # nothing written, not even the marker
    for argv in (["since", "m", "#0"], ["search", "staging", "m"], ["view", "m"], ["status", "m"], ["append", "m", "--ndjson"],
                 ["message", "m", "0"], ["date", "m", "0"], ["zoom", "m", "0+1"]):  # (#0, as it was: looked up through the index)
        out = sh(*argv, input=b'{"kind":"user","text":"x"}\n')
        assert out.returncode == 5 and out.stderr.count(b"\n") == 1, (argv, out.stderr)
        assert snapshot(log.parent) == before, argv
    assert snapshot(log.parent) == before


def test_two_lines_swapped_by_hand_are_named_by_fsck_and_stop_every_command(sh, log):
    """Every i is there once, out of order within the newest day file: readers stop there, so fsck names it
    (it is not repaired: only a person reorders the log) and append writes nothing."""
    path = log / f"{DAYS[-1]}.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[1], lines[2] = lines[2], lines[1]
    path.write_bytes(b"".join(lines))
    before = snapshot(log.parent)
    out = sh("fsck", "m", "--json")
    found = [json.loads(row) for row in out.stdout.splitlines()]
    found = [f for f in found if f["where"].startswith("main/")]  # (ranges.json and the index are named too)
    assert out.returncode == 5 and [(f["where"], f["fatal"], f["repair"]) for f in found] == [
        (f"main/{DAYS[-1]}.jsonl:3", True, None)], found
    assert "message 7 comes after message 8" in found[0]["problem"] and "by hand" in found[0]["problem"]
    day_files = snapshot(log)
    repaired = sh("fsck", "--repair", "m")
    assert repaired.returncode == 5 and snapshot(log) == day_files
    # ranges.json is named with the reason it is left as it is
    assert f"ranges.json: problem: records 1 day file otherwise than it is ({DAYS[-1]}.jsonl)".encode() in repaired.stdout
    assert b"--repair writes it again only once the log's problems above are put right" in repaired.stdout, repaired.stdout
    before = snapshot(log.parent)
    for argv in (["append", "m", "must not be logged"], ["view", "m"], ["since", "m", "#0"], ["status", "m"],
                 ["search", "staging", "m"]):
        out = sh(*argv)
        assert out.returncode == 5 and out.stderr.count(b"\n") == 1 and b"fsck" in out.stderr, (argv, out.stderr)
    assert snapshot(log.parent) == before


def test_an_older_day_file_appended_to_is_checked_by_the_writer_and_by_readers_of_it(sh, log):
    """The newest file is unchanged, so ranges.json is trusted; the writer appending to an older day's file
    checks that file (it holds it open) and a reader checks each file it reads."""
    append_behind(log / f"{DAYS[0]}.jsonl", line(2, "a duplicate restored from a backup", DAYS[0]))
    before = snapshot(log.parent)
    out = sh("append", "m", "--date", f"{DAYS[0]}T11:00:00+08:00", "late news")
    assert out.returncode == 5 and b"duplicate in the log" in out.stderr
    assert snapshot(log.parent) == before
    for argv in (["since", "m", "#0"], ["message", "m", "1"], ["date", "m", "1"]):  # (#1 read through the index, in that file)
        out = sh(*argv)
        assert out.returncode == 5 and out.stderr.count(b"\n") == 1 and b"duplicate in the log" in out.stderr, (argv, out.stderr)


def test_a_same_size_edit_is_noticed(sh, log):
    """An editor rewriting the newest file (a new inode, the same size) changes its i's: the stamp differs."""
    path = log / f"{DAYS[-1]}.jsonl"
    data = path.read_bytes().replace(b'{"i":8,', b'{"i":7,')
    path.unlink()
    path.write_bytes(data)
    assert len(data) == os.path.getsize(path)
    before = snapshot(log.parent)
    out = sh("append", "m", "x")
    assert out.returncode == 5 and b"duplicate in the log: i=7" in out.stderr
    assert snapshot(log.parent) == before


@pytest.mark.parametrize("edit", ["duplicate", "swapped"])
def test_a_same_size_edit_to_an_older_day_file_stops_append(sh, log, edit):
    """The newest file is unchanged, so ranges.json would be trusted on its word: the writer looks at every day
    file (a ``stat`` each), and one whose mtime or inode differs from its row is checked with the whole log."""
    path = log / f"{DAYS[0]}.jsonl"
    data = path.read_bytes()
    if edit == "duplicate":
        edited = data.replace(b'{"i":1,', b'{"i":0,')
    else:
        lines = data.splitlines(keepends=True)
        lines[1], lines[2] = lines[2], lines[1]
        edited = b"".join(lines)
    assert len(edited) == len(data) and edited != data
    path.write_bytes(edited)
    before = snapshot(log.parent)
    for argv in (["append", "m", "must not be logged"], ["append", "m", "--ndjson"]):
        out = sh(*argv, input=b'{"kind":"user","text":"x"}\n')
        err = out.stderr.decode()
        assert out.returncode == 5 and err.count("\n") == 1 and f"{DAYS[0]}.jsonl changed behind pimem's back" in err, (argv, err)
        assert snapshot(log.parent) == before, argv


def test_a_same_size_edit_to_an_older_day_file_is_seen_by_the_index_and_named_by_fsck(sh, log):
    """A text changed at the same length (a secret masked, say): nothing moves, so only the file's mtime and
    inode tell. The index records them and is rebuilt; fsck names the file; a write records it afresh."""
    path = log / f"{DAYS[0]}.jsonl"
    data = path.read_bytes()
    edited = data.replace(b"message 1 about the staging db", b"message 1 about the XXXXXXX db")
    assert len(edited) == len(data)
    path.write_bytes(edited)
    out = sh("fsck", "m")
    assert out.returncode == 5 and f"ranges.json: problem: records 1 day file otherwise than it is ({DAYS[0]}.jsonl)".encode() in out.stdout
    assert f"index.sqlite: problem: read main/{DAYS[0]}.jsonl before it was changed".encode() in out.stdout, out.stdout
    assert sh("append", "m", "the next turn").stdout == b"9\n"  # a sound log: written, the file recorded afresh
    out = sh("search", "xxxxxxx", "m")
    assert out.stdout.decode().startswith("m #1 ") and b"changed since the index read it" in out.stderr, out.stderr
    assert sh("search", "staging", "m", "--limit", "20").stdout.count(b"\n") == 8
    assert sh("search", "--rank", "XXXXXXX", "m").stdout.decode().startswith("m #1 ")
    assert b"#1" in sh("recall", "m", "XXXXXXX").stdout
    assert sh("fsck", "m").returncode == 0
    path.write_bytes(data)  # put back: noticed again, fsck --repair records it and rebuilds the index
    out = sh("fsck", "--repair", "m")
    assert out.returncode == 0 and out.stdout.count(b"repaired") == 2, out.stdout
    assert sh("fsck", "m").returncode == 0 and sh("search", "xxxxxxx", "m").returncode == 1
    path.write_bytes(edited)  # again, a reader first: it rebuilds the index, which fsck then leaves be
    assert b"changed since the index read it" in sh("search", "xxxxxxx", "m").stderr
    out = sh("fsck", "--repair", "m")
    assert out.returncode == 0 and out.stdout.count(b"repaired") == 1 and b"ranges.json: repaired" in out.stdout, out.stdout
    assert sh("append", "m", "and on").returncode == 0 and sh("search", "xxxxxxx", "m").stderr == b""


@pytest.mark.parametrize("day, then", [(DAYS[-1], None), (DAYS[0], ["append", "m", "a new turn"]),
                                       (DAYS[0], ["fsck", "--repair", "m"])])
def test_a_secret_masked_by_hand_is_no_longer_shown_by_the_view(sh, log, day, then):
    """A password masked in the log with as many characters (the newest day file, or an older one): the view,
    the context and the map went on showing it, from the texts lines.json kept of the lines last shown, while
    zoom and search saw the mask. A log changed behind pimem's back is read again: an older file's edit once a
    writer (which looks at every day file) or fsck --repair has recorded it."""
    path = log / f"{day}.jsonl"
    n = 7 if day == DAYS[-1] else 1
    data = path.read_bytes()
    secret = f"message {n} about the staging db".encode()
    assert secret in sh("view", "m").stdout  # (lines.json keeps it)
    path.write_bytes(data.replace(secret, f"message {n} about the ******* db".encode()))
    if then:
        assert sh(*then).returncode == 0
    for argv in (["view", "m"], ["context", "m"], ["map", "m"]):
        out = sh(*argv)
        assert out.returncode == 0 and b"staging" in out.stdout and secret not in out.stdout, (argv, out.stdout)
        assert f"message {n} about the ******* db".encode() in out.stdout, (argv, out.stdout)


def test_a_secret_masked_by_hand_is_not_shown_by_a_reader_that_writes_nothing(sh, log):
    """The MCP server's view (``api.view``) writes nothing in the memory's directory: the reader that found the log
    changed does not take the texts lines.json keeps, and leaves the file as it is."""
    from pimem import api

    path = log / f"{DAYS[-1]}.jsonl"
    path.write_bytes(path.read_bytes().replace(b"message 7 about the staging db", b"message 7 about the ******* db"))
    before = snapshot(log.parent)
    shown = "\n".join(api.view("m", home=log.parent.parent)["lines"])
    assert "message 7 about the ******* db" in shown and "message 7 about the staging db" not in shown, shown
    assert snapshot(log.parent) == before


def test_a_same_size_edit_to_the_newest_day_file_then_an_append_to_it_is_seen_by_the_index(sh, log):
    """The append grows the file the index had read: the writer, which found it changed, counts that in
    ranges.json, and the index, which recorded the count, starts over rather than reading on."""
    path = log / f"{DAYS[-1]}.jsonl"
    path.write_bytes(path.read_bytes().replace(b"message 7 about the staging db", b"message 7 about the XXXXXXX db"))
    assert sh("append", "m", "the next turn").stdout == b"9\n"
    assert sh("fsck", "m").stdout.count(b"problem") == 1  # the index, not ranges.json: recorded by the write
    out = sh("search", "xxxxxxx", "m")
    assert out.stdout.decode().startswith("m #7 ") and b"changed since the index read it" in out.stderr, out.stderr
    assert sh("append", "m", "another turn").returncode == 0 and sh("search", "staging", "m").stderr == b""
    assert sh("fsck", "m").returncode == 0


def restore(log, how: str) -> None:
    """Every day file's mtime moved (``touch``), or the whole ``main/`` put back from a copy (``cp -a``: the
    same bytes and mtimes, new inodes)."""
    if how == "touch":
        subprocess.run(["touch", *sorted(log.iterdir())], check=True)
    else:
        aside = tempfile.mkdtemp(dir=log.parent)
        subprocess.run(["cp", "-a", str(log), f"{aside}/copy"], check=True)
        os.rename(log, f"{aside}/old")  # (kept: its files' inodes are not free for the copy's)
        subprocess.run(["cp", "-a", f"{aside}/copy", str(log)], check=True)


@pytest.mark.parametrize("how", ["touch", "cp -a"])
def test_day_files_touched_or_copied_back_are_no_edit(sh, log, how):
    """Only the files' mtimes or inodes moved, their bytes are those recorded: no check of the whole log, no
    rebuild of the index, fsck finds nothing; the reader records the new stamps in the index, the next write
    in ranges.json."""
    stamps = {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in log.iterdir()}
    restore(log, how)
    assert all((p.stat().st_mtime_ns, p.stat().st_ino) != stamps[p.name] for p in log.iterdir())
    assert sh("fsck", "m").stdout == b"m: ok (9 messages)\n"
    out = sh("search", "staging", "m", "--limit", "20")
    assert out.returncode == 0 and out.stdout.count(b"\n") == 9 and out.stderr == b"", out.stderr
    with contextlib.closing(sqlite3.connect(log.parent / "index.sqlite")) as db:
        read = dict((name, (mtime, inode)) for name, mtime, inode in db.execute("SELECT name, mtime, inode FROM files"))
    assert read == {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in log.iterdir()}
    assert sh("append", "m", "the next turn").stdout == b"9\n"
    files = json.loads((log.parent / "ranges.json").read_bytes())["files"]
    assert {name: tuple(row[4:6]) for name, row in files.items()} == \
        {p.name: (p.stat().st_mtime_ns, p.stat().st_ino) for p in log.iterdir()}
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"
    assert sh("search", "staging", "m").stderr == b""


def test_a_write_after_a_same_size_edit_records_the_crc_of_the_bytes_as_edited(sh, log):
    """A writer that found a day file edited at its size carried the CRC-32 of its old bytes on: a later
    ``touch`` of it then counted as an edit (fsck exit 5) though nothing had changed since the write."""
    path = log / f"{DAYS[-1]}.jsonl"
    path.write_bytes(path.read_bytes().replace(b"message 8 about the staging db", b"message 8 about the XXXXXXX db"))
    assert sh("append", "m", "--date", f"{DAYS[-1]}T23:00:00+08:00", "later that day").stdout == b"9\n"
    row = json.loads((log.parent / "ranges.json").read_bytes())["files"][path.name]
    assert row[7] == zlib.crc32(path.read_bytes())
    assert b"changed since the index read it" in sh("search", "xxxxxxx", "m").stderr  # (the index reads it afresh)
    subprocess.run(["touch", str(path)], check=True)
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"


@pytest.mark.parametrize("how", ["touch", "cp -a"])
def test_a_same_size_edit_then_touched_or_copied_back_is_still_an_edit(sh, log, how):
    """The bytes are compared with those recorded, not the stamp alone: an edit is caught however the file
    got there, and the index compares with the bytes it read (an edit it read, then put back from a copy:
    as ranges.json records it, not as the index read it)."""
    path = log / f"{DAYS[0]}.jsonl"
    data = path.read_bytes()
    edited = data.replace(b"message 1 about the staging db", b"message 1 about the XXXXXXX db")
    path.write_bytes(edited)
    restore(log, how)
    out = sh("fsck", "m")
    assert out.returncode == 5 and f"records 1 day file otherwise than it is ({DAYS[0]}.jsonl)".encode() in out.stdout
    assert f"index.sqlite: problem: read main/{DAYS[0]}.jsonl before it was changed".encode() in out.stdout, out.stdout
    out = sh("search", "xxxxxxx", "m")
    assert out.stdout.decode().startswith("m #1 ") and b"changed since the index read it" in out.stderr, out.stderr
    path.write_bytes(data)  # put back as ranges.json records it, but not as the index read it
    restore(log, how)
    out = sh("search", "staging", "m", "--limit", "20")
    assert out.stdout.count(b"\n") == 9 and b"changed since the index read it" in out.stderr, out.stderr
    assert sh("fsck", "m").returncode == 0


def test_a_text_edited_by_hand_moves_the_lines_and_the_index_is_rebuilt_not_left_pointing_wrong(sh, log):
    path = log / f"{DAYS[-1]}.jsonl"
    data = path.read_bytes()
    edited = data.replace(b'"text":"message 7 about the staging db","size":36', b'"text":"message 7 about the great white sharks","size":44')
    assert len(edited) > len(data)  # (the file grew: as if a line had been appended)
    path.write_bytes(edited)
    out = sh("search", "staging", "m", "--limit", "20")
    hits = sorted(int(row.split()[1][1:]) for row in out.stdout.decode().splitlines())
    assert hits == [0, 1, 2, 3, 4, 5, 6, 8], out.stdout  # none silently missing past the edit
    assert b"rebuilding the index" in out.stderr and out.stderr.count(b"\n") == 1
    assert sh("search", "sharks", "m").stdout.decode().startswith("m #7 ")
    assert b"ranges.json" in sh("fsck", "m").stdout  # (the edit is named; --repair records the files afresh)
    assert sh("fsck", "--repair", "m").returncode == 0 and sh("fsck", "m").returncode == 0


@pytest.mark.parametrize("edit", ["longer", "shorter"])
def test_an_older_day_file_edited_by_hand_has_the_index_rebuilt_though_the_newest_is_unchanged(sh, log, edit):
    """ranges.json is trusted on the newest file's word, so the index looks at every file itself."""
    path = log / f"{DAYS[0]}.jsonl"
    data = path.read_bytes()
    edited = data.replace(b"message 1 about", b"REDACTED message 1 about" if edit == "longer" else b"msg 1 about")
    assert edited != data
    path.write_bytes(edited)
    out = sh("search", "staging", "m", "--limit", "20")
    hits = sorted(int(row.split()[1][1:]) for row in out.stdout.decode().splitlines())
    assert hits == list(range(9)), (out.stdout, out.stderr)
    assert b"rebuilding the index" in out.stderr and out.stderr.count(b"\n") == 1
    assert sh("search", "staging", "m").stderr == b""  # (once)


def test_a_day_file_deleted_by_hand_leaves_a_gap_that_is_named(sh, log):
    (log / f"{DAYS[0]}.jsonl").unlink()  # the oldest: #0 to #2 missing
    out = sh("search", "staging", "m")
    assert out.returncode == 5 and b"gap in the log: i=0 is missing" in out.stderr and out.stderr.count(b"\n") == 1


def lose_end(log, how: str) -> None:
    """Lose #6…#8, the log's last three messages: their day file deleted, or cut back to an empty file or to
    its first line (an older copy put back)."""
    day = log / f"{DAYS[-1]}.jsonl"
    if how == "deleted":
        day.unlink()
    else:
        day.write_bytes(b"" if how == "emptied" else day.read_bytes().split(b"\n")[0] + b"\n")


@pytest.mark.parametrize("how", ["deleted", "emptied", "cut short"])
def test_messages_lost_from_the_log_end_stop_every_command_until_the_file_is_put_back(sh, log, how):
    """ranges.json recorded #6…#8: a log that now ends before them is an integrity error (exit 5, one line
    naming them) for readers and writers, never a log whose next message takes #6 again."""
    kept = (log / f"{DAYS[-1]}.jsonl").read_bytes()
    lose_end(log, how)
    lost = b"#7\xe2\x80\xa6#8" if how == "cut short" else b"#6\xe2\x80\xa6#8"
    before = snapshot(log.parent)
    for argv in (["list"], ["status", "m"], ["context", "m"], ["search", "staging", "m"], ["append", "m", "new"],
                 ["since", "m", "#0"], ["message", "m", "0"], ["date", "m", "0"]):
        out = sh(*argv)
        assert out.returncode == 5 and out.stderr.count(b"\n") == 1, (argv, out.stderr)
        assert b"lost from the end of the log: " + lost + b", " + DAYS[-1].encode() + b".jsonl" in out.stderr, (argv, out.stderr)
    assert snapshot(log.parent) == before  # (append logged nothing)
    for repair in ([], ["--repair"]):
        out = sh("fsck", *repair, "m")
        assert out.returncode == 5 and b"lost from the end of the log: " + lost in out.stdout
        assert b"--repair --accept-lost m" in out.stdout
    assert snapshot(log.parent) == before  # (nothing repaired: a refolded view would forget how far the log went)
    (log / f"{DAYS[-1]}.jsonl").write_bytes(kept)  # put back: everything is as it was
    assert sh("append", "m", "new").stdout == b"9\n"
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"


def test_messages_another_process_logs_while_fsck_checks_are_not_lost(sh, log, run, monkeypatch):
    """fsck reads the log, then what ranges.json, the view and the index know of its end: a message an agent
    logged in between (and the index caught up with) was reported lost from the end, exit 5, with a call to
    accept the loss."""
    from pimem import fsck

    tree = fsck.check_tree
    logged = []

    def after_the_log_is_read(mem):
        if not logged:
            logged.append(sh("append", "m", "logged while fsck checks"))
            assert logged[0].stdout == b"9\n" and sh("search", "while fsck", "m").returncode == 0
        return tree(mem)

    monkeypatch.setattr(fsck, "check_tree", after_the_log_is_read)
    out = run("fsck", "m")
    assert logged and out.exit_code == 0, out.stdout
    assert "lost" not in out.stdout
    monkeypatch.setattr(fsck, "check_tree", tree)
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"


def test_messages_lost_from_the_log_end_in_another_boot_stop_writers_and_readers(sh, log):
    lose_end(log, "deleted")
    ranges = log.parent / "ranges.json"
    ranges.write_bytes(ranges.read_bytes().replace(b'"boot":"', b'"boot":"another-'))
    for argv in (["append", "m", "new"], ["status", "m"]):
        out = sh(*argv)
        assert out.returncode == 5 and b"lost from the end of the log: #6\xe2\x80\xa6#8" in out.stderr, (argv, out.stderr)


def test_messages_lost_for_good_are_accepted_by_name_and_a_note_takes_each_number(sh, log):
    lose_end(log, "deleted")
    before = snapshot(log.parent)
    assert sh("fsck", "--accept-lost", "m").returncode == 2
    assert sh("fsck", "--repair", "--accept-lost").returncode == 2
    assert snapshot(log.parent) == before
    out = sh("fsck", "--repair", "--accept-lost", "m")
    assert out.returncode == 0, (out.stdout, out.stderr)
    notes = [json.loads(x) for x in sh("since", "m", "#6").stdout.splitlines()]
    assert [(n["i"], n["kind"]) for n in notes] == [(6, "note"), (7, "note"), (8, "note")]
    assert notes[0]["text"].startswith(f"message #6 was lost from {DAYS[-1]}.jsonl; ")
    assert sh("append", "m", "new").stdout == b"9\n"
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"


def test_messages_lost_from_the_end_are_not_accepted_while_the_log_has_a_gap_before_them(sh, log):
    """#3 deleted too (a gap inside the log) beside #6…#8 lost from its end: accepting the loss logged notes
    for #6…#8 (then said the gap, exit 5), and that write recorded ranges.json for the log as it was, gap and
    all, so append and view went on with exit 0 past the gap. The loss is accepted once the gap is put right,
    and nothing is written before."""
    middle = log / f"{DAYS[1]}.jsonl"
    kept = middle.read_bytes()
    middle.write_bytes(b"".join(kept.splitlines(keepends=True)[1:]))  # #3 gone, #4 and #5 kept
    lose_end(log, "deleted")
    before = snapshot(log.parent)
    out = sh("fsck", "--repair", "--accept-lost", "m")
    assert out.returncode == 5 and b"gap: no message i=3" in out.stdout, (out.stdout, out.stderr)
    assert b"--accept-lost logs them only once the log's problems above are put right" in out.stdout
    assert snapshot(log.parent) == before
    for argv in (["append", "m", "new"], ["view", "m"]):
        assert sh(*argv).returncode == 5, argv
    assert snapshot(log.parent) == before
    middle.write_bytes(kept)  # the gap put right: the loss at the end is accepted
    assert sh("fsck", "--repair", "--accept-lost", "m").returncode == 0
    assert sh("append", "m", "new").stdout == b"9\n"


def test_accepting_messages_lost_from_the_end_keeps_the_view_and_shows_the_notes_in_their_lines(sh, log):
    """The lost messages were lines of their own, after folded ones: the view is kept as saved (the lines before
    them, the bytes a model has cached, stay as they were), their lines show the notes (not the lost texts a
    reader kept in lines.json), and the view's bytes are the notes' lines'."""
    config = log.parent / "config.json"
    config.write_bytes(b'{"view": {"hi": 300, "lo": 150}, "cview": {"hi": 300, "lo": 150}}')
    assert sh("view", "m").returncode == 0  # (folded)
    config.write_bytes(b'{"view": {"hi": 4000, "lo": 2000}, "cview": {"hi": 4000, "lo": 2000}}')
    for k in range(3):
        assert sh("append", "m", f"reply {k}").returncode == 0
    shown = sh("view", "m").stdout.splitlines()
    assert shown[-3:] == [b"9+1|user: reply 0", b"10+1|user: reply 1", b"11+1|user: reply 2"]
    assert not shown[0].startswith(b"0+1|"), shown  # (folded lines before them)
    saved = json.loads((log.parent / "view.json").read_bytes())
    day = log / f"{DAYS[-1]}.jsonl"
    day.write_bytes(b"".join(day.read_bytes().splitlines(keepends=True)[:-2]))  # #10 and #11 lost
    out = sh("fsck", "--repair", "--accept-lost", "m")
    assert out.returncode == 0 and b"view.json: repaired" in out.stdout, out.stdout
    now = json.loads((log.parent / "view.json").read_bytes())
    assert [now[v]["lines"] for v in ("view", "cview")] == [saved[v]["lines"] for v in ("view", "cview")]
    after = sh("view", "m").stdout
    assert after.splitlines()[:-2] == shown[:-2]
    assert after.splitlines()[-2:] == [b"10+1|note: message #10 was lost from " + day.name.encode() + b"; this note "
                                       b"takes its place (pimem fsck --repair --accept-lost, 2026-10-08)",
                                       b"11+1|note: message #11 was lost from " + day.name.encode() + b"; this note "
                                       b"takes its place (pimem fsck --repair --accept-lost, 2026-10-08)"]
    assert now["view"]["bytes"] == len(after)
    assert sh("fsck", "m").stdout == b"m: ok (12 messages)\n"


def test_a_day_file_lost_for_good_is_no_longer_recorded_once_the_loss_is_accepted(sh, log):
    """ranges.json recorded the deleted file; once notes take its messages' numbers it must not record it
    again (a file it records that is not there had every later command read the whole log, fsck saying ok)."""
    for day in DAYS[1:]:  # #3…#8 lost; the notes go to today's file (the tests' today is the last day)
        (log / f"{day}.jsonl").unlink()
    assert sh("fsck", "--repair", "--accept-lost", "m").returncode == 0
    assert sh("append", "m", "new").stdout == b"9\n"
    recorded = json.loads((log.parent / "ranges.json").read_bytes())["files"]
    assert sorted(recorded) == sorted(p.name for p in log.iterdir()) and f"{DAYS[1]}.jsonl" not in recorded


def test_a_day_file_gone_that_ranges_json_still_records_is_named_by_fsck_and_repair_forgets_it(sh, log):
    """A day file holding no message (a write torn by a crash, sealed) deleted by hand: ranges.json's row for it
    had every command check the whole log, fsck saying ok. fsck names it; --repair writes ranges.json again from
    the day files there are, the log untouched."""
    (log / "2026-10-09.jsonl").write_bytes(line(9, "torn by a crash")[:-30])
    assert sh("append", "m", "after the crash").stdout == b"9\n"  # (seals the torn file: recorded, no message)
    assert "2026-10-09.jsonl" in json.loads((log.parent / "ranges.json").read_bytes())["files"]
    (log / "2026-10-09.jsonl").unlink()
    out = sh("fsck", "m")
    assert out.returncode == 5 and out.stdout == (b"m: log: ranges.json: problem: records 1 day file that is gone "
        b"(2026-10-09.jsonl): something else deleted it, so every command checks the whole log (--repair: write it "
        b"again from the day files)\n"), out.stdout
    day_files = snapshot(log)
    assert sh("fsck", "--repair", "m").returncode == 0
    assert snapshot(log) == day_files
    assert sorted(json.loads((log.parent / "ranges.json").read_bytes())["files"]) == sorted(p.name for p in log.iterdir())
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"
    assert sh("append", "m", "next").stdout == b"10\n"


def test_a_row_an_older_pimem_kept_for_a_day_file_lost_for_good_is_named_by_fsck_once_the_loss_is_accepted(sh, log):
    """Before it was lost, the file's messages are the loss fsck names (ranges.json is what knows of them), not
    a stale row; once notes take their numbers, a row an older pimem kept for it is one."""
    for day in DAYS[1:]:  # #3…#8 lost; the notes go to today's file (the tests' today is the last day)
        (log / f"{day}.jsonl").unlink()
    rows = json.loads((log.parent / "ranges.json").read_bytes())["files"]
    out = sh("fsck", "m")
    assert out.returncode == 5 and b"lost from the end of the log" in out.stdout and b"that is gone" not in out.stdout, out.stdout
    assert sh("fsck", "--repair", "--accept-lost", "m").returncode == 0
    ranges = json.loads((log.parent / "ranges.json").read_bytes())
    ranges["files"][f"{DAYS[1]}.jsonl"] = rows[f"{DAYS[1]}.jsonl"]  # (as an older pimem left it)
    (log.parent / "ranges.json").write_bytes(orjson.dumps(ranges))
    out = sh("fsck", "m")
    assert out.returncode == 5 and f"records 1 day file that is gone ({DAYS[1]}.jsonl)".encode() in out.stdout
    assert sh("fsck", "--repair", "m").returncode == 0 and sh("fsck", "m").stdout == b"m: ok (9 messages)\n"
    assert sorted(json.loads((log.parent / "ranges.json").read_bytes())["files"]) == sorted(p.name for p in log.iterdir())


def test_messages_lost_from_the_end_with_ranges_json_gone_too_are_known_by_the_view_index_and_windows(sh, log):
    """ranges.json gone too: view.json (which append and context read anyway) still knows the log went to #8,
    and so do the index and the compaction windows, for fsck and compact."""
    assert sh("compact", "m", "--keep", "40").returncode == 0
    kept = json.loads((log.parent / "windows.jsonl").read_bytes().splitlines()[-1])["keptStart"]
    assert kept > 6
    lose_end(log, "deleted")
    (log.parent / "ranges.json").unlink()
    before = snapshot(log.parent)
    for argv in (["append", "m", "new"], ["context", "m"], ["view", "m"]):
        out = sh(*argv)
        assert out.returncode == 5 and out.stderr == b"pimem: error: m: messages lost from the end of the log: " \
            b"#6\xe2\x80\xa6#8 (view.json covers them); see 'pimem fsck m'\n", (argv, out.stderr)
    out = sh("compact", "m", "--keep", "40")
    assert out.returncode == 5 and f"lost from the end of the log, from #6 (windows.jsonl keeps the log from #{kept})".encode() in out.stderr
    assert snapshot(log.parent) == before
    out = sh("fsck", "m")
    assert out.returncode == 5
    assert b"m: log: main/: problem: messages lost from the end of the log: #6\xe2\x80\xa6#8 (index.sqlite, view.json, windows.jsonl know the log went to #8)" in out.stdout
    assert sh("fsck", "--repair", "--accept-lost", "m").returncode == 0
    assert sh("append", "m", "new").stdout == b"9\n"


def test_a_last_line_that_lost_only_its_newline_is_skipped_by_every_reader_until_the_next_write_seals_it(sh, log):
    """Readers skip a torn last line, a whole message without its newline too (the index, which read it
    whole, included), so they agree on 8 messages; it is no loss (the next write seals it: #8 again)."""
    day = log / f"{DAYS[-1]}.jsonl"
    with open(day, "r+b") as f:
        f.truncate(os.path.getsize(day) - 1)
    assert sh("list").stdout.split()[:2] == [b"m", b"8"]
    for argv in (["message", "m", "8"], ["date", "m", "8"]):
        out = sh(*argv)
        assert out.returncode == 3 and b"no message 8" in out.stderr, (argv, out.stderr)
    assert sh("since", "m", "#0").stdout.count(b"\n") == 8
    out = sh("fsck", "m")
    assert out.returncode == 5 and f"m: log: main/{DAYS[-1]}.jsonl:3: problem: last line has no newline (".encode() in out.stdout
    assert b"whole, but readers skip it as a torn write until it is sealed (the next write seals it)" in out.stdout
    assert b"lost" not in out.stdout
    assert sh("append", "m", "next").stdout == b"9\n"
    assert sh("message", "m", "8").stdout == b"message 8 about the staging db\n"
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"


@pytest.mark.parametrize("how", ["deleted", "a line less"])
def test_tree_nodes_lost_since_the_view_was_saved_are_found_by_fsck_and_repair_refolds_the_view(sh, log, how):
    for k in range(4):
        assert sh("append", "m", f"a long message {k} about the staging db: " + "words " * 150).returncode == 0
    assert sh("build-tree", "m").returncode == 0 and sh("view", "m").returncode == 0
    for path in (log.parent / "tree").glob("*.jsonl"):
        if how == "deleted":
            path.unlink()
        else:
            path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:-1]))
    out = sh("fsck", "m")
    assert out.returncode == 5 and b"m: view: view.json: problem: unusable: tree/" in out.stdout
    assert b"lost nodes since the view was saved (--repair: fold the view afresh from the log and the tree)" in out.stdout
    assert sh("fsck", "--repair", "m").returncode == 0
    assert sh("fsck", "m").returncode == 0
    out = sh("view", "m")
    assert out.returncode == 0 and out.stderr == b""


@pytest.mark.parametrize("damage", ["garbage", "truncated"])
def test_a_damaged_index_is_rebuilt_by_every_reader_and_fsck_repairs_it_beside_a_damaged_view(sh, log, damage):
    for k in range(4):  # (long ones: the tree has stored nodes, which readers look up in the index)
        assert sh("append", "m", f"a long message {k} about the staging db: " + "words " * 150).returncode == 0
    assert sh("build-tree", "m").returncode == 0
    index = log.parent / "index.sqlite"

    def spoil():  # (lines.json too, which build-tree writes: a reader then looks the stored nodes up)
        for side in ("-wal", "-shm"):
            (log.parent / f"index.sqlite{side}").unlink(missing_ok=True)
        index.write_bytes(b"xx" if damage == "garbage" else index.read_bytes()[:8192])
        (log.parent / "lines.json").unlink(missing_ok=True)

    warned = 0
    for argv in (["status", "m"], ["view", "m"], ["map", "m"], ["context", "m"], ["zoom", "m", "8+1"]):
        spoil()
        out = sh(*argv)  # (each reads on; one that looks a node up in the index rebuilds it, and says so)
        assert out.returncode == 0 and b"error" not in out.stderr, (argv, out.stderr)
        warned += b"rebuilding it from the log" in out.stderr
    assert warned >= 2
    spoil()
    (log.parent / "view.json").write_text("garbage")
    assert sh("fsck", "m").returncode == 5
    repaired = sh("fsck", "--repair", "m")
    assert repaired.returncode == 0, repaired.stderr
    assert sh("fsck", "m").returncode == 0 and sh("search", "staging", "m", "--limit", "20").stdout.count(b"\n") == 13


def test_fsck_repair_records_a_valid_change_so_commands_stop_checking_the_whole_log(sh, log):
    append_behind(log / f"{DAYS[-1]}.jsonl", line(9, "added by hand"))
    out = sh("fsck", "m")
    assert out.returncode == 5 and b"ranges.json" in out.stdout
    assert sh("fsck", "--repair", "m").returncode == 0
    assert sh("fsck", "m").stdout == b"m: ok (10 messages)\n"


def test_a_line_written_with_spaces_is_listed_by_the_recall_filters_that_search_the_log_bytes(sh, log):
    """``recall --kind bash`` and ``--source-class derived`` find their lines by a byte search of the log for
    the meta key; a line another tool wrote with spaces after its colons is found all the same."""
    records = [{"kind": "echo", "text": "ok", "meta": {"command": "ls -la"}},
               {"kind": "work", "text": "summary of the staging work", "meta": {"derived": True}}]
    append_behind(log / f"{DAYS[-1]}.jsonl", b"".join(
        json.dumps({"i": 9 + n, **r, "size": 2, "date": f"{DAYS[-1]}T10:00:00+08:00"}).encode() + b"\n"
        for n, r in enumerate(records)))
    def ids(*args):
        out = sh("recall", "m", "--json", *args)
        assert out.returncode == 0, out.stderr
        return [r["id"] for r in orjson.loads(out.stdout)["results"]]
    assert ids("--kind", "bash") == [9]
    assert ids("--source-class", "derived") == [10]
    assert 10 not in ids("--source-class", "primary")


def test_a_line_of_an_unknown_kind_is_read_by_every_reader_and_named_by_fsck(sh, log):
    append_behind(log / f"{DAYS[-1]}.jsonl", b'{"i":9,"kind":"custom","text":"handmade note","size":13,"date":"2026-10-08T10:00:00+08:00"}\n')
    for argv in (["recall", "m", "--json"], ["recall", "m", "handmade", "--json"], ["since", "m", "#9"], ["view", "m"]):
        out = sh(*argv)
        assert out.returncode == 0 and b"handmade" in out.stdout, (argv, out.stderr)
    out = sh("fsck", "m")
    assert out.returncode == 5 and b"unknown kind 'custom'" in out.stdout


@pytest.mark.parametrize("config", [b"{x", b"[1]", b'{"view":{"hi":"128k"}}', b'{"view":[]}', b'{"context_wait":-1}', b'{"line_bytes":true}',
                                    b'{"view":{"hi":1000,"lo":2000}}', b'{"view":{"hi":200}}', b'{"compactor":{"price_in":"0.15"}}', b'{"compactor":{"timeout":"60s"}}',
                                    b'{"compactor":{"max_tokens":0}}', b'{"compactor":{"timeout":0}}', b'{"compactor":{"workers":-1}}', b'{"compactor":{"workers":1.5}}', b'{"compactor":{"model":["m"]}}', b'{"compactor":{"timeout":1e300}}',
                                    b'{"compactor":{"retry_seconds":31622401}}', b'{"context_wait":99999999999}',
                                    b'{"compactor":{"provider":"gemini"}}', b'{"compactor":{"base_url":"ftp://x"}}',
                                    b'{"compactor":{"provider":"openai","model":null}}', b'{"compactor":{"provider":"command","command":""}}',
                                    b'{"compactor":{"price_in":1e308,"price_out":1e308}}', b'{"compactor":{"price_in":0.15}}'])
@pytest.mark.parametrize("where", ["memory", "home"])
def test_a_config_edited_wrong_by_hand_is_one_line_naming_it_for_every_command(sh, log, config, where):
    path = (log.parent if where == "memory" else log.parent.parent) / "config.json"
    path.write_bytes(config)
    before = snapshot(log.parent.parent)
    for argv in (["view", "m"], ["append", "m", "not logged"], ["status", "m"], ["search", "staging"], ["build-tree", "m"]):
        out = sh(*argv)
        err = out.stderr.decode()
        assert out.returncode == 2 and err.count("\n") == 1 and str(path) in err and "fix it or remove it" in err, (argv, err)
    assert snapshot(log.parent.parent) == before
    path.write_bytes(b"")  # emptied: no settings of its own
    assert sh("view", "m").returncode == 0


@pytest.mark.parametrize("changes", [{"view": {"hi": "128k"}}, {"view": {"lo": 300000}}, {"context_wait": -1},
                                     {"compactor": {"provider": "gemini"}}, {"compactor": {"price_in": 0.15}},
                                     {"compactor": {"provider": "openai"}}, {"compactor": {"timeout": 0}}])
def test_settings_saved_from_python_that_would_not_read_back_are_refused_and_the_file_kept(log, home, changes):
    """``Memory.save_config`` checks as every command reads: a value of the wrong shape, a lo above the home's hi,
    a provider without its model, one price: ``BadInput``, config.json as it was."""
    from pimem import Memory
    from pimem.errors import BadInput

    (home / "config.json").write_bytes(b'{"view":{"hi":256000}}')
    mem = Memory.open("m", home)
    mem.save_config({"view": {"lo": 200000}})  # below the home's hi: fine, though above the default's
    before = (log.parent / "config.json").read_bytes()
    with pytest.raises(BadInput, match="config.json"):
        mem.save_config(changes)
    assert (log.parent / "config.json").read_bytes() == before and mem.config["view"] == {"hi": 256000, "lo": 200000}


def test_pimem_model_takes_the_prices_config_json_takes(sh, log):
    """A price up to a million dollars per million tokens, as config.json holds it: a cost stays finite."""
    out = sh("model", "m", "openai/m", "--price-in", "1000001", "--price-out", "1")
    assert out.returncode == 2 and b"from 0 to 1,000,000" in out.stderr and not (log.parent / "config.json").exists()
    assert sh("model", "m", "openai/m", "--price-in", "1000000", "--price-out", "1").returncode == 0
    assert sh("status", "m").returncode == 0


def test_damaged_cursors_and_import_state_are_one_line_or_rebuilt(sh, log, tmp_path):
    for cursors, why in ((b'{"mailer":"x"}', b"not a message number"), (b'{"mailer":-5}', b"not a message number"),
                         (b"garbage", b"not a JSON object"), (b'{"mailer":99999}', b"past the log's 9 messages")):
        (log.parent / "cursors.json").write_bytes(cursors)
        out = sh("since", "m", "--cursor", "mailer")
        assert out.returncode == 5 and why in out.stderr and out.stderr.count(b"\n") == 1, out.stderr
        assert b"consumer 'mailer'" in out.stderr, out.stderr  # (the one this run could not read)
    (log.parent / "cursors.json").write_bytes(b'{"mailer":9}')  # at the end: waits for the next message, as ever
    assert sh("since", "m", "--cursor", "mailer").returncode == 0
    (log.parent / "cursors.json").unlink()
    assert b"invalid consumer name ''" in sh("since", "m", "--cursor", "").stderr
    (log.parent / "imports.json").write_bytes(b"zz")  # derived: rebuilt from the log's meta
    (tmp_path / "q.ndjson").write_bytes(b'{"kind":"user","text":"imported after all"}\n')
    assert sh("import", str(tmp_path / "q.ndjson"), "-n", "m").returncode == 0
    assert sh("message", "m", "9").stdout == b"imported after all\n"


def test_one_damaged_memory_is_named_and_the_others_are_still_listed_searched_and_reindexed(sh, log, home):
    from pimem import api

    assert sh("append", "other", "the staging db of another project").returncode == 0
    append_behind(log / f"{DAYS[-1]}.jsonl", line(11, "written by an editor"))  # m: a gap
    for argv, shown in ((["list"], b"other "), (["search", "staging"], b"other #0 "), (["reindex"], b"other: 1 message indexed")):
        out = sh(*argv)
        err = out.stderr.decode()
        assert out.returncode == 5 and err.count("\n") == 1 and err.startswith("pimem: error: m: ") and "pimem fsck m" in err, (argv, err)
        assert out.stdout.startswith(shown) and b"\nm " not in out.stdout, (argv, out.stdout)
    assert sh("search", "nowhere").returncode == 5  # nothing found, yet a memory went unread: the worse says
    out = sh("build-tree", "--json")  # the other memory built, the damaged one named
    err = out.stderr.decode()
    assert out.returncode == 5 and err.count("\n") == 1 and err.startswith("pimem: error: m: ") and "pimem fsck m" in err, err
    events = [orjson.loads(e) for e in out.stdout.splitlines()]
    assert {e["memory"] for e in events if e["event"] == "done"} == {"other"}
    assert sh("view", "other").returncode == 0 and not (home / "m" / "lock.json").exists()
    found = api.search("staging", home=home)
    assert {h["memory"] for h in found["hits"]} == {"other"} and [u["memory"] for u in found["unread"]] == ["m"]
    assert [row.get("error", "")[:3] for row in api.list_memories(home)] == ["m: ", ""]


def _as_a_user(argv: list[str]) -> list[str]:
    """``argv`` run so that file modes bind (root without its capabilities), or skip where that cannot be."""
    import shutil

    if os.geteuid() != 0:
        return argv
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: file modes do not bind")
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *argv]


def test_a_memory_the_user_may_not_read_is_named_and_the_others_still_answered(sh, log, home):
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    assert sh("append", "other", "the staging db of another project").returncode == 0
    for day in log.glob("*.jsonl"):
        day.chmod(0)
    try:
        for argv, shown in ((["list"], b"other "), (["search", "staging"], b"other #0 "), (["fsck"], b"other: ok"),
                            (["reindex"], b"other: 1 message indexed")):
            out = subprocess.run(_as_a_user(pimem_cmd(*argv)), capture_output=True, env=subprocess_env(), timeout=60)
            err = out.stderr.decode()
            assert out.returncode == 7 and err.count("\n") == 1 and err.startswith("pimem: error: m: Permission denied: "), (argv, err)
            assert shown in out.stdout, (argv, out.stdout)
    finally:
        for day in log.glob("*.jsonl"):
            day.chmod(0o600)


def test_another_projects_main_directory_in_the_home_is_not_a_memory(sh, log, home):
    project = home / "proj"
    (project / "main" / "src").mkdir(parents=True)
    (project / "main" / "README.md").write_text("staging notes\n")
    before = snapshot(project)
    for argv in (["search", "staging"], ["reindex"], ["build-tree"], ["fsck"], ["list"]):
        assert b"proj" not in sh(*argv).stdout, argv
    assert snapshot(project) == before  # nothing written into it


def test_a_memory_whose_main_is_a_link_is_refused_by_name_in_commands_over_many(sh, log, home, tmp_path):
    assert sh("append", "other", "the staging db of another project").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    log.rename(elsewhere)
    log.symlink_to(elsewhere)
    for argv, shown in ((["list"], b"other "), (["search", "staging"], b"other #0 "), (["fsck"], b"other: ok")):
        out = sh(*argv)
        err = out.stderr.decode()
        assert out.returncode == 5 and err.count("\n") == 1 and err.startswith("pimem: error: m: ") and "symbolic link" in err, (argv, err)
        assert out.stdout.startswith(shown) and b"staging db listens" not in out.stdout, (argv, out.stdout)


@contextlib.contextmanager
def read_only(memory):
    """``memory``'s directories and files without write permission (as ``_as_a_user`` sees them) meanwhile;
    yields its paths."""
    paths = [memory, *memory.rglob("*")]
    modes = {path: path.stat().st_mode for path in paths}
    for path in paths:
        path.chmod(modes[path] & 0o555)
    try:
        yield paths
    finally:
        for path in paths:
            path.chmod(modes[path])


def as_a_user(*argv):
    """``pimem ARGV`` as a real process whose file modes bind."""
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    return subprocess.run(_as_a_user(pimem_cmd(*argv)), capture_output=True, env=subprocess_env(), timeout=60)


def test_a_read_only_memory_is_searched_and_checked_and_left_as_it_was(sh, log, home):
    from pimem import Memory, builder

    memory, run = log.parent, as_a_user
    assert sh("append", "other", "a long note: " + "words to summarise " * 60).returncode == 0  # writable, unbuilt
    with read_only(memory) as paths:
        before = snapshot(memory)
        for argv, shown in ((["search", "staging", "m"], b"m #8 "), (["search", "--rank", "which staging db", "m"], b"m #"),
                            (["recall", "m", "staging"], b"#8"), (["fsck", "m"], b"m: ok"), (["view", "m"], b"message 8")):
            out = run(*argv)
            assert out.returncode == 0 and shown in out.stdout, (argv, out.stderr)
        assert snapshot(memory) == before and sorted(memory.iterdir()) == sorted(p for p in paths if p.parent == memory)
        out = run("model", "m", "openai/gpt-4o-mini")  # a write there: named by its file, not a temporary one
        err = out.stderr.decode()
        assert out.returncode == 7 and err.endswith(f"Permission denied: {memory / 'config.json'}\n"), err
        out = run("build-tree")  # its lease cannot be written: the other memory is built, this one named
        err = out.stderr.decode()
        assert out.returncode == 7 and err.splitlines()[-1].startswith("pimem: error: m: Permission denied"), err
        assert "other: 1 written" in err and builder.survey(Memory.open("other", home))["pending"] == 0
    append_behind(log / f"{DAYS[-1]}.jsonl", line(9, "restored from a backup"))
    with read_only(memory):  # a message the index lacks: one line naming the memory, not a bare SQLite error
        out = run("search", "backup", "m")
        err = out.stderr.decode()
        assert out.returncode == 7 and err.count("\n") == 1 and str(memory) in err and "cannot be written" in err, err
    assert sh("search", "backup", "m").returncode == 0  # writable again: caught up as ever


def test_fsck_leaves_no_wal_files_behind_and_refuses_a_linked_index(sh, log, tmp_path):
    memory = log.parent
    before = sorted(p.name for p in memory.iterdir())
    assert sh("fsck", "m").returncode == 0
    assert sorted(p.name for p in memory.iterdir()) == before  # no index.sqlite-wal, -shm left behind
    (memory / "index.sqlite").rename(tmp_path / "index.sqlite")
    (memory / "index.sqlite").symlink_to(tmp_path / "index.sqlite")
    out = sh("fsck", "m")
    assert out.returncode == 5 and b"index.sqlite is a symbolic link" in out.stdout
    assert sh("fsck", "m", "--repair").returncode == 0
    assert not (memory / "index.sqlite").is_symlink() and (tmp_path / "index.sqlite").exists()  # the target untouched
    assert sh("search", "staging", "m").returncode == 0


def test_a_read_only_memory_whose_view_files_are_gone_is_viewed_from_its_tree(sh, home):
    records = [{"kind": "user" if k % 2 else "pi", "text": f"note {k}: " + "about the staging database " * 30} for k in range(40)]
    (home / "b").mkdir(parents=True)
    (home / "b" / "config.json").write_bytes(b'{"view": {"hi": 4000, "lo": 2000}}')
    assert sh("append", "b", "--ndjson", input=b"".join(orjson.dumps(r) + b"\n" for r in records)).returncode == 0
    assert sh("build-tree", "b").returncode == 0
    shown = {argv: sh(*argv).stdout for argv in (("view", "b"), ("zoom", "b", "0+4"), ("view", "b", "--stats"))}
    memory = home / "b"
    for name in ("view.json", "lines.json"):  # a backup taken without them, say
        (memory / name).unlink(missing_ok=True)
    with read_only(memory):
        before = snapshot(memory)
        for argv, out in shown.items():
            done = as_a_user(*argv)
            assert done.returncode == 0 and done.stdout == out, (argv, done.stderr)
        for argv in (("context", "b"), ("map", "b"), ("status", "b")):
            done = as_a_user(*argv)
            assert done.returncode == 0, (argv, done.stderr)
        assert snapshot(memory) == before  # nothing written: no view.json, no index file, no -wal


def test_a_view_budget_lowered_in_config_json_is_kept_at_the_next_read(sh, home):
    records = [{"kind": "user" if k % 2 else "pi", "text": f"note {k} on the staging database, port {5000 + k}"} for k in range(400)]
    assert sh("append", "b", "--ndjson", input=b"".join(orjson.dumps(r) + b"\n" for r in records)).returncode == 0
    assert sh("build-tree", "b").returncode == 0
    before = sh("view", "b").stdout
    assert len(before) > 8000  # (the default budget holds it nearly whole)
    (home / "b" / "config.json").write_bytes(b'{"view": {"hi": 4000, "lo": 2000}}')
    after = sh("view", "b").stdout  # no append in between
    assert len(after) <= 4000 and after.count(b"\n") < before.count(b"\n")
    assert sh("view", "b").stdout == after  # (and saved as such)


def test_build_tree_of_every_memory_builds_past_a_damaged_one_a_bad_config_and_a_held_one(sh, log, home):
    """Each memory a build cannot take is left and the others built; the one line names the one a person must
    mend first (a damaged log before a memory a watcher holds, the usual under a watcher) and the rest, and
    --json has a ``refused`` event for each. A bad config.json stopped the whole run before (exit 2, nothing
    built), a damaged log the whole dry run."""
    import signal
    import subprocess
    import time

    from conftest import pimem_cmd, subprocess_env
    from pimem import Memory, builder, lease

    for name in ("a", "held", "odd", "z"):
        assert sh("append", name, "--ndjson", input=b"".join(
            orjson.dumps({"kind": "user", "text": f"message {n} about the staging db " * 12}) + b"\n" for n in range(9))).returncode == 0
    (home / "odd" / "config.json").write_text('{"view": {"hi": "big"}}')
    append_behind(log / f"{DAYS[-1]}.jsonl", line(11, "written by an editor"))  # m: a gap
    watcher = subprocess.Popen(pimem_cmd("watch", "held"), stderr=subprocess.PIPE, env=subprocess_env())
    try:
        while lease.holder(Memory.open("held")) is None:
            time.sleep(0.05)
        out = sh("build-tree", "--json")
        dry = sh("build-tree", "--dry-run")
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.communicate(timeout=60)
    err = out.stderr.decode()
    assert out.returncode == 5 and err.count("\n") == 1 and err.startswith("pimem: error: m: "), err
    assert err.endswith("run 'pimem fsck m' (also not built: odd, held)\n"), err
    events = [orjson.loads(e) for e in out.stdout.splitlines()]
    assert {e["memory"] for e in events if e["event"] == "done"} == {"a", "z"}
    assert {e["memory"] for e in events if e["event"] == "refused"} == {"m", "odd", "held"}
    assert all(builder.survey(Memory.open(name))["pending"] == 0 for name in ("a", "z"))
    assert dry.returncode == 5 and dry.stderr.decode().endswith("(also not built: odd)\n")
    assert [row.split(":")[0] for row in dry.stdout.decode().splitlines()] == ["a", "held", "z"]
