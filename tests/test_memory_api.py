"""The library API (``pimem.Memory``) held to what the README promises: nothing it is handed can corrupt the
log or write outside the memory, and every failure is a ``PimemError``."""

from __future__ import annotations

import pytest

from conftest import snapshot
from pimem import Memory
from pimem.errors import BadInput
from pimem.memory import Prepared


def test_records_not_from_prepare_are_checked_before_anything_is_written(home):
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "ok"}])
    before = snapshot(home)
    for bad in ({"kind": "user", "text": "x", "date": "garbage"},
                {"kind": "user", "text": "x", "size": 7, "date": "../../escape"}):
        with pytest.raises(BadInput):
            mem.append([bad])
        with pytest.raises(BadInput):  # a stream's batch that is not prepare()'s is checked as append checks it
            list(mem.append_stream([[bad]]))
        with pytest.raises(TypeError):  # (no keyword skips the checks any more)
            mem.append([bad], prepared=True)
    changed = mem.prepare([{"kind": "user", "text": "x"}])
    with pytest.raises(TypeError):  # (a prepared batch cannot be changed after it was checked)
        changed[0]["date"] = "../../escape"
    with pytest.raises(BadInput):  # (one made by hand, not checked: the log still names no such file)
        mem.append(Prepared([{**changed[0], "date": "../../escape"}]))
    assert snapshot(home) == before
    # a raw batch in a stream is logged as append logs it; a prepared one as it is
    logged = list(mem.append_stream([[{"kind": "user", "text": "two"}], mem.prepare([{"kind": "pi", "text": "three"}])]))
    assert logged == [[1], [2]]
    assert [(m["kind"], m["text"], m["size"]) for m in mem.messages(1)] == [("user", "two", 9), ("pi", "three", 9)]


def test_one_memory_object_may_be_shared_by_threads(home, capfd):
    """A writer thread appending while another reads the view through the same object: no raw error, and
    view.json is never saved in a state the log contradicts."""
    import threading

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "start"}])
    failures, done = [], threading.Event()

    def write():
        try:
            for k in range(150):
                mem.append([{"kind": "user" if k % 2 else "pi", "text": f"message {k} " + "x" * 40}])
        finally:
            done.set()

    def read():
        while not done.is_set():
            try:
                mem.view_lines()
                last = mem.count() - 1
                mem.held(last)
                mem.message(last)
            except Exception as exc:  # (any at all is the failure this test is about)
                failures.append(repr(exc))

    threads = [threading.Thread(target=write), threading.Thread(target=read), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and mem.count() == 151
    assert "unusable" not in capfd.readouterr().err
    saved = Memory.at("main").view_lines()  # restored from view.json
    (home / "main" / "view.json").unlink()
    assert Memory.at("main").view_lines() == saved == mem.view_lines()  # folded again from the log


def test_every_public_method_refuses_a_wrong_value_as_bad_input(home):
    from pimem import compaction
    from pimem.errors import NotFound

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "ok"}])
    before = snapshot(home)
    one = [{"kind": "user", "text": "x"}]
    for call in (lambda: mem.append(one, timeout="5"), lambda: mem.append(one, timeout=-1),
                 lambda: mem.append(one, timeout=float("nan")), lambda: mem.append(one, timeout=True),
                 lambda: mem.append(one, timeout=400 * 86400), lambda: list(mem.append_stream([one], timeout="5")),
                 lambda: list(mem.append_stream(5)), lambda: mem.write_node(0, 0, "t", timeout=-1),
                 lambda: mem.save_config("x"), lambda: mem.save_config(None),
                 lambda: mem.prepare([{"kind": "robot"}], labels=5), lambda: mem.held("x"),
                 lambda: mem.held_each("01"), lambda: mem.held(-1), lambda: mem.write_node(0, 0, "t", meta="x"),
                 lambda: mem.write_nodes("abc"), lambda: mem.write_nodes([(0, 0)]), lambda: mem.view_lines(end="3"),
                 lambda: mem.view_lines(end=-1), lambda: compaction.compact(mem, "5"),
                 lambda: mem.lock("x").__enter__()):
        with pytest.raises(BadInput):
            call()
    with pytest.raises(NotFound, match="first append"):  # (settings of a memory not yet made: as save_cursor's)
        Memory.at("new").save_config({"view": {"hi": 64000, "lo": 32000}})
    assert snapshot(home) == before
    assert mem.append(one, timeout=0) == [1] and mem.append(one, timeout=2.5) == [2]


def test_api_errors_name_the_python_argument_not_the_cli_option(home):
    from pimem import api

    Memory.at("main").append([{"kind": "user", "text": "staging"}])
    for kwargs, said in (({"limit": 99}, "limit must be a whole number from 1 to 30"),
                         ({"limit": 0}, "limit must be a whole number from 1 to 30"),
                         ({"page": 0}, "page must be a whole number from 1"),
                         ({"ids": [""]}, "ids '' names no message"),
                         ({"ids": [-1]}, "ids -1 names no message")):
        with pytest.raises(BadInput) as refused:
            api.recall("main", **kwargs)
        assert said in str(refused.value) and "--" not in str(refused.value) and "comma" not in str(refused.value)
    assert [r["id"] for r in api.recall("main", ids=[0, "0"])["results"]] == [0]


def test_a_prepared_batch_cannot_be_changed_after_it_was_checked(home):
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "ok"}])
    before = snapshot(home)
    meta = {"tags": ["a"], "source": "s"}
    batch = mem.prepare([{"kind": "user", "text": "x", "meta": meta}])
    for change in (lambda: batch.append({"kind": "user", "text": "no date"}),  # (it raised KeyError 'date')
                   lambda: batch.__setitem__(0, {"kind": "robot", "text": "x"}),
                   lambda: batch[0].__setitem__("text", 5), lambda: batch[0].__setitem__("kind", "robot"),
                   lambda: batch[0].update(kind="robot"), lambda: batch[0].pop("date"),
                   lambda: batch[0]["meta"].__setitem__("tags", {1}), lambda: batch[0]["meta"]["tags"].append({2})):
        with pytest.raises((TypeError, AttributeError)):
            change()
    assert snapshot(home) == before
    meta["tags"].append({3})  # (the caller's own record, changed afterwards: not what was checked, not logged)
    meta["source"] = 5
    assert mem.append(batch) == [1]
    assert mem.message(1)["meta"] == {"tags": ["a"], "source": "s"} and mem.message(1)["text"] == "x"
    assert mem.append(mem.prepare([])) == [] and list(mem.append_stream([batch])) == [[2]]


def test_memory_arguments_of_the_wrong_type_are_bad_input_naming_them(home):
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "ok"}, {"kind": "tool", "text": "ls"}])
    before = snapshot(home)
    for call, named in ((lambda: Memory.at("main", home=5), "home"), (lambda: Memory.all(home=5), "home"),
                        (lambda: Memory.open(None), "name"), (lambda: Memory.at(b"main"), "name"),
                        (lambda: Memory.named("main"), "names"), (lambda: Memory.named(None), "names"),
                        (lambda: Memory.all(refused=5), "refused"),
                        (lambda: mem.last_of_kind("user", before="x"), "before"),
                        (lambda: mem.last_of_kind("user", before=-1), "before"),
                        (lambda: mem.last_of_kind("user", before=True), "before"),
                        (lambda: mem.last_of_kind(5), "kind"),
                        (lambda: mem.view_lines("x"), "compactor"), (lambda: mem.view_lines(1), "compactor"),
                        (lambda: mem.zoom("1+1", include_tools="yes"), "include_tools"),
                        (lambda: mem.zoom("0+1", include_tools=1), "include_tools"),
                        (lambda: mem.held("1"), "i"), (lambda: mem.held(True), "i"), (lambda: mem.held(-1), "i"),
                        (lambda: mem.held_each([0], sizes="x"), "sizes"),
                        (lambda: mem.held_each([0], lines="x"), "lines"),
                        (lambda: list(mem.messages(0, -1)), "stop"), (lambda: list(mem.messages(0, "x")), "stop"),
                        (lambda: list(mem.entries(True)), "start"),
                        (lambda: mem.leaf_line("x"), "i"), (lambda: mem.leaf_line(0, -1), "l"),
                        (lambda: mem.end_before("x"), "until"),
                        (lambda: mem.write_nodes([(0, 0, "t", None)], check_halves="x"), "check_halves"),
                        (lambda: mem.message("0"), "i"), (lambda: mem.save_cursor("mailer", True), "next_i")):
        with pytest.raises(BadInput) as refused:
            call()
        said = str(refused.value)
        assert said.startswith(named + " ") and "ids" not in said and "''" not in said, said
    assert snapshot(home) == before
    assert mem.held(0)["held"] == "verbatim" and mem.last_of_kind("user", before=1)["i"] == 0


def test_api_since_refuses_a_start_and_a_when_together_as_the_cli_takes_one_or_the_other(home):
    from pimem import api

    Memory.at("main").append([{"kind": "user", "text": f"m{k}", "date": f"2026-10-0{k + 1}T09:00:00+00:00"}
                              for k in range(3)])
    before = snapshot(home)
    for start in (2, 0):  # (start was ignored: the same page again and again; 0 is a start given too)
        with pytest.raises(BadInput, match="^start and when do not go together: next is a start"):
            api.since("main", start=start, when="2026-10-02")
    assert snapshot(home) == before
    assert [m["i"] for m in api.since("main", when="2026-10-02")["messages"]] == [1, 2]
    assert [m["i"] for m in api.since("main", start=2)["messages"]] == [2]
    assert [m["i"] for m in api.since("main")["messages"]] == [0, 1, 2]  # (start 0 by default)


# the CLI's options for the API's arguments, as each is named in a line refusing it
_OPTION = {"ids": "--ids", "query": "QUERY", "file": "--file", "kind": "--kind", "page": "--page", "rank": "--rank",
           "any_term": "--any", "since": "--since", "until": "--until"}


def test_the_api_refuses_what_the_cli_refuses_together_in_the_cli_line_naming_its_arguments(home, run):
    """recall's ids with query, file, kind or page (1 too), search's rank with any_term, and an until before
    since were answered with one of them ignored, where the CLI refuses them (exit 2): the API refuses them
    with the CLI's line, its arguments named for the options, before any memory is read."""
    import re

    from pimem import api

    Memory.at("main").append([{"kind": "user", "text": f"xterm {k}"} for k in range(3)])
    before = snapshot(home)
    for call, argv, said in (
        (lambda: api.recall("main", "xterm", ids=[0]), ["recall", "main", "xterm", "--ids", "0"],
         "ids and query do not go together: ids names the messages to read; query searches"),
        *((lambda option=option, value=value: api.recall("main", ids=[0], **{option: value}),
           ["recall", "main", "--ids", "0", f"--{option}", str(value)],
           f"ids and {option} do not go together: ids names the messages to read; file, kind and page narrow a "
           "search or a listing") for option, value in (("file", "x"), ("kind", "echo"), ("page", 3), ("page", 1))),
        (lambda: api.search("xterm", rank=True, any_term=True), ["search", "xterm", "--rank", "--any"],
         "rank and any_term do not go together: rank finds messages holding any of the words already"),
        (lambda: api.search("xterm", since="#2", until="#1"), ["search", "xterm", "--since", "#2", "--until", "#1"],
         "until #1 is before since #2"),
        (lambda: api.search("xterm", since="1h", until="3h"), ["search", "xterm", "--since", "1h", "--until", "3h"],
         "until 3h is before since 1h"),
    ):
        with pytest.raises(BadInput) as refused:
            call()
        assert str(refused.value) == said
        out = run(*argv)
        named = re.sub(r"\b(" + "|".join(_OPTION) + r")\b", lambda m: _OPTION[m[1]], said)
        assert (out.exit_code, out.stderr) == (2, f"pimem: error: {named}\n"), argv
    assert snapshot(home) == before


def test_api_search_takes_until_and_offset_as_the_cli_does(home, run):
    """The API's search had no until and no offset: a ranked search could not go past its first limit."""
    import json

    from pimem import api

    Memory.at("main").append([{"kind": "user", "text": f"port {'port ' * k}{k}", "date": f"2026-10-0{k + 1}T09:00:00+00:00"}
                              for k in range(6)])
    for kwargs, argv in (({"until": "#4"}, ["--until", "#4"]), ({"until": "2026-10-03"}, ["--until", "2026-10-03"]),
                         ({"since": "#1", "until": "#5", "before": 4}, ["--since", "#1", "--until", "#5", "--before", "4"]),
                         ({"limit": 2, "offset": 1}, ["--limit", "2", "--offset", "1"]),
                         ({"rank": True, "limit": 2, "offset": 2}, ["--rank", "--limit", "2", "--offset", "2"])):
        shown = [json.loads(line)["i"] for line in run("search", "port", "--json", *argv).stdout.splitlines()]
        assert [h["i"] for h in api.search("port", **kwargs)["hits"]] == shown and shown, kwargs
    ranked = [h["i"] for h in api.search("port", rank=True)["hits"]]
    pages = [h["i"] for offset in (0, 2, 4) for h in api.search("port", rank=True, limit=2, offset=offset)["hits"]]
    assert pages == ranked and len(ranked) == 6
    with pytest.raises(BadInput, match="^offset must be a whole number from 0"):
        api.search("port", offset=-1)


def test_every_read_path_of_the_library_hides_tool_text_unless_asked(home):
    """``view_lines`` (the compactor's view and a view cut at ``end`` too), ``held``, ``held_each`` and
    ``zoom`` of a line gave tool calls and results word for word, and a summary's quote of tool output, while
    ``pimem view`` and ``pimem.api`` hid them: every reader of view lines hides them unless ``include_tools``."""
    from pimem import api

    secret, long = "DATABASE_URL=postgres://admin:Zq8vT3mWp9LxR2nK@db.internal:5433/prod", "notes " * 60
    mem = Memory.at("main")
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 150, "lo": 50}, "cview": {"hi": 150, "lo": 50}})
    mem.append([{"kind": "user", "text": "please check the env file " + long},
                {"kind": "tool", "text": "cat .env", "meta": {"command": "cat .env"}},
                {"kind": "echo", "text": secret},
                {"kind": "pi", "text": "the port is 5433 " + long},
                {"kind": "user", "text": "ok"}, {"kind": "tool", "text": "cat .env"}, {"kind": "echo", "text": secret},
                {"kind": "pi", "text": "done"}])
    mem.write_nodes([(0, 0, "user: check the env file", {}), (0, 3, "pi: the port is 5433", {}),
                     (2, 0, f"user: env file; echo: {secret}; pi: port 5433", {"model": "x"})])
    mem = Memory.open("main")
    shown = {
        "view_lines": "\n".join(mem.view_lines()),
        "compactor": "\n".join(mem.view_lines(compactor=True)),
        "end": "\n".join(mem.view_lines(end=8)),
        "held": str(mem.held(6)) + str(mem.held(2)),
        "held_each": str(mem.held_each([2, 6])),
        "zoom": str(mem.zoom("0+8")) + str(mem.zoom("4+4")),
        "api.view": str(api.view("main")), "api.zoom": str(api.zoom("main", "0+8")) + str(api.zoom("main", "4+4")),
        "api.since": str(api.since("main")), "api.search": str(api.search("port")),
        "api.recall": str(api.recall("main", "port")),
    }
    for path, text in shown.items():
        assert "Zq8vT3mWp9LxR2nK" not in text and "cat .env" not in text, (path, text)
    assert "0+8|user: env file; echo: (hidden); pi: port 5433" in shown["compactor"]
    for text in ("\n".join(mem.view_lines(include_tools=True)), "\n".join(mem.view_lines(compactor=True, include_tools=True)),
                 str(mem.held(6, include_tools=True)), str(mem.zoom("0+8", include_tools=True)),
                 str(mem.zoom("4+4", include_tools=True))):
        assert "Zq8vT3mWp9LxR2nK" in text, text
    with pytest.raises(BadInput, match="^include_tools is True or False, not 'yes'"):
        mem.view_lines(include_tools="yes")


def test_a_search_query_holding_a_nul_is_refused_not_taken_for_a_damaged_memory(home, run):
    """A NUL in a query (from an MCP client or a program: no command line can hold one) reached SQLite's full-text
    syntax, which ended the query there: every memory came back unread (``SQLite: unterminated string``), as
    if its log were damaged. It is refused as the text of a message or a memory holding one is."""
    from pimem import api

    run("append", "main", "the port is 5433")
    for query in ("port\x00", '"port\x00 is"', "\x00"):
        with pytest.raises(BadInput, match="^query contains a NUL byte"):
            api.search(query)
    assert [hit["i"] for hit in api.search("port")["hits"]] == [0]


def test_recall_of_a_file_holding_a_nul_finds_nothing_and_an_empty_file_is_refused_as_the_cli_refuses_it(home, run):
    """``api.recall(name, file="a\\x00")`` (an MCP client's) raised SQLite's ``OperationalError: unterminated string``,
    no ``PimemError``: no message names such a path. ``file=""`` listed every message, where ``pimem recall --file
    ''`` is refused: every path contains it."""
    from pimem import api

    run("append", "main", "-k", "tool", '{"path": "src/port.py"}')
    assert api.recall("main", file="port.py", include_tools=True)["count"] == 1
    for file in ("port\x00", "\x00", "po\x00rt.py"):
        assert api.recall("main", file=file, include_tools=True)["count"] == 0
    with pytest.raises(BadInput, match="^empty file: give a path or part of one$"):
        api.recall("main", file="")


def test_write_node_refuses_a_level_or_index_past_the_log_s_reach_as_bad_input(home):
    """A node's level is 0…63 and its index a message number: a level of 2**70 was an OverflowError (and 2**33
    had the label's arithmetic build a gigabyte integer), an index of 10**5000 a ValueError; each is BadInput
    naming the node's numbers, and nothing is written."""
    from pimem.errors import BadInput

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"m{k}"} for k in range(4)])
    for l, i in [(2**70, 0), (64, 0), (10**5000, 0), (0, 10**5000), (1, 2**63)]:
        with pytest.raises(BadInput, match=r"^bad node \(") as caught:
            mem.write_node(l, i, "a summary")
        assert len(str(caught.value)) < 300
        with pytest.raises(BadInput, match=r"^bad node \("):
            mem.write_nodes([(l, i, "", None)])
    assert mem.tree.stored_among([(1, 0)], 4) == set() and mem.count() == 4


def test_an_integer_too_long_to_write_in_decimal_is_bad_input_naming_its_size(home):
    """Python refuses to write an integer past 4,300 digits in decimal (ValueError); an error quoting such a
    value (a message number, a timeout, a cursor, a setting) said that instead of what was wrong. Each is a
    BadInput naming the argument and the value's size, and nothing is written."""
    from pimem import api
    from pimem.errors import shown

    huge = 10**5000
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "x"}])
    before = snapshot(home)
    calls = {"start": lambda: mem.messages(huge), "stop": lambda: mem.messages(0, huge), "i": lambda: mem.message(huge),
             "held": lambda: mem.held(huge), "ids": lambda: mem.held_each([huge]), "end": lambda: mem.view_lines(True, huge),
             "before": lambda: mem.last_of_kind("user", huge), "cursor": lambda: mem.save_cursor("c", huge),
             "l": lambda: mem.leaf_line(huge), "timeout": lambda: mem.append([{"kind": "user", "text": "y"}], huge),
             "max_cost_per_day": lambda: mem.save_config({"max_cost_per_day": huge}),
             "hi": lambda: mem.save_config({"view": {"hi": huge}}),
             "remember timeout": lambda: api.remember("main", "y", timeout=huge),
             "recall ids": lambda: api.recall("main", ids=[huge])}
    for what, call in calls.items():
        with pytest.raises(BadInput) as caught:
            call()
        said = str(caught.value)  # (a list holding one: said as such)
        assert ("5,001 digits" in said or "a list too long to write out" in said) and len(said) < 300, (what, said)
    assert snapshot(home) == before
    assert shown(huge) == "an integer of 5,001 digits" and shown(-(10**5000)) == "an integer of 5,001 digits"
    assert shown([huge]) == "a list too long to write out" and shown(12) == "12" and shown("x") == "'x'"


def test_context_parts_refuses_arguments_of_the_wrong_type_or_range_as_bad_input(home):
    """``pimem.context.parts`` (and ``context``) checked nothing: a memory's name for ``mem`` was an
    AttributeError, a ``wait`` of "8" a TypeError, a cwd of 5 an AttributeError, and an empty ``session`` (which
    ``--session ''`` refuses) or a ``session`` of 5 was taken as none. Each is a BadInput naming the argument."""
    from pimem import context

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "hi"}, {"kind": "pi", "text": "hello"}])
    before = snapshot(home)
    bad = {"mem": dict(mem="main"), "wait": dict(wait="8"), "wait ": dict(wait=float("nan")), "wait  ": dict(wait=-1),
           "wait   ": dict(wait=True), "cwd": dict(cwd=5), "cwd ": dict(cwd=b"/tmp"), "cwd  ": dict(cwd=""), "cwd   ": dict(cwd=" "), "session": dict(session=""),
           "session ": dict(session="  "), "session  ": dict(session=5), "session   ": dict(session="\ud800"),
           "include_tools": dict(include_tools="yes"), "on_note": dict(on_note=5)}
    for name, given in bad.items():
        for call in (context.parts, context.context):
            args = {"mem": mem, "wait": 0, **given}
            with pytest.raises(BadInput, match=rf"^{name.strip()} ") as caught:
                call(args.pop("mem"), **args)
            assert len(str(caught.value)) < 200
    assert snapshot(home) == before
    from pathlib import Path

    got = context.parts(mem, session="s1", cwd=Path("/tmp"), wait=0.0, include_tools=False, on_note=print)
    assert got["view"] == "0+1|user: hi\n1+1|pi: hello" and "cwd: /tmp" in got["turn"]


SHARED_CLOSE = """
import sys, threading
from pimem import Memory, api
mem = Memory.at("main")
mem.append([{"kind": "user", "text": f"seed {k} alpha"} for k in range(200)])
api.search("alpha")  # (the index file made: message() reads through it)
stop, failed = threading.Event(), []
def closing():
    while not stop.is_set():
        mem.close()
def reading():
    try:
        for j in range(300):
            mem.message(j % 200), mem.leaf_line(j % 200), mem.zoom(f"{j % 200}+1"), mem.held(j % 200)
    except Exception as exc:
        failed.append(repr(exc))
closer, readers = threading.Thread(target=closing), [threading.Thread(target=reading) for _ in range(3)]
closer.start()
for t in readers: t.start()
for t in readers: t.join()
stop.set(); closer.join()
print(failed or "ok")
"""


def test_a_memory_closed_by_one_thread_while_others_read_it_crashes_nothing(home):
    """``close()`` from one thread while others read the same ``Memory`` closed the index's SQLite connection
    under a query in flight: the interpreter died (SIGSEGV). A reader and ``close`` take the derived state one
    at a time; a reader after it reopens what it needs. (A real process: a crash must fail the test, not end it.)"""
    import subprocess
    import sys

    from conftest import subprocess_env

    for _ in range(3):  # (the race was lost within a run or two here)
        out = subprocess.run([sys.executable, "-X", "faulthandler", "-c", SHARED_CLOSE], capture_output=True,
                             timeout=300, env=subprocess_env())
        assert (out.returncode, out.stdout) == (0, b"ok\n"), out.stderr[-2000:]


def turns_beside_appends(turn, turns: int, append, appends: int) -> list[str]:
    """Two threads taking ``turns`` turns each beside one making ``appends`` appends (``append(j)``), on one
    shared ``Memory``: what any of them raised."""
    import threading

    failed: list[str] = []

    def repeat(call, times: int):
        try:
            for j in range(times):
                call(j)
        except Exception as exc:
            failed.append(repr(exc))

    threads = [threading.Thread(target=repeat, args=(lambda _: turn(), turns)) for _ in range(2)]
    threads.append(threading.Thread(target=repeat, args=(append, appends)))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return failed


def test_context_parts_on_a_memory_another_thread_appends_to_reads_a_whole_view(home):
    """``context.parts`` read the view of a ``Memory`` shared with a thread appending to it without taking its
    derived state in turn: it saw the log grow under the view it was catching up, and failed with a false
    IntegrityError ("a message lost from the end of the log") or a KeyError. It reads as ``view_lines`` does."""
    from pimem import context

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"seed {k}"} for k in range(50)])
    assert turns_beside_appends(lambda: context.parts(mem, wait=0, cwd="/tmp"), 60, lambda j: mem.append(
        [{"kind": "user", "text": f"w {j}"}, {"kind": "pi", "text": f"r {j}"}]), 120) == []
    assert context.parts(mem, wait=0)["view"] == "\n".join(Memory.open("main").view_lines())


def test_a_moment_that_utc_moves_out_of_years_1_to_9999_is_bad_input_naming_the_argument(home):
    """``first_at``, ``since`` and ``end_before`` took an aware datetime whose offset moves it out of the range of
    dates in UTC (``datetime.max`` at −14:00) and failed with OverflowError from inside; it is a BadInput naming
    the argument, as the CLI refuses such a date."""
    from datetime import datetime, timedelta, timezone

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "x", "date": "2026-01-01T00:00:00Z"}])
    late = datetime.max.replace(tzinfo=timezone(timedelta(hours=-14)))
    early = datetime.min.replace(tzinfo=timezone(timedelta(hours=14)))
    ok = datetime(2025, 1, 1, tzinfo=timezone.utc)
    for name, call in [("moment", lambda: mem.first_at(late)), ("moment", lambda: mem.first_at(early)),
                       ("moment", lambda: list(mem.since(early))), ("until", lambda: list(mem.since(ok, late))),
                       ("until", lambda: mem.end_before(early)), ("until", lambda: list(mem.since_entries(ok, late)))]:
        with pytest.raises(BadInput, match=rf"^{name} .* is out of the range of dates \(years 1 to 9999, in UTC too\)"):
            call()
    assert mem.first_at(datetime.min.replace(tzinfo=timezone.utc)) == 0 and mem.first_at(datetime.max.replace(tzinfo=timezone.utc)) is None


def test_write_node_refuses_a_text_or_meta_json_cannot_store_as_bad_input_and_writes_nothing(home):
    """A node's text holding a lone surrogate was a UnicodeEncodeError from inside, and a meta JSON cannot
    store (a set, a key that is no string, an integer past 64 bits) a TypeError; a NaN was stored as null
    and a datetime as the encoder's string. Each is a BadInput naming the node, checked as a message's meta is,
    and nothing is written."""
    import datetime

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "x " * 2000} for _ in range(4)])
    before = snapshot(home)
    for text, meta in [("\ud800 summary", None), ("ok", {"a": {1, 2}}), ("ok", {1: "a"}), ("ok", {"a": 2**70}),
                       ("ok", {"a": "\ud800"}), ("ok", {"\ud800": 1}), ("ok", {"a": float("nan")}),
                       ("ok", {"a": datetime.datetime(2026, 1, 1)})]:
        with pytest.raises(BadInput, match=r"^node 0\+1: "):
            mem.write_node(0, 0, text, meta)
        with pytest.raises(BadInput, match=r"^node 0\+1: "):
            mem.write_nodes([(0, 0, text, meta)])
    assert snapshot(home) == before
    mem.write_node(0, 0, "the summary", {"model": "m", "n": [1, 2]})
    assert mem.leaf_line(0) == "the summary"


def test_save_config_refuses_settings_json_cannot_store_as_bad_input_and_keeps_the_file(home):
    """``save_config`` (and the home's ``config.save_home``) given a setting holding a lone surrogate failed with
    a TypeError from inside, and settings nested 2,000 deep with a RecursionError; each is a BadInput naming
    config.json, and the file is as it was."""
    from pimem import config

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "x"}])
    mem.save_config({"view": {"hi": 64000, "lo": 32000}})
    deep: dict = {}
    inner = deep
    for _ in range(2000):
        inner["view"] = {}
        inner = inner["view"]
    before = snapshot(home)
    for changes in [{"\ud800": 1}, {"compactor": {"model": "\ud800"}}, deep]:
        with pytest.raises(BadInput, match=r"config\.json: the settings given (hold text that is not valid UTF-8|are nested over 8)"):
            mem.save_config(changes)
        with pytest.raises(BadInput, match=r"config\.json: the settings given (hold text that is not valid UTF-8|are nested over 8)"):
            config.save_home(None, changes)
    assert snapshot(home) == before
    assert Memory.open("main").config["view"] == {"hi": 64000, "lo": 32000}


def test_memories_remember_called_directly_refuses_text_that_is_not_utf8_or_a_huge_choice_as_bad_input(home):
    """``pimem.memories.remember`` called directly took a text (or a session, a supersede) holding a lone
    surrogate and failed with UnicodeEncodeError from inside, and a kind of 10**5000 with ValueError writing
    the error; each is a BadInput naming the argument, and memory.jsonl is not touched."""
    from pimem import memories

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "x"}])
    memories.remember(mem, "port 5433")
    before = snapshot(home)
    for name, call in [("text", lambda: memories.remember(mem, "a\ud800b")),
                       ("session", lambda: memories.remember(mem, "ok", session="s\ud800")),
                       ("supersede", lambda: memories.remember(mem, "ok", supersede="mem_\ud800")),
                       ("kind", lambda: memories.remember(mem, "ok", kind=10**5000))]:
        with pytest.raises(BadInput, match=rf"\b{name}\b") as caught:
            call()
        assert len(str(caught.value)) < 200
    assert snapshot(home) == before


def test_context_parts_waiting_for_a_watcher_while_another_thread_appends_reads_a_whole_view(home):
    """While a watcher holds the memory, ``context.parts`` polls the view for placeholders to wait for; it did so
    without taking the shared ``Memory``'s derived state in turn, and a thread appending meanwhile made it fail
    with a false IntegrityError ("a message lost from the end of the log")."""
    from pimem import context, lease

    for n in range(4):  # (the race was lost in about one run of two)
        mem = Memory.at(f"m{n}")
        mem.append([{"kind": "user", "text": "long message " * 300} for _ in range(3)])
        with lease.Lease(mem) as watcher:  # (this process holds the memory as a watcher would: the turn waits)
            assert watcher.try_acquire() is None
            failed = turns_beside_appends(lambda: context.parts(mem, wait=0.2, cwd="/tmp"), 15, lambda j: mem.append(
                [{"kind": "user", "text": f"w {j} " + "long " * 600}]), 300)
        assert failed == []


def _library_calls(moment):
    """Every public reader and writer of ``Memory`` and ``pimem.api`` (and ``context.parts``, ``memories``'
    ``remember`` and ``forget``, the home's settings saved, which the README names), each as a call on (home,
    name)."""
    from pimem import api, config, context, memories

    def at(home, name):
        return Memory.at(name, home=home)

    return {
        "at": at, "open": lambda h, n: Memory.open(n, home=h), "named": lambda h, n: Memory.named([n], home=h),
        "all": lambda h, n: Memory.all(home=h), "exists": lambda h, n: at(h, n).exists(),
        "config": lambda h, n: at(h, n).config, "text_cap": lambda h, n: at(h, n).text_cap,
        "save_config": lambda h, n: at(h, n).save_config({"view": {"hi": 64000, "lo": 32000}}),
        "lock": lambda h, n: at(h, n).lock().__enter__(),
        "append": lambda h, n: at(h, n).append([{"kind": "user", "text": "x"}]),
        "append_stream": lambda h, n: list(at(h, n).append_stream([[{"kind": "user", "text": "x"}]])),
        "count": lambda h, n: at(h, n).count(), "messages": lambda h, n: list(at(h, n).messages(0)),
        "entries": lambda h, n: list(at(h, n).entries(0)), "message": lambda h, n: at(h, n).message(0),
        "first_at": lambda h, n: at(h, n).first_at(moment), "since": lambda h, n: list(at(h, n).since(moment)),
        "end_before": lambda h, n: at(h, n).end_before(moment), "cursor": lambda h, n: at(h, n).cursor("c"),
        "save_cursor": lambda h, n: at(h, n).save_cursor("c", 0),
        "last_of_kind": lambda h, n: at(h, n).last_of_kind("user"), "summary": lambda h, n: at(h, n).summary(),
        "view_lines": lambda h, n: at(h, n).view_lines(), "held": lambda h, n: at(h, n).held(0),
        "held_each": lambda h, n: at(h, n).held_each([0]), "zoom": lambda h, n: at(h, n).zoom("0"),
        "leaf_line": lambda h, n: at(h, n).leaf_line(0), "write_node": lambda h, n: at(h, n).write_node(1, 0, "s"),
        "api.list_memories": lambda h, n: api.list_memories(home=h), "api.message": lambda h, n: api.message(n, 0, home=h),
        "api.since": lambda h, n: api.since(n, home=h), "api.search": lambda h, n: api.search("hello", names=[n], home=h),
        "api.view": lambda h, n: api.view(n, home=h), "api.zoom": lambda h, n: api.zoom(n, "0", home=h),
        "api.recall": lambda h, n: api.recall(n, "hello", home=h), "api.memories": lambda h, n: api.memories(n, home=h),
        "api.remember": lambda h, n: api.remember(n, "a fact", home=h), "api.forget": lambda h, n: api.forget(n, "r1", home=h),
        "api.compact": lambda h, n: api.compact(n, 1, home=h),
        "api.memory_propose": lambda h, n: api.memory_propose(n, "a fact", session="s", home=h),
        "context.parts": lambda h, n: context.parts(at(h, n), wait=0),
        "memories.remember": lambda h, n: memories.remember(at(h, n), "a fact"),
        "memories.forget": lambda h, n: memories.forget(at(h, n), "r1"),
        "config.save_home": lambda h, n: config.save_home(h, {"view": {"hi": 64000, "lo": 32000}}),
    }


@pytest.mark.parametrize("case", ["under a file", "a link loop", "a name too long", "a path too long"])
def test_what_the_system_refuses_reaches_a_library_caller_as_a_pimem_error(tmp_path, monkeypatch, case):
    """A home the system cannot use (a file where a directory should be: ENOTDIR, a loop of links: ELOOP, a
    name past 255 bytes or a path past 4,096: ENAMETOOLONG) failed ``Memory.at(…).append`` and most readers with a
    bare ``OSError``; each is a ``PimemError`` (exit 7) in the CLI's line naming the path, and still the
    ``OSError`` it was, of its type, its errno and file kept (a caller's ``except OSError`` takes it as before)."""
    import datetime
    import errno

    from pimem.errors import ExitStatus, PimemError

    monkeypatch.setenv("PIMEM_HOME", str(tmp_path / "unused"))
    (tmp_path / "file").write_text("x")
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    home, number = {
        "under a file": (tmp_path / "file" / "sub", errno.ENOTDIR),
        "a link loop": (tmp_path / "loop1", errno.ELOOP),
        "a name too long": (tmp_path / ("a" * 300), errno.ENAMETOOLONG),
        "a path too long": (tmp_path.joinpath(*["b" * 200] * 25), errno.ENAMETOOLONG),
    }[case]
    moment = datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)
    refused = {}
    for call, func in _library_calls(moment).items():
        try:
            func(str(home), "m")
        except PimemError as exc:
            if isinstance(exc, OSError):  # (not every call reaches the disk: a home with no memory lists none)
                assert exc.code == ExitStatus.SYSTEM and exc.errno == number, (call, exc)
                blocker = str(tmp_path / "file")  # (named too, where the path named is not itself what is in the way)
                in_the_way = f" ({blocker} is a file)" if case == "under a file" and exc.filename != blocker else ""
                assert str(exc) == f"{exc.strerror}: {exc.filename}{in_the_way}", (call, exc)
                assert exc.filename.startswith(str(home)) or str(home).startswith(exc.filename), (call, exc)  # (or the file in the way)
                assert isinstance(exc, type(OSError(number, ""))), (call, type(exc))  # (NotADirectoryError …)
                refused[call] = exc
        except Exception as exc:  # noqa: BLE001 (the failure this test is about)
            pytest.fail(f"{call}: {type(exc).__name__} {exc}")
    assert {"append", "append_stream", "api.remember", "view_lines", "config"} <= set(refused)
    import pickle

    again = pickle.loads(pickle.dumps(refused["append"]))  # (to another process: as it was)
    assert (type(again), str(again), again.errno, again.filename) == (
        type(refused["append"]), str(refused["append"]), number, refused["append"].filename)


@pytest.mark.parametrize("file", ["memory.jsonl", "the day's log", "view.json", "cursors.json", "config.json",
                                  "../config.json"])
def test_a_directory_at_a_memorys_file_reaches_a_library_caller_as_a_pimem_error(home, file, capfd):
    """A directory where a memory keeps a file (EISDIR): what read it raised a bare ``IsADirectoryError``
    (``context.parts`` and ``memories.remember`` over a ``memory.jsonl`` that is one); each is a ``PimemError``
    (exit 7) naming it, an ``IsADirectoryError`` still."""
    import datetime

    from pimem.errors import ExitStatus, PimemError

    mem = Memory.at("m", home=home)
    mem.append([{"kind": "user", "text": "hello"}])
    mem.close()
    path = next((home / "m" / "main").glob("*.jsonl")) if file == "the day's log" else (home / "m" / file).resolve()
    if path.exists():
        path.unlink()
    path.mkdir()
    refused = {}
    for call, func in _library_calls(datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)).items():
        try:
            func(str(home), "m")
        except PimemError as exc:
            if isinstance(exc, OSError):
                assert exc.code == ExitStatus.SYSTEM and isinstance(exc, IsADirectoryError), (call, exc)
                assert str(exc) == f"Is a directory: {path}", (call, exc)
                refused[call] = exc
        except Exception as exc:  # noqa: BLE001 (the failure this test is about)
            pytest.fail(f"{call}: {type(exc).__name__} {exc}")
    # (each is read by some call; view.json is derived: readers and writers do without it, a warning said)
    assert (refused == {}) if file == "view.json" else refused


def test_what_sqlite_refuses_reaches_a_library_caller_as_a_pimem_error(home, capfd):
    """The index's files where SQLite cannot use them (directories at index.sqlite's -wal and -shm: 'disk I/O
    error'): ``api.recall`` raised a bare ``sqlite3.OperationalError``; it is a ``PimemError`` (exit 7) in the
    CLI's line, and still the ``sqlite3`` error of its type."""
    import datetime
    import sqlite3

    from pimem.errors import ExitStatus, PimemError

    mem = Memory.at("m", home=home)
    mem.append([{"kind": "user", "text": "hello"}])
    mem.close()
    for name in ("index.sqlite-wal", "index.sqlite-shm"):
        (home / "m" / name).unlink(missing_ok=True)
        (home / "m" / name).mkdir()
    refused = {}
    for call, func in _library_calls(datetime.datetime(2020, 1, 1, tzinfo=datetime.timezone.utc)).items():
        try:
            func(str(home), "m")
        except PimemError as exc:
            if isinstance(exc, sqlite3.Error):
                assert exc.code == ExitStatus.SYSTEM and isinstance(exc, sqlite3.OperationalError), (call, exc)
                assert str(exc).startswith("SQLite: disk I/O error in index.sqlite, the memory's derived index"), (call, exc)
                refused[call] = exc
        except Exception as exc:  # noqa: BLE001 (the failure this test is about)
            pytest.fail(f"{call}: {type(exc).__name__} {exc}")
    assert "api.recall" in refused
