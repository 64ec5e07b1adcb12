"""The log's commands: append, since, message, date, list, status, demo."""

import contextlib
import os
import shlex
import signal
import subprocess
import time
from datetime import datetime

import orjson
import pytest

from conftest import pimem_cmd, snapshot, subprocess_env
from pimem import Memory
from pimem.errors import BadInput

# PIMEM_NOW is 2026-10-08T09:30:00+08:00
DAY = [
    ("user", "old question", "2026-10-06T10:00:00+08:00"),
    ("pi", "old answer", "2026-10-06T10:01:00+08:00"),
    ("user", "check the db", "2026-10-08T08:00:00+08:00"),
    ("tool", "bash(psql -p 5433)", "2026-10-08T08:00:05+08:00"),
    ("echo", "psql: connected", "2026-10-08T08:00:06+08:00"),
    ("pi", "it listens on 5433", "2026-10-08T08:01:00+08:00"),
    ("user", "thanks", "2026-10-08T09:00:00+08:00"),
]


@pytest.fixture
def day(home):
    Memory.at("main").append([{"kind": k, "text": t, "date": d} for k, t, d in DAY])
    return Memory.open("main")


def rows(out):
    assert out.exit_code == 0, out.output
    return [orjson.loads(line) for line in out.stdout.splitlines()]


def ids(out):
    return [r["i"] for r in rows(out)]


def test_append_text_from_args_stdin_kind_date_meta(run, home):
    assert run("append", "main", "two", "words").stdout == "0\n"
    assert run("append", "main", "-k", "pi", input="from stdin\n").stdout == "1\n"
    out = run("append", "main", "--json", "--date", "2026-10-07T08:00:00+08:00", "--meta", '{"source":"irc","n":1}', "x")
    assert out.stdout == '{"i":2}\n'
    got = list(Memory.open("main").messages())
    assert [(m["kind"], m["text"]) for m in got] == [("user", "two words"), ("pi", "from stdin\n"), ("user", "x")]
    assert got[2]["meta"] == {"source": "irc", "n": 1} and got[2]["date"] == "2026-10-07T08:00:00+08:00"


def test_append_ndjson_prints_every_i_and_ignores_given_i_and_size(run, home):
    stream = b"".join(
        orjson.dumps(r) + b"\n"
        for r in [{"kind": "user", "text": "a", "i": 99, "size": 1}, {"kind": "assistant", "text": "b", "meta": {"model": "m"}}]
    ) + b"\n"  # blank lines are skipped
    out = run("append", "main", "--ndjson", input=stream)
    assert out.stdout == "0\n1\n"
    assert [(m["i"], m["kind"], m["size"]) for m in Memory.open("main").messages()] == [(0, "user", 7), (1, "pi", 5)]


def test_copying_a_memory_through_a_pipe(run, home, day):
    dump = run("since", "main", "#0", "--include-tools").stdout
    assert run("append", "copy", "--ndjson", input=dump).stdout == "".join(f"{i}\n" for i in range(len(DAY)))
    assert list(Memory.open("copy").messages()) == list(day.messages())


def test_since_is_ndjson_that_jq_style_tools_read(run, day):
    out = run("since", "main", "2026-10-08")
    assert [r["text"] for r in rows(out)] == ["check the db", "it listens on 5433", "thanks"]
    for line in out.stdout.splitlines():  # each line is the stored object, whole
        assert set(orjson.loads(line)) == {"i", "kind", "text", "size", "date"}


def test_since_accepts_dates_times_numbers_and_relative_times(run, day):
    assert ids(run("since", "main", "2026-10-08T08:00:30+08:00")) == [5, 6]
    assert ids(run("since", "main", "2026-10-08T00:30:00Z")) == [6]  # 08:30 at +08:00
    assert ids(run("since", "main", "08:30")) == [6]  # a time today, in local time
    assert ids(run("since", "main", "#5")) == [5, 6]
    assert ids(run("since", "main", "2h")) == [2, 5, 6]  # since 07:30
    assert ids(run("since", "main", "3d")) == [0, 1, 2, 5, 6]
    assert ids(run("since", "main", "yesterday")) == [2, 5, 6]
    assert ids(run("since", "main", "today")) == [2, 5, 6]
    assert ids(run("since", "main", "2026-10-09")) == []


def test_since_until_and_kind(run, day):
    assert ids(run("since", "main", "#0", "--until", "#2")) == [0, 1]
    assert ids(run("since", "main", "2026-10-06", "--until", "2026-10-08T08:01:00+08:00")) == [0, 1, 2]
    assert ids(run("since", "main", "#0", "--kind", "user")) == [0, 2, 6]
    assert ids(run("since", "main", "#0", "-k", "assistant", "-k", "user")) == [0, 1, 2, 5, 6]


def test_since_until_a_date_filters_by_date_when_the_log_is_not_in_date_order(run, day):
    """An earlier session imported after a later one: its messages, logged after the later ones, are still
    before --until (the stream was cut at the first message dated after it). A --cursor stops at the first
    message left out for its date, so the next run starts there and gives each message once."""
    Memory.open("main").append([{"kind": "user", "text": t, "date": d} for t, d in [
        ("older session", "2026-10-01T10:00:00+08:00"), ("its reply", "2026-10-01T10:05:00+08:00")]])
    assert ids(run("since", "main", "2026-09-30", "--until", "2026-10-02")) == [7, 8]
    assert ids(run("since", "main", "2026-09-30", "--until", "2026-10-07")) == [0, 1, 7, 8]
    assert ids(run("since", "main", "#0", "--until", "2026-10-07")) == [0, 1, 7, 8]
    assert [m["i"] for m in Memory.open("main").since(datetime.fromisoformat("2026-09-30T00:00:00+08:00"),
                                                       datetime.fromisoformat("2026-10-07T00:00:00+08:00"))] == [0, 1, 7, 8]
    assert ids(run("since", "main", "#0", "--until", "2026-10-07", "--cursor", "c")) == [0, 1]
    assert ids(run("since", "main", "#0", "--cursor", "c")) == [2, 5, 6, 7, 8]


def test_since_cursor_until_a_date_hands_each_message_out_once(run, home):
    """A cursor run with --until a date stops at the first message left out for its date: it printed those
    after it that were before --until and saved the cursor at that message, so the next run printed them
    again."""
    Memory.at("main").append([{"kind": "user", "text": f"m{n}", "date": d} for n, d in enumerate(
        ["2026-05-01T10:00:00Z", "2026-05-02T10:00:00Z", "2025-01-01T10:00:00Z", "2025-01-02T10:00:00Z", "2026-01-01T10:00:00Z"])])
    assert ids(run("since", "main", "--cursor", "c2", "--until", "2026-01-01")) == []
    assert ids(run("since", "main", "--cursor", "c2", "--until", "2026-01-01")) == []
    assert ids(run("since", "main", "--cursor", "c2")) == [0, 1, 2, 3, 4]
    assert ids(run("since", "main", "--cursor", "c3", "--until", "2026-05-02")) == [0]
    assert ids(run("since", "main", "--cursor", "c3")) == [1, 2, 3, 4]


def test_tool_traffic_is_private_by_default(run, day):
    assert [r["kind"] for r in rows(run("since", "main", "#0"))] == ["user", "pi", "user", "pi", "user"]
    assert ids(run("since", "main", "#0", "--include-tools")) == list(range(7))
    assert ids(run("since", "main", "#0", "--kind", "tool_result")) == [4]
    out = run("message", "main", "4")
    assert out.exit_code == 2 and "--include-tools" in out.stderr and out.stdout == ""
    assert run("message", "main", "4", "--include-tools").stdout == "psql: connected\n"


def test_since_text_is_one_line_per_message(run, day):
    out = run("since", "main", "#5", "--text")
    assert out.stdout == "#5 2026-10-08T08:01:00+08:00 pi: it listens on 5433\n#6 2026-10-08T09:00:00+08:00 user: thanks\n"


def test_since_bad_arguments(run, day):
    for argv, words in [
        (["since", "main"], "give WHEN"),
        (["since", "main", "#x"], "bad message number"),
        (["since", "main", "#-1"], "bad message number"),
        (["since", "main", "next week"], "bad date 'next week'"),
        (["since", "main", "#0", "--kind", "robot"], "unknown kind"),
        (["since", "main", "#0", "--follow", "--until", "#3"], "--follow and --until"),
        (["since", "main", "#0", "--cursor", "../x"], "invalid"),
    ]:
        out = run(*argv)
        assert out.exit_code == 2 and words in out.stderr and len(out.stderr.splitlines()) == 1, (argv, out.stderr)


def test_since_with_until_before_its_start_is_refused_and_a_cursor_past_until_is_caught_up(run, day, home):
    """A start after --until (dates, ages, message numbers) said nothing and exited 0, as if no message were
    there: one line says so now, exit 2, the store untouched. A cursor already past --until is a consumer
    caught up (a cron job's later run): nothing, exit 0, the cursor where it was."""
    before = snapshot(home)
    for argv in (["2026-10-08", "--until", "2026-10-06"], ["#5", "--until", "#2"], ["1h", "--until", "3h"],
                 ["#5", "--until", "#2", "--cursor", "c"]):
        out = run("since", "main", *argv)
        assert out.exit_code == 2 and out.stdout == "", (argv, out.stdout)
        assert out.stderr == f"pimem: error: --until {argv[2]} is before the start {argv[0]}\n", argv
    assert snapshot(home) == before
    assert ids(run("since", "main", "#2", "--until", "#2")) == []  # (an empty range, not a reversed one)
    assert ids(run("since", "main", "#0", "--until", "#3", "--cursor", "c")) == [0, 1, 2]
    for until in ("#2", "2026-10-06"):
        out = run("since", "main", "--cursor", "c", "--until", until)
        assert (out.exit_code, out.stdout, out.stderr) == (0, "", "")
    assert orjson.loads((home / "main" / "cursors.json").read_bytes()) == {"c": 3}


def test_cursor_gives_each_message_exactly_once(run, day, home):
    assert ids(run("since", "main", "--cursor", "mailer")) == [0, 1, 2, 5, 6]
    assert ids(run("since", "main", "--cursor", "mailer")) == []
    Memory.open("main").append([{"kind": "user", "text": "new"}, {"kind": "tool", "text": "ls"}, {"kind": "pi", "text": "done"}])
    assert ids(run("since", "main", "--cursor", "mailer")) == [7, 9]
    assert ids(run("since", "main", "--cursor", "mailer")) == []
    # a cursor starts at WHEN the first time, and WHEN is ignored once it exists
    assert ids(run("since", "main", "#6", "--cursor", "other")) == [6, 7, 9]
    assert ids(run("since", "main", "#0", "--cursor", "other")) == []
    # --until stops the cursor where it stopped reading
    assert ids(run("since", "main", "#0", "--until", "#2", "--cursor", "third")) == [0, 1]
    assert ids(run("since", "main", "#0", "--cursor", "third")) == [2, 5, 6, 7, 9]
    assert orjson.loads((home / "main" / "cursors.json").read_bytes()) == {"mailer": 10, "other": 10, "third": 10}


def test_a_cursor_read_through_a_pipe_moves_past_the_lines_its_reader_took_only(day, home):
    """``since --cursor c | head -1``: head read one line and left; the lines after it were written to the pipe
    (all five fit) but never read, and the next run gives them. A reader that reads all moves it to the end."""
    def piped(reader: str) -> bytes:
        out = subprocess.run(f"{shlex.join(pimem_cmd('since', 'main', '#0', '--cursor', 'c'))} | {reader}; exit ${{PIPESTATUS[0]}}",
                             shell=True, executable="bash", capture_output=True, env=subprocess_env(), timeout=60)
        assert (out.returncode, out.stderr) == (0, b"")
        return out.stdout

    assert [orjson.loads(line)["i"] for line in piped("head -1").splitlines()] == [0]
    assert orjson.loads((home / "main" / "cursors.json").read_bytes()) == {"c": 1}
    assert [orjson.loads(line)["i"] for line in piped("head -2").splitlines()] == [1, 2]  # (3 and 4: tools)
    assert [orjson.loads(line)["i"] for line in piped("cat").splitlines()] == [5, 6]
    assert orjson.loads((home / "main" / "cursors.json").read_bytes()) == {"c": 7}
    assert piped("head -1") == b""


def test_consumers_saving_their_cursors_at_once_lose_none_of_each_others(day, home):
    procs = [subprocess.Popen(pimem_cmd("since", "main", "--cursor", f"c{k}"), stdout=subprocess.DEVNULL, env=subprocess_env())
             for k in range(12)]
    assert [p.wait(timeout=60) for p in procs] == [0] * 12
    assert orjson.loads((home / "main" / "cursors.json").read_bytes()) == {f"c{k}": 7 for k in range(12)}
    mem = Memory.open("main")
    for bad in (-1, "3", 1.5, True):  # (the library too: a cursor is a message number)
        with pytest.raises(BadInput):
            mem.save_cursor("c0", bad)


def test_follow_prints_new_messages_as_they_are_logged(sh, day, home):
    proc = subprocess.Popen(pimem_cmd("since", "main", "#6", "--follow"), stdout=subprocess.PIPE, env=subprocess_env())
    try:
        assert orjson.loads(proc.stdout.readline())["text"] == "thanks"
        for text in ("first live", "second live"):
            assert sh("append", "main", text).returncode == 0
            assert orjson.loads(proc.stdout.readline())["text"] == text
        assert proc.poll() is None  # still following
    finally:
        proc.kill()
        proc.wait()


def test_broken_pipe_exits_quietly(home):
    Memory.at("main").append([{"kind": "user", "text": f"message {n} " + "x" * 200} for n in range(20_000)])
    for flags in ([], ["--text"]):
        out = subprocess.run(
            f"{shlex.join(pimem_cmd('since', 'main', '#0', *flags))} | head -1; exit ${{PIPESTATUS[0]}}",
            shell=True, executable="bash", capture_output=True, env=subprocess_env(), timeout=60,
        )
        assert (out.returncode, out.stderr) == (0, b"")
        assert out.stdout.startswith(b'{"i":0,' if not flags else b"#0 ")


def test_a_follower_whose_reader_went_away_ends_while_nothing_is_logged(day, home):
    """``since --follow | head -1`` ends (exit 0, quietly) once head has gone, as ``tail -f`` does, not at the
    next message logged; with --cursor too (the cursor is past the line head took)."""
    for extra in ([], ["--cursor", "c"]):
        proc = subprocess.Popen(f"{shlex.join(pimem_cmd('since', 'main', '#6', '--follow', *extra))} | head -1; "
                                "exit ${PIPESTATUS[0]}", shell=True, executable="bash", stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, env=subprocess_env(), start_new_session=True)
        try:
            out, err = proc.communicate(timeout=60)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # (pimem too, had it not ended)
            proc.wait()
        assert (proc.returncode, err) == (0, b"")
        assert orjson.loads(out)["text"] == "thanks"
    assert Memory.open("main").cursor("c") == 7


def test_message_prints_the_text_exactly(run, day):
    Memory.open("main").append([{"kind": "user", "text": "  spaced\n\nlines \n"}])
    assert run("message", "main", "7").stdout == "  spaced\n\nlines \n\n"
    assert rows(run("message", "main", "2", "--json")) == [
        {"i": 2, "kind": "user", "text": "check the db", "size": 18, "date": "2026-10-08T08:00:00+08:00"}
    ]
    out = run("message", "main", "8")
    assert out.exit_code == 3 and out.stderr.startswith("pimem: error: no message")
    out = run("message", "main", "--", "-1")  # not a message number at all
    assert out.exit_code == 2 and "use a whole number from 0" in out.stderr


def test_a_memory_with_no_messages_says_so(run, home):
    assert run("remember", "m", "use pnpm").exit_code == 0  # (a memory of memories only: no messages yet)
    for argv in (["message", "m", "0"], ["date", "m", "0"]):
        out = run(*argv)
        assert (out.exit_code, out.stderr) == (3, "pimem: error: no message 0 in 'm': it has no messages\n")
    Memory.open("m").append([{"kind": "user", "text": "one"}])
    assert run("message", "m", "1").stderr == "pimem: error: no message 1 in 'm': it has 1 message (0…0)\n"


def test_date_and_date_at(run, day):
    assert run("date", "main", "5").stdout == "2026-10-08T08:01:00+08:00\n"
    assert run("date", "main", "--at", "2026-10-07").stdout == "2\n"
    assert run("date", "main", "--at", "2026-10-08T08:00:06+08:00").stdout == "4\n"
    assert rows(run("date", "main", "--at", "08:30", "--json")) == [{"i": 6, "date": "2026-10-08T09:00:00+08:00"}]
    out = run("date", "main", "--at", "2026-10-09")
    assert out.exit_code == 1 and out.stdout == ""
    assert run("date", "main", "9").exit_code == 3
    assert run("date", "main").exit_code == 2
    assert run("date", "main", "1", "--at", "today").exit_code == 2
    # a node's dates: its label as the view writes it (to join with view --json), whatever zeros it was typed with
    assert rows(run("date", "main", "04+02", "--json")) == [
        {"label": "4+2", "first": "2026-10-08T08:00:06+08:00", "last": "2026-10-08T08:01:00+08:00"}]


def test_list_and_status(run, home, day):
    Memory.at("other").append([{"kind": "user", "text": "second memory"}])
    assert rows(run("list", "--json")) == [
        {"name": "main", "messages": 7, "first": "2026-10-06T10:00:00+08:00", "last": "2026-10-08T09:00:00+08:00", "last_user": "thanks"},
        {"name": "other", "messages": 1, "first": "2026-10-08T09:30:00+08:00", "last": "2026-10-08T09:30:00+08:00", "last_user": "second memory"},
    ]
    lines = run("list").stdout.splitlines()
    assert lines[0].startswith("main") and lines[0].endswith("thanks") and " 7 messages  " in lines[0]
    assert " 1 message   " in lines[1] and len(lines[0]) - len("thanks") == len(lines[1]) - len("second memory")
    status = rows(run("status", "main", "--json"))[0]
    assert status["messages"] == 7 and status["log_files"] == 2
    assert status["log_bytes"] == sum(p.stat().st_size for p in (home / "main" / "main").iterdir())
    text = run("status", "main").stdout
    assert "messages  7  in 2 daily files" in text
    assert "in 1 daily file, " in run("status", "other").stdout and "1 of 1 node built" in run("status", "other").stdout


def test_list_cuts_the_last_message_to_the_terminal_width_in_columns(run, home, monkeypatch):
    import unicodedata

    def cells(line: str) -> int:  # (display width, measured apart from the code under test)
        return sum(2 if unicodedata.east_asian_width(ch) in "WF" else 1 for ch in line)

    monkeypatch.setenv("COLUMNS", "70")
    Memory.at("wide").append([{"kind": "user", "text": "部署讨论：staging 数据库端口是 5433，用户要求保持原样，不要动生产库。🚀🚀🚀"}])
    Memory.at("narrow").append([{"kind": "user", "text": "x" * 100}])
    lines = run("list").stdout.splitlines()
    widths = {line.split()[0]: cells(line) for line in lines}
    assert widths["narrow"] == 70 and widths["wide"] in (69, 70)  # (a wide character does not fit in one cell)
    assert all(line.endswith("…") for line in lines)


def test_list_cuts_the_last_message_before_a_control_characters_marker_not_inside_it(run, home, monkeypatch):
    """A control character is shown as a two-character marker (``^G``, ``^[``); cut to the terminal's width, the
    line could keep its ``^`` alone (``xxxx^…``): it is cut before the marker."""
    monkeypatch.setenv("COLUMNS", "70")  # (16 columns left for the text, after the name, count and date)
    Memory.at("bell").append([{"kind": "user", "text": "x" * 14 + "\x07yyyy"}])
    Memory.at("escape").append([{"kind": "user", "text": "好" * 7 + "\x1b[31mred"}])
    Memory.at("whole").append([{"kind": "user", "text": "x" * 12 + "\x07yy"}])  # (it fits: the marker shown)
    Memory.at("caret").append([{"kind": "user", "text": "x" * 12 + "a^2 b"}])  # (a caret the user wrote, cut after)
    said = {line.split()[0]: line.rsplit("  ", 1)[1] for line in run("list").stdout.splitlines()}
    assert said == {"bell": "x" * 14 + "…", "escape": "好" * 7 + "…", "whole": "x" * 12 + "^Gyy",
                    "caret": "x" * 12 + "a^2…"}


def test_list_with_no_memories_exits_1(run, home):
    out = run("list")
    assert out.exit_code == 1 and out.stdout == "" and "no memories" in out.stderr


def test_demo_logs_the_sample_once(run, home):
    first = run("demo")
    assert first.exit_code == 0 and "logged" in first.stderr
    count = Memory.open("demo").count()
    spans = [tuple(map(int, line.split("|", 1)[0].split("+"))) for line in first.stdout.splitlines()]
    assert count > 5 and sum(n for _, n in spans) == count and [s for s, _ in spans] == sorted(s for s, _ in spans)
    assert len(spans) < count  # the demo's small view budget folds the old part of the sample
    log = home / "demo" / "main"
    before = snapshot(log)
    again = run("demo")
    assert again.exit_code == 0 and again.stdout == first.stdout and "already holds" in again.stderr
    assert snapshot(log) == before  # nothing logged twice (derived state such as the index may be touched)
    assert run("append", "mine", "my own note").exit_code == 0
    before = snapshot(home / "mine")
    out = run("demo", "--name", "mine")  # a memory of the user's own: the sample is not poured into it
    assert out.exit_code == 2 and "holds messages of its own" in out.stderr and snapshot(home / "mine") == before
    copy = run("since", "demo", "#0", "--until", "#10", "--include-tools").stdout  # part of the sample, copied
    assert run("append", "part", "--ndjson", input=copy).exit_code == 0
    assert run("demo", "--name", "part").exit_code == 0  # the rest logged, and its tree built
    assert orjson.loads(run("status", "part", "--json").stdout)["tree"]["pending"] == 0


def test_demo_runs_twice_while_a_watcher_of_the_home_builds_it(run, home):
    """`pimem watch` (every memory of the home) builds the demo too: the demo does not fail for it (the watcher's
    lease is not taken from it), it waits for what the watcher builds and prints the view."""
    assert run("append", "main", "hello").exit_code == 0
    watcher = subprocess.Popen(pimem_cmd("watch"), env=subprocess_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        first = run("demo")
        assert first.exit_code == 0, first.stderr
        deadline = time.monotonic() + 60
        while not ((home / "demo" / "lock.json").exists()
                   and orjson.loads((home / "demo" / "lock.json").read_bytes()).get("pid") == watcher.pid):
            assert watcher.poll() is None and time.monotonic() < deadline, "the watcher did not take the demo"
            time.sleep(0.05)
        log = snapshot(home / "demo" / "main")
        again = run("demo")
        assert again.exit_code == 0, again.stderr
        assert again.stdout == run("view", "demo").stdout and "--wait" not in again.stderr
        assert snapshot(home / "demo" / "main") == log
    finally:
        watcher.terminate()
        watcher.wait(60)


def test_reads_never_take_the_writer_lock(sh, day, home):
    """A reader answers while a writer holds the lock; a writer waits and then gives up with exit 4."""
    from filelock import FileLock

    with FileLock(str(home / "main" / "write.lock")):
        start = time.monotonic()
        assert sh("since", "main", "#0").returncode == 0
        out = sh("append", "main", "--timeout", "0.5", "blocked")
        assert out.returncode == 4 and b"locked" in out.stderr
        assert time.monotonic() - start < 50
    assert Memory.open("main").count() == len(DAY)


def test_a_planted_link_or_a_file_in_the_way_is_one_line(sh, home, tmp_path):
    """What the system refuses is said in one line (exit 7), never a traceback; a link planted as a day file
    is never written through (exit 5; a real full disk: tests/test_full_disk.py); what was logged stays."""
    assert sh("append", "main", "--date", "2026-10-08T09:00:00+08:00", "kept").returncode == 0
    day = home / "main" / "main" / "2026-10-09.jsonl"
    day.symlink_to("/dev/full")
    out = sh("append", "main", "--date", "2026-10-09T09:00:00+08:00", "lost to a full disk")
    assert out.returncode == 5
    assert out.stderr.decode() == f"pimem: error: {day} is a symbolic link: pimem never follows links inside its home; remove it\n"
    day.unlink()
    assert sh("since", "main", "#0", "--text").stdout.decode().count("kept") == 1
    assert sh("append", "main", "next").stdout == b"1\n"

    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where a home should be")
    out = sh("append", "main", "hi", "--home", str(blocker))
    assert out.returncode == 7 and out.stderr.decode().startswith("pimem: error: ")
    assert out.stderr.count(b"\n") == 1 and b"Traceback" not in out.stderr


def test_lines_for_people_show_control_characters_and_message_keeps_them(run, sh, home):
    """``since --text``, ``search``, ``list`` and ``map`` print one line a terminal shows as it is: an escape
    sequence or a bell from a transcript is written ``^[`` / ``^G``, not obeyed; ``message`` gives the text
    exactly."""
    text = "ansi \x1b[31mRED\x1b[0m and bell \x07 end\r\nnext \x9b line \u202ereversed"
    run("append", "m", text)
    run("remember", "m", text)  # a memory's lines too, each shown as such
    for argv in (["since", "m", "#0", "--text"], ["search", "ansi"], ["list"], ["map", "m", "--width", "80"],
                 ["memories", "m"]):
        out = run(*argv).stdout
        assert not any(ord(c) < 32 and c != "\n" or 127 <= ord(c) < 160 or c == "\u202e" for c in out), (argv, out)
        assert "^[[31mRED" in out and "^G" in out, (argv, out)
    assert sh("message", "m", "0").stdout == (text + "\n").encode()
    assert run("context", "m", "--cwd", "/tmp/a\nb").stdout.rstrip().splitlines()[-1].endswith("cwd: /tmp/a b</turn>")


def test_view_lines_are_one_line_each_and_inert_on_a_terminal(run, home):
    """``view``, ``context`` and ``zoom`` show a message's line as one physical line that steers nothing: an
    escape sequence is left out, a bell, a C1 control, a line or paragraph separator and a vertical tab are spaces
    (one a byte, so the line is the size ``view --stats`` counted), a bidirectional override is left out (it was
    U+FFFD, which the message did not hold); every reader's
    ``splitlines`` then counts the lines ``view --stats`` does (before, ``ESC[2J`` cleared the screen and
    U+2028 split a line in two)."""
    text = "clear \x1b[2J bell \x07 csi \x9b nel \x85 ls \u2028 ps \u2029 vt \x0b ff \x0c fs \x1c \u202ereversed"
    run("append", "m", text)
    run("append", "m", "ok")
    shown = {"view": run("view", "m").stdout, "context": run("context", "m").stdout, "zoom": run("zoom", "m", "0+2").stdout}
    for name, out in shown.items():
        assert not any(ord(c) < 32 and c != "\n" or 127 <= ord(c) < 160 or c in "\u2028\u2029\u202e" for c in out), (name, out)
        assert "clear  bell" in out and " reversed" in out and "\ufffd" not in out, (name, out)
    assert shown["view"].splitlines() == shown["view"].split("\n")[:-1] and len(shown["view"].splitlines()) == 2
    assert len(shown["view"].encode()) == orjson.loads(run("view", "m", "--stats", "--json").stdout)["bytes"]
    whole = run("zoom", "m", "0+1").stdout  # the message itself: its newlines kept (it has none), else its view line
    assert whole == shown["view"].splitlines()[0] + "\n"
    first = orjson.loads(run("view", "m", "--json").stdout.split("\n")[0])
    assert first["text"] == "user: " + text  # the JSON gives the text exactly


def test_lines_for_a_person_steer_nothing_on_a_terminal(tmp_path):
    """On a terminal (a pty: pimem colours its own parts there), ``search``, ``list``, ``since --text``, ``map``,
    ``memories`` and ``status`` write only their own colour codes: a message's clipboard write (OSC 52), bell
    and screen clear are shown as ``cat -v`` shows them (``^[]52;…^G``), and so is a home whose path holds a
    newline and an escape sequence (``status`` printed it raw, and an error naming the home broke its line)."""
    import os
    import pty
    import re
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    home = tmp_path / "ho\n\x1b]52;c;QQ==\x07me"
    home.mkdir()
    evil = "look \x1b]52;c;ZWNobyBwd25lZA==\x07 x \x1b[2J"

    def on_a_pty(*args) -> bytes:
        leader, follower = pty.openpty()
        with subprocess.Popen(pimem_cmd(*args), stdin=subprocess.DEVNULL, stdout=follower, stderr=follower,
                              env=subprocess_env(PIMEM_HOME=home, NO_COLOR="", TERM="xterm")) as proc:
            os.close(follower)
            out = b""
            while True:
                try:
                    chunk = os.read(leader, 65536)
                except OSError:  # (the pty's other end closed)
                    break
                if not chunk:
                    break
                out += chunk
        os.close(leader)
        return out

    for argv in (["append", "m", evil], ["remember", "m", evil]):
        assert subprocess.run(pimem_cmd(*argv), capture_output=True, env=subprocess_env(PIMEM_HOME=home)).returncode == 0
    for argv in (["search", "look", "m"], ["list"], ["since", "m", "#0", "--text"], ["map", "m"], ["memories", "m"],
                 ["status", "m"], ["since", "nothing-here"]):
        out = on_a_pty(*argv)
        assert b"\x07" not in out and b"\x1b]" not in out and b"\x1b[2J" not in out, (argv, out)
        assert not re.search(rb"\x1b(?!\[[0-9;]*m)", out), (argv, out)  # (only colour codes of its own)
        assert b"ho\r\n" not in out, (argv, out)  # (the home's newline: a pty writes it as CR LF)
        if argv[0] != "map":
            assert b"^[]52;c;" in out, (argv, out)


def test_view_lines_leave_out_colour_codes_and_invisible_format_characters(run, sh, home):
    """A line the model reads holds no terminal escape sequence (its ESC a space left ``[31m`` standing in the
    text) and no other invisible format character (a zero-width space, a byte order mark, tags outside a flag), but
    the direction marks right-to-left writers put in (U+200E, U+200F, U+061C) stay; ``view --stats`` counts the
    bytes shown, and the message itself stays as it was logged (``message``, ``zoom ID+1``, ``view --json``'s
    text)."""
    text = ("build \x1b[1;31mfailed\x1b[0m in \x1b]0;title\x07ci: see\u200e log\u200f.txt \u061cnow; "
            "zero\u200bwidth \ufeffbom \U000e0041\U000e0042hidden flag \U0001f3f4\U000e0067\U000e0062\U000e0073"
            "\U000e0063\U000e0074\U000e007f ok")
    run("append", "m", text)
    run("append", "m", "ok")
    shown = {"view": run("view", "m").stdout, "context": run("context", "m").stdout,
             "zoom": run("zoom", "m", "0+2").stdout}
    for name, out in shown.items():
        assert "build failed in ci: see\u200e log\u200f.txt \u061cnow; zerowidth bom hidden flag \U0001f3f4\U000e0067" in out, (name, out)
        assert not any(c in out for c in "[\u200b\ufeff\U000e0041"), (name, out)
    assert len(shown["view"].encode()) == orjson.loads(run("view", "m", "--stats", "--json").stdout)["bytes"]
    assert orjson.loads(run("view", "m", "--json").stdout.split("\n")[0])["text"] == "user: " + text
    assert sh("message", "m", "0").stdout == (text + "\n").encode()
    assert "\x1b" not in run("zoom", "m", "0+1").stdout and "build failed in" in run("zoom", "m", "0+1").stdout


_SAID = "see\u200e log\ufeff \u200bzw\r\nnext \x1b[31mred\x1b[0m\u202eX\x07"


@pytest.mark.parametrize("argv, shown", [
    (["context", "m"], "#0 user: see\u200e log zw\nnext redX \n"),  # the previous exchange
    (["zoom", "m", "0+1"], "0+1|user: see\u200e log zw\nnext redX \n"),
    (["recall", "m", "--ids", "0"], "] user 2026-10-08T09:30:00+08:00 held=verbatim\nsee\u200e log zw\nnext redX \n"),
    (["recall", "m", "zw"], "\nsnippet: see\u200e log zw\nnext redX "),
    (["since", "m", "#0", "--text"], " user: see\u200e log zw next ^[[31mred^[[0mX^G\n"),
    (["search", "next"], " user: see\u200e log zw next ^[[31mred^[[0mX^G"),
    (["map", "m", "--width", "80"], " you    see\u200e log zw next ^[[31mred^[[0mX^G"),
    (["list"], "  see\u200e log zw next ^[[31mred^[[0mX^G"),
    (["memories", "m"], "\n  see\u200e log zw\n  next ^[[31mred^[[0mX^G\n"),
])
def test_every_line_for_a_reader_leaves_out_invisible_format_characters(run, home, argv, shown):
    """A message's words shown as lines for a person or a model (the previous exchange, ``zoom ID+1``, recall's
    text, ``since --text``, ``search``, ``map``, ``list``, ``memories``) leave out the zero-width space and the
    byte order mark as a view line does, and keep the direction marks, through one function (``tree.plain``): the
    previous exchange and ``zoom ID+1`` kept them, and recall printed the message as logged (a colour code, a CR
    that sends the cursor back, an override that reorders the line). A CR LF is a newline where newlines are
    kept, a space where they are not; a line for a person still shows a colour code as ``cat -v`` does."""
    run("append", "m", _SAID)
    run("remember", "m", _SAID.replace("\r\n", "\n"))
    out = run(*argv).stdout
    assert not any(c in out for c in "\u200b\ufeff\u202e\r\x1b\x07"), (argv, out)
    assert shown in out, (argv, out)


def test_list_shows_times_in_the_readers_zone_and_status_the_days_earliest_and_latest(run, home):
    """list showed a memory's last time as its writer wrote it (10:00 in UTC) where status shows the reader's
    (18:00+08:00); and status's first and last were those of the first and last message of their day files,
    not the earliest and latest in them (appended 10:00, then 08:00: 'to' said 08:00). The JSON keeps the
    dates as recorded."""
    Memory.at("main").append([{"kind": "user", "text": "first", "date": "2026-05-11T10:00:00+00:00"},
                              {"kind": "user", "text": "late entry", "date": "2026-05-11T08:00:00+00:00"},
                              {"kind": "pi", "text": "next day", "date": "2026-05-12T09:00:00+00:00"},
                              {"kind": "pi", "text": "next day, earlier", "date": "2026-05-12T07:00:00+00:00"}])
    assert "  2026-05-12 17:00  " in run("list").stdout  # (PIMEM_NOW is +08:00)
    assert rows(run("list", "--json"))[0]["last"] == "2026-05-12T09:00:00+00:00"
    text = run("status", "main").stdout
    assert "from      2026-05-11T16:00:00+08:00\n" in text and "to        2026-05-12T17:00:00+08:00\n" in text, text
    status = rows(run("status", "main", "--json"))[0]
    assert (status["first"], status["last"]) == ("2026-05-11T08:00:00+00:00", "2026-05-12T09:00:00+00:00")


def test_list_and_fsck_json_say_every_memory_the_damaged_one_as_the_api_does(run, home):
    from pimem import api

    assert run("append", "a", "hello").exit_code == 0 and run("append", "b", "hi", "there").exit_code == 0
    out = run("fsck", "--json")
    assert out.exit_code == 0
    assert [orjson.loads(line) for line in out.stdout.splitlines()] == [
        {"memory": "a", "ok": True, "messages": 1}, {"memory": "b", "ok": True, "messages": 1}]
    (log,) = (home / "b" / "main").glob("*.jsonl")
    log.write_bytes(log.read_bytes() * 2)  # message 0 twice: every command refuses b (exit 5)
    out = run("list", "--json")
    rows = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert out.exit_code == 5 and out.stderr.count("\n") == 1 and out.stderr.startswith("pimem: error: b: ")
    assert [row["name"] for row in rows] == ["a", "b"] and list(rows[1]) == ["name", "error"]
    assert rows == api.list_memories()
    fsck = [orjson.loads(line) for line in run("fsck", "--json").stdout.splitlines()]
    assert fsck[0] == {"memory": "a", "ok": True, "messages": 1} and all(row["memory"] == "b" for row in fsck[1:])


def test_a_verbatim_line_keeps_the_direction_marks_and_holds_no_replacement_character(run, sh, home):
    """README: ``zoom ID+1`` shows the message whole and a verbatim line keeps the marks right-to-left writers use.
    Both left out U+200F and showed an embedding (U+202B … U+202C) as U+FFFD, a character the message did not
    hold: the direction marks now stay and an embedding, override or isolate is left out, on every read path."""
    text = "המחיר\u200f 40$ \u202bשלום ok\u202c \u061cend \u2067iso\u2069"
    run("append", "m", text)
    run("append", "m", "ok")
    from pimem import api

    outs = {"view": run("view", "m").stdout, "zoom": run("zoom", "m", "0+1").stdout, "context": run("context", "m").stdout,
            "halves": run("zoom", "m", "0+2").stdout, "api": api.view("m")["lines"][0], "search": run("search", "ok").stdout,
            "since": run("since", "m", "#0", "--text").stdout}
    for name, out in outs.items():
        assert "המחיר\u200f 40$ שלום ok \u061cend iso" in out, (name, out)
        assert not any(c in out for c in "\ufffd\u202b\u202c\u2067\u2069"), (name, out)
    assert sh("message", "m", "0").stdout == (text + "\n").encode()


def test_start_up_imports_no_summary_search_or_provider_code(home):
    """Agent wrappers run pimem every turn, and every command registers with the CLI at start-up: what the
    command modules import at their top is paid by ``--version`` and ``append`` alike. The offline compactor's
    tool-work reader and redaction (``toolwork``, ``privacy``), the tree, SQLite and the HTTP client are loaded
    by the commands that use them (recall imported toolwork and the tree at its top: ~5 ms a command).
    ``pimem --version`` alone registers no command, and so imports none of their modules nor the store
    (``pimem.Memory`` is imported when first asked for): every command module was ~1.9x a minimal typer app."""
    import sys

    heavy = ("pimem.toolwork", "pimem.privacy", "pimem.tree", "pimem.compactor", "sqlite3", "httpx",
             "pimem.commands", "pimem.memory", "pimem.store")
    probe = ("import atexit, sys\n"
             f"atexit.register(lambda: sys.stderr.write(' '.join(m for m in {heavy + ('pimem.cli',)!r} if m in sys.modules)))\n"
             "from pimem.cli import main; main(sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", probe, "--version"], capture_output=True, timeout=60, env=subprocess_env())
    assert proc.returncode == 0 and proc.stdout.startswith(b"pimem ")
    assert proc.stderr == b"pimem.cli"  # (the probe ran, and listed none of them)


def test_help_imports_neither_rich_nor_the_memory_logs_chain(home):
    """``pimem --help`` registers every command, and so imports what their modules import at their top:
    ``map``'s narrowest width loaded rich (its cell measure, ~1.2 ms) and the memories' choices the hash chain of
    ``memory.jsonl`` (~1.7 ms). They are imported where a picture is drawn or the log is read or written."""
    import sys

    probe = ("import atexit, sys\n"
             "atexit.register(lambda: sys.stderr.write(' '.join(m for m in ('pimem.commands.map', 'pimem.commands.remember',"
             " 'rich', 'pimem.chain') if m in sys.modules)))\n"
             "from pimem.cli import main; main(sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", probe, "--help"], capture_output=True, timeout=60, env=subprocess_env())
    assert proc.returncode == 0 and b"remember" in proc.stdout
    assert proc.stderr == b"pimem.commands.map pimem.commands.remember"  # (the probe ran: the commands were loaded)


def test_append_compiles_no_date_or_escape_patterns_it_does_not_use(home, run):
    """``pimem append`` of a plain ASCII text reads no WHEN and holds no escape sequence: the patterns of the
    WHEN grammar (``when._spoken_forms``, ``when._shapes``) and of what a view line leaves out (``tree._hidden``)
    are compiled when first used (~1.5 ms a start-up); a view still leaves an escape sequence out."""
    import sys

    probe = ("import atexit, sys\n"
             "def compiled():\n"
             "    from pimem import tree, when\n"
             "    sys.stderr.write(' '.join(f.__name__ for f in (when._spoken_forms, when._shapes, tree._hidden)"
             " if f.cache_info().currsize))\n"
             "atexit.register(compiled)\n"
             "from pimem.cli import main; main(sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", probe, "append", "probe", "the staging db listens on 5433"],
                          capture_output=True, timeout=60, env=subprocess_env())
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"0\n", b"")
    run("append", "probe", "red \x1b[31mwarning\x1b[0m")
    assert "red warning" in run("view", "probe").stdout


@pytest.mark.parametrize("command", ["view", "context"])
def test_a_turn_with_no_builder_imports_no_socket(home, run, command):
    """``view`` and ``context`` look for a watcher or build-tree every turn (``lease``); only a lease record they
    find is compared with this host's name, so ``socket`` (~1.5 ms) is imported only then."""
    import sys

    run("append", "main", "hello there")
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: sys.stderr.write(str('socket' in sys.modules)))\n"
             "from pimem.cli import main; main(sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", probe, command, "main"], capture_output=True, timeout=60,
                          env=subprocess_env())
    assert proc.returncode == 0 and b"hello there" in proc.stdout and proc.stderr == b"False"


def test_help_imports_no_command_engine(home):
    """``pimem --help`` registers every command, so each command module's top is paid by it: a command imports
    its engine when it runs (recall, fsck, compaction, housekeeping: OpenSSL's hashlib and socket with them,
    ~8 ms), while the help lists every command as before."""
    import sys

    engines = ("pimem.recall", "pimem.fsck", "pimem.compaction", "pimem.housekeeping", "hashlib", "socket")
    probe = ("import atexit, sys\n"
             f"atexit.register(lambda: sys.stderr.write(' '.join(m for m in {engines!r} if m in sys.modules)))\n"
             "from pimem.cli import main; main(sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", probe, "--help"], capture_output=True, timeout=60, env=subprocess_env())
    assert proc.returncode == 0 and proc.stderr == b""
    assert all(f"\n  {name} " in proc.stdout.decode() for name in ("recall", "fsck", "compact", "rename", "delete"))


def test_commands_run_in_a_callers_process_leave_no_log_file_open(run, home):
    """A command run in the caller's process (an agent wrapper calling pimem's CLI in-process every turn, or the
    tests' runner) left the day files its memory's index read open for good: raw descriptors, which the garbage
    collector never closed (one more a ``recall``, a ``zoom``). They are closed once the index is collected."""
    import gc
    import os

    assert run("append", "m", "hello world").exit_code == 0 and run("remember", "m", "the db is on 5433").exit_code == 0

    def held() -> list[str]:
        gc.collect()
        out = []
        for fd in os.listdir("/proc/self/fd"):
            try:
                out.append(os.readlink(f"/proc/self/fd/{fd}"))
            except OSError:
                pass
        return sorted(path for path in out if path.startswith(str(home)))

    for args in (["recall", "m", "hello"], ["zoom", "m", "0+1"], ["search", "hello"], ["view", "m"], ["context", "m"]):
        before = held()
        for _ in range(3):
            assert run(*args).exit_code == 0, args
        assert held() == before, args
