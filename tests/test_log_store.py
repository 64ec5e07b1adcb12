"""The message log on disk: schema, daily files, order, torn lines, integrity, permissions, home."""

import os
import stat

import orjson
import pytest

from conftest import snapshot
from pimem import Memory, env
from pimem.errors import IntegrityError


def stored_lines(home, name="main"):
    out = {}
    for path in sorted((home / name / "main").glob("*.jsonl")):
        out[path.name] = [orjson.loads(l) for l in path.read_bytes().splitlines() if l.strip()]
    return out


def test_kinds_aliases_and_size(home):
    mem = Memory.at("main")
    given = ["user", "pi", "tool", "echo", "work", "note", "assistant", "tool_call", "tool_result", "bash", "custom"]
    mem.append([{"kind": k, "text": "héllo 世界"} for k in given])
    kinds = [m["kind"] for m in mem.messages()]
    assert kinds == ["user", "pi", "tool", "echo", "work", "note", "pi", "tool", "echo", "echo", "work"]
    for m in mem.messages():
        assert m["size"] == len(f"{m['kind']}: héllo 世界".encode())


def test_exact_stored_line(home):
    Memory.at("main").append([{"kind": "user", "text": "hi", "date": "2026-10-08T09:30:00+08:00", "meta": {"source": "irc"}}])
    assert (home / "main" / "main" / "2026-10-08.jsonl").read_bytes() == (
        b'{"i":0,"kind":"user","text":"hi","size":8,"date":"2026-10-08T09:30:00+08:00","meta":{"source":"irc"}}\n'
    )


def test_dates_are_normalised_and_default_to_now(run, home):
    assert run("append", "main", "--date", "2026-10-01", "a").exit_code == 0
    assert run("append", "main", "--date", "2026-10-02T08:00:00Z", "b").exit_code == 0
    assert run("append", "main", "c").exit_code == 0
    dates = [m["date"] for m in Memory.open("main").messages()]
    local = env.now().tzinfo  # a date without an offset is local time
    assert dates[0].startswith("2026-10-01T00:00:00") and dates[0] != "2026-10-01" and local
    assert dates[1:] == ["2026-10-02T08:00:00Z", "2026-10-08T09:30:00+08:00"]


def test_daily_files_are_named_by_each_messages_date_and_read_in_i_order(home):
    mem = Memory.at("main")
    mem.append([
        {"kind": "user", "text": "a", "date": "2026-10-07T23:59:59+08:00"},
        {"kind": "user", "text": "b", "date": "2026-10-08T00:00:01+08:00"},
        # imported history: an older day's file gets a later i, and one day's file holds two runs
        {"kind": "user", "text": "c", "date": "2026-10-01T12:00:00+08:00"},
        {"kind": "user", "text": "d", "date": "2026-10-08T09:00:00-05:00"},
        {"kind": "user", "text": "e", "date": "2026-10-07T10:00:00+08:00"},
    ])
    files = stored_lines(home)
    assert {name: [m["i"] for m in msgs] for name, msgs in files.items()} == {
        "2026-10-01.jsonl": [2],
        "2026-10-07.jsonl": [0, 4],
        "2026-10-08.jsonl": [1, 3],
    }
    fresh = Memory.open("main")  # a new reader, nothing cached
    assert [m["text"] for m in fresh.messages()] == list("abcde")
    assert [m["text"] for m in fresh.messages(1, 4)] == list("bcd")
    assert fresh.count() == 5 and fresh.message(4)["text"] == "e"


def test_torn_last_line_is_skipped_then_sealed(run, home):
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "one"}, {"kind": "user", "text": "two"}])
    path = home / "main" / "main" / "2026-10-08.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"i":2,"kind":"user","text":"thr')  # a crash mid-write
    out = run("since", "main", "#0")
    assert [orjson.loads(l)["text"] for l in out.stdout.splitlines()] == ["one", "two"]
    assert Memory.open("main").count() == 2
    assert run("append", "main", "three").stdout == "2\n"
    lines = path.read_bytes().splitlines()
    assert lines[2] == b'{"i":2,"kind":"user","text":"thr'  # kept, on a line of its own, never rewritten
    assert orjson.loads(lines[3])["i"] == 2
    assert [m["text"] for m in Memory.open("main").messages()] == ["one", "two", "three"]


@pytest.mark.parametrize("damage,word", [("gap", "gap"), ("duplicate", "duplicate")])
def test_gap_or_duplicate_is_an_integrity_error(run, home, damage, word):
    Memory.at("main").append([{"kind": "user", "text": t} for t in "abc"])
    path = home / "main" / "main" / "2026-10-08.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(lines[0] + lines[2] if damage == "gap" else lines[0] + lines[1] + lines[1] + lines[2])
    before = snapshot(home)
    out = run("since", "main", "#0")
    assert out.exit_code == 5
    assert out.stderr.count("\n") == 1 and f"{word} in the log: " in out.stderr
    assert "pimem fsck" in out.stderr
    with pytest.raises(IntegrityError):
        list(Memory.open("main").messages())
    assert snapshot(home) == before  # reading never repairs


def test_permissions(run, home):
    old = os.umask(0)
    try:
        assert run("append", "main", "hello").exit_code == 0
        assert run("since", "main", "#0", "--cursor", "mailer").exit_code == 0
        Memory.open("main").save_config({"view": {"hi": 10, "lo": 5}})
    finally:
        os.umask(old)
    for path in [home, *home.rglob("*")]:
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode == (0o700 if path.is_dir() else 0o600), (path, oct(mode))
    assert {p.name for p in (home / "main").iterdir()} >= {"main", "cursors.json", "config.json"}


def test_home_resolution_order(tmp_path, monkeypatch):
    for var in ("PIMEM_HOME", "PI_MEM_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    assert env.home() == tmp_path / "user" / ".pi" / "memory"
    monkeypatch.setenv("PI_MEM_HOME", str(tmp_path / "pi"))
    assert env.home() == tmp_path / "pi"
    monkeypatch.setenv("PIMEM_HOME", str(tmp_path / "pimem"))
    assert env.home() == tmp_path / "pimem"
    assert env.home(str(tmp_path / "flag")) == tmp_path / "flag"


def test_home_flag_beats_the_environment(run, home, tmp_path):
    other = tmp_path / "other"
    assert run("append", "main", "--home", other, "hi").exit_code == 0
    assert (other / "main" / "main").is_dir() and not home.exists()
    assert run("since", "main", "#0").exit_code == 3  # not in $PIMEM_HOME
    assert run("since", "main", "#0", "--home", other).exit_code == 0


def test_pi_mem_home_is_used_when_pimem_home_is_unset(sh, tmp_path):
    env = {"PIMEM_HOME": "", "PI_MEM_HOME": str(tmp_path / "pi"), "HOME": str(tmp_path / "user")}
    assert sh("append", "main", "hi", **env).returncode == 0
    assert (tmp_path / "pi" / "main" / "main").is_dir()
    env = {"PIMEM_HOME": "", "PI_MEM_HOME": "", "HOME": str(tmp_path / "user")}
    assert sh("append", "main", "hi", **env).returncode == 0
    assert (tmp_path / "user" / ".pi" / "memory" / "main" / "main").is_dir()


def test_readers_of_unknown_memories_exit_3_and_create_nothing(run, home):
    for argv in (["since", "nope", "#0"], ["message", "nope", "0"], ["date", "nope", "0"], ["status", "nope"]):
        out = run(*argv)
        assert out.exit_code == 3 and out.stderr.startswith("pimem: error: no memory named 'nope'")
    assert not home.exists()


def test_a_new_process_starts_from_ranges_json_and_checks_it_against_file_sizes(home, monkeypatch):
    """ranges.json spares a new process opening every daily file; a file that grew since (a crash before the
    cache was replaced) is read again, and a damaged cache is ignored."""
    from pimem import store

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"m{k}", "date": f"2026-10-{k + 1:02d}T09:00:00+00:00"} for k in range(5)])
    saved = orjson.loads((home / "main" / "ranges.json").read_bytes())
    assert {name: row[1:3] for name, row in saved["files"].items()} == {f"2026-10-{k + 1:02d}.jsonl": [k, k] for k in range(5)}
    assert not (home / "main" / store.WRITING).exists()  # a completed write lifts its marker

    opened = []
    real_first = store._first_i
    monkeypatch.setattr(store, "_first_i", lambda f, size: opened.append(f.name) or real_first(f, size))
    assert Memory.open("main").count() == 5 and opened == []  # every file known from the cache

    # a writer that crashed after writing a message, before replacing the cache, left its marker
    before = (home / "main" / "ranges.json").read_bytes()
    Memory.at("main").append([{"kind": "user", "text": "late", "date": "2026-10-03T10:00:00+00:00"}])
    (home / "main" / "ranges.json").write_bytes(before)
    (home / "main" / store.WRITING).touch()
    assert Memory.open("main").count() == 6
    assert Memory.at("main").append([{"kind": "user", "text": "next"}]) == [6]
    assert not (home / "main" / store.WRITING).exists()

    (home / "main" / "ranges.json").write_bytes(b'{"boot": null, "files": {"2026-10-01.jsonl": [1, "x", 3, false]')
    assert Memory.open("main").count() == 7
    assert [m["i"] for m in Memory.open("main").messages()] == list(range(7))


def test_ranges_json_carries_each_day_files_crc_on_from_the_bytes_written(home):
    """Each write carries a day file's CRC-32 on from the bytes it writes, never reading the file back: it is
    the CRC-32 of the file as it is, through a batch that goes back a day, a torn line sealed, and a file grown
    behind pimem's back (read whole by the check of the log that this sets off; recorded at its new size, not
    as the ranges.json that was found wrong says)."""
    import zlib

    def recorded_right() -> bool:
        files = orjson.loads((home / "main" / "ranges.json").read_bytes())["files"]
        return {name: (row[0], row[7]) for name, row in files.items()} == \
            {p.name: (p.stat().st_size, zlib.crc32(p.read_bytes())) for p in (home / "main" / "main").iterdir()}

    days = ["01", "02", "01", "03"]
    Memory.at("main").append([{"kind": "user", "text": f"m{k}", "date": f"2026-10-{d}T09:00:00+00:00"}
                              for k, d in enumerate(days)])
    assert recorded_right()
    with open(home / "main" / "main" / "2026-10-03.jsonl", "ab") as f:
        f.write(b'{"i":4,"kind":"us')  # a torn write
    Memory.at("main").append([{"kind": "user", "text": "sealed first", "date": "2026-10-03T10:00:00+00:00"}])
    assert recorded_right()
    with open(home / "main" / "main" / "2026-10-02.jsonl", "ab") as f:
        f.write(b'{"i":5,"kind":"user","text":"by hand","size":13,"date":"2026-10-02T11:00:00+00:00"}\n')
    assert Memory.at("main").append([{"kind": "user", "text": "after it"}]) == [6]
    assert recorded_right()


@pytest.mark.parametrize("behind_its_back", ["other boot", "new file", "marker"])
def test_ranges_json_stands_for_the_files_only_when_no_write_can_have_happened_since(home, behind_its_back):
    """A reader takes the files' sizes from ranges.json without a stat each only when it was written complete
    in this boot, no writer's marker is there, and it names exactly the files there are."""
    from pimem import store

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"m{k}", "date": f"2026-10-{k + 1:02d}T09:00:00+00:00"} for k in range(3)])
    cache = home / "main" / "ranges.json"
    assert Memory.open("main").log._trusted(Memory.open("main").log._names())
    line = b'{"i":3,"kind":"user","text":"written behind the cache","size":30,"date":"2026-10-%s"}\n'
    if behind_its_back == "other boot":
        saved = orjson.loads(cache.read_bytes())
        cache.write_bytes(orjson.dumps({**saved, "boot": "a boot before a power cut"}))
        with open(home / "main" / "main" / "2026-10-03.jsonl", "ab") as f:
            f.write(line % b"03T10:00:00+00:00")
    elif behind_its_back == "new file":
        (home / "main" / "main" / "2026-10-09.jsonl").write_bytes(line % b"09T10:00:00+00:00")
    else:
        (home / "main" / store.WRITING).touch()
        with open(home / "main" / "main" / "2026-10-03.jsonl", "ab") as f:
            f.write(line % b"03T10:00:00+00:00")
    reader = Memory.open("main")
    assert not reader.log._trusted(reader.log._names())
    assert reader.count() == 4 and [m["text"] for m in reader.messages(3)] == ["written behind the cache"]


def test_reading_below_a_known_count_survives_older_files_growing(home):
    """A reader that listed the files once keeps reading below that count while a writer appends an old-dated
    message to an earlier day's file (which now ends past the next file's start)."""
    writer = Memory.at("main")
    writer.append([{"kind": "user", "text": f"m{k}", "date": f"2026-10-0{1 + k // 3}T09:00:00+00:00"} for k in range(6)])
    reader = Memory.open("main")
    assert reader.count() == 6
    writer.append([{"kind": "user", "text": "late", "date": "2026-10-01T10:00:00+00:00"}])
    assert [m["i"] for m in reader.messages(0, 6)] == list(range(6))
    assert [m["i"] for m in reader.messages(2, 5)] == [2, 3, 4]
    assert [m["i"] for m in reader.messages(0)] == list(range(7))


def test_reading_from_a_message_deep_in_a_long_file_bisects_to_its_line(home, monkeypatch):
    import pimem.store as store

    mem = Memory.at("main")
    day = [{"kind": "user", "text": f"{n} " + "x" * (40 + 37 * (n % 50)), "date": "2026-10-01T10:00:00+08:00"} for n in range(600)]
    mem.append(day[:300])
    mem.append([{"kind": "user", "text": "backdated", "date": "2026-09-01T10:00:00+08:00"}])  # files overlap: merged
    mem.append(day[300:])
    path = home / "main" / "main" / "2026-10-01.jsonl"
    data = path.read_bytes()
    assert len(data) > 4 * store._SKIP_MIN
    offsets = []
    real = store._entries
    monkeypatch.setattr(store, "_entries", lambda p, offset=0: offsets.append((p.name, offset)) or real(p, offset))
    everything = [m["text"] for m in Memory.at("main").messages()]
    assert sorted(offsets) == [("2026-09-01.jsonl", 0), ("2026-10-01.jsonl", 0)]
    line_of = {orjson.loads(line)["i"]: n for n, line in enumerate(data.splitlines(keepends=True))}
    starts = [sum(len(l) for l in data.splitlines(keepends=True)[:n]) for n in range(len(line_of) + 1)]
    for start in (1, 150, 299, 300, 301, 302, 450, 599, 600):
        offsets.clear()
        assert [m["text"] for m in Memory.at("main").messages(start)] == everything[start:]
        (offset,) = [o for name, o in offsets if name == path.name]
        assert offset in starts  # a line start, at or before the first line it must yield
        assert offset <= starts[line_of[start if start != 300 else 301]]
        if start >= 200:
            assert offset > 0  # well past the head of the file


def test_bisection_stops_at_a_line_it_cannot_read_and_reads_from_there(home):
    import pimem.store as store

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"{n} " + "y" * 500, "date": "2026-10-01T10:00:00+08:00"} for n in range(400)])
    path = home / "main" / "main" / "2026-10-01.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[200] = b"not json at all\n"  # damage: the reader skips it, and bisection must not trust it
    path.write_bytes(b"".join(lines))
    for start in (100, 199, 201, 350):
        offset = store._offset_below(path, start)
        head = path.read_bytes()[:offset]
        assert all(orjson.loads(l)["i"] < start for l in head.splitlines() if l.startswith(b"{"))


@pytest.mark.parametrize("then", ["nothing", "written again"])
def test_the_whole_log_check_reads_a_line_ending_in_a_brace_that_is_no_json_as_readers_do(home, then):
    """A line torn after a ``}`` of its text and sealed keeps its head ``{"i":1,`` and ends as an object
    does, but is no message: readers skip it, so the check of the whole log finds a gap where it stands alone
    and no duplicate where the message was written again after it."""
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": t} for t in ("a", "b}c", "d")])
    path = home / "main" / "main" / "2026-10-08.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    torn = lines[1][: lines[1].index(b"}") + 1] + b"\n"
    path.write_bytes(lines[0] + torn + (lines[1] if then == "written again" else b"") + lines[2])
    log = Memory.open("main").log
    if then == "nothing":
        with pytest.raises(IntegrityError, match="gap in the log: i=1 is missing"):
            log.check_whole("test")
    else:
        assert log.check_whole("test") == 3
