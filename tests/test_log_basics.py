import orjson

from pimem import Memory


def test_append_prints_i_and_since_streams_ndjson(run, home):
    assert run("append", "main", "hello", "world").stdout == "0\n"
    assert run("append", "main", "-k", "assistant", input="hi there\n").stdout == "1\n"
    out = run("since", "main", "#0")
    assert out.exit_code == 0
    rows = [orjson.loads(l) for l in out.stdout.splitlines()]
    assert rows == [
        {"i": 0, "kind": "user", "text": "hello world", "size": 17, "date": "2026-10-08T09:30:00+08:00"},
        {"i": 1, "kind": "pi", "text": "hi there\n", "size": 13, "date": "2026-10-08T09:30:00+08:00"},
    ]
    assert (home / "main" / "main" / "2026-10-08.jsonl").stat().st_mode & 0o777 == 0o600
    assert (home / "main").stat().st_mode & 0o777 == 0o700


def test_unknown_memory_exits_3_and_creates_nothing(run, home):
    out = run("since", "nope", "#0")
    assert out.exit_code == 3
    assert "no memory named 'nope'" in out.stderr
    assert not (home / "nope").exists()


def test_library_roundtrip(home):
    mem = Memory.at("lib")
    assert mem.append([{"kind": "user", "text": "a"}, {"kind": "tool_result", "text": "b"}]) == [0, 1]
    assert [m["kind"] for m in Memory.open("lib").messages()] == ["user", "echo"]
