"""`pimem mcp` as a real subprocess, driven by the MCP SDK's own stdio client."""

import contextlib
import functools
import json
import os
import shlex
import sys
from unittest import mock

import anyio
import pytest

from conftest import snapshot, subprocess_env

mcp = pytest.importorskip("mcp")

SECRET = "sk-test-0000SECRET"


@contextlib.asynccontextmanager
async def client_of(home, **env):
    """A real `python -m pimem mcp` over the SDK's client, initialized: ``(client, info)``, ``info`` the server's;
    ``env``, more of its environment."""
    params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "pimem", "mcp"], env=subprocess_env(PIMEM_HOME=home, **env))
    async with mcp.stdio_client(params) as (read, write):
        async with mcp.ClientSession(read, write) as client:
            yield client, (await client.initialize()).server_info


async def called(client, tool, **args):
    """A tool call's structured result, or its error's text."""
    result = (await client.call_tool(tool, args)).model_dump(by_alias=True, mode="json")
    return result["content"][0]["text"] if result["isError"] else result["structuredContent"]


def call_all(home, calls):
    """Start `python -m pimem mcp`, list its tools, make each ``(tool, arguments)`` call, and return the
    tool names and each result as a dict (isError, structuredContent, content)."""

    async def session():
        async with client_of(home) as (client, _):
            tools = [t.name for t in (await client.list_tools()).tools]
            results = []
            for name, args in calls:
                result = await client.call_tool(name, args)
                results.append(result.model_dump(by_alias=True, mode="json"))
            return tools, results

    return anyio.run(session)


@pytest.fixture
def talk(run, home):
    home.mkdir()
    (home / "config.json").write_text('{"view": {"hi": 300, "lo": 150}}')  # small budgets: old lines fold
    for k in range(8):
        run("append", "main", f"filler message {k} about the weather")
    run("append", "main", "the staging db listens on 5433")
    run("append", "main", "-k", "tool", f"cat .env  # {SECRET}")
    run("append", "main", "-k", "echo", f"OPENAI_API_KEY={SECRET}")
    run("append", "main", "-k", "pi", "好的，端口是 5433。")
    assert run("remember", "main", "never touch the production database").exit_code == 0
    assert run("search", "5433").exit_code == 0  # derived state caught up, as after any earlier command


def test_tools_are_listed_and_no_read_call_writes(home, talk):
    before = snapshot(home)
    tools, results = call_all(home, [
        ("list_memories", {}),
        ("since", {"name": "main", "start": 8}),
        ("since", {"name": "main", "start": 9, "limit": 1, "include_tools": True}),
        ("message", {"name": "main", "i": 11}),
        ("message", {"name": "main", "i": 8, "offset": 4, "max_chars": 7}),
        ("message", {"name": "nope", "i": 0}),
        ("view", {"name": "main"}),
        ("view", {"name": "main", "lines": 1}),
        ("zoom", {"name": "main", "node": "0+4"}),
        ("zoom", {"name": "main", "node": "8+1"}),
        ("zoom", {"name": "main", "node": "3+2"}),
        ("recall", {"name": "main", "query": "5433"}),
        ("memory_search", {"name": "main", "query": "production"}),
        ("search", {"query": "5433"}),
        ("search", {"query": "端口", "names": ["main"]}),
        ("recall", {"name": "main", "ids": [8, "11"]}),  # numbers as JSON numbers or strings
    ])
    assert snapshot(home) == before
    assert {"list_memories", "since", "message", "view", "zoom"} <= set(tools)
    listing, plain, tooled, reply, window, missing, view, last, halves, leaf, misaligned, recalled, found, hits, cjk, by_id = (r.get("structuredContent") or r for r in results)
    assert [m["name"] for m in listing["memories"]] == ["main"]
    assert [m["i"] for m in plain["messages"]] == [8, 11]
    assert plain["next"] is None
    assert [m["kind"] for m in tooled["messages"]] == ["tool"] and tooled["next"] == 10
    assert reply["text"] == "好的，端口是 5433。" and reply["held"]["label"] == "8+4"
    assert window["text"] == "staging" and window["next_offset"] == 11
    assert missing["isError"] and "no memory named 'nope'" in missing["content"][0]["text"]
    # the old messages are folded into a line covering several; the newest are their own lines
    assert view["lines"][0].startswith("0+8|user: filler message 0") and view["messages"] == 12
    # the call says what it ran, not what it read (briefly: a joined line of tool calls stays near its bytes)
    line = "8+4|user: the staging db listens on 5433 tool: ran cat (hidden) echo: (hidden) pi: 好的，端口是 5433。"
    assert view["lines"][1] == line
    assert plain["messages"][0]["held"] == {"held": "inside", "label": "8+4", "n": 4}  # the line once, by label
    assert plain["lines"] == {"8+4": line} and reply["held"]["line"] == line  # (one message: its line in held)
    assert last["lines"] == view["lines"][-1:] and last["first"] == view["total_lines"] - 1
    assert [c["label"] for c in halves["children"]] == ["0+2", "2+2"]
    assert halves["children"][0]["text"] == "user: filler message 0 about the weather\nuser: filler message 1 about the weather"
    assert leaf["message"]["text"] == "the staging db listens on 5433"
    assert misaligned["isError"] and "misaligned node id 3+2" in misaligned["content"][0]["text"]
    assert [(r["id"], r["held"]["label"]) for r in recalled["results"]] == [(11, "8+4"), (8, "8+4")]
    assert [(r["content"], r["status"]) for r in found["records"]] == [("never touch the production database", "active")]
    assert {"search", "recall", "memory_search", "memory_propose"} <= set(tools)
    assert [(h["memory"], h["i"], h["held"]["label"]) for h in hits["hits"]] == [("main", 11, "8+4"), ("main", 8, "8+4")]
    assert [(h["i"], h["snippet"]) for h in cjk["hits"]] == [(11, "好的，端口是 5433。")]
    assert [r["id"] for r in by_id["results"]] == [8, 11]


def test_arguments_the_schema_refuses_come_back_in_one_line(home, talk):
    _, results = call_all(home, [("message", {"name": "main", "i": "abc"}), ("message", {}),
                                 ("recall", {"name": "main", "ids": [None]}), ("search", {"query": 5}),
                                 ("message", {"name": "main", "i": False}), ("message", {"name": "main", "i": "0"}),
                                 ("since", {"name": "main", "limit": True}),
                                 ("message", {"name": "main", "i": 1, "include_tools": "yes"})])
    texts = [r["content"][0]["text"] for r in results]
    assert all(r["isError"] for r in results) and all("\n" not in t for t in texts), texts
    assert texts[0] == "Error executing tool message: bad arguments: i: Input should be a valid integer"
    # (no coercion: false is not message 0, "0" not 0, true not a limit of 1, "yes" not true; as the API)
    assert [t.rsplit(": ", 1)[1] for t in texts[4:]] == ["Input should be a valid integer"] * 3 + ["Input should be a valid boolean"]
    assert texts[1] == "Error executing tool message: bad arguments: name: Field required; i: Field required"
    assert texts[3] == "Error executing tool search: bad arguments: query: Input should be a valid string"


def test_a_tools_text_is_its_compact_json_within_the_budget(run, home, talk):
    for k in range(40):
        run("append", "main", f"message {k} about the staging database, its port and the deploy script " * 3)
    _, results = call_all(home, [("recall", {"name": "main", "ids": list(range(40)), "budget": 300}),
                                 ("recall", {"name": "main", "query": "staging deploy", "limit": 30, "budget": 2000})])
    for result, most in zip(results, (300, 2000)):
        text = result["content"][0]["text"]
        assert len(text) <= most and json.loads(text) == result["structuredContent"] and "\n" not in text, len(text)


@pytest.mark.parametrize("lock", ["free", "busy"])
def test_a_view_saved_before_the_names_were_counted_is_read_writing_nothing(home, talk, lock):
    """A view.json of version 1 (saved before the speakers' names were counted) is counted by a reader, who
    saves it counted if the writer lock is free, else keeps which lines it counted in lines.json: the MCP
    server did both (view.json written by view, since, search, recall and zoom; lines.json where another
    process held the lock), where it writes nothing. It counts the view for itself and leaves the files be."""
    import subprocess

    import orjson

    from pimem.viewfile import checksum as view_check

    path = home / "main" / "view.json"
    saved = orjson.loads(path.read_bytes())
    old = {**saved, "version": 1}
    old["check"] = view_check({k: old[k] for k in ("T", "view", "cview", "tree")})
    path.write_bytes(orjson.dumps(old))
    holder = subprocess.Popen([sys.executable, "-c", "import sys\nfrom pimem import Memory\n"
                               "with Memory.open('main').lock():\n    print('held', flush=True)\n    sys.stdin.readline()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=subprocess_env()) if lock == "busy" else None
    try:
        assert holder is None or holder.stdout.readline() == b"held\n"
        before = snapshot(home)
        _, results = call_all(home, [("view", {"name": "main"}), ("since", {"name": "main", "start": 8}),
                                     ("search", {"query": "5433"}), ("recall", {"name": "main", "query": "5433"}),
                                     ("zoom", {"name": "main", "node": "8+1"})])
        after = snapshot(home)
    finally:
        if holder is not None:
            holder.communicate(b"\n", timeout=30)
    assert not any(r["isError"] for r in results), results
    assert "5433" in " ".join(results[0]["structuredContent"]["lines"])
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == set()


def test_a_memory_without_view_json_is_shown_folded_from_its_log_writing_nothing(home, talk):
    """view.json is derived (deleting it loses nothing): the CLI folds the view afresh where it is missing, and the
    MCP tools showed an empty view (no line, 0 messages) and every hit's ``held`` as null. They fold it in memory
    too, and still write nothing."""
    shown = call_all(home, [("view", {"name": "main"}), ("search", {"query": "5433"})])[1]
    (home / "main" / "view.json").unlink()
    before = snapshot(home)
    _, results = call_all(home, [("view", {"name": "main"}), ("search", {"query": "5433"}),
                                 ("message", {"name": "main", "i": 8})])
    assert snapshot(home) == before
    assert results[0]["structuredContent"] == shown[0]["structuredContent"]
    assert results[0]["structuredContent"]["messages"] == 12
    assert results[1]["structuredContent"]["hits"] == shown[1]["structuredContent"]["hits"]
    assert all(hit["held"] for hit in results[1]["structuredContent"]["hits"])
    assert results[2]["structuredContent"]["held"]["label"] in {line.split("|")[0] for line in shown[0]["structuredContent"]["lines"]}


def test_a_lagging_index_is_the_only_thing_a_read_may_write(run, home, talk):
    run("append", "main", "one more about 5433")  # the index now lags the log
    before = snapshot(home)
    _, results = call_all(home, [("search", {"query": "5433"}), ("since", {"name": "main", "start": 12})])
    assert results[0]["structuredContent"]["hits"][0]["i"] == 12
    after = snapshot(home)
    changed = {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)}
    assert changed - {"main/index.lock"} == {"main/index.sqlite", "main/index-1.sqlite"}  # (the lock: empty)


def test_a_claim_with_nothing_logged_is_read_as_a_memory_of_no_messages_writing_nothing(home):
    """A memory claimed for a project before its first message (projects.json and the lock, no main/), listed
    with 0 messages, was 'no memory named' to every other tool: each reads it as it reads a memory with nothing
    logged (the same directory with an empty main/), and writes nothing there (no index)."""
    import shutil

    from pimem import projects
    from pimem.importers.detect import choices

    assert projects.claim("/home/x/client-a/api", choices("/home/x/client-a/api"), home) == "api"
    shutil.copytree(home / "api", home / "blank")
    (home / "blank" / "main").mkdir(mode=0o700)
    calls = lambda name: [  # noqa: E731
        ("since", {"name": name, "start": 0}), ("since", {"name": name, "when": "2h"}), ("message", {"name": name, "i": 0}),
        ("view", {"name": name}), ("zoom", {"name": name, "node": "0+1"}), ("recall", {"name": name}),
        ("recall", {"name": name, "query": "staging db"}), ("memory_search", {"name": name, "query": "db"}),
        ("search", {"query": "db", "names": [name]})]
    before = snapshot(home / "api")
    _, got = call_all(home, calls("api"))
    assert snapshot(home / "api") == before
    _, blank = call_all(home, calls("blank"))
    assert json.dumps(got) == json.dumps(blank).replace("blank", "api")
    assert [r["isError"] for r in got] == [False, False, True, False, True, False, False, False, False]


def test_memory_propose_writes_only_a_provisional_memory(home, talk):
    before = snapshot(home)
    _, results = call_all(home, [
        ("memory_propose", {"name": "main", "text": "staging db port is 5433", "kind": "fact"}),
        ("memory_propose", {"name": "main", "text": "x", "kind": "nonsense"}),
        ("memory_propose", {"name": "main", "text": " "}),
        ("memory_search", {"name": "main", "status": "all"}),
    ])
    proposed, refused, blank, listed = (r.get("structuredContent") or r for r in results)
    assert (proposed["status"], proposed["author"]) == ("provisional", "model")
    assert refused["isError"] and "nonsense" in refused["content"][0]["text"]
    # (the tool named once: the library's error names its function, as the client names the tool)
    assert blank["isError"] and blank["content"][0]["text"].count("memory_propose") == 1, blank
    assert blank["content"][0]["text"].endswith("memory_propose: text is blank: give the memory's text"), blank
    assert sorted((r["status"], r["content"]) for r in listed["records"]) == [
        ("active", "never touch the production database"), ("provisional", "staging db port is 5433")]
    after = snapshot(home)
    assert {k for k in before.keys() | after.keys() if before.get(k) != after.get(k)} == {"main/memory.jsonl"}


def test_a_memory_locked_by_another_writer_is_said_without_an_option_a_tool_does_not_take(home, talk):
    """A proposal while another process held the writer lock told the model to 'raise --timeout', an option no
    tool takes; a Python caller was told the same of its ``timeout=`` argument. Each is told what it can do."""
    from pimem import Memory, api
    from pimem.errors import Busy

    async def propose():
        async with client_of(home, PIMEM_LOCK_TIMEOUT="0.2") as (client, _):
            return await called(client, "memory_propose", name="main", text="staging db port is 5433")

    before = snapshot(home)
    with Memory.open("main").lock():
        said = anyio.run(propose)
        with pytest.raises(Busy) as caught:
            api.remember("main", "staging db port is 5433", timeout=0)
    assert said.endswith("memory 'main' is locked by another writer; try again in a moment"), said
    assert str(caught.value) == "memory 'main' is locked by another writer; try again or raise timeout="
    assert snapshot(home) == before


def test_a_proposal_waits_for_the_writer_lock_a_few_seconds_not_as_long_as_a_client_waits_for_it(home, talk):
    """memory_propose waited the writer lock's 60 s, as long as a client often waits for a call: the model got
    a timeout of its own, not the line saying to try again. It waits ``PROPOSE_TIMEOUT`` at most."""
    from pimem import Memory
    from pimem.mcp_server import PROPOSE_TIMEOUT

    async def propose():
        async with client_of(home, PIMEM_LOCK_TIMEOUT="60") as (client, _):
            with anyio.fail_after(PROPOSE_TIMEOUT + 20):  # (the client's patience, here, shorter than the lock's 60 s)
                return await called(client, "memory_propose", name="main", text="staging db port is 5433")

    with Memory.open("main").lock():
        said = anyio.run(propose)
    assert said.endswith("memory 'main' is locked by another writer; try again in a moment"), said


def test_tool_traffic_only_with_include_tools(home, talk):
    _, results = call_all(home, [
        ("since", {"name": "main"}),
        ("message", {"name": "main", "i": 10}),
        ("message", {"name": "main", "i": 10, "include_tools": True}),
        ("view", {"name": "main"}),
        ("zoom", {"name": "main", "node": "8+4"}),
        ("zoom", {"name": "main", "node": "9+1"}),
        ("view", {"name": "main", "include_tools": True}),
        ("search", {"query": "SECRET"}),
        ("search", {"query": "SECRET", "include_tools": True}),
    ])
    plain, refused, shown, view, halves, leaf, tooled_view, searched, tool_hits = results
    assert searched["structuredContent"]["hits"] == [] and len(tool_hits["structuredContent"]["hits"]) == 2
    for result in (plain, refused, view, halves, leaf, searched):
        assert SECRET not in str(result)
    said = "message 9 is a tool call; ask again with include_tools to show it"  # (not the CLI's --include-tools)
    assert leaf["isError"] and leaf["content"][0]["text"].endswith(said)
    assert SECRET in tooled_view["structuredContent"]["lines"][1]
    assert refused["isError"] and "include_tools" in refused["content"][0]["text"]
    assert shown["structuredContent"]["text"] == f"OPENAI_API_KEY={SECRET}"


def test_no_api_call_keeps_a_file_open(run, home):
    """The MCP server calls the api for ever: a call's index connections, log files and view.json mapping
    must be let go when it returns, without waiting for the garbage collector (which may never run)."""
    import gc
    import os

    from pimem import Memory, api

    home.mkdir()
    (home / "config.json").write_text('{"view": {"hi": 300, "lo": 150}}')
    Memory.at("main").append([{"kind": "user" if k % 2 else "pi", "text": f"deploy note {k} on port {5000 + k}",
                               "date": f"2026-09-{k % 28 + 1:02d}T09:00:00+08:00"} for k in range(60)])
    assert run("build-tree", "main").exit_code == 0 and run("view", "main").exit_code == 0
    calls = [lambda: api.list_memories(), lambda: api.message("main", 3), lambda: api.since("main", 0, limit=5),
             lambda: api.search("deploy", ["main"]), lambda: api.search("deploy", ["main"], rank=True, limit=50),
             lambda: api.view("main"), lambda: api.zoom("main", "0+2"), lambda: api.recall("main", "deploy"),
             lambda: api.recall("main"), lambda: api.memory_search("main")]
    gc.disable()
    try:
        for call in calls:
            call()
            opened = sorted(os.listdir("/proc/self/fd"))
            for _ in range(3):
                call()
            assert sorted(os.listdir("/proc/self/fd")) == opened
    finally:
        gc.enable()


def test_since_and_the_listing_stay_bounded_however_long_the_messages(home):
    from pimem import Memory, api, budget

    Memory.at("big").append([{"kind": "user", "text": f"{k} " + "x" * 150_000} for k in range(5)])
    got = api.since("big")
    assert [(m["i"], len(m["text"]), m["chars"], m["next_offset"]) for m in got["messages"]] == \
        [(i, api.MESSAGE_CHARS, 150_002, api.MESSAGE_CHARS) for i in range(3)] and got["next"] == 3  # 4 × 50,000 and their JSON would pass it
    assert len(budget.dumps(got)) <= api.SINCE_CHARS
    rest = api.message("big", 0, offset=got["messages"][0]["next_offset"], max_chars=200_000)
    assert got["messages"][0]["text"] + rest["text"] == Memory.open("big").message(0)["text"]  # read on, nothing lost
    assert api.since("big", got["next"])["messages"][0]["i"] == 3
    [row] = api.list_memories()
    assert len(row["last_user"]) <= api.LAST_USER_CHARS and row["last_user"].startswith("4 xxx") and "more chars]" in row["last_user"]


def test_zoom_of_one_long_message_is_bounded_as_since_is(home):
    """``zoom id+1`` over MCP gave the original whole: a message of megabytes in one tool result, past what a
    client takes (Claude Code's is 25,000 tokens). It is cut as ``since`` cuts it, and ``message`` reads on."""
    from pimem import Memory, api

    text = "the start " + "y" * 150_000 + " the end"
    Memory.at("big").append([{"kind": "user", "text": text}, {"kind": "pi", "text": "short"}])
    _, (long, short) = call_all(home, [("zoom", {"name": "big", "node": "0+1"}), ("zoom", {"name": "big", "node": "1+1"})])
    assert not long["isError"] and len(long["content"][0]["text"]) < api.MESSAGE_CHARS + 1_000
    got = long["structuredContent"]["message"]
    assert (got["text"], got["chars"], got["next_offset"]) == (text[: api.MESSAGE_CHARS], len(text), api.MESSAGE_CHARS)
    assert got["text"] + api.message("big", 0, offset=got["next_offset"], max_chars=200_000)["text"] == text
    assert short["structuredContent"]["message"]["text"] == "short" and "chars" not in short["structuredContent"]["message"]


def test_since_gives_each_view_line_once_and_its_reply_stays_within_its_bound(run, home):
    """Every message carried the view line holding it (up to 512 bytes) in ``held``, the same line again for
    each message it covers: 100 short messages were 67 KB of JSON, limit=1000 690 KB, past what some clients
    take. ``held`` names the line by its label, ``lines`` gives each line once, and the whole reply (the
    tool's text) stays within SINCE_CHARS; ``next`` pages on with nothing lost."""
    from pimem import Memory, api, budget

    home.mkdir()
    (home / "config.json").write_text('{"view": {"hi": 4000, "lo": 2000}}')
    texts = [f"note {k}: build {k} went to staging " + "ok " * 80 for k in range(1500)]
    Memory.at("main").append([{"kind": "user" if k % 2 else "pi", "text": t} for k, t in enumerate(texts)])
    assert run("build-tree", "main").exit_code == 0
    _, results = call_all(home, [("since", {"name": "main"}), ("since", {"name": "main", "limit": 1000}),
                                 ("view", {"name": "main", "lines": 10_000})])
    (short, long), view = results[:2], results[2]["structuredContent"]
    for result in (short, long):
        got = result["structuredContent"]
        assert len(result["content"][0]["text"]) <= api.SINCE_CHARS
        assert all(set(m["held"]) == {"held", "label", "n"} for m in got["messages"])  # no line in held
        assert {m["held"]["label"] for m in got["messages"]} == set(got["lines"])  # each line once, by label
        assert set(got["lines"].values()) <= set(view["lines"])
        assert len(got["lines"]) < 10
    assert [m["i"] for m in short["structuredContent"]["messages"]] == list(range(100))
    got = long["structuredContent"]
    assert 0 < got["next"] < 1000  # (the bound, before the limit)
    read, start = [m["text"] for m in got["messages"]], got["next"]
    while start is not None:
        page = api.since("main", start, limit=1000)
        assert len(budget.dumps(page)) <= api.SINCE_CHARS
        read, start = read + [m["text"] for m in page["messages"]], page["next"]
    assert read == texts


def test_since_keeps_its_bound_when_one_message_alone_would_pass_it(home):
    """A text of 50,000 characters that JSON escapes (control characters: six characters each) was one reply of
    300,000: it is cut shorter, so the reply fits, and ``message`` reads on from ``next_offset``."""
    from pimem import Memory, api

    text = "\x01" * 60_000
    Memory.at("esc").append([{"kind": "user", "text": text}, {"kind": "pi", "text": "after"}])
    _, (result,) = call_all(home, [("since", {"name": "esc"})])
    got = result["structuredContent"]
    assert len(result["content"][0]["text"]) <= api.SINCE_CHARS and got["next"] == 1
    (msg,) = got["messages"]
    assert 0 < len(msg["text"]) < api.MESSAGE_CHARS and (msg["chars"], msg["next_offset"]) == (60_000, len(msg["text"]))
    assert msg["text"] + api.message("esc", 0, offset=msg["next_offset"], max_chars=100_000)["text"] == text


def test_list_memories_pages_with_a_total(home):
    """list_memories gave every memory in one reply (1,500 of them: 935 KB). It gives ``limit`` (default 100)
    from ``offset``, with the ``total`` and the ``next_offset``; the API's list_memories still gives them all."""
    from pimem import Memory, api

    names = [f"m{k:03d}" for k in range(105)]
    for name in names:
        Memory.at(name).append([{"kind": "user", "text": f"hello from {name}"}])
    _, results = call_all(home, [("list_memories", {}), ("list_memories", {"offset": 100}),
                                 ("list_memories", {"offset": 3, "limit": 2}), ("list_memories", {"limit": 0})])
    first, rest, middle = (r["structuredContent"] for r in results[:3])
    assert [m["name"] for m in first["memories"]] == names[:100] and (first["total"], first["next_offset"]) == (105, 100)
    assert [m["name"] for m in rest["memories"]] == names[100:] and (rest["total"], rest["next_offset"]) == (105, None)
    assert [m["name"] for m in middle["memories"]] == ["m003", "m004"] and middle["next_offset"] == 5
    assert results[3]["isError"] and results[3]["content"][0]["text"] == \
        "Error executing tool list_memories: limit must be a whole number from 1 to 200"
    assert api.list_memories() == first["memories"] + rest["memories"]
    assert first["memories"][0]["last_user"] == "hello from m000"


@pytest.mark.parametrize("call, said", [
    (lambda api: api.since("main", when=5), "since: when must be str or None, not int"),
    (lambda api: api.search(None), "search: query must be str, not NoneType"),
    (lambda api: api.search("5433", names="main"), "search: names must be a list of str or None, not str"),
    (lambda api: api.search("a\udcffb"), "search: query is not valid UTF-8"),
    (lambda api: api.recall("main", page="1"), "recall: page must be int or None, not str"),
    (lambda api: api.recall("main", ids=[None]), "recall: ids must be a list of int or str or None, not list"),
    (lambda api: api.message("main", True), "message: i must be int, not bool"),
    (lambda api: api.message("main"), "message: missing a required argument: 'i'"),
    (lambda api: api.memory_propose("main", "a\udcff"), "memory_propose: text is not valid UTF-8"),
    (lambda api: api.list_memories(home=5), "list_memories: home must be str or a path or None, not int"),
    # (the tools' argument names, not the CLI's options)
    (lambda api: api.recall("main", ids=["99999999999999999999"]), "bad ids message number '99999999999999999999'"),
    (lambda api: api.recall("main", ids=[" "]), "ids ' ' names no message"),
    (lambda api: api.memory_propose("main", " "), "memory_propose: text is blank: give the memory's text"),
    # (empty, as the CLI refuses --supersede '' (exit 2, not 3: no memory not found) and --session '')
    (lambda api: api.memory_propose("main", "x", supersede=""), "empty supersede: give a memory's id"),
    (lambda api: api.memory_propose("main", "x", session=" "), "session ' ': give the caller's session id, not an empty one"),
    # (an empty date is refused, as the CLI's --since '' and since's when '': no date is None, not "")
    (lambda api: api.search("5433", since=""), "bad date '': use a date (2026-10-08)"),
    (lambda api: api.search("5433", until=""), "bad date '': use a date (2026-10-08)"),
    (lambda api: api.since("main", when=""), "bad date '': use a date (2026-10-08)"),
    (lambda api: api.memory_search("main", session=""), "session '': give the caller's session id, not an empty one"),
    # (a query of white space only, as the CLI's recall ' ' and memories main ' ': not the listing no query asks for)
    (lambda api: api.recall("main", " "), "empty query: give words to search for, or none to list the newest"),
    (lambda api: api.memory_search("main", "\t "), "empty query: give words to rank by, or none to list every memory"),
    (lambda api: api.memories("main", " "), "empty query: give words to rank by, or none to list every memory"),
    # (the writers, checked as the readers are: a "yes" pinned, a number raised a bare TypeError)
    (lambda api: api.remember("main", "x", pin="yes"), "remember: pin must be bool, not str"),
    (lambda api: api.remember("main", "x", scope="session"), "remember: scope session needs session"),
    (lambda api: api.remember("main", ""), "remember: text is blank: give the memory's text"),
    (lambda api: api.remember("main", "x", timeout=-1), "timeout is seconds from 0"),
    (lambda api: api.remember("new", "x", timeout="5"), "remember: timeout must be int or float or None, not str"),
    (lambda api: api.forget("main", 5), "forget: record_id must be str, not int"),
    (lambda api: api.forget("main", ""), "empty record_id: give a memory's id"),
    (lambda api: api.memories("main", include_tools="yes"), "memories: include_tools must be bool, not str"),
    (lambda api: api.compact("main", "5"), "compact: keep must be int, not str"),
    (lambda api: api.compact("main", -1), "keep must be a whole number from 0"),
    (lambda api: api.compact("main", 0, dry_run=1), "compact: dry_run must be bool, not int"),
])
def test_an_api_argument_of_the_wrong_type_is_a_bad_input_naming_it(home, call, said):
    from pimem import Memory, api
    from pimem.errors import BadInput

    Memory.at("main").append([{"kind": "user", "text": "the staging db listens on 5433"}])
    before = snapshot(home)
    with pytest.raises(BadInput) as refused:
        call(api)
    assert str(refused.value).startswith(said) and snapshot(home) == before


def test_a_home_that_is_a_file_is_refused_at_start_as_by_every_command(tmp_path):
    import subprocess

    from conftest import pimem_cmd

    home = tmp_path / "home"
    home.write_text("not a directory")
    done = subprocess.run(pimem_cmd("mcp"), env=subprocess_env(PIMEM_HOME=home), input="", capture_output=True,
                          text=True, timeout=60)
    assert (done.returncode, done.stdout) == (7, "")
    assert done.stderr == f"pimem: error: the home {home} is not a directory: set --home or $PIMEM_HOME to one\n"


def test_the_server_says_its_version_and_the_help_that_one_tool_writes(run, home):
    from pimem import __version__

    async def session():
        async with client_of(home) as (_, info):
            return info

    info = anyio.run(session)
    assert (info.name, info.version) == ("pimem", __version__)
    assert "(read-only)" not in run("mcp", "--help").stdout


def test_search_names_a_memory_whose_config_cannot_be_read_and_searches_the_others(run, home):
    assert run("append", "good", "fine apples").exit_code == 0 and run("append", "other", "fine pears").exit_code == 0
    (home / "good" / "config.json").write_text('{"view":{"hi":"x"}}')
    _, results = call_all(home, [("search", {"query": "fine"}), ("search", {"query": "fine", "rank": True})])
    for result in results:
        found = result["structuredContent"]
        assert not result["isError"] and [h["memory"] for h in found["hits"]] == ["other"], result
        assert [u["memory"] for u in found["unread"]] == ["good"] and 'view.hi cannot be "x"' in found["unread"][0]["error"]


def readable(stream, seconds: float) -> bool:
    """Whether ``stream`` has something to read within ``seconds`` (poll: select() refuses a descriptor number
    past 1,023, which a long test run's may be)."""
    import select

    poller = select.poll()
    poller.register(stream, select.POLLIN)
    return bool(poller.poll(seconds * 1000))


def raw_session(home, lines: list[bytes], answers: int) -> list[dict]:
    """Start `python -m pimem mcp`, initialize it, write ``lines`` as they are, and return the first ``answers``
    lines it writes back (stdin kept open until then: the SDK drops answers in flight when its stdin ends). Its
    stdout is read unbuffered: poll waits on the pipe, and would pass over answers a buffered read had taken
    from it with an earlier one."""
    import subprocess

    from conftest import pimem_cmd

    proc = subprocess.Popen(pimem_cmd("mcp"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            bufsize=0, env=subprocess_env(PIMEM_HOME=home))
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    got = []
    try:
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        proc.stdin.write(b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n' + b"".join(line + b"\n" for line in lines))
        proc.stdin.flush()
        while len(got) < answers and readable(proc.stdout, 60):
            got.append(json.loads(proc.stdout.readline()))
    finally:
        proc.stdin.close()
        code = proc.wait(60)
        proc.stdout.close()
        proc.stderr.close()
    assert code == 0, got  # (the client's stdin ended: the server stops, as it should)
    return got


def test_a_lone_surrogate_is_read_as_u_fffd_and_a_line_that_is_no_message_is_answered(run, home):
    """A request holding a lone surrogate escape (JavaScript's JSON.stringify of a string cut inside a pair) got
    no answer, nor did a line that is not JSON: the SDK dropped both, and the client waited for ever."""
    assert run("append", "pi", "hello").exit_code == 0
    call = b'{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":"%s","arguments":%s}}'
    answers = raw_session(home, [call % (2, b"memory_propose", b'{"name":"pi","text":"\\ud800 lone"}'), b"garbage line",
                                 b"", b'{"a":1}', call % (5, b"list_memories", b"{}")], 4)
    by_id = {a["id"]: a for a in answers if a["id"] is not None}
    assert sorted(by_id) == [2, 5] and not by_id[2]["result"]["isError"], answers
    assert by_id[2]["result"]["structuredContent"]["content"] == "\ufffd lone"
    assert by_id[5]["result"]["structuredContent"]["memories"][0]["name"] == "pi"
    refused = [(a["error"]["code"], a["error"]["message"]) for a in answers if a["id"] is None]
    assert refused == [(-32700, "Parse error: Invalid JSON: expected value at line 1 column 1"),
                       (-32600, "Invalid Request: not a JSON-RPC 2.0 message")]  # (the blank line: nothing to answer)
    assert run("memories", "pi", "--json").stdout.count("\ufffd lone") == 1


def test_since_never_passes_its_bound_and_next_names_the_message_left_for_the_next_call(home):
    """The bound was checked before a message was added, so a call returned up to 250,000 characters of text
    (203,140 seen): it ends before the message that would pass 200,000, and ``next`` is that message."""
    from pimem import Memory, api

    texts = [f"{k} " + "z" * 30_000 for k in range(10)]
    Memory.at("big").append([{"kind": "tool" if k % 3 == 0 else "user", "text": t} for k, t in enumerate(texts)])
    _, (result,) = call_all(home, [("since", {"name": "big", "start": 0, "limit": 1000, "include_tools": True})])
    got = result["structuredContent"]
    assert sum(len(m["text"]) for m in got["messages"]) <= api.SINCE_CHARS
    assert [m["i"] for m in got["messages"]] == list(range(6)) and got["next"] == 6  # 6 × 30,002: a 7th would pass it
    rest = api.since("big", got["next"], limit=1000, include_tools=True)
    assert [m["text"] for m in got["messages"] + rest["messages"]] == texts and rest["next"] is None  # nothing lost


def test_an_argument_a_tool_does_not_take_is_refused_in_one_line(home, talk):
    """An argument no tool takes was ignored: a misspelt ``names`` searched every memory, ``limt`` read 100."""
    before = snapshot(home)
    _, results = call_all(home, [("search", {"query": "5433", "memory": "nope"}), ("since", {"name": "main", "limt": 5}),
                                 ("since", {"name": "main", "limt": 5, "includeTools": True}), ("list_memories", {"all": True}),
                                 ("memory_propose", {"name": "main", "text": "kept?", "pinned": True})])
    assert snapshot(home) == before  # (nothing proposed)
    assert [r["isError"] for r in results] == [True] * 5
    assert [r["content"][0]["text"] for r in results] == [
        "Error executing tool search: bad arguments: memory: search takes no such argument (it takes query, names, "
        "rank, any_term, kinds, include_tools, since, until, before, limit, offset)",
        "Error executing tool since: bad arguments: limt: since takes no such argument (did you mean limit?)",
        "Error executing tool since: bad arguments: limt: since takes no such argument (did you mean limit?); "
        "includeTools: since takes no such argument (did you mean include_tools?)",
        "Error executing tool list_memories: bad arguments: all: list_memories takes no such argument (it takes offset, limit)",
        "Error executing tool memory_propose: bad arguments: pinned: memory_propose takes no such argument (it takes "
        "name, text, kind, priority, supersede, session)"]

    async def schemas():
        async with client_of(home) as (client, _):
            return [t.input_schema for t in (await client.list_tools()).tools]

    assert all(schema["additionalProperties"] is False for schema in anyio.run(schemas))  # (as a client may check first)


def test_a_tools_description_is_its_help_without_the_indent_of_the_source(home):
    """Each line of a tool's description after the first came with the 8 spaces its docstring is indented by in
    the source (some 200 characters of the tool list every client reads, and a ragged text where one shows it)."""
    from pimem import mcp_server

    tools = anyio.run(mcp_server.build(home).list_tools)
    assert len(tools) == 9
    for tool in tools:
        assert tool.description == tool.description.strip() and "\n " not in tool.description, tool.description
    assert [t.description for t in tools if t.name == "list_memories"] == [
        "The memories, `limit` of them from `offset`: name, message count, first and last dates, and the\n"
        "last thing the user said. `total` counts them all; `next_offset` is the offset for the next page (null\n"
        "at the end)."]


def test_arguments_that_do_not_go_together_are_refused_in_one_line_as_the_cli_refuses_them(home, talk):
    """Each answered with one of them ignored: recall read message 0, search ranked, since read from when."""
    before = snapshot(home)
    _, results = call_all(home, [("recall", {"name": "main", "ids": [0], "query": "x"}),
                                 ("recall", {"name": "main", "ids": [0], "page": 1}),
                                 ("search", {"query": "5433", "rank": True, "any_term": True}),
                                 ("since", {"name": "main", "start": 0, "when": "2h"}),
                                 ("search", {"query": "5433", "since": "#5", "until": "#2"}),
                                 ("since", {"name": "main", "when": "#2"})])
    assert snapshot(home) == before
    assert [r["isError"] for r in results] == [True] * 6
    assert [r["content"][0]["text"] for r in results] == [
        "Error executing tool recall: ids and query do not go together: ids names the messages to read; query searches",
        "Error executing tool recall: ids and page do not go together: ids names the messages to read; file, kind "
        "and page narrow a search or a listing",
        "Error executing tool search: rank and any_term do not go together: rank finds messages holding any of the "
        "words already",
        "Error executing tool since: start and when do not go together: next is a start, to page on with alone",
        "Error executing tool search: until #2 is before since #5",
        "Error executing tool since: when is a date or time; a message number (#2) goes in start"]


def test_a_ranked_search_pages_on_with_offset_and_until_bounds_a_search(home, talk):
    """The search tool took no offset and no until: a ranked search never went past its first limit."""
    _, results = call_all(home, [("search", {"query": "filler weather", "rank": True, "limit": 3}),
                                 ("search", {"query": "filler weather", "rank": True, "limit": 3, "offset": 3}),
                                 ("search", {"query": "filler weather", "rank": True, "limit": 6}),
                                 ("search", {"query": "filler", "until": "#3"}),
                                 ("search", {"query": "filler", "since": "#2", "until": "#5", "offset": 1})])
    first, second, whole, until, window = ([h["i"] for h in r["structuredContent"]["hits"]] for r in results)
    assert first + second == whole and len(set(whole)) == 6
    assert until == [2, 1, 0] and window == [3, 2]


def test_recall_that_finds_nothing_says_how_many_tool_messages_would_match(home, talk):
    _, (hidden, shown) = call_all(home, [("recall", {"name": "main", "query": "OPENAI_API_KEY"}),
                                         ("recall", {"name": "main", "query": "OPENAI_API_KEY", "include_tools": True})])
    assert (hidden["structuredContent"]["count"], hidden["structuredContent"]["toolsMatching"]) == (0, 1)
    assert shown["structuredContent"]["count"] == 1 and "toolsMatching" not in shown["structuredContent"]


def test_recall_counts_every_tool_message_that_matches_not_one_per_long_head(home, run):
    """toolsMatching said 1 of 40 tool results whose first 240 characters were the same."""
    lines = "".join(json.dumps({"kind": "tool_result", "text": "x" * 300 + f" root password is hunter{n}"}) + "\n"
                    for n in range(40))
    assert run("append", "main", "--ndjson", input=lines).exit_code == 0
    _, (hidden, shown) = call_all(home, [("recall", {"name": "main", "query": "root password"}),
                                         ("recall", {"name": "main", "query": "root password", "include_tools": True,
                                                     "limit": 30})])
    assert (hidden["structuredContent"]["count"], hidden["structuredContent"]["toolsMatching"]) == (0, 40)
    assert (shown["structuredContent"]["count"], len(shown["structuredContent"]["results"])) == (40, 30)


def test_a_request_whose_id_is_no_string_or_integer_is_refused_and_a_lone_surrogate_id_comes_back_as_sent(home):
    """A request whose id was 1.5, true, an object or null was read as a notification and never answered, and one
    whose id held a lone surrogate escape was answered with U+FFFD in its place: the client waited for ever."""
    ping = b'{"jsonrpc":"2.0","id":%s,"method":"ping"}'
    ids = [b"1.5", b"true", b'{"a":1}', b"[2]", b"null", b"1.0"]
    answers = raw_session(home, [ping % i for i in ids] + [ping % b'"\\ud800 x\\udc00"', b'{"jsonrpc":"2.0","method":"ping"}',
                                                           ping % b'"\\ud83d\\ude00"', ping % b"9"], len(ids) + 3)
    refused = answers[:len(ids)]
    assert all(a == {"jsonrpc": "2.0", "id": None, "error": {
        "code": -32600, "message": "Invalid Request: id must be a string or an integer"}} for a in refused), answers
    # (the escapes as sent: the standard library reads them back as lone surrogates; a pair is a character)
    assert [(a["id"], a["result"]) for a in answers[len(ids):]] == [("\ud800 x\udc00", {}), ("\U0001f600", {}), (9, {})], answers


def test_requests_written_at_once_after_initialized_are_each_answered(home):
    """A client that writes notifications/initialized and its first requests at once (as Claude Code writes
    tools/list) gets an answer to each, however many come back in one read."""
    pings = [b'{"jsonrpc":"2.0","id":%d,"method":"ping"}' % i for i in range(100, 120)]
    for _ in range(3):
        answers = raw_session(home, pings + [b'{"jsonrpc":"2.0","id":200,"method":"tools/list"}'], 21)
        assert sorted(a["id"] for a in answers) == [*range(100, 120), 200], answers
        assert next(a for a in answers if a["id"] == 200)["result"]["tools"], answers


def _refused(code):
    return {"jsonrpc": "2.0", "id": None, "error": {"code": code, "message": {
        -32600: "Invalid Request: id must be a string or an integer",
        -32700: "Parse error: Invalid JSON: unexpected end of hex escape at line 1 column 62"}[code]}}


@pytest.mark.parametrize("line, answer", [
    (b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1e999}}', None),
    (b'{"jsonrpc":"2.0","method":"notifications/x","params":{"a":NaN}}', None),
    (b'{"jsonrpc":"2.0","id":1e400,"method":"tools/list"}', _refused(-32600)),
    (b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"a":"\\ud800","b":%s}}' % (b"[" * 600 + b"]" * 600), _refused(-32700)),
    (b'{"jsonrpc":"2.0","id":5,"method":"ping","params":{"a":"\\ud800","b":%s}}' % (b"[" * 300 + b"]" * 300), _refused(-32700)),
    (b'{"jsonrpc":"2.0","id":123456789012345678901234567890,"method":"ping","params":{"x":"\\ud800"}}',
     {"jsonrpc": "2.0", "id": 123456789012345678901234567890, "result": {}}),
], ids=["cancelled 1e999", "NaN", "id 1e400", "600 deep", "300 deep", "wide id"])
def test_a_line_pimem_cannot_read_is_refused_and_the_server_goes_on(home, line, answer):
    """A notification holding NaN or a number too large for a double (which pydantic reads and orjson does not), a
    request with such an id, and a request too deeply nested holding a lone surrogate escape each stopped the
    server: every later request went unanswered. A notification is never answered; a request is refused. A
    request holding a lone surrogate escape whose id was an integer beyond 64 bits was refused (its id read as a
    float); it is answered with its id as sent."""
    answers = raw_session(home, [line, b'{"jsonrpc":"2.0","id":77,"method":"ping"}'], 1 if answer is None else 2)
    assert answers == [answer, {"jsonrpc": "2.0", "id": 77, "result": {}}][answer is None:], answers


SERVED_IN_PROCESS = """
import os, sys
from pimem import mcp_server

def files():
    return [(os.fstat(fd).st_dev, os.fstat(fd).st_ino) for fd in (0, 1)]

before = files()
mcp_server.serve()
print("the same stdin and stdout after the server:", files() == before, flush=True)
os.write(1, b"and fd 1 is stdout\\n")
from pimem import viewfile
print("a reader saves the views again:", viewfile._readers_save, flush=True)
"""


def test_a_server_run_in_a_python_process_gives_it_its_stdin_and_stdout_back_when_it_ends(home):
    """While it serves, fds 0 and 1 read /dev/null and write to stderr (nothing else the process runs reads or
    writes the client's messages); a Python user's process that goes on after the server has them back."""
    import subprocess

    proc = subprocess.Popen([sys.executable, "-c", SERVED_IN_PROCESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env(PIMEM_HOME=home), cwd="/")
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    proc.stdin.write(json.dumps(init).encode() + b"\n")
    proc.stdin.flush()
    assert json.loads(proc.stdout.readline())["id"] == 1
    out, err = proc.communicate(timeout=60)  # (stdin closed: the client hung up, the server ends)
    assert proc.returncode == 0, err
    assert out == (b"the same stdin and stdout after the server: True\nand fd 1 is stdout\n"
                   b"a reader saves the views again: True\n"), (out, err)


def test_a_cancellation_naming_an_id_with_a_lone_surrogate_cancels_that_request_and_no_other(run, home):
    """A request whose id holds a lone surrogate escape is served under a stand-in id; a cancellation naming that
    id was read with U+FFFD in its place, so it cancelled a request whose id was U+FFFD (left unanswered) and
    never the one it named. It cancels the one it names, and one naming no request is ignored."""
    import subprocess

    from pimem import mcp_server

    ids = {"pimem-1": '"\\ud800"'}
    cancel = '{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"%s","reason":"r"}}'
    assert json.loads(mcp_server._read(cancel % "\\ud800", ids)[0])["params"]["requestId"] == "pimem-1"
    assert mcp_server._read(cancel % "\\udc00", ids) == (None, None)
    assert mcp_server._read(cancel % "x\\ud800", ids) == (None, None)
    assert json.loads(mcp_server._read(cancel % "\\ufffd", ids)[0])["params"]["requestId"] == "\ufffd"

    assert run("append", "m", "the staging db").exit_code == 0 and run("search", "staging").exit_code == 0
    assert run("append", "m", "another staging note").exit_code == 0
    gate = home.parent / "gate"  # (the search waits for it: a request in flight; an index.lock held is no longer
    # waited for by the MCP server's search, which reads the index as it is)
    proc = subprocess.Popen([sys.executable, "-c", SERVED_WITH_A_GATED_SEARCH, str(gate)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0, env=subprocess_env(PIMEM_HOME=home))

    def send(*lines):
        proc.stdin.write(b"".join(line + b"\n" for line in lines))
        proc.stdin.flush()

    def answer():
        assert readable(proc.stdout, 60), "no answer"
        return json.loads(proc.stdout.readline())

    try:
        send(json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}).encode())
        assert answer()["id"] == 1
        send(b'{"jsonrpc":"2.0","method":"notifications/initialized"}',
             b'{"jsonrpc":"2.0","id":"\\ufffd","method":"tools/call","params":{"name":"search","arguments":{"query":"staging"}}}',
             b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"\\ud800"}}',
             b'{"jsonrpc":"2.0","id":7,"method":"ping"}')
        assert answer() == {"jsonrpc": "2.0", "id": 7, "result": {}}  # (the cancellation was read before it)
        gate.touch()
        found = answer()
        assert found["id"] == "\ufffd" and len(found["result"]["structuredContent"]["hits"]) == 2, found
    finally:
        proc.stdin.close()
        code = proc.wait(60)
        proc.stdout.close()
        proc.stderr.close()
    assert code == 0


def test_without_the_sdk_the_hint_installs_the_extra_from_pimems_checkout_not_from_pypi(tmp_path):
    """"pimem[mcp]" on PyPI is another project: the hint names this checkout, else says to run pip in it."""
    import shutil
    import subprocess

    from conftest import ROOT, pimem_cmd

    (tmp_path / "stub" / "mcp").mkdir(parents=True)
    (tmp_path / "stub" / "mcp" / "__init__.py").write_text("raise ImportError('no SDK here')\n")
    copy = tmp_path / "installed"  # pimem's files without their checkout, as pip install . leaves them
    shutil.copytree(ROOT / "pimem", copy / "pimem", ignore=shutil.ignore_patterns("__pycache__"))
    said = []
    for where in (ROOT, copy):
        env = subprocess_env(PIMEM_HOME=tmp_path / "home", PYTHONPATH=f"{tmp_path / 'stub'}{os.pathsep}{where}")
        done = subprocess.run(pimem_cmd("mcp"), env=env, cwd=tmp_path, input="", capture_output=True, text=True, timeout=60)
        assert (done.returncode, done.stdout) == (2, "") and "pimem[mcp]" not in done.stderr
        said.append(done.stderr)
    head, pip = "pimem: error: pimem mcp needs the MCP SDK 2.x, pimem's mcp extra:", f"{shlex.quote(sys.executable)} -m pip install"
    assert said == [f"{head} {pip} -e {shlex.quote(f'{ROOT}[mcp]')}\n", f"{head} in pimem's checkout, {pip} '.[mcp]'\n"]


def test_a_client_that_stops_reading_is_served_until_it_hangs_up_and_the_server_ends_quietly(home):
    """A client that closed its end of the server's stdout (or was killed while an answer was being written)
    stopped the server at the first answer it could not take: no later call was served and, once stdin closed,
    a traceback of a hundred lines on stderr and exit 1. What is left to answer goes nowhere, the calls are
    still served, and the server ends with exit 0 when the client hangs up, as a command whose reader went away."""
    import subprocess
    import time

    from conftest import pimem_cmd
    from pimem import Memory

    Memory.at("main", home=home).append([{"kind": "user", "text": "the staging db listens on 5433"}])
    proc = subprocess.Popen(pimem_cmd("mcp"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(PIMEM_HOME=home), cwd="/")
    proc.stdout.close()  # (the client stops reading, and still writes: the answer to initialize is the first lost)
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    propose = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "memory_propose", "arguments": {"name": "main", "text": "the port is 5433"}}}
    for message in (init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, propose):
        proc.stdin.write(json.dumps(message).encode() + b"\n")
    proc.stdin.flush()
    memories, deadline = home / "main" / "memory.jsonl", time.monotonic() + 60
    while not (memories.exists() and b"the port is 5433" in memories.read_bytes()) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.stdin.close()  # (the client hangs up)
    assert proc.wait(timeout=60) == 0
    assert proc.stderr.read() == b""
    assert b"the port is 5433" in memories.read_bytes()


def test_calls_a_client_sent_before_it_hung_up_are_answered_before_the_server_ends(home):
    """A client that writes its requests and closes stdin at once (printf … | pimem mcp, to try it by hand) got
    the answer to initialize, but a call still running when stdin ended was cut off: no answer to a view, and a
    memory_propose stored with its answer (the memory's id) never sent. Each request read is answered before the
    server ends, with exit 0."""
    import subprocess

    from conftest import pimem_cmd
    from pimem import Memory

    Memory.at("main", home=home).append([{"kind": "user", "text": "the staging db listens on 5433"}])
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
    calls = [{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "view", "arguments": {"name": "main"}}},
             {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
                 "name": "memory_propose", "arguments": {"name": "main", "text": "the port is 5433"}}}]
    sent = b"".join(json.dumps(m).encode() + b"\n" for m in [init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, *calls])
    done = subprocess.run(pimem_cmd("mcp"), input=sent, capture_output=True, env=subprocess_env(PIMEM_HOME=home),
                          cwd="/", timeout=60)
    assert done.returncode == 0 and done.stderr == b"", done.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, done.stdout.splitlines())}
    assert sorted(answers) == [1, 2, 3], done.stdout
    assert "0+1|user: the staging db listens on 5433" in answers[2]["result"]["content"][0]["text"]
    assert "mem_" in answers[3]["result"]["content"][0]["text"]


def test_a_memory_renamed_or_deleted_under_a_running_server_is_read_where_it_went_or_said_gone(run, home):
    """A long-running `pimem mcp` holds no memory between calls: each opens it by name, so after a `pimem rename`
    (another process) the old name reads the renamed memory through its pointer, as the new one does, and after a
    `pimem delete` a call says there is no such memory (one line, never an empty memory)."""
    import subprocess

    from conftest import pimem_cmd

    for k in range(3):
        assert run("append", "old", f"note {k} on port 5433").exit_code == 0

    def sh(*args):
        assert subprocess.run(pimem_cmd(*args), capture_output=True, env=subprocess_env(PIMEM_HOME=home), cwd="/").returncode == 0

    async def session():
        async with client_of(home) as (client, _):
            call = functools.partial(called, client)
            said = [await call("view", name="old")]
            sh("rename", "old", "new")
            for name in ("old", "new"):
                said += [await call("view", name=name), await call("message", name=name, i=2),
                         [m["text"] for m in (await call("since", name=name))["messages"]]]
            sh("delete", "new")
            said += [await call(tool, name=name, **args) for tool, args in (("view", {}), ("message", {"i": 2}))
                     for name in ("old", "new")]
            return said

    said = anyio.run(session)
    before, renamed, gone = said[0], said[1:7], said[7:]
    assert before["lines"] == ["0+1|user: note 0 on port 5433", "1+1|user: note 1 on port 5433",
                               "2+1|user: note 2 on port 5433"]
    for view, message, texts in (renamed[:3], renamed[3:]):  # by the old name and by the new, the same memory
        assert view["lines"] == before["lines"]
        assert message["text"] == "note 2 on port 5433" and texts == [f"note {k} on port 5433" for k in range(3)]
    # (the advice names the tool to call, not the shell command: the CLI says "(see 'pimem list')")
    assert gone == [f"Error executing tool {tool}: no memory named '{name}' in {home} (see list_memories)"
                    for tool in ("view", "message") for name in ("old", "new")]


def test_an_error_advises_the_tool_to_call_not_the_shell_command(run, home, talk):
    _, results = call_all(home, [("search", {"query": "5433", "names": ["nope"]}),
                                 ("memory_propose", {"name": "main", "supersede": "mem_bogus"}),
                                 ("memory_propose", {"name": "main", "text": "x", "supersede": ""})])
    assert [r["content"][0]["text"] for r in results] == [
        f"Error executing tool search: no memory named 'nope' in {home} (see list_memories)",
        "Error executing tool memory_propose: no memory 'mem_bogus' in 'main' (see memory_search)",
        "Error executing tool memory_propose: empty supersede: give a memory's id (see memory_search)"]
    # the CLI's words are the CLI's
    assert run("view", "nope").stderr == f"pimem: error: no memory named 'nope' in {home} (see 'pimem list')\n"
    assert run("remember", "main", "x", "--supersede", "").stderr == \
        "pimem: error: empty --supersede: give a memory's id (see 'pimem memories')\n"


def test_a_home_deleted_or_replaced_by_a_file_under_a_running_server_is_said_not_listed_empty(run, home):
    """A home that goes while `pimem mcp` runs: list_memories answered an empty list (and search no hits), as if
    nothing had ever been logged. Deleted, each call says the home is gone; a file, that it is not a directory,
    as every command says of such a home."""
    import shutil

    assert run("append", "main", "the staging db listens on 5433").exit_code == 0

    async def session():
        async with client_of(home) as (client, _):
            call = functools.partial(called, client)
            said = [await call("list_memories")]
            shutil.rmtree(home)
            said += [await call("list_memories"), await call("search", query="5433")]
            home.write_text("not a directory")
            said += [await call("list_memories"), await call("search", query="5433")]
            home.unlink()
            assert run("append", "main", "back again").exit_code == 0  # (made again: read again)
            said += [[m["name"] for m in (await call("list_memories"))["memories"]]]
            return said

    said = anyio.run(session)
    assert [m["name"] for m in said[0]["memories"]] == ["main"]
    gone = f"the home {home} is gone: it was deleted or moved after the server started"
    assert said[1:3] == [f"Error executing tool {tool}: {gone}" for tool in ("list_memories", "search")]
    file = f"the home {home} is not a directory: set --home or $PIMEM_HOME to one"
    assert said[3:5] == [f"Error executing tool {tool}: {file}" for tool in ("list_memories", "search")]
    assert said[5] == ["main"]


def test_a_search_after_the_index_is_lost_answers_at_once_and_says_the_index_is_being_caught_up(home):
    """A big memory's index lost: the search tool caught it up before answering, for longer than a client waits
    for a call (a rebuild at 100,000 messages: over a minute under load), the server answering nothing else
    meanwhile. It searches the index as it is, says in ``notes`` that the messages it lacks were not searched,
    and leaves the catch-up to a process of its own; once that is done, the same call finds the message."""
    from test_hook import catching_up, gone
    from test_search import lost_index_memory

    mem = lost_index_memory(home)
    _, [result, recalled, small] = call_all(home, [("search", {"query": "port 5433", "names": ["main"]}),
                                                   ("recall", {"name": "main", "query": "staging port 5433"}),
                                                   ("recall", {"name": "main", "query": "staging port 5433", "budget": 300})])
    assert not result["isError"], result
    note = ("the search index of memory 'main' lacks 10 MiB of its log; a process of its own is catching it up, so this "
            "search did not read the messages it lacks (ask again once it is done)")
    assert result["structuredContent"] == {"hits": [], "notes": [note]}
    assert recalled["structuredContent"]["notes"] == [note] and "5433" not in json.dumps(recalled["structuredContent"]["results"])
    assert len(json.dumps(small["structuredContent"], separators=(",", ":"), ensure_ascii=False)) <= 300, small
    pids = catching_up(mem.path)
    assert len(pids) == 1
    gone(pids)
    _, [result, recalled] = call_all(home, [("search", {"query": "port 5433", "names": ["main"]}),
                                            ("recall", {"name": "main", "query": "staging port 5433"})])
    assert [hit["i"] for hit in result["structuredContent"]["hits"]] == [500] and "notes" not in result["structuredContent"]
    assert "5433" in json.dumps(recalled["structuredContent"]["results"]) and "notes" not in recalled["structuredContent"]


def test_the_view_after_the_index_is_lost_hides_its_long_lines_at_once_and_says_why(home):
    """A big memory's index lost: the view tool caught it up before answering (its mask asks the index about
    lines over long spans). It answers at once with such a line hidden whole, never its tool output, says why in
    ``notes``, and leaves the catch-up to a process of its own; then the line is masked as ever."""
    from test_context import SAID, long_lined_memory
    from test_hook import catching_up, gone

    mem = long_lined_memory(home)
    _, [view, zoomed] = call_all(home, [("view", {"name": "main"}), ("zoom", {"name": "main", "node": "0+4096"})])
    note = ("the search index of memory 'main' lacks 11 MiB of its log; a process of its own is catching it up, so lines "
            "over long spans are shown as [tool output hidden] until it is done")
    assert view["structuredContent"]["lines"][0] == "0+2048|[tool output hidden]" and view["structuredContent"]["notes"] == [note]
    assert zoomed["structuredContent"]["children"][0]["text"] == "[tool output hidden]" and zoomed["structuredContent"]["notes"] == [note]
    assert "swordfish32" not in json.dumps([view, zoomed])
    gone(catching_up(mem.path))
    _, [view] = call_all(home, [("view", {"name": "main"})])
    assert view["structuredContent"]["lines"][0] == f"0+2048|user: ports; the file says [tool output hidden]; user: {SAID}"
    assert "notes" not in view["structuredContent"]


def test_the_view_with_tools_after_the_index_is_lost_says_nothing_of_lines_hidden(home):
    """include_tools after a big memory's index was lost: the line over a long span was shown whole with its tool
    output, as asked, while ``notes`` said such lines were shown as [tool output hidden]. It says nothing."""
    from test_context import SAID, SECRET, long_lined_memory

    long_lined_memory(home)
    _, [view] = call_all(home, [("view", {"name": "main", "include_tools": True})])
    assert view["structuredContent"]["lines"][0] == f"0+2048|user: ports; the file says {SECRET}; user: {SAID}"
    assert "notes" not in view["structuredContent"]


def done_with(proc) -> None:
    """A server process killed if it still runs, and its pipes closed."""
    if proc.poll() is None:
        proc.kill()
        proc.wait()
    for stream in (proc.stdin, proc.stdout, proc.stderr):
        stream.close()


@pytest.mark.parametrize("signame, code", [("SIGTERM", 143), ("SIGINT", 130), ("SIGHUP", 129)])
def test_the_server_stops_on_a_signal_while_its_client_keeps_stdin_open(home, signame, code):
    """SIGTERM (a client stopping its server), Ctrl-C or SIGHUP said 'pimem: interrupted' and left the server
    running until the client closed stdin: the thread reading it, blocked in its read, kept the interpreter from
    exiting, and a second signal was ignored. It exits at once with 143, 130 or 129."""
    import signal
    import subprocess

    from conftest import pimem_cmd

    proc = subprocess.Popen(pimem_cmd("mcp"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(PIMEM_HOME=home))
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1  # (serving, reading the next line)
        proc.send_signal(getattr(signal, signame))
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the server did not stop on {signame} while its stdin was open")
        assert proc.returncode == code
        assert proc.stderr.read() == b"pimem: interrupted\n"
    finally:
        done_with(proc)


SERVED_WITH_A_GATED_SEARCH = """
import sys, time
from pathlib import Path
from pimem import api

searched, gate = api.search, Path(sys.argv[1])

def gated(*args, **kwargs):
    sys.stderr.write("searching\\n")
    sys.stderr.flush()
    while not gate.exists():
        time.sleep(0.01)
    return searched(*args, **kwargs)

api.search = gated
if len(sys.argv) > 2:  # (how long an answer may wait for the client once a signal came)
    from pimem import mcp_server
    mcp_server._Pending.STOPPING = float(sys.argv[2])
sys.argv = ["pimem", "mcp"]
from pimem.__main__ import main
main()
"""


@pytest.mark.parametrize("stopping", [None, "0.05"], ids=["at-once", "a-call-outlasting-the-wait-for-a-client"])
def test_a_request_in_flight_when_sigterm_arrives_is_answered_before_the_server_exits(home, tmp_path, stopping):
    """A client stopping its server (SIGTERM) as a call ran: the call ran to its end, its answer was dropped (a
    memory_propose stored never said) and the server exited 143. The first signal ends the client's lines as
    stdin's end does (the requests read are answered), then the server exits 143. The time an answer may wait
    for a client that does not read it (``_Pending.STOPPING``) does not cut a call that runs longer."""
    import signal
    import subprocess
    import time

    gate = tmp_path / "gate"
    proc = subprocess.Popen([sys.executable, "-c", SERVED_WITH_A_GATED_SEARCH, str(gate), *[stopping] * bool(stopping)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(PIMEM_HOME=home))
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "search", "arguments": {"query": "x"}}}
        proc.stdin.write(b"".join(json.dumps(message).encode() + b"\n" for message in (
            init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call)))
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        assert proc.stderr.readline() == b"searching\n"  # (the call is in flight)
        proc.send_signal(signal.SIGTERM)
        if stopping:
            time.sleep(20 * float(stopping))  # (the call outlasts the wait)
        gate.touch()
        out, err = proc.communicate(timeout=60)  # (stdin still open: the signal ends the server)
        assert [json.loads(line)["id"] for line in out.splitlines()] == [2], (out, err)
        assert "hits" in json.loads(out)["result"]["structuredContent"]
        assert proc.returncode == 143 and err == b"pimem: interrupted\n"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("hung_up", [False, True], ids=["stdin-open", "stdin-closed-first"])
def test_a_signal_ends_the_server_soon_when_its_client_no_longer_reads_and_says_how_many_answers_were_lost(home, hung_up):
    """After SIGTERM the server answers the requests it read; a client that kept its end of stdout open and no
    longer read it (the pipe full) kept the server writing for up to ten minutes (a process manager's stop, or the
    SDK's client, which closes stdin, then sends SIGTERM and SIGKILL two seconds apart, waited on it or killed it).
    It now gives the answers a moment (``_Pending.STOPPING``), then exits 143, saying how many were lost."""
    import fcntl
    import signal
    import subprocess
    import termios
    import time

    from conftest import pimem_cmd
    from pimem import Memory

    Memory.at("main", home=home).append([{"kind": "user", "text": "x" * 200_000}])
    proc = subprocess.Popen(pimem_cmd("mcp"), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(PIMEM_HOME=home), cwd="/")
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        proc.stdin.write(json.dumps(init).encode() + b"\n")
        proc.stdin.flush()
        assert json.loads(proc.stdout.readline())["id"] == 1
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {  # (an answer past the pipe's 64 KiB)
            "name": "message", "arguments": {"name": "main", "i": 0, "max_chars": 100_000}}}
        proc.stdin.write(b"".join(json.dumps(m).encode() + b"\n" for m in [
            {"jsonrpc": "2.0", "method": "notifications/initialized"}, call]))
        proc.stdin.flush()
        if hung_up:
            proc.stdin.close()
        # (the client reads no more: wait until the pipe is full, the server blocked writing the first answer)
        size, deadline = fcntl.fcntl(proc.stdout.fileno(), 1032), time.monotonic() + 60  # (F_GETPIPE_SZ)
        while int.from_bytes(fcntl.ioctl(proc.stdout.fileno(), termios.FIONREAD, b"\0" * 4), "little") < size:
            assert time.monotonic() < deadline and proc.poll() is None, "the server never filled its stdout"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            pytest.fail("the server kept writing to a client that did not read, after SIGTERM")
        assert proc.returncode == 143
        assert proc.stderr.read() == b"pimem: interrupted; 1 answer was not delivered: the client did not read it\n"
    finally:
        done_with(proc)


def test_a_relative_home_is_refused_as_the_hook_refuses_it_not_read_in_the_clients_directory(tmp_path):
    """``pimem mcp --home memory`` served a home under whatever directory the MCP client started it in (a new
    empty one in each project), as a relative $PIMEM_HOME was refused. It is refused alike, before the SDK
    loads: exit 2, one line, nothing made there."""
    import subprocess

    from conftest import pimem_cmd

    project = tmp_path / "project"
    project.mkdir()
    done = subprocess.run(pimem_cmd("mcp", "--home", "memory"), cwd=project, env=subprocess_env(), input="",
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("pimem: error: --home is a relative path ('memory'): set it to an absolute one (it would name "
                           "another home in each directory a command runs in)\n")
    assert list(project.iterdir()) == []


def test_a_client_whose_pipes_do_not_block_is_served_as_any_other(home):
    """A client may hand the server pipes set non-blocking (O_NONBLOCK, as some runtimes leave theirs): with such
    a stdin the server read no line and ended at once, exit 0, as if the client had hung up; with such a stdout
    it died with a traceback (BlockingIOError, exit 1) at the first answer the pipe could not take whole, the
    client holding half of it. The server reads and writes them as blocking pipes, and gives their mode back."""
    import fcntl
    import subprocess
    import termios
    import time

    from conftest import pimem_cmd
    from pimem import Memory

    Memory.at("main", home=home).append([{"kind": "user", "text": "x" * 200_000}])
    stdin, to_server = os.pipe()
    from_server, stdout = os.pipe()
    for fd in (stdin, stdout):
        os.set_blocking(fd, False)
    proc = subprocess.Popen(pimem_cmd("mcp"), stdin=stdin, stdout=stdout, stderr=subprocess.PIPE,
                            env=subprocess_env(PIMEM_HOME=home), cwd="/")
    os.close(stdin)
    os.close(stdout)
    sent, answers = os.fdopen(to_server, "wb"), os.fdopen(from_server, "rb")
    try:
        init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}
        call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {  # (an answer past the pipe's 64 KiB)
            "name": "message", "arguments": {"name": "main", "i": 0, "max_chars": 100_000}}}
        with contextlib.suppress(BrokenPipeError):  # (a server gone already)
            sent.write(b"".join(json.dumps(m).encode() + b"\n" for m in (init, {"jsonrpc": "2.0", "method": "notifications/initialized"}, call)))
            sent.flush()
        assert json.loads(answers.readline() or "null") == {"jsonrpc": "2.0", "id": 1, "result": mock.ANY}
        size, deadline = fcntl.fcntl(from_server, 1032), time.monotonic() + 60  # (F_GETPIPE_SZ: the pipe full)
        while proc.poll() is None and int.from_bytes(fcntl.ioctl(from_server, termios.FIONREAD, b"\0" * 4), "little") < size:
            assert time.monotonic() < deadline, "the server never filled its stdout"
            time.sleep(0.05)
        answer = json.loads(answers.readline())
        assert answer["id"] == 2 and len(answer["result"]["structuredContent"]["text"]) == 100_000
        sent.write(b'{"jsonrpc": "2.0", "id": 3, "method": "ping"}\n')  # (still read, though nothing came for a while)
        sent.flush()
        assert json.loads(answers.readline() or "null") == {"jsonrpc": "2.0", "id": 3, "result": {}}
        sent.close()
        assert proc.wait(60) == 0 and proc.stderr.read() == b""
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for stream in (sent, answers, proc.stderr):
            with contextlib.suppress(BrokenPipeError):
                stream.close()
