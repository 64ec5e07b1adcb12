"""An adversarial argument corpus: every entry, run as a real process, prints exactly one line on stderr
(``pimem: error: …``), exits with the documented code, and leaves the store byte-for-byte as it was. Then
the same kinds of input through MCP: the client reads the reason, never a bare failure."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime

import orjson
import pytest

from conftest import pimem_cmd, snapshot, subprocess_env

BIG = str(10**30)
LONG_ZERO = "0+" + "0" * 5000

# (argv, stdin, exit code)
CORPUS = [
    # numbers and ids out of range or not in ASCII digits
    (["message", "m", BIG], None, 2),
    (["message", "m", "١"], None, 2),
    (["message", "m", "--", "-1"], None, 2),
    (["message", "m", "4 "], None, 2),
    (["message", "m", "99"], None, 3),
    (["date", "m", BIG], None, 2),
    (["date", "m", "١٢"], None, 2),
    (["search", "staging", "m", "--before", BIG], None, 2),
    (["search", "staging", "m", "--limit", "0"], None, 2),
    (["search", "staging", "m", "--limit", BIG], None, 2),
    (["since", "m", "#" + BIG], None, 2),
    (["since", "m", "#-1"], None, 2),
    (["since", "m", "#١"], None, 2),
    (["zoom", "m", LONG_ZERO], None, 2),
    (["zoom", "m", "١+١"], None, 2),
    (["zoom", "m", "0+1 "], None, 2),
    (["zoom", "m", " 0+1"], None, 2),
    (["zoom", "m", "0+3"], None, 2),
    (["zoom", "m", "1+2"], None, 2),
    (["zoom", "m", "1024+1024"], None, 3),
    (["zoom", "m", "9223372036854775808+1"], None, 2),  # (past any message's number: bad input, not "not found")
    (["date", "m", "9223372036854775808+2"], None, 2),
    (["date", "m", "9223372036854775806+2"], None, 3),  # (the last two numbers a message may have: past the log)
    (["date", "m", "1024+1024"], None, 3),
    (["recall", "m", "staging", "--page", "0"], None, 2),
    (["recall", "m", "staging", "--limit", BIG], None, 2),
    (["memories", "m", "--limit", "0"], None, 2),
    (["map", "m", "--width", "0"], None, 2),
    (["map", "m", "--width", "19"], None, 2),
    (["recall", "m", "--ids", ""], None, 2),
    (["recall", "m", "--ids", ",,,"], None, 2),
    (["recall", "m", "--ids", "9223372036854775808"], None, 2),
    (["recall", "m", "--ids", "3,99999999999999999999999"], None, 2),
    (["compact", "m", "--keep", "-5"], None, 2),
    # durations and money
    (["append", "m", "x", "--timeout", "nan"], None, 2),
    (["append", "m", "x", "--timeout", "inf"], None, 2),
    (["append", "m", "x", "--timeout", "-1"], None, 2),
    (["append", "m", "x", "--timeout", "1e400"], None, 2),
    (["build-tree", "m", "--max-cost", "NaN"], None, 2),
    (["build-tree", "m", "--max-cost", "-0.5"], None, 2),
    (["build-tree", "m", "--wait", "NaN"], None, 2),
    (["view", "m", "--wait", "inf"], None, 2),
    (["context", "m", "--wait", "nan"], None, 2),
    (["context", "m", "--wait", "99999999999"], None, 2),
    (["context", "m", "--wait", "٣"], None, 2),
    (["watch", "--max-cost-per-day", "nan"], None, 2),
    # (the hook's own: exit 1, Claude Code's non-blocking error; its 2 would erase the prompt)
    (["hook", "claude-code", "--timeout", "nan"], None, 1),
    (["hook", "claude-code", "--budget", "-5"], None, 1),
    (["model", "m", "extractive", "--price-in", "nan"], None, 2),
    (["model", "m", "openai/gpt-4o-mini", "--base-url", "http://"], None, 2),
    (["model", "m", "openai/gpt-4o-mini", "--base-url", "http://exa mple.com/v1"], None, 2),
    (["model", "m", "openai/gpt-4o\nmini"], None, 2),
    # WHENs
    (["since", "m", "10000000000d"], None, 2),
    (["since", "m", "999999999999 weeks ago"], None, 2),
    (["since", "m", "next week"], None, 2),
    (["since", "m", "#0", "--until", "10000000000d"], None, 2),
    (["date", "m", "--at", "10000000000d"], None, 2),
    (["search", "staging", "m", "--since", "10000000000d"], None, 2),
    (["search", "staging", "m", "--until", "25:61"], None, 2),
    (["append", "m", "--date", "10000000000d", "x"], None, 2),
    (["append", "m", "--date", "last fortnight", "x"], None, 2),
    # names
    (["message", "", "0"], None, 2),  # (an empty name given is no name: not the default memory)
    (["view", ""], None, 2),
    (["since", "", "#0"], None, 2),
    (["append", "config.json", "x"], None, 2),
    (["append", "notes.jsonl", "x"], None, 2),
    (["append", "write.lock", "x"], None, 2),
    (["append", "index.sqlite", "x"], None, 2),
    (["append", "../escape", "x"], None, 2),
    (["append", ".trash", "x"], None, 2),
    (["append", "", "x"], None, 2),
    (["append", "a" * 65, "x"], None, 2),
    (["rename", "m", "config.json"], None, 2),
    (["rename", "m", "m"], None, 2),
    (["remember", "config.json", "x"], None, 2),
    (["message", "nope", "0"], None, 3),
    (["delete", "nope"], None, 3),
    # input
    (["append", "m", "-k", "bogus", "x"], None, 2),
    (["append", "m", "--meta", "[1]", "x"], None, 2),
    (["append", "m", "--meta", "{", "x"], None, 2),
    (["append", "m"], b"", 2),  # (white space alone is a message: logged as given)
    (["append", "m"], b"\xff\xfe not utf-8", 2),
    (["append", "m"], b"a\x00b", 2),
    (["append", "m", "--ndjson"], b'{"kind":"user"}\n', 2),
    (["append", "m", "--ndjson"], b'{"kind":"user","text":"ok"}\n[1,2]\n', 2),
    (["append", "m", "--ndjson"], b'{"kind":"user","text":"' + b"a" * (17 * 1024 * 1024) + b'"}\n', 2),
    (["append", "m"], b"a" * (8 * 1024 * 1024 + 1), 2),
    (["remember", "m"], b"m" * (256 * 1024 + 1), 2),
    (["import", "/dev/zero"], None, 2),
    (["import", "/no/such/file.jsonl"], None, 2),
]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """One store for the whole corpus (no entry may change it, so each runs against the same bytes): a memory
    with a few messages and a memory, derived state caught up as after any earlier command."""
    home = tmp_path_factory.mktemp("adversarial") / "home"
    records = [{"kind": "user", "text": f"message {n}: the staging db listens on {5000 + n}"} for n in range(5)]
    assert pimem(home, "append", "m", "--ndjson", input=b"".join(orjson.dumps(r) + b"\n" for r in records)).returncode == 0
    assert pimem(home, "remember", "m", "never touch production").returncode == 0
    for warm in (["search", "staging", "m"], ["view", "m"], ["status", "m"], ["date", "m", "--at", "yesterday"]):
        pimem(home, *warm)
    return home


def pimem(home, *argv, input: bytes = b""):
    env = subprocess_env(PIMEM_HOME=home, PIMEM_NOW="2026-10-08T09:30:00+08:00")
    env.pop("PI_MEM_HOME", None)
    return subprocess.run(pimem_cmd(*argv), input=input, capture_output=True, timeout=120, env=env)


# options that cannot go together, or mean something only with another: refused before any memory is read
# (a memory that does not exist is not looked for), the line naming both
APART = [
    (["since", "m", "#0", "--text", "--json"], ["--text", "--json"]),
    (["since", "m", "#0", "--follow", "--until", "#3"], ["--follow", "--until"]),
    (["recall", "m", "--offset", "5"], ["--offset", "--raw"]),
    (["recall", "m", "--raw-limit", "5"], ["--raw-limit", "--raw"]),
    (["recall", "m", "--ids", "1", "--offset", "5"], ["--offset", "--raw"]),
    (["recall", "m", "--raw", "--offset", "5"], ["--offset", "--ids"]),
    (["recall", "m", "staging", "--raw", "--offset", "5"], ["--offset", "--ids"]),
    (["recall", "m", "--ids", "1,2", "--raw", "--offset", "5"], ["--offset", "one"]),
    (["recall", "m", "--ids", "1", "--file", "x"], ["--ids", "--file"]),
    (["recall", "m", "--ids", "1", "staging"], ["--ids", "QUERY"]),
    (["recall", "m", "--ids", "1", "--kind", "user"], ["--ids", "--kind"]),
    (["recall", "m", "--ids", "1", "--page", "2"], ["--ids", "--page"]),
    (["recall", "m", "--ids", "1", "--page", "1"], ["--ids", "--page"]),  # (1 is given too)
    (["memories", "m", "--id", "mem_x", "--status", "all"], ["--id", "--status"]),
    (["memories", "m", "--id", "mem_x", "--kind", "fact"], ["--id", "--kind"]),
    (["memories", "m", "production", "--id", "mem_x"], ["--id", "WORDS"]),
    (["search", "staging", "m", "--rank", "--any"], ["--rank", "--any"]),
    (["build-tree", "m", "--dry-run", "--retries", "2"], ["--dry-run", "--retries"]),
    (["build-tree", "m", "--dry-run", "--wait", "1"], ["--dry-run", "--wait"]),
    (["build-tree", "m", "--dry-run", "--retries", "0"], ["--dry-run", "--retries"]),  # (0 is given too)
    (["build-tree", "m", "--dry-run", "--wait", "0"], ["--dry-run", "--wait"]),
    (["compact", "m", "--keep", "2", "--dry-run", "--timeout", "5"], ["--dry-run", "--timeout"]),
    (["fsck", "m", "--timeout", "5"], ["--timeout", "--repair"]),
]


@pytest.mark.parametrize("argv,named", APART, ids=[" ".join(a)[:60] for a, _ in APART])
def test_options_that_do_not_go_together_are_refused_before_anything_is_read(store, argv, named):
    before = snapshot(store)
    for args in (argv, [a if a != "m" else "nope" for a in argv]):  # (no such memory: still the usage error)
        out = pimem(store, *args)
        err = out.stderr.decode("utf-8", "replace")
        assert out.returncode == 2 and out.stdout == b"", err
        assert err.count("\n") == 1 and err.startswith("pimem: error: "), err
        assert args != argv or all(word in err for word in named), err  # (a lone unknown word may be the query)
    assert snapshot(store) == before


@pytest.mark.parametrize("argv,stdin,code", CORPUS, ids=[" ".join(a)[:60] for a, _, _ in CORPUS])
def test_every_bad_argument_is_one_line_its_code_and_changes_nothing(store, argv, stdin, code):
    before = snapshot(store)
    out = pimem(store, *argv, input=stdin if stdin is not None else b"")
    err = out.stderr.decode("utf-8", "replace")
    assert out.returncode == code, err
    assert err.count("\n") == 1 and err.startswith("pimem: error: ") and "Traceback" not in err, err
    assert snapshot(store) == before


def test_a_blank_command_is_refused_as_the_argument_it_is(store):
    """``--command "   "`` names the option, not a config.json that was never written."""
    out = pimem(store, "model", "m", "command", "--command", "   ")
    err = out.stderr.decode()
    assert out.returncode == 2 and "needs --command" in err and "config.json" not in err, err


def test_the_python_api_refuses_bad_values_as_pimem_errors(store):
    """The library's own entry points: every bad value is a ``PimemError`` with its exit code, not a
    ``TypeError`` from deep inside, nor a false integrity alarm."""
    from pimem import Memory, api
    from pimem.errors import BadInput, NotFound

    home = store
    mem = Memory.open("m", home)
    before = snapshot(home)
    for call, error in ((lambda: list(mem.messages(-5)), BadInput), (lambda: mem.message(2**63), BadInput),
                        (lambda: mem.message(-1), BadInput), (lambda: list(mem.messages(2**70)), BadInput),
                        (lambda: mem.message("3"), BadInput), (lambda: mem.save_cursor("c", -1), BadInput),
                        (lambda: mem.save_cursor("c", mem.count() + 1), BadInput),  # (past the log: never seen)
                        (lambda: Memory.at("ghost", home).save_cursor("c", 0), NotFound),
                        (lambda: mem.first_at(datetime(2026, 10, 8)), BadInput),  # naive: which zone?
                        (lambda: list(mem.since("2026-10-08")), BadInput), (lambda: mem.append(None), BadInput),
                        (lambda: mem.append([{"kind": "user", "text": "x", "meta": {1: "a"}}]), BadInput),
                        (lambda: mem.append([{"kind": "user", "text": "x", "meta": {"k": "\udcff"}}]), BadInput),
                        (lambda: mem.prepare([{"kind": "user", "text": "x"}, {"kind": "robot"}], labels=["line 7"]), BadInput),
                        (lambda: api.memory_search("m", budget=1, home=home), BadInput),
                        (lambda: api.recall("m", query=None, home=home), BadInput),
                        (lambda: api.message("m", 0, offset=1.5, home=home), BadInput)):
        with pytest.raises(error):
            call()
    assert snapshot(home) == before  # (refused before the writer lock: ranges.json not even rewritten)
    assert api.memory_search("m", budget=2, home=home) == {}  # nothing fits: the empty document
    assert [r["id"] for r in api.recall("m", ids=[0], home=home)["results"]] == [0]  # numbers as numbers


def test_a_directory_with_no_sessions_says_there_is_nothing_to_import(store, tmp_path):
    empty = tmp_path / "sessions"
    empty.mkdir()
    before = snapshot(store)
    out = pimem(store, "import", str(empty))
    assert out.returncode == 1 and out.stderr.decode() == f"pimem: error: nothing to import: no session files (*.jsonl) under {empty}\n"
    (empty / "a.jsonl").write_bytes(b"")
    out = pimem(store, "import", str(empty))
    assert out.returncode == 1 and b"is empty" in out.stderr
    assert snapshot(store) == before


def test_mcp_errors_carry_the_reason(tmp_path):
    mcp = pytest.importorskip("mcp")
    import anyio

    store = tmp_path / "home"
    assert pimem(store, "append", "m", "the staging db listens on 5433").returncode == 0

    calls = [
        ("message", {"name": "m", "i": 10**30}),
        ("message", {"name": "m", "i": 2**63}),
        ("since", {"name": "m", "when": "10000000000d"}),
        ("since", {"name": "m", "start": 2**64}),
        ("search", {"query": "staging", "before": 2**70}),
        ("zoom", {"name": "m", "node": LONG_ZERO}),
        ("zoom", {"name": "m", "node": "١+١"}),
        ("memory_propose", {"name": "m", "text": "x" * (256 * 1024 + 1)}),
    ]
    (store / "m" / "main" / "2000-01-01.jsonl").mkdir()  # a directory where a day file should be: the OS refuses
    calls.append(("since", {"name": "m", "start": 0}))

    async def session():
        params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "pimem", "mcp"], env=subprocess_env(PIMEM_HOME=store))
        async with mcp.stdio_client(params) as (read, write):
            async with mcp.ClientSession(read, write) as client:
                await client.initialize()
                return [(await client.call_tool(name, args)).model_dump(by_alias=True, mode="json") for name, args in calls]

    before = snapshot(store)
    for (name, args), result in zip(calls, anyio.run(session)):
        text = result["content"][0]["text"]
        assert result["isError"], (name, args)
        assert "Error executing tool" not in text or ":" in text.split("Error executing tool", 1)[1], text
        assert any(word in text for word in ("whole number", "out of range", "malformed", "at most", "Is a directory")), (name, text)
    assert snapshot(store) == before
