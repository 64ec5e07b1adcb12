"""Bad input is refused with exit 2, one clear line on stderr, and the store exactly as it was."""

import os

import orjson
import pytest

from conftest import snapshot
from pimem import Memory
from pimem.errors import BadInput

SEEDED = [{"kind": "user", "text": "the staging db listens on 5433"}, {"kind": "pi", "text": "noted"}]


def ndjson(*records) -> bytes:
    return b"".join(r if isinstance(r, bytes) else orjson.dumps(r) + b"\n" for r in records)


GOOD = {"kind": "user", "text": "fine"}

# (what, argv after "append", stdin, words the one stderr line must contain)
BAD_APPENDS = [
    ("malformed NDJSON line, refused with the good lines around it", ["main", "--ndjson"], ndjson(GOOD, b'{"kind": "user", "text": \n', GOOD), ["line 2", "not valid JSON"]),
    ("NDJSON line that is not an object", ["main", "--ndjson"], ndjson(GOOD, b"[1, 2]\n"), ["line 2", "JSON object"]),
    ("invalid UTF-8 on stdin", ["main"], b"caf\xc3 au lait", ["not valid UTF-8"]),
    ("invalid UTF-8 inside an NDJSON line", ["main", "--ndjson"], ndjson(GOOD, b'{"kind":"user","text":"caf\xc3"}\n'), ["line 2", "UTF-8"]),
    ("NUL byte on stdin", ["main"], b"a\x00b", ["NUL"]),
    ("NUL byte escaped in NDJSON", ["main", "--ndjson"], ndjson(GOOD, {"kind": "user", "text": "a\x00b"}), ["line 2", "NUL"]),
    ("unknown kind", ["main", "-k", "robot", "beep"], None, ["unknown kind 'robot'"]),
    ("unknown kind in NDJSON", ["main", "--ndjson"], ndjson(GOOD, GOOD, {"kind": "robot", "text": "x"}), ["line 3", "unknown kind 'robot'"]),
    ("missing kind in NDJSON", ["main", "--ndjson"], ndjson({"text": "x"}), ["line 1", "missing kind"]),
    ("kind that is not a string", ["main", "--ndjson"], ndjson(GOOD, {"kind": ["user"], "text": "x"}), ["line 2", "kind must be a string such as user or pi, not a list"]),
    ("text that is not a string", ["main", "--ndjson"], ndjson({"kind": "user", "text": 42}), ["line 1", "text must be a string, not a number"]),
    ("unknown field in NDJSON", ["main", "--ndjson"], ndjson({"kind": "user", "text": "x", "colour": "red"}), ["unknown field 'colour'"]),
    ("bad date", ["main", "--date", "2026-13-40T25:00:00+08:00", "hello"], None, ["bad date"]),
    ("bad date in NDJSON", ["main", "--ndjson"], ndjson(GOOD, {"kind": "user", "text": "x", "date": "last tuesday"}), ["line 2", "bad date"]),
    ("meta that is not JSON", ["main", "--meta", "{oops", "hello"], None, ["--meta"]),
    ("meta that is not an object", ["main", "--ndjson"], ndjson({"kind": "user", "text": "x", "meta": [1]}), ["meta"]),
    ("meta number too large for a double", ["main", "--meta", '{"a":-1e400}', "hello"], None, ["--meta: it holds a number too large for a double (past 1.8e308)"]),
    ("meta number too large for a double in NDJSON", ["main", "--ndjson"], ndjson(GOOD, b'{"kind": "user", "text": "x", "meta": {"a": 1e999}}\n'), ["line 2: it holds a number too large for a double"]),
    ("a byte order mark opening a later NDJSON line", ["main", "--ndjson"], ndjson(GOOD, b'\xef\xbb\xbf{"kind": "user", "text": "x"}\n'), ["line 2: a byte order mark (BOM) opens it"]),
    ("meta that is not JSON", ["main", "--meta", '{"a":', "hello"], None, ["--meta: not valid JSON"]),
    ("meta integer beyond 64 bits", ["main", "--meta", '{"id":18446744073709551617}', "hello"], None, ["beyond 64 bits"]),
    ("meta integer just below -2^63 (the nearest float is -2^63)", ["main", "--meta", '{"id":-9223372036854775809}', "hello"], None, ["beyond 64 bits"]),
    ("meta integer just below -2^63 in NDJSON", ["main", "--ndjson"], ndjson(GOOD, b'{"kind":"user","text":"x","meta":{"id":-9223372036854775809}}\n'), ["line 2", "beyond 64 bits"]),
    ("meta integer beyond 64 bits in NDJSON", ["main", "--ndjson"], ndjson(GOOD, b'{"kind":"user","text":"x","meta":{"a":[1,-123456789012345678901234567890]}}\n'), ["line 2", "beyond 64 bits"]),
    ("meta nested too deeply", ["main", "--meta", '{"a":' * 300 + "1" + "}" * 300, "hello"], None, ["nested deeper"]),
    ("meta nested too deeply in NDJSON", ["main", "--ndjson"], ndjson(GOOD, b'{"kind":"user","text":"x","meta":' + b'{"a":' * 300 + b"1" + b"}" * 301 + b"\n"), ["line 2", "nested deeper"]),
    ("empty text argument", ["main", ""], None, ["empty text"]),
    ("empty stdin", ["main"], b"", ["empty text"]),
    ("empty text in NDJSON", ["main", "--ndjson"], ndjson(GOOD, {"kind": "pi", "text": ""}), ["line 2", "empty text"]),
    ("no lines at all with --ndjson", ["main", "--ndjson"], b"\n\n", ["no messages"]),
    ("text with --ndjson", ["main", "--ndjson", "hello"], b"", ["--ndjson"]),
    ("name ..", ["..", "hello"], None, ["invalid memory name '..'"]),
    ("name a/b", ["a/b", "hello"], None, ["invalid memory name 'a/b'"]),
    ("name -x", ["--", "-x", "hello"], None, ["invalid memory name '-x'"]),
    ("empty name", ["", "hello"], None, ["invalid memory name ''"]),
    ("name with a control character", ["a\x01b", "hello"], None, ["invalid memory name"]),
    ("name too long", ["a" * 65, "hello"], None, ["invalid memory name"]),
]


@pytest.mark.parametrize("what,argv,stdin,words", BAD_APPENDS, ids=[c[0] for c in BAD_APPENDS])
def test_bad_append_is_refused_whole_and_changes_nothing(run, home, what, argv, stdin, words):
    Memory.at("main").append(SEEDED)
    before = snapshot(home)
    out = run("append", *argv, input=stdin)
    assert out.exit_code == 2, out.output
    assert out.stdout == ""
    lines = out.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("pimem: error: "), out.stderr
    for word in words:
        assert word in lines[0]
    assert snapshot(home) == before
    assert [m["text"] for m in Memory.open("main").messages()] == [r["text"] for r in SEEDED]


def test_a_message_of_whitespace_alone_is_logged_as_given_and_every_reader_takes_it(run, home):
    """A text of spaces, tabs, line breaks or U+3000 alone is what was written: it was refused as empty text."""
    blanks = ["   ", "\n\t", "\u3000", " " * 600, "\n" * 700]  # (the last two over a verbatim leaf's 512 bytes)
    assert [run("append", "main", text).stdout for text in blanks[:3]] == ["0\n", "1\n", "2\n"]
    assert run("append", "main", "-k", "pi", input=" \n").stdout == "3\n"
    out = run("append", "main", "--ndjson", input=ndjson(*({"kind": "user", "text": t} for t in blanks[3:]),
                                                          {"kind": "pi", "text": "the port is 5433"}))
    assert (out.exit_code, out.stdout) == (0, "4\n5\n6\n")
    assert [m["text"] for m in Memory.open("main").messages()] == blanks[:3] + [" \n"] + blanks[3:] + ["the port is 5433"]
    assert run("append", "main", "").exit_code == 2  # (nothing at all is still nothing to log)
    view = run("view", "main").stdout.splitlines()
    assert view[:4] == ["0+1|user:    ", "1+1|user:   ", "2+1|user: \u3000", "3+1|pi:   "], view
    assert run("zoom", "main", "1+1").stdout == "1+1|user: \n\t\n"  # (a leaf zoomed is the message as written)
    assert run("build-tree", "main").exit_code == 0  # the offline compactor writes a line for each, none empty
    tree = [orjson.loads(line) for f in sorted((home / "main" / "tree").iterdir()) for line in f.read_text().splitlines()]
    assert tree and all(node["text"].strip() for node in tree if node.get("model") == "extractive")
    assert {(n["l"], n["i"]) for n in tree if n.get("model") == "extractive"} >= {(0, 4), (0, 5)}
    assert run("fsck", "main").exit_code == 0
    assert orjson.loads(run("message", "main", "1", "--json").stdout)["text"] == "\n\t"
    recalled = orjson.loads(run("recall", "main", "--ids", "0,2", "--json").stdout)
    assert [r["text"] for r in recalled["results"]] == ["   ", "\u3000"]
    assert [orjson.loads(line)["text"] for line in run("since", "main", "1d").stdout.splitlines()][:2] == ["   ", "\n\t"]
    assert run("search", "5433", "main").exit_code == 0 and run("context", "main").exit_code == 0


def test_bad_input_for_a_new_memory_creates_nothing(run, home):
    assert run("append", "fresh", "-k", "robot", "x").exit_code == 2
    assert run("append", "fresh", "--ndjson", input=ndjson(GOOD, b"{")).exit_code == 2
    assert not (home / "fresh").exists()


def test_text_over_the_cap_is_refused_but_long_tool_output_is_trimmed(run, home):
    mem = Memory.at("main")
    mem.append(SEEDED)
    mem.save_config({"max_text_bytes": 1000})
    before = snapshot(home)
    out = run("append", "main", "-k", "pi", input="é" * 501)  # 1,002 bytes
    assert out.exit_code == 2
    assert out.stderr == "pimem: error: text on stdin is over the cap of 1000 bytes (reading stopped there); split it into several messages\n"
    assert snapshot(home) == before
    # tool output is never refused for its length: it keeps its head and tail
    out = run("append", "main", "-k", "tool_result", input="h" * 20_000 + "m" * 5_000 + "t" * 20_000)
    assert out.exit_code == 0 and out.stdout == "2\n"
    text = Memory.open("main").message(2)["text"]
    assert text == "h" * 15_000 + "\n[… 15000 characters of tool output cut by pimem …]\n" + "t" * 15_000


def test_meta_floats_and_64_bit_integers_are_kept_as_given(sh, home):
    """A float is kept whatever its size (JSON writes it back as it was); only an integer beyond 64 bits,
    which a parser would round, is refused."""
    meta = '{"big":1e300,"low":-9.223372036854776e18,"top":18446744073709551615,"bottom":-9223372036854775808,"f":0.5}'
    assert sh("append", "main", "--meta", meta, "hello").returncode == 0
    line = b'{"kind":"user","text":"x","meta":' + meta.encode() + b"}\n"
    out = sh("append", "main", "--ndjson", input=line)
    assert out.returncode == 0, out.stderr
    for m in Memory.open("main").messages():
        assert m["meta"] == {"big": 1e300, "low": -(2.0**63), "top": 2**64 - 1, "bottom": -(2**63), "f": 0.5}
    Memory.at("main").append([{"kind": "user", "text": "x", "meta": {"n": 1e300}}])  # (Python values are what they say)
    with pytest.raises(BadInput, match="beyond 64 bits"):
        Memory.at("main").append([{"kind": "user", "text": "x", "meta": {"n": -(2**63) - 1}}])


def test_meta_may_hold_250_levels_of_objects_and_lists_whatever_is_inside_the_last(home):
    from pimem.message import META_DEPTH

    def nested(levels: int, inner):
        for _ in range(levels):
            inner = [inner]
        return inner

    mem = Memory.at("deep")
    for inner in ([], [1], {}):  # 250 levels of lists inside meta: kept, empty or not
        mem.append([{"kind": "user", "text": "x", "meta": {"a": nested(META_DEPTH - 1, inner)}}])
    with pytest.raises(BadInput, match="nested deeper than 250"):  # one more: refused
        mem.append([{"kind": "user", "text": "x", "meta": {"a": nested(META_DEPTH, [])}}])
    assert Memory.open("deep").count() == 3


def test_a_copy_of_a_memory_keeps_trimmed_tool_output_as_it_is(sh, home):
    """Trimmed tool output logged again (since | append --ndjson) is not trimmed again: same text, same size."""
    assert sh("append", "rt", "-k", "echo", "E" * 40_000).returncode == 0
    export = sh("since", "rt", "#0", "--include-tools")
    assert sh("append", "rtcopy", "--ndjson", input=export.stdout).returncode == 0
    original, copy = Memory.open("rt").message(0), Memory.open("rtcopy").message(0)
    assert "\n[… 10000 characters of tool output cut by pimem …]\n" in copy["text"]
    assert (copy["text"], copy["size"]) == (original["text"], original["size"])
    again = sh("since", "rtcopy", "#0", "--include-tools")
    assert orjson.loads(again.stdout)["text"] == orjson.loads(export.stdout)["text"]


def test_an_export_of_text_at_the_cap_all_control_characters_reads_back(sh, home, tmp_path):
    """Each control character is six bytes in JSON (\\u0001): the line cap admits any line pimem writes."""
    from pimem import config

    config.save_home(None, {"max_text_bytes": 65_536})
    text = "\x01\x02" * 32_768  # 65,536 bytes: at the cap
    assert sh("append", "ctl", "-", input=text.encode()).returncode == 0
    export = sh("since", "ctl", "#0")
    assert len(export.stdout) > 6 * 65_536  # over the old cap of twice the text cap plus 64 KiB
    copied = sh("append", "ctlcopy", "--ndjson", input=export.stdout)
    assert copied.returncode == 0, copied.stderr
    (tmp_path / "ctl.jsonl").write_bytes(export.stdout)
    imported = sh("import", tmp_path / "ctl.jsonl", "-n", "ctlimport")
    assert imported.returncode == 0 and b"skipped" not in imported.stderr, imported.stderr
    assert Memory.open("ctlcopy").message(0)["text"] == Memory.open("ctlimport").message(0)["text"] == text


def test_default_cap_is_8_mib(run, home):
    assert run("append", "main", input="x" * (8 * 1024 * 1024)).exit_code == 0
    before = snapshot(home)
    out = run("append", "main", input="x" * (8 * 1024 * 1024 + 1))
    assert out.exit_code == 2 and "over the cap of 8388608 bytes" in out.stderr
    assert snapshot(home) == before


def test_echo_under_the_trim_limit_is_kept_whole(run, home):
    text = "line\n" * 6_000  # exactly 30,000 characters
    assert run("append", "main", "-k", "echo", input=text).exit_code == 0
    assert Memory.open("main").message(0)["text"] == text


def test_a_stream_logs_good_batches_and_refuses_the_bad_one_whole(sh, home, monkeypatch):
    """Batches of --ndjson are validated whole; an error names the line and says what was logged before."""
    from pimem import ingest

    lines = [orjson.dumps({"kind": "user", "text": f"m{n}"}) for n in range(ingest.BATCH_LINES + 5)]
    lines[ingest.BATCH_LINES + 2] = b'{"kind": "user"'
    out = sh("append", "main", "--ndjson", input=b"\n".join(lines) + b"\n")
    assert out.returncode == 2
    assert out.stderr.decode() == (
        f"pimem: error: line {ingest.BATCH_LINES + 3}: not valid JSON "
        f"(that batch was refused; the {ingest.BATCH_LINES:,} messages before it were logged)\n"
    )
    assert Memory.open("main").count() == ingest.BATCH_LINES
    assert out.stdout.decode().split() == [str(i) for i in range(ingest.BATCH_LINES)]


def test_one_message_logged_before_a_bad_batch_is_said_in_the_singular(run, home, monkeypatch):
    from pimem import ingest

    monkeypatch.setattr(ingest, "BATCH_LINES", 1)
    out = run("append", "main", "--ndjson", input=b'{"kind": "user", "text": "m0"}\n{"kind": "user"\n')
    assert (out.exit_code, out.stderr) == (2, "pimem: error: line 2: not valid JSON (that batch was refused; the 1 "
                                              "message before it was logged)\n")


def _reader_of(pid: int) -> int:
    """The pid of the process ``append --ndjson`` (pid) forked to read its stdin."""
    import time

    for _ in range(200):
        children = open(f"/proc/{pid}/task/{pid}/children").read().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    pytest.fail("append --ndjson forked no reader")


def test_a_stream_whose_reader_is_killed_or_whose_terminal_is_gone_ends_in_one_line_exit_7(home):
    """The reader ``append --ndjson`` forks for stdin, killed, or failing to read a terminal that went away (a
    ``nohup`` run): a traceback of a ``RuntimeError``, exit 1 (nothing found). One line now, exit 7; what was
    logged before was printed and stays."""
    import signal
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    line = b'{"kind": "user", "text": "t1"}\n'
    proc = subprocess.Popen(pimem_cmd("append", "main", "--ndjson"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env())
    proc.stdin.write(line)
    proc.stdin.flush()  # (kept open: the reader waits for more)
    assert proc.stdout.readline() == b"0\n"
    reader = _reader_of(proc.pid)
    os.kill(reader, signal.SIGKILL)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.decode()) == (7, f"pimem: error: the process reading stdin (pid {reader}) ended without "
                                                  "a word (killed?); the rest of stdin was not logged\n")
    assert out == b"" and Memory.open("main").count() == 1

    controller, terminal = os.openpty()
    proc = subprocess.Popen(pimem_cmd("append", "main", "--ndjson"), stdin=terminal, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env(),
                            preexec_fn=lambda: (os.setsid(), signal.signal(signal.SIGHUP, signal.SIG_IGN)))
    os.close(terminal)
    os.write(controller, line)
    assert proc.stdout.readline() == b"1\n"
    os.close(controller)  # the terminal goes away: reading it is an I/O error
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, err.decode()) == (7, "pimem: error: Input/output error: stdin\n")
    assert Memory.open("main").count() == 2


@pytest.mark.parametrize("command", ["append", "remember"])
def test_a_dash_reads_the_text_typed_on_a_terminal_up_to_ctrl_d(home, command):
    """`pimem append m -` on a terminal was refused at once (`no text: …`), the text never read: `-` reads stdin,
    as the README says, a terminal too; with no text and no `-` a terminal is refused, saying `-`."""
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    def typed(*argv, keys: bytes):
        controller, terminal = os.openpty()
        proc = subprocess.Popen(pimem_cmd(*argv), stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=subprocess_env(), preexec_fn=os.setsid)
        os.close(terminal)
        os.write(controller, keys)
        out, err = proc.communicate(timeout=60)
        os.close(controller)
        return proc.returncode, out.decode(), err.decode()

    code, out, err = typed(command, "m", "-", keys=b"the db is on 5433\n\x04")
    assert code == 0 and (err == "" if command == "append" else err.startswith("remembered")), err
    if command == "append":
        assert [m["text"] for m in Memory.open("m").messages()] == ["the db is on 5433\n"]
        assert typed("append", "m", keys=b"") == (2, "", "pimem: error: no text: give it as arguments, pipe it on stdin, "
                                                         "or give - to type it (Ctrl-D ends it)\n")
    else:
        from pimem import memories

        assert [r["content"] for r in memories.records(Memory.open("m"))] == ["the db is on 5433\n"]  # (as given)


def test_usage_errors_are_one_line_too(sh, home):
    for argv, expected in [
        (["append", "-x", "hi"], "pimem: error: no such option: -x (see 'pimem append --help')\n"),
        (["frobnicate"], "pimem: error: no such command 'frobnicate' (see 'pimem --help')\n"),
        (["message", "main", "abc"], "pimem: error: invalid value for 'I': 'abc': use a whole number from 0 to 9223372036854775807 "
                                       "(see 'pimem message --help')\n"),
    ]:
        out = sh(*argv)
        assert (out.returncode, out.stderr.decode()) == (2, expected)
    assert not home.exists()


def test_an_unknown_option_is_said_with_a_close_one_only(sh, home):
    """Click suggests options whose spelling is close counting their dashes: recall --session got (Possible
    options: --json), since --date (Possible options: --text), options the user did not mean. A suggestion is
    as close without the dashes; a typo still gets one."""
    for argv, expected in [
        (["recall", "--session", "s1"], "no such option: --session (see 'pimem recall --help')"),
        (["since", "--date", "2h"], "no such option: --date (see 'pimem since --help')"),
        (["recall", "--limt", "3"], "no such option: --limt (Possible options: --limit, --raw-limit) (see 'pimem recall --help')"),
        (["recall", "--jsno"], "no such option: --jsno (Possible options: --json) (see 'pimem recall --help')"),
    ]:
        out = sh(*argv)
        assert (out.returncode, out.stderr.decode()) == (2, f"pimem: error: {expected}\n"), argv
    assert not home.exists()


def test_an_argument_that_is_not_utf8_is_one_line_and_changes_nothing(sh, home):
    assert sh("append", "main", "hello").returncode == 0 and sh("append", "other", "hello").returncode == 0
    before = {k: v for k, v in snapshot(home).items() if "index" not in k and "lines.json" not in k}  # (derived)
    for argv in (["search", b"a\xffb", "main"], ["search", b"a\xffb"], ["remember", "main", b"a\xffb"], ["context", "main", "--cwd", b"/tmp/\xff"],
                 ["recall", "main", "--ids", b"entry:\xff"], ["append", "main", b"caf\xff"], ["recall", "main", b"\xff"],
                 ["memories", "main", b"\xff"], ["memories", "main", "--id", b"\xff"], ["memories", "main", "--session", b"\xff"],
                 ["forget", "main", b"mem_\xff"], ["remember", "main", "--supersede", b"a\xff", "t"]):
        out = sh(*map(os.fsdecode, argv))  # (the bytes as the process gets them)
        assert out.returncode == 2 and out.stderr.count(b"\n") == 1 and b"UTF-8" in out.stderr, (argv, out.stderr)
        assert b"main:" not in out.stderr and b"other:" not in out.stderr  # (the bytes are the argument's, not a memory's)
    assert {k: v for k, v in snapshot(home).items() if "index" not in k and "lines.json" not in k} == before


def test_an_empty_argument_is_refused_not_read_as_none_given(sh, home):
    """An empty session, query, --file, FILE or memory id is refused as an empty name, query or cursor is
    (``remember --session ''`` stored a memory for every session, ``recall c ''`` listed everything, ``import ''``
    read the current directory, ``forget main ''`` was a memory not found, exit 3)."""
    assert sh("append", "main", "hello").returncode == 0 and sh("remember", "main", "port 5433").returncode == 0
    before = {k: v for k, v in snapshot(home).items() if "index" not in k and "lines.json" not in k}  # (derived)
    for argv in (["remember", "main", "--session", "", "x"], ["remember", "main", "--session", " ", "x"],
                 ["memories", "main", "--session", ""], ["context", "main", "--session", ""],
                 ["forget", "main", "--session", "", "mem_x"], ["recall", "main", ""], ["recall", "main", " "],
                 ["recall", "main", "--file", ""], ["memories", "main", ""], ["import", ""], ["import", "--follow", ""],
                 ["forget", "main", ""], ["memories", "main", "--id", ""], ["remember", "main", "--supersede", "", "x"]):
        out = sh(*argv)
        assert out.returncode == 2 and out.stderr.count(b"\n") == 1 and b"empty" in out.stderr, (argv, out.stderr)
    assert {k: v for k, v in snapshot(home).items() if "index" not in k and "lines.json" not in k} == before


def test_an_error_quotes_a_long_input_by_its_head_and_length(sh, home):
    """A 5,000-character node id, consumer name or option made a 5 KB error line: what an error quotes of the
    input, past 200 characters, shows its first 60 and its length, in every error (ours and the parser's)."""
    from pimem.errors import shortened

    assert sh("append", "main", "hello").returncode == 0
    long = "a" * 5000
    for argv, said in ((["zoom", "main", "4+1" + long], "malformed node id '4+1" + "a" * 57 + "…' (5,003 characters): expected"),
                       (["since", "main", "--cursor", long], "invalid consumer name '" + "a" * 60 + "…' (5,000 characters): use"),
                       (["message", "main", long], "invalid value for 'I': '" + "a" * 60 + "…' (5,000 characters): use"),
                       (["since", "main", "#0", "--x" + long], "no such option: --x" + "a" * 57 + "… (5,003 characters) (see")):
        out = sh(*argv)
        assert out.returncode == 2 and out.stderr.count(b"\n") == 1 and len(out.stderr) < 300, (argv, out.stderr[:200])
        assert said in out.stderr.decode(), (argv, out.stderr)
    # an escape counts as the character it stands for; a short quote, an apostrophe and a path are left alone
    assert shortened("bad date %r: use" % ("\n" * 201)) == "bad date '%s…' (201 characters): use" % ("\\n" * 30)
    kept = "the caller's session id is not 'abc' here, nor in memories' words: /a/b/" + "c" * 300
    assert shortened(kept) == kept and shortened(f"no file {'/a/b' * 50!r}") == f"no file {'/a/b' * 50!r}"


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_a_library_meta_holding_nan_or_an_infinity_is_refused_not_stored_as_null(home, value):
    from pimem import Memory
    from pimem.errors import BadInput

    with pytest.raises(BadInput, match="JSON cannot hold"):
        Memory.at("lib").append([{"kind": "user", "text": "x", "meta": {"a": [value]}}])
    assert not Memory.at("lib").exists()


def test_a_library_meta_is_checked_in_tuples_and_subclasses_and_refuses_what_json_has_no_type_for(home):
    """A tuple (a prepared batch's arrays are tuples) and a dict or list subclass are looked inside as JSON's
    arrays and objects are: a NaN there is refused, not stored as null, and so is a nesting past 250 levels
    (it could not be logged again from the log's own lines); a value JSON has no type for (a datetime, a UUID,
    a dataclass) is refused, not stored as the string or object the encoder would make of it."""
    import collections
    import dataclasses
    import datetime
    import uuid

    from pimem.message import META_DEPTH

    @dataclasses.dataclass
    class Point:
        x: int

    deep: object = "x"
    for _ in range(META_DEPTH + 1):
        deep = (deep,)
    mem = Memory.at("lib")
    refused = {"JSON cannot hold": [{"a": (float("nan"),)}, collections.OrderedDict(a=float("inf")),
                                    {"a": {"b": type("L", (list,), {})([float("nan")])}}],
               "nested deeper than 250": [{"a": deep}],
               "JSON has no type for": [{"a": datetime.datetime(2026, 1, 1)}, {"a": uuid.UUID(int=1)},
                                        {"a": Point(1)}, {"a": datetime.date(2026, 1, 1)}, {"a": [{1, 2}]}]}
    for said, metas in refused.items():
        for meta in metas:
            with pytest.raises(BadInput, match=said):
                mem.append([{"kind": "user", "text": "x", "meta": meta}])
    assert not mem.exists()
    # what JSON writes as it was given is kept: a tuple as an array, a subclass of dict, list, str or int
    kept = mem.append([{"kind": "user", "text": "x", "meta": collections.OrderedDict(a=(1, "b"), c=type("S", (str,), {})("s"))}])
    assert Memory.open("lib").message(kept[0])["meta"] == {"a": [1, "b"], "c": "s"}
    again = mem.prepare(list(mem.prepare([{"kind": "user", "text": "y", "meta": {"a": [[1], {"b": [2]}]}}])))
    assert again[0]["meta"] == {"a": ((1,), {"b": (2,)})}
