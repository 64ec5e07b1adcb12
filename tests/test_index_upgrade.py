"""An index of the previous schema (7: no CRC-32 of the files read) is brought up to this one in place by its
next reader, not built again from the log. The old index is made by the pimem of the commit before the change,
run from a copy of its tree in a real process."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import orjson
import pytest

from conftest import subprocess_env

REPO = Path(__file__).resolve().parent.parent
SCHEMA_7 = "403b6b9^"  # the last commit whose index was schema 7
DAYS = ["2026-10-06", "2026-10-07", "2026-10-08"]


@pytest.fixture(scope="module")
def old_pimem(tmp_path_factory) -> Path:
    tree = tmp_path_factory.mktemp("pimem7")
    archive = subprocess.run(["git", "-C", str(REPO), "archive", SCHEMA_7], capture_output=True)
    if archive.returncode != 0:
        pytest.skip(f"no git history to take the schema-7 pimem from: {archive.stderr.decode().strip()}")
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return tree


@pytest.fixture
def log7(sh, home, old_pimem):
    """Nine messages over three day files, searched by the schema-7 pimem: its index is there, at version 7."""
    records = [{"kind": "user", "text": f"message {n} about the staging db", "date": f"{DAYS[n // 3]}T09:0{n % 3}:00+08:00"}
               for n in range(9)]

    def old(*args, input=None):
        env = subprocess_env(PYTHONPATH=str(old_pimem))
        return subprocess.run([sys.executable, "-m", "pimem", *args], input=input, capture_output=True, env=env, cwd="/")

    assert old("append", "m", "--ndjson", input=b"".join(orjson.dumps(r) + b"\n" for r in records)).returncode == 0
    assert old("search", "staging", "m").returncode == 0
    assert versions(home / "m") == (7, 7)
    return home / "m" / "main"


def versions(memory: Path) -> tuple[int, int]:
    with contextlib.closing(sqlite3.connect(memory / "index.sqlite")) as db:
        db.execute("ATTACH DATABASE ? AS shard", (str(memory / "index-1.sqlite"),))
        return tuple(db.execute(f"PRAGMA {schema}.user_version").fetchone()[0] for schema in ("main", "shard"))


def crcs(memory: Path) -> dict[str, int | None]:
    with contextlib.closing(sqlite3.connect(memory / "index.sqlite")) as db:
        return dict(db.execute("SELECT name, crc FROM files"))


def test_an_index_of_schema_7_is_upgraded_in_place_and_a_touched_file_is_then_read_again_once(sh, log7):
    memory = log7.parent
    assert sh("fsck", "m").stdout == b"m: ok (9 messages)\n"  # (fsck reads the old index as it is)
    inode = os.stat(memory / "index.sqlite").st_ino
    out = sh("search", "staging", "m", "--limit", "20")
    assert out.returncode == 0 and out.stdout.count(b"\n") == 9 and out.stderr == b"", out.stderr
    assert versions(memory) == (8, 8) and os.stat(memory / "index.sqlite").st_ino == inode
    assert crcs(memory) == {f"{day}.jsonl": None for day in DAYS}  # kept, not read again
    assert sh("fsck", "m").stdout == b"m: ok (9 messages)\n"
    # the bytes the old index read are not known: a file touched is read again, as before schema 8, once
    os.utime(log7 / f"{DAYS[0]}.jsonl", ns=(1, 1))
    out = sh("search", "staging", "m", "--limit", "20")
    assert out.stdout.count(b"\n") == 9 and b"changed since the index read it" in out.stderr, out.stderr
    assert None not in crcs(memory).values()
    os.utime(log7 / f"{DAYS[0]}.jsonl", ns=(2, 2))
    out = sh("search", "staging", "m", "--limit", "20")
    assert out.stdout.count(b"\n") == 9 and out.stderr == b"", out.stderr


def test_reindex_of_an_index_of_schema_7_upgrades_it_under_the_lock_it_holds(sh, log7):
    """``reindex`` holds ``index.lock`` when it opens the index; the upgrade takes it again in the same thread."""
    out = sh("reindex", "m", PIMEM_LOCK_TIMEOUT="2")
    assert out.returncode == 0, out.stderr
    assert versions(log7.parent) == (8, 8)
    assert sh("search", "staging", "m", "--limit", "20").stdout.count(b"\n") == 9


def test_a_second_file_left_at_schema_7_is_upgraded_alone(sh, log7):
    """A crash between the two files' upgrades (each its own transaction) leaves the main file at 8 and the
    second at 7: the next reader upgrades the second, and neither is built again."""
    memory = log7.parent
    with contextlib.closing(sqlite3.connect(memory / "index.sqlite")) as db:
        db.execute("ALTER TABLE files ADD COLUMN crc INTEGER")
        db.execute("PRAGMA user_version = 8")
    assert versions(memory) == (8, 7)
    with contextlib.closing(sqlite3.connect(memory / "index-1.sqlite")) as db:  # (a row a new file would not have)
        db.execute("INSERT INTO files (name, done) VALUES ('kept', 0)")
        db.commit()
    out = sh("search", "staging", "m", "--limit", "20")
    assert out.stdout.count(b"\n") == 9 and out.stderr == b"", out.stderr
    assert versions(memory) == (8, 8) and crcs(memory) == {f"{day}.jsonl": None for day in DAYS}
    with contextlib.closing(sqlite3.connect(memory / "index-1.sqlite")) as db:
        assert db.execute("SELECT done FROM files WHERE name = 'kept'").fetchall() == [(0,)]


def test_a_read_only_memory_indexed_at_schema_7_is_searched_as_it_is(sh, log7):
    """A memory whose directory cannot be written keeps its schema-7 index: read as it is, its files' CRC-32
    not known (it was refused as an index of another pimem version, exit 7)."""
    from test_behind_its_back import as_a_user, read_only

    memory = log7.parent
    with read_only(memory):
        out = as_a_user("search", "staging", "m", "--limit", "20")
    assert out.returncode == 0 and out.stdout.count(b"\n") == 9 and out.stderr == b"", out.stderr
    assert versions(memory) == (7, 7)
    assert sh("search", "staging", "m", "--limit", "20").stdout.count(b"\n") == 9  # writable: upgraded as ever
    assert versions(memory) == (8, 8)


KEPT_OPEN = """
import sys
from pimem import Memory

mem = Memory.open("m")
index = mem.index()
index.catch_up()
print(index.count_kinds({"user"}), index.read_only, flush=True)
mem.close()  # (reopened on next use)
sys.stdin.readline()  # the memory can be written now, and holds a tenth message
for step in ("caught up", "touched", "touched again"):
    index.catch_up()
    print(step, index.count_kinds({"user"}), index.read_only, flush=True)
    mem.close()
    sys.stdin.readline()
"""


def test_an_index_read_only_then_reopened_where_it_can_be_written_is_caught_up_and_upgraded(sh, log7):
    """A Memory kept by a Python user across its directory turning writable: the index reopened (``close``,
    then next use) is an index that can be written, caught up and upgraded, its files' CRC-32 then read as
    recorded (not NULL, as when it was read as it was)."""
    from test_behind_its_back import _as_a_user, read_only

    from conftest import subprocess_env

    memory = log7.parent
    with read_only(memory):
        child = subprocess.Popen(_as_a_user([sys.executable, "-c", KEPT_OPEN]), stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env(), cwd="/")
        assert child.stdout.readline() == b"9 True\n"
    assert sh("append", "m", "message 9 about the staging db").returncode == 0
    said = []
    for then in ((1, 1), (2, 2), None):
        with contextlib.suppress(BrokenPipeError):  # (a child that failed: said below)
            child.stdin.write(b"\n")
            child.stdin.flush()
        said.append(child.stdout.readline())
        if then is not None:
            os.utime(log7 / f"{DAYS[0]}.jsonl", ns=then)
    out, err = child.communicate(b"\n", timeout=60)
    assert said == [b"caught up 10 False\n", b"touched 10 False\n", b"touched again 10 False\n"], err
    assert child.returncode == 0 and versions(memory) == (8, 8)
    # the bytes the schema-7 index read are not known: read again once, as any reader would; not a second time
    assert err.decode().count("changed since the index read it") == 1, err
