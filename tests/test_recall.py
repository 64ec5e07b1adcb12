"""Recall: records from messages, list/search/read, privacy, raw envelopes and hard budgets."""

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pimem import Memory, recall
from pimem.lineage import off_lineage


def log(run, *records):
    lines = "\n".join(orjson.dumps(r).decode() for r in records) + "\n"
    assert run("append", "main", "--ndjson", input=lines).exit_code == 0


SESSION = [
    {"kind": "user", "text": "Fix token refresh in src/auth/session.ts"},
    {"kind": "assistant", "text": "Reading it first.", "meta": {"entry": "a3f0c2d1"}},
    {"kind": "tool_call", "text": 'read({"path": "src/auth/session.ts"})', "meta": {"call_id": "c1", "tool": "read"}},
    {"kind": "tool_result", "text": "export function refresh() {}  // SECRET-TOKEN-123", "meta": {"call_id": "c1", "tool": "read"}},
    {"kind": "bash", "text": "12 passed, 1 failed", "meta": {"command": "npm test -- auth.test.ts", "exit_code": 1}},
    {"kind": "custom", "text": "compaction summary: refresh work", "meta": {"derived": True}},
    {"kind": "user", "text": "Try a mutex instead"},
]


def results(run, *args):
    out = run("recall", "main", "--json", *args)
    return [r["id"] for r in orjson.loads(out.stdout)["results"]]


def test_records_carry_both_vocabularies_files_and_source_class(home):
    mem = Memory.at("main")
    mem.append(SESSION)
    records = [recall.record(m) for m in mem.messages()]
    assert [r["kinds"] for r in records] == [
        ["user"], ["pi", "assistant"], ["tool", "tool_call"], ["echo", "tool_result"], ["echo", "tool_result", "bash"],
        ["work", "custom"], ["user"],
    ]
    assert records[2]["files"] == ["src/auth/session.ts"]
    assert records[4]["files"] == ["auth.test.ts"]
    assert records[0]["files"] == []  # paths in prose are found by search, not listed as files
    cwd_only = recall.record({"i": 9, "kind": "tool", "text": 'bash({"cwd": "/home/dev/shop", "command": "ls"})',
                              "date": "2026-10-08T09:30:00+08:00", "meta": {"cwd": "/home/dev/shop"}})
    assert cwd_only["files"] == []  # a working directory is not a file the agent touched
    assert [r["sourceClass"] for r in records].count("derived") == 1 and records[5]["sourceClass"] == "derived"


def test_files_are_the_paths_claude_code_and_codex_calls_name(run, home):
    """Claude Code names a file ``file_path`` (Read, Edit, Write) or ``notebook_path``, Codex's apply_patch in its
    patch's headers: --file found none of them, nor did compaction's file memories name them."""
    calls = ['Edit({"file_path": "/home/dev/shop/src/cart.py", "old_string": "a", "new_string": "b"})',
             'NotebookEdit({"notebook_path": "/home/dev/shop/analysis.ipynb", "new_source": "x = 1"})',
             "apply_patch(*** Begin Patch\n*** Update File: src/agents/plugin.ts\n@@\n-a\n+b\n"
             "*** Add File: docs/new.md\n+hello\n*** Delete File: old/gone.txt\n*** End Patch)"]
    log(run, *[{"kind": "tool", "text": text} for text in calls])
    assert [recall.record(m)["files"] for m in Memory.open("main").messages()] == [
        ["/home/dev/shop/src/cart.py"], ["/home/dev/shop/analysis.ipynb"],
        ["src/agents/plugin.ts", "docs/new.md", "old/gone.txt"]]
    assert results(run, "--file", "cart.py", "--include-tools") == [0]
    assert results(run, "--file", "plugin.ts", "--include-tools") == [2]
    log(run, {"kind": "user", "text": "thanks"})
    assert run("compact", "main", "--keep", "1").exit_code == 0
    derived = run("memories", "main", "--kind", "derived", "--include-tools").stdout
    assert all(f"file: {path}" in derived for path in ("/home/dev/shop/src/cart.py", "src/agents/plugin.ts", "docs/new.md"))


def test_list_is_newest_first_and_paged(run, home):
    log(run, *SESSION)
    assert results(run) == [6, 5, 1, 0]  # tool traffic hidden
    assert results(run, "--include-tools", "--limit", "3") == [6, 5, 4]
    page2 = orjson.loads(run("recall", "main", "--json", "--include-tools", "--limit", "3", "--page", "2").stdout)
    assert [r["id"] for r in page2["results"]] == [3, 2, 1] and page2["nextPage"] == 3
    assert results(run, "--kind", "assistant") == results(run, "--kind", "pi") == [1]
    assert results(run, "--kind", "bash") == [4]
    assert results(run, "--kind", "tool_result") == [4, 3]
    assert results(run, "--source-class", "derived") == [5]
    assert results(run, "--source-class", "primary") == [6, 1, 0]


def test_search_ranks_paths_and_rare_terms_first(run, home):
    log(run, *SESSION)
    assert results(run, "session", "--include-tools") == [2, 0]  # the path hit outranks the prose
    assert results(run, "mutex") == [6]
    assert results(run, "--file", "session.ts", "--include-tools") == [2]
    assert results(run, "--file", "Session.ts", "--include-tools") == []
    out = run("recall", "main", "the and")
    assert out.exit_code == 1 and out.stdout.startswith("pimem recall (0 results)")
    # derived records count a fifth: the summary mentioning refresh comes after the user's words
    ranked = results(run, "refresh")
    assert ranked.index(0) < ranked.index(5)


def test_a_search_matching_more_than_it_looks_at_says_so(run, home, monkeypatch):
    monkeypatch.setattr(recall, "POOL", 20)
    Memory.at("main").append([{"kind": "user", "text": f"deploy note {n}"} for n in range(30)])
    found = orjson.loads(run("recall", "main", "deploy", "--json").stdout)
    assert (found["count"], found["capped"]) == (20, True)
    assert run("recall", "main", "deploy").stdout.startswith("pimem recall (20+ results: the ranker's best 20 looked at)")
    Memory.open("main").append([{"kind": "user", "text": "a mutex instead"}])
    few = orjson.loads(run("recall", "main", "mutex", "--json").stdout)
    assert few["count"] == 1 and "capped" not in few


def test_tool_traffic_stays_private_unless_asked_for(run, home):
    log(run, *SESSION)
    for args in ([], ["SECRET"], ["--ids", "3"], ["--ids", "3", "--raw"], ["--raw"]):
        out = run("recall", "main", *args)
        assert "SECRET-TOKEN" not in out.stdout, args
    hidden = orjson.loads(run("recall", "main", "--json", "--ids", "3").stdout)
    assert hidden["hiddenIds"] == [3] and hidden["results"] == []
    assert "SECRET-TOKEN" in run("recall", "main", "SECRET", "--include-tools").stdout
    assert "SECRET-TOKEN" in run("recall", "main", "SECRET", "--kind", "echo").stdout


def reference(mem, request: recall.Request) -> recall.Found:
    """What ``request`` lists or reads, worked out the slow way: a record of every message, less those its
    scope leaves out (lineage: ``off_lineage`` over every message), the source class and the filters applied
    to each, newest first (or the ids)."""
    msgs = list(mem.messages())
    out = off_lineage(msgs) if request.scope == "lineage" else set(recall.SCOPES[request.scope](mem))
    hide = not recall._shows_tools(request)
    records = [r for r in map(recall.record, msgs) if r["id"] not in out and request.source_class in ("all", r["sourceClass"])]
    if request.ids:
        return recall._by_ids(request, records, hide)
    listed = [r for r in records if recall._listed(request, r, hide)][::-1]
    start, end = (request.page - 1) * request.limit, request.page * request.limit
    return recall.Found("list", listed[start:end], len(listed), next_page=request.page + 1 if end < len(listed) else None)


def recorded_reads(monkeypatch) -> list:
    """The ``(start, stop)`` of every ``Memory.messages`` read from now on."""
    reads = []
    real = Memory.messages

    def recorded(self, start=0, stop=None):
        reads.append((start, stop))
        return real(self, start, stop)

    monkeypatch.setattr(Memory, "messages", recorded)
    return reads


def test_a_listing_and_a_read_by_number_read_only_what_they_show(home, monkeypatch):
    """5,000 messages: the last page of users' words and two messages by number come without reading the
    log from its start; the count and the pages are those of a listing of every record."""
    mem = Memory.at("main")
    mem.append([{"kind": ("user", "pi", "tool", "echo")[k % 4], "text": f"message {k}"} for k in range(5000)])
    requests = [recall.Request(limit=3, page=2), recall.Request(kind="user", limit=3, page=2),
                recall.Request(kind="bash", include_tools=True), recall.Request(limit=30, page=167)]
    every = [reference(mem, r) for r in requests]  # the listing of every record
    reads = recorded_reads(monkeypatch)
    for k, (request, expected) in enumerate(zip(requests, every)):
        reads.clear()
        found = recall.find(mem, request)
        assert (found.records, found.total, found.next_page) == (expected.records, expected.total, expected.next_page)
        if k < 2:  # the pages of the latest messages: the last window read, the count from the index
            assert reads == [(5000 - recall.LIST_WINDOW, 5000)]
    assert [r["id"] for r in every[0].records] == [4992, 4989, 4988] and every[0].total == 2500
    assert [r["id"] for r in every[1].records] == [4984, 4980, 4976] and every[1].next_page == 3
    assert every[2].total == 0 and every[3].next_page is None
    reads.clear()
    read = orjson.loads(recall.recall(mem, recall.Request(ids=["#4001", "17", "9999"], as_json=True)))
    assert [r["id"] for r in read["results"]] == [17, 4001] and read["missingIds"] == ["9999"]
    assert all(stop - start <= 1 for start, stop in reads), reads  # (one message each, or the index)


def test_a_listing_on_a_meta_field_reads_only_the_lines_holding_it(home, monkeypatch):
    """``--kind bash`` and a source class: the same pages and totals as a listing of every record, with the
    messages that hold the field found by a byte search, not by reading the log (nor fooled by a text that
    spells the field out, or by the field nested elsewhere, or false)."""
    def message(k: int) -> dict:
        shape = k % 7
        if shape == 0:
            return {"kind": "echo", "text": f"ok {k}", "meta": {"command": f"pytest -k t{k}", "exit_code": 0}}
        if shape == 1:
            return {"kind": "work", "text": f"summary {k}", "meta": {"derived": True}}
        if shape == 2:
            return {"kind": "tool", "text": f'bash({{"command": "ls {k}"}})', "meta": {"args": {"command": "ls"}}}
        if shape == 3:
            return {"kind": "user", "text": f'{{"command": "x", "derived":true}} {k}', "meta": {"derived": False}}
        return {"kind": ("user", "pi", "echo")[shape - 4], "text": f"message {k}"}

    mem = Memory.at("main")
    mem.append([message(k) for k in range(3000)])
    mem.append([{"kind": "pi", "text": f"recent {k}"} for k in range(600)])  # the fields' messages all lie behind
    requests = [recall.Request(kind=kind, source_class=source, include_tools=tools, limit=5, page=page)
                for kind in (None, "bash", "user", "work", "echo") for source in ("all", "primary", "derived")
                for tools in (False, True) for page in (1, 3)]
    every = [reference(mem, r) for r in requests]
    reads = recorded_reads(monkeypatch)
    for request, expected in zip(requests, every):
        reads.clear()
        found = recall.find(mem, request)
        assert (found.records, found.total, found.next_page) == (expected.records, expected.total, expected.next_page), request
        if request.kind == "bash" or request.source_class == "derived":
            assert reads == [], (request, reads)
    counts = {(r.kind, r.source_class, r.include_tools): e.total for r, e in zip(requests, every)}
    assert counts[("bash", "all", False)] == 429 and counts[("work", "derived", False)] == 429
    assert counts[(None, "derived", False)] == 429 and counts[("user", "derived", False)] == 0


def test_ids_read_in_log_order_and_name_what_is_missing(run, home):
    log(run, *SESSION)
    doc = orjson.loads(run("recall", "main", "--json", "--ids", "6,a3f0c2d1,99", "--ids", "99,entry:nope,0,6").stdout)
    assert [r["id"] for r in doc["results"]] == [0, 1, 6]  # (each once, as each missing one is named once)
    assert doc["missingIds"] == ["99", "entry:nope"]
    limited = orjson.loads(run("recall", "main", "--json", "--include-tools", "--ids", "0,1,2,3,4,5", "--limit", "4").stdout)
    assert [r["id"] for r in limited["results"]] == [0, 1, 2, 3] and limited["omittedIds"] == [4, 5]
    text = run("recall", "main", "--ids", "6,1").stdout
    assert text.startswith("pimem recall (2 results)\n\n[#1] pi ")
    assert "entry=a3f0c2d1" in text


def test_ids_of_the_other_source_class_are_said_to_be_so_not_missing(sh, run, home):
    log(run, *SESSION)  # 1 is the assistant's reply (primary), 5 the compaction summary (derived)
    out = sh("recall", "main", "--ids", "1", "--source-class", "derived")
    assert out.returncode == 1 and b"not found" not in out.stdout + out.stderr
    assert b'(not derived: ["1"])' in out.stdout
    assert out.stderr == b"pimem: error: nothing recalled: 1 is not derived (drop --source-class to read it)\n"
    doc = orjson.loads(sh("recall", "main", "--json", "--ids", "1,5,99", "--source-class", "primary").stdout)
    assert [r["id"] for r in doc["results"]] == [1]
    assert doc["notPrimaryIds"] == ["5"] and doc["missingIds"] == ["99"]
    assert orjson.loads(sh("recall", "main", "--json", "--ids", "a3f0c2d1", "--source-class", "derived").stdout)["notDerivedIds"] == ["a3f0c2d1"]


def test_entry_ids_are_found_without_reading_every_message(home, monkeypatch):
    """An entry id is found by a byte search of the log: only lines holding it are parsed, every message
    carrying it is read (an entry's text and its tool calls are messages of their own), and a line
    merely quoting it is not taken for it. An id whose line was written
    by another hand (an escape the log's writer does not use) is still found, by reading every message."""
    mem = Memory.at("main")
    mem.append([{"kind": "user" if k % 2 else "pi", "text": f"turn {k}", "meta": {"entry": f"e{k:04x}"}}
                for k in range(3000)])
    mem.append([{"kind": "user", "text": "a child of e0100", "meta": {"parent": "e0100"}},
                {"kind": "pi", "text": "the same entry again", "meta": {"entry": "e0bb7"}}])
    reads = recorded_reads(monkeypatch)

    def ids(*wanted):
        doc = orjson.loads(recall.recall(mem, recall.Request(ids=list(wanted), as_json=True)))
        return [r["id"] for r in doc["results"]], doc.get("missingIds", [])

    assert ids("entry:e0100", "e0bb7", "7", "entry:e0007") == ([7, 256, 2999, 3001], [])
    assert ids("entry:e0bb9") == ([], ["entry:e0bb9"])
    assert reads == [(0, None)]  # only the id not found read every message
    day = next(mem.path.joinpath("main").glob("*.jsonl"))
    day.write_bytes(day.read_bytes().replace(b'"entry":"e0123"', b'"entry":"\\u0065\\u0030123"'))
    mem = Memory.at("main")
    assert ids("e0123") == ([291], [])


def test_snippet_starts_at_the_line_with_the_hit(run, home):
    log(run, {"kind": "user", "text": "intro line\n" * 200 + "the needle is here\nafter"})
    item = orjson.loads(run("recall", "main", "needle", "--json").stdout)["results"][0]
    assert item["snippet"].startswith("the needle is here")


def test_raw_single_entry_is_exact_json_or_a_paged_envelope(run, home):
    big = "line with \"quotes\" and \\ and 中文\n" * 2000
    log(run, {"kind": "user", "text": "short"}, {"kind": "user", "text": big})
    whole = run("recall", "main", "--ids", "0", "--raw").stdout
    assert orjson.loads(whole) == Memory.open("main").message(0)
    line = run("recall", "main", "--ids", "0", "--raw", "--json").stdout  # NDJSON: one line
    assert line.count("\n") == 1 and orjson.loads(line) == Memory.open("main").message(0)
    pretty = orjson.dumps(Memory.open("main").message(1), option=orjson.OPT_INDENT_2).decode()
    pieces, offset = [], 0
    while True:
        out = run("recall", "main", "--ids", "1", "--raw", "--offset", offset).stdout[:-1]
        assert len(out) <= 16_000
        env = orjson.loads(out)
        assert env["id"] == 1 and env["totalChars"] == len(pretty) and env["offset"] == offset
        pieces.append(env["body"])
        if not env["truncated"]:
            break
        offset = env["nextOffset"]
    assert "".join(pieces) == pretty
    small = orjson.loads(run("recall", "main", "--ids", "1", "--raw", "--offset", "10", "--raw-limit", "25").stdout)
    assert small["body"] == pretty[10:35] and small["limit"] == 25 and small["nextOffset"] == 35


def test_raw_many_entries_are_whole_with_the_omitted_ids_listed(run, home):
    log(run, *[{"kind": "user", "text": f"entry {n} " + "x" * 3000} for n in range(10)])
    out = run("recall", "main", "--ids", ",".join(map(str, range(10))), "--raw", "--limit", "10").stdout
    assert len(out) <= 16_001 and "(omitted ids: [" in out
    assert out.count("[#") == 5  # 5 whole entries of ~3,100 characters fit in 16,000
    first = out.split("[#0]\n", 1)[1].split("\n\n[#1]")[0]
    assert orjson.loads(first)["i"] == 0
    none_fit = run("recall", "main", "--ids", "0,1", "--raw", "--budget", "2000").stdout
    assert none_fit.startswith("pimem recall (2 results; 0 included)") and "[0,1]" in none_fit
    tiny = [run("recall", "main", "--ids", "0,1", "--budget", b).stdout for b in (12, 60)]  # too small for a listing:
    assert tiny == ["(2 results)\n", "pimem recall (2 results; none fits in 60 characters)\n"]  # still the count
    assert orjson.loads(run("recall", "main", "--ids", "0,1", "--budget", "80", "--json").stdout) == {"source": "pimem-recall", "action": "read", "count": 2, "truncated": True}


def test_budgets_hold_with_five_thousand_huge_ids_and_escapes(run, home):
    nasty = "\x00\x01\"\\\n\u2028" * 500
    log(run, *[{"kind": "user", "text": nasty.replace("\x00", "") + f" needle {n}", "meta": {"entry": "e" * 3000 + str(n)}} for n in range(40)])
    ids = ",".join(["huge-" + "z" * 200 + str(n) for n in range(5000)] + [str(n) for n in range(40)])
    for max_chars in (2, 10, 100, 1000, 5000, 16_000):
        for args in (["--ids", ids], ["--ids", ids, "--raw"], ["needle"], ["--raw", "needle"], ["--ids", "3", "--raw"], ["--limit", "30"]):
            for as_json in ([], ["--json"]):
                out = run("recall", "main", "--budget", max_chars, *args, *as_json)
                text = out.stdout[:-1]
                assert len(text) <= max_chars, (max_chars, args, as_json)
                if as_json or "--ids" in args and "3" in args:
                    assert text in ("", "{}") or isinstance(orjson.loads(text), dict)
    doc = orjson.loads(run("recall", "main", "--json", "--ids", ids).stdout)
    assert doc["missingIdsNotListed"] > 0 and len(doc["missingIds"]) + doc["missingIdsNotListed"] == 5000


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(st.text(min_size=1, max_size=300).filter(lambda t: t.strip() and "\x00" not in t), min_size=1, max_size=8),
       max_chars=st.integers(min_value=2, max_value=4000), raw=st.booleans())
def test_any_log_any_budget_never_overflows(home, texts, max_chars, raw):
    mem = Memory.at("main")
    try:
        mem.append([{"kind": "user", "text": t} for t in texts])
    except Exception:
        return  # text the log refuses (lone surrogates) is not recall's concern
    request = recall.Request(raw=raw, limit=30, budget=max_chars, as_json=True)
    text = recall.recall(mem, request)
    assert len(text) <= max_chars
    assert text == "" or isinstance(orjson.loads(text), dict)


def test_a_scope_narrows_the_universe_before_anything_else(home, monkeypatch):
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": f"note {n}", "meta": {"session": "A" if n % 2 else "B"}} for n in range(6)])
    monkeypatch.setitem(recall.SCOPES, "lineage", lambda mem: {m["i"]: m for m in mem.messages() if m["meta"]["session"] == "B"})
    doc = orjson.loads(recall.recall(mem, recall.Request(query="note", scope="lineage", as_json=True)))
    assert [r["id"] for r in doc["results"]] == [5, 3, 1]
    read = orjson.loads(recall.recall(mem, recall.Request(ids=["0", "1"], scope="lineage", as_json=True)))
    assert [r["id"] for r in read["results"]] == [1] and read["missingIds"] == ["0"]
    monkeypatch.setitem(recall.SCOPES, "empty", lambda mem: {m["i"]: m for m in mem.messages()})
    for request in (recall.Request(scope="empty", as_json=True), recall.Request(query="note", scope="empty", as_json=True)):
        assert orjson.loads(recall.recall(mem, request))["results"] == []  # never widened to everything
    with pytest.raises(Exception, match="unknown scope"):
        recall.recall(mem, recall.Request(scope="nope"))


def test_bad_requests_exit_2_and_unknown_memories_3(run, home):
    log(run, *SESSION)
    for args in (["--limit", "31"], ["--limit", "0"], ["--kind", "robot"], ["--source-class", "x"], ["--page", "0"]):
        assert run("recall", "main", *args).exit_code == 2, args
    for limit in ("0", "31"):  # one range, said the same way either side of it
        assert "from 1 to 30" in run("recall", "main", "--limit", limit).stderr
    assert run("recall", "nope", "x").exit_code == 3 and not (home / "nope").exists()
    assert run("recall", "nope").exit_code == 1  # a lone word naming no memory is the query, in main


def test_a_raw_read_left_with_one_entry_still_names_the_ids_it_left_out(run, home):
    Memory.at("main").append([{"kind": "user", "text": f"msg {n}"} for n in range(8)])
    for args, key, ids in ((["--ids", "0,3,7", "--limit", "1"], "omittedIds", [3, 7]), (["--ids", "0,999"], "missingIds", ["999"])):
        out = orjson.loads(run("recall", "main", "--raw", "--json", *args).stdout)
        assert [e["i"] for e in out["entries"]] == [0] and out[key] == ids, (args, out)
    alone = run("recall", "main", "--ids", "0", "--raw").stdout  # asked for one, got it: the entry itself
    assert orjson.loads(alone)["text"] == "msg 0"


def test_nothing_recalled_says_how_many_tool_messages_match_and_the_option(run, home):
    log(run, {"kind": "user", "text": "restyle it"},
        *[{"kind": "tool", "text": f'Edit({{"file_path": "src/theme.ts", "old_string": "{n}", "new_string": "x"}})'}
          for n in range(3)])
    out = run("recall", "main", "--file", "theme.ts")
    assert (out.exit_code, out.stderr) == (1, "pimem: error: nothing recalled: 3 tool calls and results match; "
                                              "add --include-tools to show them\n")
    assert run("recall", "main", "restyle", "--file", "theme.ts").stderr == "pimem: error: nothing recalled\n"
    run("append", "one", "-k", "tool", 'Edit({"file_path": "src/colors.ts", "old_string": "a", "new_string": "b"})')
    assert run("recall", "one", "--file", "colors.ts").stderr == (
        "pimem: error: nothing recalled: 1 tool call or result matches; add --include-tools to show it\n")
    assert results(run, "--file", "theme.ts", "--include-tools") == [3, 2, 1]
    # in the JSON too (an agent reads that, not stderr: it said {"count":0,…} alone), and so over MCP
    for raw in ([], ["--raw"]):
        out = run("recall", "main", "--file", "theme.ts", "--json", *raw)
        assert (out.exit_code, orjson.loads(out.stdout)["count"], orjson.loads(out.stdout)["toolsMatching"]) == (1, 0, 3), raw
    assert "toolsMatching" not in run("recall", "main", "restyle", "--file", "theme.ts", "--json").stdout
    from pimem import api

    assert api.recall("main", file="theme.ts", home=home)["toolsMatching"] == 3


def test_messages_that_share_a_long_head_are_all_recalled_and_identical_ones_counted_and_listed(run, home):
    """A search kept one message per first 240 characters: of two tracebacks ending in different ports one was
    gone, and of 40 tool results naming the root password 39 were, the count and the hint saying 1."""
    head = "Traceback (most recent call last): File app/main.py line 12 in run; File app/db.py line 88 in connect; " * 3
    log(run, {"kind": "user", "text": head + "the staging db listens on 5433"},
        {"kind": "user", "text": head + "the production db listens on 6543"},
        *[{"kind": "tool_result", "text": "[cat]\n" + "x" * 300 + f" root password is hunter{n}"} for n in range(40)])
    doc = orjson.loads(run("recall", "main", "db listens", "--json").stdout)
    assert (doc["count"], [r["id"] for r in doc["results"]]) == (2, [1, 0])
    out = run("recall", "main", "root password")
    assert (out.exit_code, out.stderr) == (1, "pimem: error: nothing recalled: 40 tool calls and results match; "
                                              "add --include-tools to show them\n")
    assert orjson.loads(run("recall", "main", "root password", "--json").stdout)["toolsMatching"] == 40
    doc = orjson.loads(run("recall", "main", "root password", "--include-tools", "--limit", "30", "--json").stdout)
    assert (doc["count"], len(doc["results"]), doc["nextPage"]) == (40, 30, 2)
    # the very same text (and kind) is shown once: the others are counted and listed, not lost
    log(run, *[{"kind": "user", "text": "deploy with make ship"}] * 3, {"kind": "pi", "text": "deploy with make ship"},
        {"kind": "user", "text": "deploy  with make ship"})
    doc = orjson.loads(run("recall", "main", "make ship", "--json").stdout)
    assert (doc["count"], sorted(r["id"] for r in doc["results"]), doc["sameTextIds"]) == (5, [44, 45, 46], [43, 42])
    text = run("recall", "main", "make ship").stdout
    assert "(same text as a result shown: [43,42])" in text and text.startswith("pimem recall (5 results)")


def test_the_tool_traffic_hint_counts_with_the_requests_filters(run, home):
    """The hint counts what the same request would find with tool traffic shown: none under a kind that is no
    tool's (``--kind user``), nor past another filter (a source class, a file)."""
    log(run, {"kind": "user", "text": "check the build"},
        *[{"kind": "tool", "text": f'Bash({{"command": "tail -5 /tmp/tasks/bae407b.output", "n": {n}}})'}
          for n in range(2)])
    hint = "pimem: error: nothing recalled: 2 tool calls and results match; add --include-tools to show them\n"
    assert run("recall", "main", "bae407b").stderr == hint
    for args in (["--kind", "user"], ["--kind", "pi"], ["--kind", "note"], ["--source-class", "derived"],
                 ["--scope", "lineage", "--kind", "user"]):
        out = run("recall", "main", "bae407b", *args)
        assert (out.exit_code, out.stderr) == (1, "pimem: error: nothing recalled\n"), (args, out.stderr)
        assert run("recall", "main", "bae407b", *args, "--include-tools").exit_code == 1, args
    assert run("recall", "main", "bae407b", "--scope", "lineage").stderr == hint


def test_a_page_past_the_last_says_so_not_that_nothing_matched(run, home):
    """``--page 99`` over two results said ``nothing recalled`` under ``pimem recall (2 results)``: the page is
    past the last one, which is what to say (exit 1 still: the page holds nothing)."""
    log(run, {"kind": "user", "text": "staging listens on 5433"}, {"kind": "pi", "text": "staging noted"})
    for args in ([], ["staging"]):
        out = run("recall", "main", *args, "--page", "99")
        assert out.exit_code == 1 and out.stdout.startswith("pimem recall (2 results)")
        assert out.stderr == "pimem: error: nothing recalled on page 99: the 2 results end on page 1\n", out.stderr
    out = run("recall", "main", "--page", "3", "--limit", "1")
    assert out.stderr == "pimem: error: nothing recalled on page 3: the 2 results end on page 2\n", out.stderr
    assert run("recall", "main", "--page", "2", "--limit", "1").exit_code == 0
    out = run("recall", "main", "5433", "--page", "2")
    assert out.stderr == "pimem: error: nothing recalled on page 2: the one result is on page 1\n", out.stderr
    # an agent reads the JSON (and an MCP client the tool's answer): it holds the last page too
    doc = orjson.loads(run("recall", "main", "--page", "3", "--limit", "1", "--json").stdout)
    assert (doc["count"], doc["results"], doc["lastPage"]) == (2, [], 2)
    from pimem import api

    assert api.recall("main", "staging", page=99)["lastPage"] == 1 and "lastPage" not in api.recall("main", page=1)


@pytest.mark.parametrize("move", [["rename", "main", "new"], ["delete", "main"]])
@pytest.mark.parametrize("request_", [recall.Request(query="mutex"), recall.Request(file="src/auth"), recall.Request(),
                                      recall.Request(ids=["0"]), recall.Request(ids=["a3f0c2d1"])],
                         ids=["search", "file", "listing", "ids", "entry-id"])
def test_recall_of_a_memory_renamed_or_deleted_while_open_says_so_as_every_reader_does(run, home, sh, move, request_):
    """Another process renaming or deleting the memory while a recall had it open (an MCP call in flight): a
    search found nothing in it (count 0, as if nothing matched), or failed with the system's error on a file gone
    (No such file or directory, SQLite's disk I/O error: is the disk full?). It says what every reader of a Memory
    says then (NotFound, exit 3), and writes nothing."""
    from conftest import snapshot
    from pimem.errors import NotFound

    log(run, *SESSION)
    mem = Memory.open("main")
    assert recall.find(mem, recall.Request(query="mutex")).records  # (its index open, caught up)
    assert sh(*move).returncode == 0
    before = snapshot(home)
    with pytest.raises(NotFound) as refused:
        recall.find(mem, request_)
    assert str(refused.value) == "memory 'main' was renamed or deleted while this had it open; nothing more was written: run again"
    assert snapshot(home) == before
