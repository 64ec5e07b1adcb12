"""rename, delete and fsck: moving whole memories and checking them on disk."""

import os
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone

import orjson
import pytest

from conftest import pimem_cmd, snapshot, subprocess_env
from pimem import Memory
from pimem.errors import NotFound


@pytest.fixture
def two(run):
    assert run("append", "old", "the staging db listens on 5433").exit_code == 0
    assert run("append", "old", "-k", "pi", "noted").exit_code == 0


@pytest.fixture
def watcher(home, two):
    """A real `pimem watch old` process, once it holds the memory's lease."""
    proc = subprocess.Popen(pimem_cmd("watch", "old"), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    lock = home / "old" / "lock.json"
    deadline = time.monotonic() + 60
    while not (lock.exists() and orjson.loads(lock.read_bytes()).get("pid") == proc.pid):
        assert proc.poll() is None and time.monotonic() < deadline, "pimem watch did not take the lease"
        time.sleep(0.05)
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


def test_a_memory_renamed_while_a_command_goes_over_every_memory_is_passed_over_not_an_error(run, home, two, capsys):
    """The command listed it, another renamed it before it was read: what reading it failed on (its directory
    now a pointer file) is no problem of the memories there are."""
    from pimem import output
    from pimem.errors import PimemError

    assert run("append", "other", "another memory").exit_code == 0
    mems = Memory.all(home)
    assert [m.name for m in mems] == ["old", "other"]
    assert run("rename", "old", "elsewhere").exit_code == 0
    unread = output.Unread()
    assert unread.run(mems[0], lambda: (_ for _ in ()).throw(NotADirectoryError(20, "Not a directory", str(mems[0].path / "index.lock")))) is None
    unread(mems[1], PimemError("damaged", 5))  # (one still there is named)
    assert capsys.readouterr().err.count("\n") == 1 and unread.code == 5


def test_a_memory_renamed_while_open_is_not_taken_for_one_that_lost_its_messages(run, home, two):
    """A Memory read before a rename finds no log at its path after it: not messages lost from the log's end
    (ranges.json, read before, is gone from that path too), nor an empty memory: it says it was moved."""
    with Memory.open("old") as mem:
        assert mem.count() == 2
        assert run("rename", "old", "new").exit_code == 0
        with pytest.raises(NotFound, match="was renamed or deleted while this had it open"):
            mem.count()
    assert Memory.open("new").count() == 2


READERS = {  # every public reader of a Memory, as a caller holding one calls it
    "count": lambda m: m.count(),
    "messages": lambda m: list(m.messages()),
    "entries": lambda m: list(m.entries(1)),
    "message": lambda m: m.message(0),
    "since": lambda m: list(m.since(datetime(2000, 1, 1, tzinfo=timezone.utc))),
    "first_at": lambda m: m.first_at(datetime(2000, 1, 1, tzinfo=timezone.utc)),
    "end_before": lambda m: m.end_before(datetime(2100, 1, 1, tzinfo=timezone.utc)),
    "summary": lambda m: m.summary(),
    "last_of_kind": lambda m: m.last_of_kind("user"),
    "view_lines": lambda m: m.view_lines(),
    "held": lambda m: m.held(0),
    "held_each": lambda m: m.held_each([0, 1], lines=False),
    "zoom": lambda m: m.zoom("0+2"),
    "cursor": lambda m: m.cursor("reader"),
    "save_cursor": lambda m: m.save_cursor("reader", 0),
    "save_config": lambda m: m.save_config({"line_bytes": 300}),
}


@pytest.mark.parametrize("move", [["rename", "old", "new"], ["delete", "old"], ["delete", "old", "+anew"]])
@pytest.mark.parametrize("opened", ["open", "all", "at and append"])
def test_every_reader_of_a_memory_renamed_or_deleted_while_open_says_so_as_a_writer_does(home, sh, move, opened):
    """A rename or delete by another process while a program holds the memory: each reader raises the writers'
    NotFound (exit 3), not an empty memory (0 messages), the system's error (the path now a pointer file) or
    another memory that took the name since; nothing is written where it was."""
    assert sh("append", "old", "the staging db listens on 5433").returncode == 0
    mem = {"open": lambda: Memory.open("old"), "all": lambda: Memory.all()[0], "at and append": lambda: Memory.at("old")}[opened]()
    if opened == "at and append":
        mem.append([{"kind": "pi", "text": "noted"}])
    else:
        assert sh("append", "old", "-k", "pi", "noted").returncode == 0
    if opened != "all":
        assert mem.count() == 2 and len(mem.view_lines()) == 2  # (its derived state loaded and kept open)
    assert sh(*[a for a in move if a != "+anew"]).returncode == 0
    if "+anew" in move:  # a new memory took the name
        assert sh("append", "old", "a new memory of that name").returncode == 0
    before = snapshot(home)
    for name, read in READERS.items():
        with pytest.raises(NotFound) as refused:
            read(mem)
        assert str(refused.value) == ("memory 'old' was renamed or deleted while this had it open; nothing more was "
                                      "written: run again"), name
        assert refused.value.code == 3
    assert snapshot(home) == before
    if move[0] == "rename":
        assert Memory.open("old").count() == 2  # (opened again, through the pointer the old name keeps)


def test_a_memory_named_before_it_was_made_is_read_once_another_process_makes_it(home, sh):
    """Memory.at of a memory not made yet holds no directory: one made afterwards is the one it reads."""
    mem = Memory.at("later")
    assert mem.count() == 0 and mem.summary()["messages"] == 0
    assert sh("append", "later", "first").returncode == 0
    assert mem.count() == 1 and [m["text"] for m in mem.messages()] == ["first"]


def test_renaming_through_an_old_name_says_which_memory_it_renamed(run, home, two):
    assert run("rename", "old", "u").stderr == f"renamed 'old' to 'u' ({home / 'u'})\n"
    out = run("rename", "old", "w")  # (old points to u)
    assert (out.exit_code, out.stderr) == (0, f"renamed 'u' (the memory 'old' leads to) to 'w' ({home / 'w'})\n")
    assert (home / "w").is_dir() and Memory.open("old").count() == 2


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


def test_rename_and_delete_refuse_while_a_watcher_holds_the_memory(run, home, watcher):
    before = {k: v for k, v in snapshot(home).items() if k != "old/lock.json"}  # its heartbeat moves on
    for args in (("rename", "old", "new"), ("delete", "old")):
        out = run(*args)
        assert out.exit_code == 4
        assert f"pid {watcher.pid}" in out.stderr
    assert {k: v for k, v in snapshot(home).items() if k != "old/lock.json"} == before
    watcher.kill()
    watcher.wait()
    assert run("delete", "old").exit_code == 0  # a dead watcher's lease holds nothing


def test_rename_and_delete_refused_by_a_stopped_watcher_say_it_must_be_resumed_to_stop(run, home, watcher):
    """A watcher frozen with Ctrl-Z keeps its lease: rename and delete said to stop that process first, and a
    SIGTERM waits, pending, until it is resumed. They say it is not answering and to resume it."""
    from pimem import lease

    watcher.send_signal(signal.SIGSTOP)
    deadline = time.monotonic() + 60
    while lease.quiet(orjson.loads((home / "old" / "lock.json").read_bytes())) is None:
        assert time.monotonic() < deadline, "the heartbeat did not go quiet"
        time.sleep(0.1)
    for args, doing in ((("rename", "old", "new"), "rename"), (("delete", "old"), "delete")):
        out = run(*args)
        assert out.exit_code == 4 and out.stderr.startswith(
            f"pimem: error: cannot {doing} 'old': a tree builder, pimem watch or build-tree (pid {watcher.pid}, since "), out.stderr
        assert "which is not answering (stopped?: its last heartbeat was " in out.stderr, out.stderr
        assert out.stderr.endswith(f" s ago), holds it; resume it (fg, or kill -CONT {watcher.pid}) and stop it first\n"), out.stderr
    assert Memory.open("old").count() == 2


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
    assert out.stdout.splitlines()[0] == ("old: log: main/2026-10-08.jsonl:3: problem: torn last line (24 bytes, no newline): "
                                          "a write cut by a crash, which readers skip (--repair: seal it with a newline)")
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
    assert ("main/2026-10-08.jsonl:2", "damaged line (7 bytes) is not JSON; readers skip it, so anything it held is missing") in problems
    assert ("main/2026-10-08.jsonl:3", "duplicate i=0: also at main/2026-10-08.jsonl:1") in problems
    assert ("main/2026-10-08.jsonl:4", "gap: no message i=1…2 after main/2026-10-08.jsonl:1; readers stop here with exit 5") in problems
    assert ("main/2026-10-09.jsonl:1", "message 4: size is 99, the text makes it 7") in problems
    assert ("main/2026-10-09.jsonl:1", "message 4: dated 2026-10-08T10:00:00+08:00 but stored in 2026-10-09.jsonl") in problems
    assert ("ranges.json", "records 2 day files otherwise than they are (2026-10-08.jsonl first): something else "
            "changed them, so every command checks the whole log; --repair writes it again only once the log's "
            "problems above are put right (recorded now, it would vouch for a broken log and commands would stop "
            "checking it)") in problems
    assert all(r["fatal"] and not r["repaired"] for r in rows)
    assert "6 problems found" in out.stderr
    assert snapshot(home) == before


def test_fsck_repair_leaves_the_index_of_a_log_holding_a_number_twice_and_says_why(run, home):
    """A line copied in a day file: `fsck` offered to rebuild the index; `fsck --repair` rewrote it, stopped at
    the duplicate with `the log holds a message number twice; run 'pimem fsck'` and printed no finding. The
    index is left (its rebuild waits for the log put right), and the findings are printed as a check prints them."""
    for n in range(6):
        assert run("append", "m", f"message {n} about the staging db").exit_code == 0
    assert run("search", "staging", "m").exit_code == 0  # (the index made)
    path = next((home / "m" / "main").glob("*.jsonl"))
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:3] + [lines[2]] + lines[3:]))
    checked = run("fsck", "m")
    before = snapshot(home)
    repaired = run("fsck", "--repair", "m")
    assert (checked.exit_code, repaired.exit_code) == (5, 5) and repaired.stdout == checked.stdout
    assert "; --repair builds it again once the log's problems above are put right" in checked.stdout
    assert checked.stderr == repaired.stderr == "pimem: error: 3 problems found\n"
    assert snapshot(home) == before


def test_fsck_names_a_damaged_message_inside_the_log_as_damage_not_a_sealed_torn_write(run, home, two):
    """A torn write sealed at the log's end is followed by the same i written again; a line starting as message 1
    with a byte changed inside, followed by message 2, is that message damaged: the gap's bytes are there."""
    assert run("append", "old", "third").exit_code == 0
    path = log_file(home)
    lines = path.read_bytes().splitlines(keepends=True)
    damaged = lines[1].replace(b'"kind"', b'"ki\x00d"', 1)
    path.write_bytes(lines[0] + damaged + lines[2])
    before = snapshot(home)
    out = run("fsck", "--repair", "old")
    assert out.exit_code == 5
    assert out.stdout.splitlines()[0] == (
        f"old: log: main/2026-10-08.jsonl:2: problem: damaged line ({len(damaged) - 1} bytes) is not JSON: it starts as "
        "message 1, which the log lacks (the gap below): put its bytes right by hand"), out.stdout
    assert "old: log: main/2026-10-08.jsonl:3: problem: gap: no message i=1 after main/2026-10-08.jsonl:1" in out.stdout
    assert "torn" not in out.stdout
    assert {k: v for k, v in snapshot(home).items() if k.startswith("old/main/")} == \
        {k: v for k, v in before.items() if k.startswith("old/main/")}
    path.write_bytes(lines[0] + lines[1][:30] + b"\n" + lines[1] + lines[2])  # a torn write sealed, then written again
    assert "main/2026-10-08.jsonl:2: note: a write torn by a crash and later sealed (30 bytes)" in run("fsck", "old").stdout


def test_fsck_of_every_memory_names_a_broken_rename_pointer(run, home, two):
    """A command given the old name exits 5 ('run pimem fsck'): fsck of the home names the pointer, and leaves it."""
    assert run("rename", "old", "new").exit_code == 0
    (home / "old").write_bytes(b"x\n")  # (overwritten by hand)
    out = run("zoom", "old", "0+1")
    assert out.exit_code == 5 and "broken rename pointer" in out.stderr
    before = snapshot(home)
    for args in (("fsck",), ("fsck", "--repair")):
        out = run(*args)
        assert out.exit_code == 5, out.stdout
        assert out.stdout.splitlines() == [
            "new: ok (2 messages)",
            "old: pointer: old: problem: a rename pointer that cannot be read (unexpected character, expected a JSON value: "
            "line 1 column 1 (char 0)): commands given the name 'old' stop at it (exit 5); pimem leaves it: remove it, "
            "or write {\"renamedTo\": \"NAME\"} in it"]
        assert out.stderr == "pimem: error: 1 problem found\n"
    assert snapshot(home) == before
    (home / "old").unlink()
    assert run("fsck").exit_code == 0


def test_fsck_all_memories_and_unknown_names(run, home, two):
    run("append", "other", "y")
    out = run("fsck")
    assert out.stdout.splitlines() == ["old: ok (2 messages)", "other: ok (1 message)"]
    assert run("fsck", "nope").exit_code == 3
    assert not (home / "nope").exists()


@pytest.mark.parametrize("made", [True, False])
def test_fsck_build_tree_and_reindex_of_every_memory_say_a_home_without_any(sh, home, made):
    """On a home that holds no memory (one not made yet, a typo in $PIMEM_HOME) fsck, build-tree and reindex
    printed nothing at all and exited 0: they say so in one line on stderr naming the home, exit 0 still (cron
    runs build-tree before anything was logged), print nothing on stdout (--json too) and make nothing."""
    if made:
        home.mkdir()
    before = snapshot(home)
    missing = "" if made else " (no such directory)"
    for command, nothing in (("fsck", "check"), ("build-tree", "build"), ("reindex", "index")):
        for json in ((), ("--json",)):
            out = sh(command, *json)
            said = f"pimem: no memories in {home}{missing}; nothing to {nothing}\n"
            assert (out.returncode, out.stdout, out.stderr.decode()) == (0, b"", said), (command, json)
    assert snapshot(home) == before and home.exists() == made


def test_fsck_finds_a_day_file_changed_behind_ranges_json_and_repair_rewrites_it(run, home, two):
    """Readers trust ranges.json when no pimem write can have happened since, after checking the newest day
    file against it: a line appended by something else is seen (the log checked whole first); fsck says
    ranges.json is behind, and --repair writes it again."""
    day = next((home / "old" / "main").glob("*.jsonl"))
    with open(day, "ab") as f:
        f.write(b'{"i":2,"kind":"user","text":"appended by hand","size":22,"date":"2026-10-08T09:31:00+08:00"}\n')
    assert run("message", "old", "2").stdout == "appended by hand\n"
    out = run("fsck", "old")
    assert out.exit_code == 5
    assert f"old: log: ranges.json: problem: records 1 day file otherwise than it is ({day.name}): something else changed it" in out.stdout
    assert run("fsck", "--repair", "old").exit_code == 0
    assert run("fsck", "old").stdout == "old: ok (3 messages)\n"
    assert run("message", "old", "2").stdout == "appended by hand\n"


def test_fsck_checks_tree_nodes(run, home, two):
    tree = home / "old" / "tree"
    tree.mkdir()
    nodes = [
        {"l": 0, "i": 0, "text": "a summary", "size": 9},
        {"l": 0, "i": 0, "text": "again", "size": 5},
        {"l": 1, "i": 1, "text": "past the end", "size": 12},
        {"l": 0, "i": 1, "text": "x" * 600, "size": 600},
    ]
    (tree / "2026-10-08.jsonl").write_bytes(b"".join(orjson.dumps(n) + b"\n" for n in nodes) + b'{"l":1,"i":0,"te')
    out = run("fsck", "--json", "old")
    assert out.exit_code == 5
    rows = {(r["where"], r["problem"]) for r in map(orjson.loads, out.stdout.splitlines())}
    assert rows == {
        ("tree/2026-10-08.jsonl:2", "node 0+1 built twice (first at tree/2026-10-08.jsonl:1, which readers use)"),
        ("tree/2026-10-08.jsonl:3", "node 2+2 covers messages past the end of the log (2)"),
        ("tree/2026-10-08.jsonl:4", "node 1+1 is 600 bytes, over the 512-byte line: readers pass over it, and it is built again"),
        ("tree/2026-10-08.jsonl:5", "torn last line (16 bytes, no newline): a write cut by a crash, which readers skip"),
    }
    out = run("fsck", "--repair", "old")
    assert "repaired: torn last line" in out.stdout and out.exit_code == 5  # the rest is for a person


def test_fsck_names_a_tree_line_that_is_no_node(run, home, two):
    """A JSON line that is no node crashed fsck (TypeError: the log's count shadowed the counting helper)."""
    tree = home / "old" / "tree"
    tree.mkdir()
    (tree / "2026-10-08.jsonl").write_bytes(b'{"l":0,"i":0,"text":"a summary","size":9}\n{"x":1}\n')
    out = run("fsck", "old")
    assert out.exit_code == 5, out.output
    assert out.stdout == "old: tree: tree/2026-10-08.jsonl:2: problem: damaged line (7 bytes) is not a node; readers skip it\n"


def test_fsck_repair_refolds_an_unusable_view(run, home, two):
    good = run("view", "old").stdout
    (home / "old" / "view.json").write_text('{"version": 1, "view": {"lines": "nonsense"}}')
    out = run("fsck", "old")
    assert out.exit_code == 5
    assert out.stdout.startswith("old: view: view.json: problem: unusable: ")
    assert "(--repair: fold the view afresh from the log and the tree)" in out.stdout
    assert run("fsck", "--repair", "old").exit_code == 0
    assert run("fsck", "old").stdout == "old: ok (2 messages)\n"
    assert run("view", "old").stdout == good


def test_fsck_reports_a_broken_hash_chain_and_leaves_it(run, home, two):
    assert run("remember", "old", "port 5433").exit_code == 0
    assert run("remember", "old", "never touch prod").exit_code == 0
    path = home / "old" / "memory.jsonl"
    path.write_bytes(path.read_bytes().replace(b"port 5433", b"port 6543"))
    before = snapshot(home)
    out = run("fsck", "--repair", "old")
    assert out.exit_code == 5
    assert "old: memory: memory.jsonl:1: problem: seq 1: hash does not match the event's content (it was changed); later events are not trusted" in out.stdout
    assert snapshot(home) == before


def test_fsck_says_readers_read_a_memory_event_that_lost_only_its_newline(run, home, two):
    assert run("remember", "old", "port 5433").exit_code == 0
    assert run("remember", "old", "never touch prod").exit_code == 0
    path = home / "old" / "memory.jsonl"
    path.write_bytes(path.read_bytes()[:-1])
    size = len(path.read_bytes().splitlines()[-1])
    assert "never touch prod" in run("memories", "old").stdout  # (read as it is)
    out = run("fsck", "old")
    assert out.exit_code == 5
    assert out.stdout == (f"old: memory: memory.jsonl:2: problem: last line has no newline ({size} bytes), which readers "
                          "read as it is (--repair: seal it with a newline)\n")
    assert run("fsck", "--repair", "old").exit_code == 0
    assert run("fsck", "old").stdout == "old: ok (2 messages)\n"


def test_fsck_checks_the_index_read_only_and_repair_rebuilds_it(run, home, two):
    import sqlite3

    assert run("search", "5433", "old").exit_code == 0  # builds index.sqlite
    index = home / "old" / "index.sqlite"
    db = sqlite3.connect(index)
    db.execute("UPDATE msgs SET offset = offset + 1 WHERE i = 1")
    db.commit()
    db.close()
    def files():  # SQLite's own -wal/-shm companions come and go with any connection to a WAL database
        return {k: v for k, v in snapshot(home).items() if not k.endswith(("-wal", "-shm"))}

    before = files()
    out = run("fsck", "old")
    assert out.exit_code == 5
    assert out.stdout.startswith("old: index: index.sqlite: problem: 1 of 2 message rows point at the wrong line (message 1 at 2026-10-08.jsonl:")
    assert files() == before  # checking changed nothing
    assert run("fsck", "--repair", "old").exit_code == 0
    assert run("fsck", "old").stdout == "old: ok (2 messages)\n"
    index.write_bytes(b"not a database")
    assert "problem: unreadable: file is not a database" in run("fsck", "old").stdout
    assert run("fsck", "--repair", "old").exit_code == 0
    assert run("search", "noted", "old").stdout.startswith("old #1 ")
    (home / "old" / "index-1.sqlite").write_bytes(b"not a database")  # the second file (odd messages' texts)
    assert "old: index: index-1.sqlite: problem: unreadable: file is not a database" in run("fsck", "old").stdout
    assert run("fsck", "--repair", "old").exit_code == 0
    assert run("fsck", "old").stdout == "old: ok (2 messages)\n"
    assert run("search", "noted", "old").stdout.startswith("old #1 ")


def test_fsck_names_the_index_file_it_could_not_read_in_one_line(sh, home, two):
    """The file the user has, never the URI SQLite was given; SQLite's report over many lines, in one."""
    assert sh("search", "5433", "old").returncode == 0
    index, second = home / "old" / "index.sqlite", home / "old" / "index-1.sqlite"
    second.unlink()
    second.mkdir()  # (SQLite cannot open it; nor would --repair delete it: it is named and left)
    out = sh("fsck", "old")
    assert out.stdout == (b"old: index: index-1.sqlite: problem: a directory, not a file: pimem leaves it "
                          b"(remove it: the index is built again from the log)\n")
    second.rmdir()
    assert sh("fsck", "--repair", "old").returncode == 0
    data = bytearray(index.read_bytes())
    data[4096:8192] = b"x" * 4096  # (its second page: SQLite's check reports it over several lines)
    index.write_bytes(data)
    out = sh("fsck", "old")
    assert out.returncode == 5 and out.stdout.startswith(b"old: index: index.sqlite: problem: ") and out.stdout.count(b"\n") == 1, out.stdout


def test_fsck_names_a_directory_where_the_view_or_the_index_goes_and_repair_leaves_it(run, home, two):
    """A directory is not the derived file pimem would delete and build again: named, no repair promised, and
    --repair neither fails on it nor touches it."""
    assert run("search", "5433", "old").exit_code == 0  # builds index.sqlite and index-1.sqlite
    assert run("view", "old").exit_code == 0
    log = log_file(home).read_bytes()
    for name, rebuilt in (("view.json", "the view is folded afresh from the log"),
                          ("index.sqlite", "the index is built again from the log"),
                          ("index-1.sqlite", "the index is built again from the log")):
        path = home / "old" / name
        path.unlink()
        path.mkdir()
        (path / "kept").write_text("the user's")
        line = f"old: {'view' if name == 'view.json' else 'index'}: {name}: problem: a directory, not a file: pimem leaves it (remove it: {rebuilt})\n"
        before = snapshot(home)
        for args in (("fsck", "old"), ("fsck", "--repair", "old")):
            out = run(*args)
            assert (out.exit_code, out.stdout) == (5, line), (args, out.stdout, out.stderr)
            assert out.stderr == "pimem: error: 1 problem found\n"
        assert {k: v for k, v in snapshot(home).items() if not k.endswith("-wal")} == {k: v for k, v in before.items() if not k.endswith("-wal")}
        (path / "kept").unlink()
        path.rmdir()
        assert run("fsck", "--repair", "old").exit_code == 0, name
        assert run("view", "old").exit_code == 0
        assert run("fsck", "old").stdout == "old: ok (2 messages)\n"
    os.mkfifo(home / "old" / "view.json.pipe")
    os.replace(home / "old" / "view.json.pipe", home / "old" / "view.json")  # (read, a pipe would hang fsck)
    out = run("fsck", "--repair", "old")
    assert (out.exit_code, out.stdout) == (5, "old: view: view.json: problem: a named pipe, not a file: pimem leaves it "
                                              "(remove it: the view is folded afresh from the log)\n")
    assert log_file(home).read_bytes() == log


# a real `pimem delete` process SIGKILLed just before or just after its move into the trash
KILLED_AT_THE_MOVE = """
import os, signal, sys
real = os.rename
def rename(src, dst, *args, **kwargs):
    if "/.trash/" in os.fspath(dst) and sys.argv[1] == "before":
        os.kill(os.getpid(), signal.SIGKILL)
    real(src, dst, *args, **kwargs)
    if "/.trash/" in os.fspath(dst):
        os.kill(os.getpid(), signal.SIGKILL)
os.rename = rename
from pimem.cli import main
main(sys.argv[2:])
"""


def killed_delete(when: str, name: str) -> None:
    proc = subprocess.run([sys.executable, "-c", KILLED_AT_THE_MOVE, when, "delete", name], capture_output=True, timeout=60,
                          env=subprocess_env())
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def test_a_delete_killed_after_its_move_is_finished_by_the_next_command(sh, home):
    assert sh("append", "a", "first").returncode == 0
    assert sh("rename", "a", "b").returncode == 0
    killed_delete("after", "b")
    trashed = list((home / ".trash").iterdir())
    assert len(trashed) == 1 and not (home / "b").exists() and (home / "a").is_file()  # moved; its pointer left behind
    out = sh("since", "a", "#0")
    assert out.returncode == 3 and b"no memory named 'a'" in out.stderr  # as after a whole delete, not "was deleted"
    assert sorted(p.name for p in home.iterdir()) == [".trash"]  # the pointer and the delete's record are gone
    assert sh("append", "b", "a new b").stdout == b"0\n" and sh("append", "a", "a new a").stdout == b"0\n"
    assert [m["text"] for m in Memory.open("a").messages()] == ["a new a"]  # its own history, not the new b's
    assert [orjson.loads(l)["text"] for l in next((trashed[0] / "main").iterdir()).read_bytes().splitlines()] == ["first"]


def test_a_delete_killed_before_its_move_deleted_nothing(sh, home):
    assert sh("append", "a", "first").returncode == 0
    assert sh("rename", "a", "b").returncode == 0
    killed_delete("before", "b")
    assert sh("append", "a", "second").stdout == b"1\n"  # the same memory, through the same pointer
    assert [m["text"] for m in Memory.open("b").messages()] == ["first", "second"]
    assert sh("delete", "b").returncode == 0
    assert sorted(p.name for p in home.iterdir()) == [".trash"] and sh("since", "a", "#0").returncode == 3


# holds old's writer lock until told, then moves the memory away as a rename would (the lock's file goes with it)
HOLD_THEN_MOVE = """
import fcntl, os, sys
home = sys.argv[1]
fd = os.open(os.path.join(home, "old", "write.lock"), os.O_RDWR)
fcntl.flock(fd, fcntl.LOCK_EX)
print("locked", flush=True)
sys.stdin.readline()
os.rename(os.path.join(home, "old"), os.path.join(home, "moved"))
if sys.argv[2] == "recreate":
    os.makedirs(os.path.join(home, "old", "main"))
    open(os.path.join(home, "old", "write.lock"), "w").close()
fcntl.flock(fd, fcntl.LOCK_UN)
"""


def holds_open(pid: int, file: os.stat_result) -> bool:
    """Whether process ``pid`` has ``file`` open (the writer lock's file it then waits to lock)."""
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            st = os.stat(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if (st.st_dev, st.st_ino) == (file.st_dev, file.st_ino):
            return True
    return False


@pytest.mark.parametrize("after", ["renamed", "recreate"])
def test_a_writer_queued_behind_the_lock_of_a_memory_moved_meanwhile_writes_nothing(home, two, after):
    holder = subprocess.Popen([sys.executable, "-c", HOLD_THEN_MOVE, str(home), after], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, env=subprocess_env())
    assert holder.stdout.readline() == b"locked\n"
    queued = {argv[0]: subprocess.Popen(pimem_cmd(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())
              for argv in (["append", "old", "written after the move"], ["rename", "old", "other"], ["delete", "old"])}
    lock = os.stat(home / "old" / "write.lock")
    deadline = time.monotonic() + 60
    while not all(holds_open(proc.pid, lock) for proc in queued.values()):  # (each waits for the lock: a second's
        assert time.monotonic() < deadline and all(proc.poll() is None for proc in queued.values())  # sleep was
        time.sleep(0.02)  # not always enough under load, and one started after the move wrote into the new memory)
    moved = snapshot(home / "old")
    holder.communicate(b"go\n", timeout=30)
    for command, proc in queued.items():
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 3 and err.count(b"\n") == 1 and b"was renamed or deleted while this" in err, (command, err)
    assert snapshot(home / "moved") == moved  # nothing written, renamed or trashed
    assert not (home / "other").exists() and not (home / ".trash").exists()
    assert [m["text"] for m in Memory.open("moved").messages()] == ["the staging db listens on 5433", "noted"]


@pytest.mark.parametrize("move,anew", [(["delete", "old"], False), (["rename", "old", "new"], False),
                                       (["delete", "old"], True)])
def test_an_append_stream_stops_when_its_memory_is_moved_away(home, two, move, anew):
    stream = subprocess.Popen(pimem_cmd("append", "old", "--ndjson"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, env=subprocess_env())
    stream.stdin.write(b'{"kind":"user","text":"before the move"}\n')
    stream.stdin.flush()
    assert stream.stdout.readline() == b"2\n"
    assert subprocess.run(pimem_cmd(*move), capture_output=True, env=subprocess_env()).returncode == 0
    if anew:  # a new memory took the name
        assert subprocess.run(pimem_cmd("append", "old", "a new memory of that name"), capture_output=True,
                              env=subprocess_env()).returncode == 0
    before = snapshot(home)
    out, err = stream.communicate(b'{"kind":"user","text":"after the move"}\n', timeout=60)
    assert stream.returncode == 3 and err.count(b"\n") == 1 and b"was renamed or deleted while this had it open" in err, err
    assert snapshot(home) == before  # nothing written: no empty memory made again at the old name either


def test_since_follow_follows_a_rename_and_stops_at_a_delete(home, two):
    follow = subprocess.Popen(pimem_cmd("since", "old", "#0", "--follow"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=subprocess_env())
    assert orjson.loads(follow.stdout.readline())["i"] == 0 and orjson.loads(follow.stdout.readline())["i"] == 1
    for argv in (["rename", "old", "new"], ["append", "new", "logged after the rename"]):
        assert subprocess.run(pimem_cmd(*argv), capture_output=True, env=subprocess_env()).returncode == 0
    assert orjson.loads(follow.stdout.readline())["text"] == "logged after the rename"
    assert subprocess.run(pimem_cmd("delete", "new"), capture_output=True, env=subprocess_env()).returncode == 0
    out, err = follow.communicate(timeout=30)
    assert follow.returncode == 3 and err == b"pimem: error: memory 'new' was deleted while it was followed\n"


def test_fsck_repair_removes_the_temporary_copy_a_killed_write_left_and_nothing_else(run, home, two):
    # a real process killed inside write_atomic, between writing its temporary copy and renaming it
    code = ("import os, sys, time\nfrom pathlib import Path\nfrom pimem import home\n"
            "os.replace = lambda *a: (print('written', flush=True), time.sleep(600))\n"
            "home.write_atomic(Path(sys.argv[1]), b'{}')\n")
    proc = subprocess.Popen([sys.executable, "-c", code, str(home / "old" / "view.json")], env=subprocess_env(),
                            stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"written\n"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = home / "old" / f".view.json.{proc.pid}.tmp"
    assert left.exists()
    live = home / "old" / "main" / f".ranges.json.{os.getpid()}.tmp"  # (its process runs: a write under way)
    young = home / "old" / f".lines.json.{proc.pid}.tmp"  # (just made: maybe a process on another machine)
    users = home / "old" / f".notes.txt.{proc.pid}.tmp"  # (named so, but no twin of a file the memory keeps)
    live.write_bytes(b"{}")
    young.write_bytes(b"{}")
    users.write_bytes(b"mine")
    hour_ago = time.time() - 3700
    for path in (left, live, users):
        os.utime(path, (hour_ago, hour_ago))
    out = run("fsck", "old")
    assert out.exit_code == 0, out.stdout
    assert out.stdout == (f"old: files: .view.json.{proc.pid}.tmp: note: a temporary copy of view.json left by a write "
                          f"that was killed (process {proc.pid} is gone); readers never read it\n")
    assert left.exists()
    out = run("fsck", "--repair", "old")
    assert out.exit_code == 0, out.stdout
    assert out.stdout.startswith(f"old: files: .view.json.{proc.pid}.tmp: repaired: a temporary copy")
    assert not left.exists() and live.exists() and young.exists() and users.read_bytes() == b"mine"
    assert run("fsck", "old").stdout == "old: ok (2 messages)\n"


def test_fsck_repair_looks_again_before_it_removes_a_temporary_copy(home, two):
    # found stale while fsck checked without the writer lock; written again (a process of that PID, reused) by the
    # time --repair holds the lock and removes it: it is left
    from pimem import fsck

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    twin = home / "old" / f".view.json.{int(dead.stdout)}.tmp"
    twin.write_bytes(b"{}")
    hour_ago = time.time() - 3700
    os.utime(twin, (hour_ago, hour_ago))
    with Memory.open("old") as mem:
        [found] = fsck.check_temporaries(mem)
        twin.write_bytes(b"{} ")  # (now)
        found.action(mem)
        assert twin.read_bytes() == b"{} "
        os.utime(twin, (hour_ago, hour_ago))
        found.action(mem)
    assert not twin.exists()
