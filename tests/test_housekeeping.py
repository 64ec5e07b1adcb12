"""rename, delete and fsck: moving whole memories and checking them on disk."""

import os
import socket
import subprocess
import sys
import time

import orjson
import pytest

from conftest import snapshot
from pimem import Memory


@pytest.fixture
def two(run):
    assert run("append", "old", "the staging db listens on 5433").exit_code == 0
    assert run("append", "old", "-k", "pi", "noted").exit_code == 0


@pytest.fixture
def watcher(home):
    """A live process recorded as the watcher of memory 'old' in lock.json, as `pimem watch` writes it."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    lease = {"pid": proc.pid, "token": "t1", "host": socket.gethostname(), "started": "2026-10-08T09:00:00+08:00", "beat": time.time()}
    (home / "old" / "lock.json").write_bytes(orjson.dumps(lease))
    yield proc
    proc.kill()
    proc.wait()


def test_rename_leaves_a_pointer_that_commands_follow(run, home, two):
    out = run("rename", "old", "new")
    assert out.exit_code == 0, out.stderr
    assert orjson.loads((home / "old").read_bytes()) == {"renamedTo": "new"}
    assert (home / "new" / "main").is_dir()
    assert [orjson.loads(l)["text"] for l in run("since", "old", "#0").stdout.splitlines()] == ["the staging db listens on 5433", "noted"]
    assert run("append", "old", "via the old name").stdout == "2\n"
    assert Memory.open("new").count() == 3
    assert run("list", "--json").stdout.count('"name"') == 1


def test_rename_refuses_a_taken_name_and_leaves_everything(run, home, two):
    run("append", "taken", "x")
    before = snapshot(home)
    out = run("rename", "old", "taken")
    assert out.exit_code == 2
    assert "'taken' already exists" in out.stderr
    assert run("rename", "nope", "fresh").exit_code == 3
    assert run("rename", "old", "../x").exit_code == 2
    assert snapshot(home) == before


def test_rename_back_over_its_own_pointer(run, home, two):
    assert run("rename", "old", "new").exit_code == 0
    assert run("rename", "new", "old").exit_code == 0
    assert (home / "old").is_dir() and orjson.loads((home / "new").read_bytes()) == {"renamedTo": "old"}
    assert Memory.open("old").count() == 2


def test_rename_and_delete_refuse_while_a_watcher_holds_the_memory(run, home, two, watcher):
    before = snapshot(home)
    for args in (("rename", "old", "new"), ("delete", "old")):
        out = run(*args)
        assert out.exit_code == 4
        assert f"pid {watcher.pid}" in out.stderr
    assert snapshot(home) == before
    watcher.kill()
    watcher.wait()
    assert run("delete", "old").exit_code == 0  # a dead watcher's lease holds nothing


def test_delete_moves_to_trash_and_drops_pointers(run, home, two):
    run("rename", "old", "kept")
    out = run("delete", "kept")
    assert out.exit_code == 0, out.stderr
    dest = home / ".trash" / "kept-20261008T093000"
    assert out.stdout == f"{dest}\n"
    assert [orjson.loads(l)["text"] for l in (dest / "main" / "2026-10-08.jsonl").read_bytes().splitlines()][0].startswith("the staging")
    assert not (home / "kept").exists() and not (home / "old").exists()
    assert run("since", "kept", "#0").exit_code == 3
    run("append", "again", "x")
    run("delete", "again")
    run("append", "again", "y")
    assert run("delete", "again").stdout.strip().endswith("again-20261008T093000-2")


def log_file(home, name="old"):
    return home / name / "main" / "2026-10-08.jsonl"


def test_fsck_clean_memory_exits_0(run, two):
    out = run("fsck", "old")
    assert (out.exit_code, out.stdout) == (0, "old: ok (2 messages)\n")


def test_fsck_repair_seals_a_torn_line_without_losing_a_byte(run, home, two):
    path = log_file(home)
    path.write_bytes(path.read_bytes() + b'{"i":2,"kind":"user","te')
    original = path.read_bytes()
    out = run("fsck", "old")
    assert out.exit_code == 5
    assert "main/2026-10-08.jsonl:3: problem: torn last line (24 bytes" in out.stdout
    assert "--repair" in out.stderr
    out = run("fsck", "--repair", "old")
    assert out.exit_code == 0, out.stdout
    assert "repaired: torn last line" in out.stdout
    assert path.read_bytes() == original + b"\n"
    out = run("fsck", "old")
    assert out.exit_code == 0 and "note: a write torn by a crash and later sealed" in out.stdout
    assert run("append", "old", "after").stdout == "2\n"


def test_fsck_explains_gaps_duplicates_and_damage_and_repair_changes_nothing(run, home, two):
    path = log_file(home)
    lines = path.read_bytes().splitlines(keepends=True)
    moved = orjson.loads(lines[1])
    moved["i"] = 3
    path.write_bytes(lines[0] + b"garbage\n" + lines[0] + orjson.dumps(moved) + b"\n")
    day2 = home / "old" / "main" / "2026-10-09.jsonl"
    day2.write_bytes(orjson.dumps({"i": 4, "kind": "user", "text": "x", "size": 99, "date": "2026-10-08T10:00:00+08:00"}) + b"\n")
    before = snapshot(home)
    out = run("fsck", "--repair", "--json", "old")
    assert out.exit_code == 5
    rows = [orjson.loads(l) for l in out.stdout.splitlines()]
    problems = {(r["where"], r["problem"]) for r in rows}
    assert ("main/2026-10-08.jsonl:2", "damaged line (7 bytes) is not a message; readers skip it, so anything it held is missing") in problems
    assert ("main/2026-10-08.jsonl:3", "duplicate i=0: also at main/2026-10-08.jsonl:1") in problems
    assert ("main/2026-10-08.jsonl:4", "gap: no message i=1…2 after main/2026-10-08.jsonl:1; readers stop here with exit 5") in problems
    assert ("main/2026-10-09.jsonl:1", "message 4: size is 99, the text makes it 7") in problems
    assert ("main/2026-10-09.jsonl:1", "message 4: dated 2026-10-08T10:00:00+08:00 but stored in 2026-10-09.jsonl") in problems
    assert all(r["fatal"] and not r["repaired"] for r in rows)
    assert "5 problems found" in out.stderr
    assert snapshot(home) == before


def test_fsck_all_memories_and_unknown_names(run, home, two):
    run("append", "other", "y")
    out = run("fsck")
    assert out.stdout.splitlines() == ["old: ok (2 messages)", "other: ok (1 message)"]
    assert run("fsck", "nope").exit_code == 3
    assert not (home / "nope").exists()
