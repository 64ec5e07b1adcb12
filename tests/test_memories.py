"""Authoritative memories: the projector's rules, the commands, ranking and output budgets."""

import orjson
import pytest

from conftest import snapshot
from pimem import Memory, memories
from pimem.chain import memory_chain


def ev(seq, type_, rid, author="user", payload=None, session=None, ts=None):
    event = {"seq": seq, "ts": ts or f"2026-10-08T09:{seq:02d}:00+08:00", "type": type_, "recordId": rid, "author": author, "payload": payload or {}}
    if session:
        event["sessionId"] = session
    return event


def create(seq, rid, author="user", status="active", content=None, **extra):
    payload = {"kind": "fact", "content": content or f"content of {rid}", "scope": "project", "status": status,
               "priority": "normal", "sourceEntryIds": [], "sourceHash": "", **extra}
    return ev(seq, "create", rid, author, payload)


# ---- the projector ---------------------------------------------------------------------------------------


def test_replay_is_deterministic_and_keeps_the_first_of_a_duplicated_seq():
    events = [create(1, "a"), create(2, "b"), ev(3, "pin", "a"), create(2, "c")]
    once = memories.project(events)
    assert list(once) == ["a", "b"]
    shuffled = [events[2], events[1], events[0], events[3]]  # replay sorts by seq; the first seq 2 seen wins
    assert memories.project(shuffled) == once
    assert memories.project(events) == once
    assert once["a"]["status"] == "pinned" and once["a"]["pinned"] is True


def test_a_second_create_of_an_id_is_ignored():
    records = memories.project([create(1, "a", content="first"), create(2, "a", content="second")])
    assert records["a"]["content"] == "first"


@pytest.mark.parametrize("author", ["model", "rule"])
def test_machines_cannot_make_anything_active_or_pinned(author):
    records = memories.project([
        create(1, "active", author, status="active"),  # refused outright: no record at all
        create(2, "mine", author, status="provisional"),
        ev(3, "pin", "mine", author),
        create(4, "users"),
        ev(5, "resolve", "users", author),  # machines never touch the user's records
        ev(6, "supersede", "users", author, {"newRecordId": "x", "content": "edited", "status": "provisional"}),
        ev(7, "supersede", "mine", author, {"newRecordId": "y", "content": "edited", "status": "active"}),
    ])
    assert "active" not in records and "x" not in records and "y" not in records
    assert records["mine"]["status"] == "provisional" and not records["mine"]["pinned"]
    assert records["users"]["status"] == "active"


def test_the_model_and_the_rules_touch_only_their_own_provisional_records():
    records = memories.project([
        create(1, "rules", "rule", status="provisional"),
        create(2, "models", "model", status="provisional"),
        ev(3, "supersede", "rules", "model", {"newRecordId": "x", "content": "the model rewrote a rule's", "status": "provisional"}),
        ev(4, "resolve", "models", "rule"),
        ev(5, "supersede", "models", "model", {"newRecordId": "y", "content": "its own, edited", "status": "provisional"}),
    ])
    assert "x" not in records and records["rules"]["status"] == "provisional" and records["y"]["supersedes"] == "models"


def _failed_run_compacted(run) -> None:
    """A memory ``main`` holding a failed test run, compacted: the rules derive a memory from it."""
    Memory.at("main").append([
        {"kind": "user", "text": "please fix the tests"},
        {"kind": "tool", "text": "pytest -q", "meta": {"call_id": "c1", "command": "pytest -q"}},
        {"kind": "echo", "text": "3 passed, 1 failed", "meta": {"call_id": "c1", "command": "pytest -q", "exit_code": 1}},
        {"kind": "pi", "text": "fixed it"}, {"kind": "user", "text": "thanks"}])
    run("compact", "main", "--keep", "10")


def test_a_proposal_cannot_replace_a_rule_derived_memory(run, home):
    from pimem import api

    _failed_run_compacted(run)
    rules = [r for r in orjson.loads(run("memories", "main", "--include-tools", "--json").stdout)["records"] if r["author"] == "rule"]
    assert rules, "compact derives a memory from the failed run"
    before = snapshot(home / "main")
    out = run("remember", "main", "--propose", "--supersede", rules[0]["id"], "the model rewrote the rule memory")
    assert out.exit_code == 2 and "the model's own provisional proposals" in out.stderr
    with pytest.raises(memories.BadInput):
        api.memory_propose("main", "again", supersede=rules[0]["id"], home=home)
    assert snapshot(home / "main") == before


def test_supersede_chain_versions_and_terminal_records_are_immutable():
    records = memories.project([
        create(1, "a"),
        ev(2, "pin", "a"),
        ev(3, "supersede", "a", payload={"newRecordId": "b", "content": "v2", "priority": "high"}),
        ev(4, "pin", "b"),
        ev(5, "supersede", "b", payload={"newRecordId": "c", "content": "v3", "kind": "constraint"}),
        ev(6, "pin", "a"),  # superseded: ignored
        ev(7, "resolve", "c"),
        ev(8, "pin", "c"),  # resolved: ignored
        ev(9, "supersede", "c", payload={"newRecordId": "d", "content": "v4"}),
    ])
    a, b, c = records["a"], records["b"], records["c"]
    assert (a["status"], a["supersededBy"], a["pinned"]) == ("superseded", "b", False)
    assert (b["version"], b["supersedes"], b["priority"], b["status"]) == (2, "a", "high", "superseded")
    assert (c["version"], c["kind"], c["priority"], c["status"], c["pinned"]) == (3, "constraint", "high", "resolved", False)
    assert "d" not in records


def test_the_user_confirms_a_proposal_by_superseding_it():
    records = memories.project([
        create(1, "p", "model", status="provisional"),
        ev(2, "supersede", "p", "user", {"newRecordId": "q", "content": "confirmed", "status": "active"}),
    ])
    assert records["q"]["status"] == "active" and records["q"]["author"] == "user"


# ---- the commands ----------------------------------------------------------------------------------------


def _ids(run, *args):
    out = run("memories", "main", "--json", *args)
    return [r["id"] for r in orjson.loads(out.stdout)["records"]]


def test_command_flow(run, home):
    pinned = run("remember", "main", "--pin", "--kind", "constraint", "never touch prod").stdout.strip()
    active = run("remember", "main", "use pnpm").stdout.strip()
    proposal = run("remember", "main", "--propose", "staging listens on 5433").stdout.strip()
    assert _ids(run) == [pinned, active, proposal]
    text = run("memories", "main").stdout
    assert text.startswith("pimem memories (3)\n\n- [" + pinned + "] pinned constraint prio=normal author=user v1\n  never touch prod")
    # a proposal may not replace the user's memory, and nothing is written when it tries
    before = snapshot(home)
    out = run("remember", "main", "--propose", "--supersede", active, "use yarn")
    assert out.exit_code == 2 and "own provisional proposals" in out.stderr
    assert snapshot(home) == before
    # the model may edit its own proposal; the user confirms it
    edited = run("remember", "main", "--propose", "--supersede", proposal, "staging listens on 5434").stdout.strip()
    before = snapshot(home)
    for given in ("   ", ""):  # blank text given: refused, not the old text kept
        blank = run("remember", "main", "--supersede", edited, given)
        assert blank.exit_code == 2 and "blank" in blank.stderr and snapshot(home) == before, given
    confirmed = orjson.loads(run("remember", "main", "--supersede", edited, "--json").stdout)
    assert (confirmed["status"], confirmed["content"], confirmed["version"]) == ("active", "staging listens on 5434", 3)
    # superseding a pinned memory keeps it pinned
    newer = orjson.loads(run("remember", "main", "--supersede", pinned, "--json", "never touch prod or staging").stdout)
    assert newer["status"] == "pinned" and newer["supersedes"] == pinned
    assert run("forget", "main", active).stdout.strip() == active
    assert active not in _ids(run)
    assert _ids(run, "--status", "resolved") == [active]
    out = run("forget", "main", active)
    assert out.exit_code == 2 and "already resolved" in out.stderr
    assert run("forget", "main", "mem_nope").exit_code == 3


def test_bad_input_writes_nothing_and_creates_nothing(run, home):
    for args in (["--kind", "bogus", "x"], ["--scope", "session", "x"], ["--pin", "--propose", "x"], ["-"]):
        out = run("remember", "fresh", *args, input="")
        assert out.exit_code == 2, args
        assert out.stderr.startswith("pimem: error: ") and out.stderr.count("\n") == 1
    assert not (home / "fresh").exists()
    run("remember", "main", "one")
    before = snapshot(home)
    assert run("remember", "main", "--priority", "urgent", "x").exit_code == 2
    assert run("remember", "main", "--supersede", "mem_missing", "x").exit_code == 3
    assert snapshot(home) == before
    for args in (["memories", "nope", "x"], ["forget", "nope", "mem_x"], ["remember", "nope", "--supersede", "mem_x", "y"]):
        assert run(*args).exit_code == 3
    assert not (home / "nope").exists()


def test_forget_and_supersede_of_an_unknown_id_name_the_memory_they_looked_in(run, home):
    """``forget demo bogus`` and ``remember demo --supersede bogus`` say which memory has no such record, as
    ``memories demo --id bogus`` does (before: "no memory 'bogus' here"); exit 3, nothing written."""
    run("remember", "demo", "use pnpm")
    before = snapshot(home)
    for args in (["forget", "demo", "bogus"], ["remember", "demo", "--supersede", "bogus", "x"]):
        out = run(*args)
        assert (out.exit_code, out.stderr) == (3, "pimem: error: no memory 'bogus' in 'demo' (see 'pimem memories demo')\n")
    assert run("memories", "demo", "--id", "bogus").stderr == "pimem: error: no memory 'bogus' in 'demo'\n"
    assert snapshot(home) == before


def test_remember_creates_the_memory_and_reads_stdin(run, home):
    assert run("remember", "fresh", "-", input="from stdin\n").exit_code == 0
    assert Memory.open("fresh").count() == 0
    assert orjson.loads(run("memories", "fresh", "--json").stdout)["records"][0]["content"] == "from stdin\n"


def test_session_memories_are_visible_only_to_their_session(run, home):
    mine = run("remember", "main", "--scope", "session", "--session", "A", "draft in /tmp/a").stdout.strip()
    shared = run("remember", "main", "shared note").stdout.strip()
    assert _ids(run, "--session", "A") == [shared, mine] or set(_ids(run, "--session", "A")) == {shared, mine}
    assert _ids(run, "--session", "B") == [shared]
    assert _ids(run) == [shared]
    assert run("forget", "main", mine, "--session", "B").exit_code == 3
    assert run("forget", "main", mine, "--session", "A").exit_code == 0


def test_status_and_kind_filters(run, home):
    a = run("remember", "main", "--kind", "decision", "ship on friday").stdout.strip()
    b = run("remember", "main", "tabs over spaces").stdout.strip()
    run("forget", "main", b)
    assert _ids(run, "--kind", "decision") == [a]
    assert _ids(run, "--status", "all") == [a, b]
    out = run("memories", "main", "--status", "superseded")
    assert out.exit_code == 1 and out.stdout == "pimem memories (0)\n"
    assert run("memories", "main", "--status", "nope").exit_code == 2


# ---- ranking ---------------------------------------------------------------------------------------------


def test_ranking_prefers_authority_then_rare_terms(home):
    events = [
        create(1, "prov", "model", status="provisional", content="the deploy uses port 5433"),
        create(2, "act", content="the deploy uses port 5433"),
        create(3, "pin", content="the deploy uses port 5433"),
        ev(4, "pin", "pin"),
        create(5, "noise", content="deploy deploy deploy notes"),
        create(6, "other", content="unrelated words"),
    ]
    records = list(memories.project(events).values())
    ranked = [r["id"] for r in memories.rank(records, "port 5433")]
    assert ranked[:3] == ["pin", "act", "prov"] and "other" not in ranked
    assert memories.rank(records, "the and with") == []
    assert [r["id"] for r in memories.rank(records, "deploy port")][0] == "pin"


def test_ranking_finds_chinese_and_path_parts(home):
    records = list(memories.project([
        create(1, "zh", content="预发环境的数据库在 5433 端口"),
        create(2, "path", content="the refresh bug is in src/auth/session.ts"),
    ]).values())
    assert [r["id"] for r in memories.rank(records, "数据库")] == ["zh"]
    assert [r["id"] for r in memories.rank(records, "session.ts")] == ["path"]
    assert [r["id"] for r in memories.rank(records, "auth")] == ["path"]


# ---- budgets ---------------------------------------------------------------------------------------------


def test_a_200000_char_memory_pages_back_exactly(run, home):
    body = "".join(f"{n:06d} 数据\n\"q\"\\ " for n in range(14_000))[:200_000]
    assert len(body) == 200_000
    rid = run("remember", "main", input=body).stdout.strip()
    listing = run("memories", "main")
    assert len(listing.stdout) <= 16_001 and "read it whole" in listing.stdout
    listing_json = run("memories", "main", "--json").stdout
    assert len(listing_json) <= 16_001
    doc = orjson.loads(listing_json)["records"][0]
    assert doc["contentTruncated"] and doc["contentChars"] == 200_000
    first = orjson.loads(run("memories", "main", "--id", rid).stdout)
    assert len(first["content"]) == 4000 and first["nextOffset"] == 4000 and first["totalChars"] == 200_000
    pieces, offset = [], 0
    while True:
        out = run("memories", "main", "--id", rid, "--offset", offset, "--limit", 100_000).stdout
        assert len(out) <= 16_001  # the line and its newline
        page = orjson.loads(out)
        pieces.append(page["content"])
        if not page["truncated"]:
            assert "nextOffset" not in page
            break
        offset = page["nextOffset"]
    assert "".join(pieces) == body
    at_end = orjson.loads(run("memories", "main", "--id", rid, "--offset", 200_000).stdout)
    assert (at_end["content"], at_end["truncated"], at_end["offset"]) == ("", False, 200_000) and "nextOffset" not in at_end
    assert len(pieces) > 12  # escapes make each page hold fewer than 16,000 characters of text


def _append_raw(home, events):
    mem = Memory.at("main")
    (home / "main" / "main").mkdir(parents=True, exist_ok=True)
    with mem.lock():
        memory_chain(mem.path).append(lambda _: events)


@pytest.mark.parametrize("max_chars", [2, 40, 300, 1000, 16_000])
def test_budgets_hold_on_adversarial_records(run, home, max_chars):
    ts = "2026-10-08T09:30:00+08:00"
    nasty = "\x01\"\\\n" * 3000
    events = [
        {"ts": ts, "type": "create", "recordId": "mem_" + "x" * 40_000, "author": "user",
         "payload": {"kind": "fact", "content": nasty, "scope": "project", "status": "active", "priority": "normal",
                     "sourceEntryIds": [f"entry-{n}-" + "y" * 50 for n in range(5000)], "sourceHash": "h" * 9000,
                     "provenance": nasty}},
    ]
    events += [{"ts": ts, "type": "create", "recordId": f"mem_big{n}", "author": "user",
                "payload": {"kind": "fact", "content": f"needle {n} " + nasty, "scope": "project", "status": "active",
                            "priority": "normal", "sourceEntryIds": list(range(5000)), "sourceHash": ""}} for n in range(30)]
    _append_raw(home, events)
    for args in (["--json"], [], ["needle", "--json"], ["needle"], ["--json", "--id", "mem_" + "x" * 40_000], ["--id", "mem_big3", "--limit", "100000"]):
        out = run("memories", "main", "--budget", max_chars, *args)
        assert out.exit_code == 0, (args, out.stderr)
        text = out.stdout[:-1]
        assert len(text) <= max_chars, args
        if "--json" in args or "--id" in args:
            assert text == "" or isinstance(orjson.loads(text), dict)


def test_thirty_big_hits_page_without_overlap(run, home):
    ts = "2026-10-08T09:30:00+08:00"
    _append_raw(home, [
        {"ts": ts, "type": "create", "recordId": f"mem_{n:02d}", "author": "user",
         "payload": {"kind": "fact", "content": f"needle {n} " + "z" * 2000, "scope": "project", "status": "active",
                     "priority": "normal", "sourceEntryIds": [], "sourceHash": ""}}
        for n in range(30)
    ])
    first = orjson.loads(run("memories", "main", "needle", "--json").stdout)
    assert first["truncated"] and first["count"] == 30
    second = orjson.loads(run("memories", "main", "needle", "--json", "--offset", first["nextOffset"]).stdout)
    ids1, ids2 = {r["id"] for r in first["records"]}, {r["id"] for r in second["records"]}
    assert len(ids1) == first["nextOffset"] and ids1.isdisjoint(ids2)


def test_a_text_listing_too_small_for_any_record_says_so_in_text(run, home):
    run("remember", "main", "a")
    run("remember", "main", "b")
    assert run("memories", "main", "--budget", "60").stdout == "pimem memories (2; none fits in 60 characters)\n"
    assert run("memories", "main", "--budget", "20").stdout == "(2)\n"
    assert orjson.loads(run("memories", "main", "--budget", "80", "--json").stdout) == {"source": "memory-log", "count": 2, "offset": 0, "truncated": True}
    assert run("memories", "main", "--budget", "30", "--json").stdout == '{"count":2,"truncated":true}\n'  # the count, while it fits
    assert run("memories", "main", "--budget", "20", "--json").stdout == "{}\n"  # then the empty document


@pytest.mark.parametrize("wrong", [{"session": 5}, {"session": ["S"]}, {"text": 5}, {"supersede": 5}])
def test_a_library_call_with_a_wrong_type_writes_nothing(run, home, wrong):
    from pimem import api
    from pimem.errors import BadInput

    assert run("remember", "main", "seed").exit_code == 0
    before = snapshot(home)
    args = {"text": "x", **wrong}
    with pytest.raises(BadInput, match="must be (a )?str"):
        api.memory_propose("main", args.pop("text"), home=home, **args)
    assert snapshot(home) == before
    assert run("remember", "main", "still writable").exit_code == 0  # nothing blocks the log


def test_reading_a_memory_hidden_as_tool_derived_says_to_add_include_tools(run, home):
    _failed_run_compacted(run)
    rule = next(r for r in orjson.loads(run("memories", "main", "--include-tools", "--json").stdout)["records"]
                if r["author"] == "rule")["id"]
    out = run("memories", "main", "--id", rule)
    assert (out.exit_code, out.stdout) == (3, "")
    assert out.stderr == (f"pimem: error: memory '{rule}' in 'main' is derived from tool traffic; "
                          "add --include-tools to read it\n")
    assert run("memories", "main", "--id", rule, "--include-tools").exit_code == 0
    assert run("memories", "main", "--id", "mem_nope").stderr == "pimem: error: no memory 'mem_nope' in 'main'\n"
    # a listing or a search matching only such memories says how many and the option, as recall does
    for args in ([], ["--kind", "derived"], ["pytest"]):
        n = len(orjson.loads(run("memories", "main", *args, "--include-tools", "--json").stdout)["records"])
        said = "1 memory derived from tool traffic matches" if n == 1 else f"{n} memories derived from tool traffic match"
        out = run("memories", "main", *args)
        assert (out.exit_code, out.stderr) == (1, f"pimem: error: no memories match: {said}; add --include-tools to "
                                                  "show them\n"), (args, out.stderr)
        assert orjson.loads(run("memories", "main", *args, "--json").stdout)["toolsMatching"] == n, args  # (JSON too)
    for args in (["--kind", "fact"], ["nothing-like-it"]):
        assert run("memories", "main", *args).stderr == "pimem: error: no memories match\n", args


@pytest.mark.parametrize("call, said", [
    (lambda mem: memories.remember(mem, "x", pin="yes"), "pin is True or False, not 'yes'"),  # (it pinned)
    (lambda mem: memories.remember(mem, "x", propose=1), "propose is True or False, not 1"),
    (lambda mem: memories.forget(mem, 5), "record_id must be a string, not int"),  # (a bare TypeError)
    (lambda mem: memories.remember(Memory.at("new"), "x", timeout=-1), "timeout is seconds from 0"),  # (made it first)
])
def test_the_library_writers_check_their_arguments(run, home, call, said):
    assert run("remember", "main", "seed").exit_code == 0
    before = snapshot(home)
    with pytest.raises(memories.BadInput) as refused:
        call(Memory.open("main"))
    assert str(refused.value).startswith(said) and snapshot(home) == before


def test_the_api_remembers_lists_and_forgets_as_the_commands_do(run, home):
    from pimem import api

    pinned = api.remember("main", "never touch the production database", pin=True, kind="constraint")
    assert (pinned["status"], pinned["kind"]) == ("pinned", "constraint")  # (the memory made by the first remember)
    newer = api.remember("main", None, supersede=pinned["id"], priority="high")  # (its text kept)
    assert (newer["content"], newer["status"], newer["priority"]) == ("never touch the production database", "pinned", "high")
    listed = orjson.loads(run("memories", "main", "--json").stdout)
    assert api.memories("main") == listed and [r["id"] for r in listed["records"]] == [newer["id"]]
    assert api.forget("main", newer["id"])["status"] == "resolved"
    assert api.memories("main")["count"] == 0 and api.memories("main", status="all")["count"] == 2
    with pytest.raises(memories.NotFound):
        api.forget("main", "mem_nope")


def test_superseding_with_a_blank_text_is_refused_and_no_text_keeps_the_old_one_in_every_writer(run, home):
    """The README: ``remember --supersede ID`` with a blank text, ``""`` included, is refused (no text keeps
    the old one). So do ``remember --propose``, ``api.remember`` and ``api.memory_propose`` (and the MCP tool
    through it): ``""`` or white space given with ``supersede`` is refused, nothing written; no text (None, no
    argument) keeps the old text. ``memory_propose(text="", supersede=ID)`` kept the old text and wrote a new
    version, where ``"   "`` was refused and no text could not be given."""
    from pimem import api

    mine = run("remember", "main", "--propose", "staging listens on 5433").stdout.strip()
    before = snapshot(home)
    for given in ("", "   "):
        for refused in (lambda: api.remember("main", given, supersede=mine),
                        lambda: api.memory_propose("main", given, supersede=mine)):
            with pytest.raises(memories.BadInput, match="blank"):
                refused()
        for args in (["--supersede", mine, given], ["--propose", "--supersede", mine, given]):
            out = run("remember", "main", *args)
            assert out.exit_code == 2 and "blank" in out.stderr, (args, out.stderr)
        assert snapshot(home) == before, given
    kept = api.memory_propose("main", None, supersede=mine, priority="high")  # (its text kept, its priority raised)
    assert (kept["content"], kept["priority"], kept["status"]) == ("staging listens on 5433", "high", "provisional")
    confirmed = api.remember("main", None, supersede=kept["id"])
    assert (confirmed["content"], confirmed["status"]) == ("staging listens on 5433", "active")
    with pytest.raises(memories.BadInput, match="memory_propose: text is blank"):
        api.memory_propose("main", None)  # (no text and nothing to supersede)


@pytest.mark.parametrize("text", ["\u200b", "\ufeff \u200b", "\x1b[31m\x1b[0m", " \u3000\u2060 "])
def test_a_text_that_shows_nothing_is_refused_as_a_blank_one_by_every_writer(run, home, text):
    """White space alone was refused (no text), but a zero-width space, a BOM or escape sequences alone were
    remembered: a memory showing nothing (``- [mem_…] fact:`` in every context), and a supersede with such a
    text replaced a memory's words with nothing. Whatever shows nothing is refused as white space is."""
    from pimem import api

    kept = run("remember", "main", "use pnpm").stdout.strip()
    before = snapshot(home)
    out = run("remember", "main", text)
    assert out.exit_code == 2 and "no text" in out.stderr, out.stderr
    out = run("remember", "main", input=text)
    assert out.exit_code == 2 and "no text" in out.stderr, out.stderr
    out = run("remember", "main", "--supersede", kept, text)
    assert out.exit_code == 2 and "blank" in out.stderr, out.stderr
    for refused, said in ((lambda: api.remember("main", text), "remember: text is blank"),
                          (lambda: api.memory_propose("main", text), "memory_propose: text is blank"),
                          (lambda: api.memory_propose("main", text, supersede=kept), "blank")):
        with pytest.raises(memories.BadInput, match=said):
            refused()
    assert snapshot(home) == before
    assert run("remember", "main", f"{text}tabs{text}").exit_code == 0  # (around words: kept as given)


def test_a_listing_paged_past_its_end_exits_1_saying_how_many_there_are(run, home):
    """``--offset`` past the last record printed the header alone and exited 0, where every other page of
    nothing (a search's, a recall's) exits 1: a pager's loop went on for ever."""
    run("remember", "main", "the staging db is on port 5433")
    run("remember", "main", "deploys happen on tuesdays")
    assert run("memories", "main", "--offset", "1").exit_code == 0
    for args in ([], ["--json"], ["staging"]):
        past = run("memories", "main", *args, "--offset", "2")
        count = 1 if args == ["staging"] else 2
        assert past.exit_code == 1, past
        assert past.stderr == f"pimem: error: no more memories past --offset 2: {count} {'memory matches' if count == 1 else 'memories match'}\n"
