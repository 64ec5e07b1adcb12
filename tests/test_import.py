"""pimem import: pi (v1 and v3 trees), Claude Code, Codex and NDJSON; re-import; malformed lines; lineage."""

from __future__ import annotations

import json
import re
import os
from pathlib import Path

import pytest

from conftest import snapshot
from pimem import Memory
from pimem.errors import BadInput
from pimem.lineage import off_lineage, on_lineage


def write_jsonl(path: Path, lines) -> Path:
    """Each item a dict (dumped as one JSON line) or a str (written as is, for malformed lines)."""
    with open(path, "a", encoding="utf-8") as f:
        for item in lines:
            f.write((item if isinstance(item, str) else json.dumps(item)) + "\n")
    return path


def messages(name="t") -> list[dict]:
    return list(Memory.open(name).messages())


def brief(msgs) -> list[tuple[str, str]]:
    return [(m["kind"], m["text"]) for m in msgs]


# ---- pi ------------------------------------------------------------------------------------------------

def pi_tree(path: Path) -> Path:
    """A v3 session: a fix attempt on one branch, then the user went back to the first reply and asked for
    something else (the active branch). A model change sits between two entries of the first branch."""
    t = "2026-03-02T09:00:{:02d}.000Z".format
    return write_jsonl(path, [
        {"type": "session", "version": 3, "id": "sess-1", "timestamp": t(0), "cwd": "/home/dev/shop"},
        {"type": "message", "id": "u1", "parentId": None, "timestamp": t(5),
         "message": {"role": "user", "content": "Fix token refresh in src/auth/session.ts", "timestamp": 1}},
        {"type": "message", "id": "a1", "parentId": "u1", "timestamp": t(9),
         "message": {"role": "assistant", "model": "m-1", "content": [
             {"type": "thinking", "thinking": "SECRET-THOUGHT read it first"},
             {"type": "text", "text": "Reading the file."},
             {"type": "toolCall", "id": "call_01", "name": "read", "arguments": {"path": "src/auth/session.ts"}}]}},
        {"type": "message", "id": "r1", "parentId": "a1", "timestamp": t(10),
         "message": {"role": "toolResult", "toolCallId": "call_01", "toolName": "read",
                     "content": [{"type": "text", "text": "export function refresh() {}"}], "isError": False}},
        {"type": "model_change", "id": "mc", "parentId": "r1", "timestamp": t(11), "provider": "x", "modelId": "m-2"},
        {"type": "message", "id": "b1", "parentId": "mc", "timestamp": t(20),
         "message": {"role": "bashExecution", "command": "npm test", "output": "12 passed, 1 failed", "exitCode": 1}},
        {"type": "compaction", "id": "c1", "parentId": "b1", "timestamp": t(30), "summary": "worked on refresh",
         "firstKeptEntryId": "a1", "tokensBefore": 100},
        {"type": "custom", "id": "x1", "parentId": "c1", "timestamp": t(31), "customType": "ext", "data": {}},
        {"type": "message", "id": "u2", "parentId": "a1", "timestamp": t(40),
         "message": {"role": "user", "content": [{"type": "text", "text": "Try a mutex instead"},
                                                  {"type": "image", "data": "AAAA", "mimeType": "image/png"}]}},
    ])


def test_pi_tree_keeps_ids_pairs_tools_and_drops_thinking(run, home, tmp_path):
    result = run("import", pi_tree(tmp_path / "s.jsonl"), "--name", "t")
    assert result.exit_code == 0, result.stderr
    assert result.stdout == "t: 7 imported, 0 already present, 0 malformed skipped; 7 messages in all\n"
    msgs = messages()
    assert brief(msgs) == [
        ("user", "Fix token refresh in src/auth/session.ts"),
        ("pi", "Reading the file."),
        ("tool", 'read({"path":"src/auth/session.ts"})'),
        ("echo", "export function refresh() {}"),
        ("echo", "$ npm test\n12 passed, 1 failed"),
        ("work", "worked on refresh"),
        ("user", "Try a mutex instead\n[image]"),
    ]
    assert "SECRET-THOUGHT" not in (home / "t" / "main" / "2026-03-02.jsonl").read_text()
    assert [m["date"] for m in msgs][:2] == ["2026-03-02T09:00:05.000Z", "2026-03-02T09:00:09.000Z"]
    tool, echo, bash, summary = msgs[2]["meta"], msgs[3]["meta"], msgs[4]["meta"], msgs[5]["meta"]
    assert tool["call_id"] == echo["call_id"] == "call_01" and tool["tool"] == echo["tool"] == "read"
    assert echo["is_error"] is False and "exit_code" not in echo  # pi's flag: it ended well
    assert bash["command"] == "npm test" and bash["exit_code"] == 1
    assert summary["derived"] is True
    assert msgs[0]["meta"] == {"source": "pi", "session": "sess-1", "cwd": "/home/dev/shop", "entry": "u1", "parent": None,
                               "file": str((tmp_path / "s.jsonl").resolve())}
    assert bash["parent"] == "r1"  # the model change between them is looked through


def test_import_leaves_the_search_index_complete(run, home, tmp_path, monkeypatch):
    from pimem.importers import job

    monkeypatch.setattr(job, "INDEX_MIN", 7)  # a bulk import: the import indexes what it logged
    run("import", pi_tree(tmp_path / "s.jsonl"), "-n", "t")
    mem = Memory.open("t")
    assert mem.has_index() and not mem.index().behind()
    monkeypatch.setattr(job, "INDEX_MIN", 8)  # a small one leaves the index to the next reader
    run("import", pi_tree(tmp_path / "s2.jsonl"), "-n", "u")
    assert not Memory.open("u").has_index()
    found = run("search", "mutex", "t", "--json")
    assert found.exit_code == 0 and "Try a mutex instead" in found.stdout


def index_rows(mem: Memory) -> tuple[list, dict]:
    """What the index holds: every msgs row and, per file and table, the rowids each trigram of a probe
    finds (the FTS tables are contentless, so their contents are compared through queries)."""
    import sqlite3

    rows, found = None, {}
    for name in ("index.sqlite", "index-1.sqlite"):
        db = sqlite3.connect(mem.path / name)
        if name == "index.sqlite":
            rows = db.execute("SELECT i, (SELECT name FROM files WHERE id = file), offset, length, kind, epoch FROM msgs ORDER BY i").fetchall()
        for table in ("talk", "tools"):
            for probe in ("mut", "ex ", "the", "cat", "ls ", "\n\n", "ry "):
                found[name, table, probe] = db.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ? ORDER BY rowid",
                                                       ['"' + probe + '"']).fetchall()
        db.close()
    return rows, found


def test_the_index_an_import_builds_from_its_own_batches_is_the_one_the_log_gives(run, home, tmp_path, monkeypatch):
    """An import indexes each batch from the messages it just logged (nothing read back); the result must be
    exactly what catching up from the log builds, batch after batch and across files."""
    from pimem.importers import job

    monkeypatch.setattr(job, "BATCH_LINES", 3)  # several batches, each indexed as it is logged
    monkeypatch.setattr(job, "INDEX_MIN", 0)
    calls = []
    from pimem.index import Index

    real = Index.add_logged
    monkeypatch.setattr(Index, "add_logged", lambda self, *a: calls.append(len(a[1])) or real(self, *a))
    run("import", pi_tree(tmp_path / "s.jsonl"), write_jsonl(tmp_path / "c.jsonl", claude_lines()), "-n", "t")
    mem = Memory.open("t")
    assert len(calls) > 2 and sum(calls) == mem.count()
    built = index_rows(mem)
    mem.close()
    assert run("reindex", "t").exit_code == 0
    assert index_rows(Memory.open("t")) == built
    assert any(built[1].values()) and len(built[0]) == mem.count()


def test_lineage_follows_the_active_branch(run, home, tmp_path):
    run("import", pi_tree(tmp_path / "s.jsonl"), "--name", "t")
    msgs = messages()
    on_branch = [m["meta"]["entry"] for m in on_lineage(msgs)]
    assert on_branch == ["u1", "a1", "a1", "u2"]  # a1 gave a reply and a tool call
    # a message typed into the memory is on every lineage
    Memory.at("t").append([{"kind": "note", "text": "typed by hand"}])
    assert off_lineage(messages()) == {3, 4, 5}


def test_recall_scope_lineage_leaves_out_other_branches(run, tmp_path):
    run("import", pi_tree(tmp_path / "s.jsonl"), "-n", "t")
    everywhere = run("recall", "t", "npm", "--include-tools", "--scope", "all", "--json")
    assert everywhere.exit_code == 0 and [r["id"] for r in json.loads(everywhere.stdout)["results"]] == [4]
    lineage = run("recall", "t", "npm", "--include-tools", "--scope", "lineage")
    assert lineage.exit_code == 1  # the test run is on the branch the user left
    mutex = run("recall", "t", "mutex", "--scope", "lineage", "--json")
    assert mutex.exit_code == 0 and "Try a mutex instead" in mutex.stdout
    assert run("recall", "t", "x", "--scope", "sideways").exit_code == 2


def test_a_session_ending_on_an_entry_that_gives_no_message_ends_its_branch_there(run, tmp_path):
    """The user went back to the tool's result (r1) and changed the model: the session's last line is that
    model change, a child of r1, so the active branch ends at r1, not at its last message (u2, on another
    branch). The leaf was the last message, whatever came after it."""
    path = pi_tree(tmp_path / "s.jsonl")
    write_jsonl(path, [{"type": "model_change", "id": "m9", "parentId": "r1", "timestamp": "2026-03-02T09:01:00.000Z",
                        "provider": "x", "modelId": "m-3"}])
    assert run("import", path, "-n", "t").exit_code == 0
    mutex = run("recall", "t", "mutex", "--scope", "lineage")
    assert mutex.exit_code == 1, mutex.stdout  # on the branch the user stepped away from
    refresh = run("recall", "t", "refresh", "--include-tools", "--scope", "lineage", "--json")
    assert refresh.exit_code == 0 and sorted(r["id"] for r in json.loads(refresh.stdout)["results"]) == [0, 3]
    # the user comes back to u2's branch: its next entry is the leaf again, read on from where it stopped
    write_jsonl(path, [{"type": "label", "id": "l1", "parentId": "u2", "timestamp": "2026-03-02T09:02:00.000Z", "targetId": "u2"}])
    assert run("import", path, "-n", "t").exit_code == 0
    assert run("recall", "t", "mutex", "--scope", "lineage").exit_code == 0


def test_recall_scope_lineage_is_the_slow_way_s_answer_and_reads_only_the_linked_lines(run, tmp_path, monkeypatch):
    from pimem import recall
    from test_recall import recorded_reads, reference

    run("import", pi_tree(tmp_path / "s.jsonl"), "-n", "t")
    mem = Memory.at("t")
    mem.append([{"kind": ("user", "pi", "echo", "work")[k % 4], "text": f"later {k} mutex",
                 "meta": {"command": "npm test"} if k % 4 == 2 else {"derived": True} if k % 4 == 3 else {}} for k in range(600)])
    requests = [recall.Request(scope="lineage", kind=kind, source_class=source, include_tools=tools, limit=4, page=page)
                for kind in (None, "bash", "user", "tool_call") for source in ("all", "primary", "derived")
                for tools in (False, True) for page in (1, 40)]
    requests += [recall.Request(scope="lineage", ids=["0", "3", "4", "a1", "entry:u2", "600"], include_tools=True),
                 recall.Request(scope="lineage", query="mutex", include_tools=True)]
    expected = [reference(mem, r) for r in requests[:-1]]
    reads = recorded_reads(monkeypatch)
    for request, want in zip(requests, expected):
        reads.clear()
        found = recall.find(mem, request)
        assert (found.records, found.total, found.next_page, found.missing) == (want.records, want.total, want.next_page, want.missing), request
        assert (0, None) not in reads and all(stop is not None for _, stop in reads), (request, reads)  # never the whole log
    searched = [r["id"] for r in recall.find(mem, requests[-1]).records]
    assert searched and not set(searched) & off_lineage(messages("t"))


def test_a_second_pi_entry_with_the_same_id_keeps_its_text_and_is_said(run, tmp_path):
    """Two entries of a damaged session share an id: the second one's text was counted 'already present'
    and lost. It is a message of its own (its entry the id and its line's hash), said with the line it
    repeats, and once only when the file is imported again; the same line written twice is one message."""
    path = pi_tree(tmp_path / "s.jsonl")
    again = {"type": "message", "id": "u2", "parentId": "a1", "timestamp": "2026-03-02T09:01:00.000Z",
             "message": {"role": "user", "content": "Or a lock file"}}
    lines = path.read_text().splitlines()
    write_jsonl(path, [again, lines[-1]])
    first = run("import", path, "-n", "t")
    assert first.exit_code == 0
    assert first.stdout == "t: 8 imported, 1 already present, 0 malformed skipped; 8 messages in all\n"
    digest = messages()[-1]["meta"]["entry"].removeprefix("u2.")
    assert first.stderr == f"pimem: warning: {path}:10: entry id 'u2' is line 9's too; logged as entry u2.{digest}\n"
    assert brief(messages()[-2:]) == [("user", "Try a mutex instead\n[image]"), ("user", "Or a lock file")]
    (tmp_path / "home" / "t" / "imports.json").unlink()
    assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported, 9 already present")


def test_a_pi_id_repeated_in_a_grown_file_keeps_its_text(run, tmp_path):
    """A pi id repeated by a line added after the file was imported (read on from there: the ids of the
    lines read before were not known) was counted already present and its text lost. Now the part read
    before is read again for its ids once a new line's id is held by the memory, so the line gets the
    entry a fresh import gives it (ID.HASH, said); the same line again adds nothing."""
    path = pi_tree(tmp_path / "s.jsonl")
    assert run("import", path, "-n", "t").exit_code == 0
    again = {"type": "message", "id": "u1", "parentId": "a1", "timestamp": "2026-03-02T09:01:00.000Z",
             "message": {"role": "user", "content": "fourth"}}
    same = path.read_text().splitlines()[1]
    write_jsonl(path, [again, same])
    grown = run("import", path, "-n", "t")
    assert grown.exit_code == 0
    assert grown.stdout.startswith("t: 1 imported, 1 already present, 0 malformed skipped; 8 messages in all")
    entry = messages()[-1]["meta"]["entry"]
    assert entry.startswith("u1.") and messages()[-1]["text"] == "fourth"
    assert grown.stderr == f"pimem: warning: {path}:10: entry id 'u1' is line 2's too; logged as entry {entry}\n"
    assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported, 0 already present")
    (tmp_path / "home" / "t" / "imports.json").unlink()
    fresh = run("import", path, "-n", "t")
    assert fresh.stdout.startswith("t: 0 imported, 9 already present") and len(messages()) == 8


def test_a_pi_entry_edited_after_its_import_keeps_its_new_text(run, tmp_path, monkeypatch):
    """A pi session file edited in place (an entry's text changed, the file written again) was read again from
    its start and the changed entry counted already present, its id held: the new text never reached the log,
    and nothing said so. It is logged as entry ID.HASH and said, as a Claude Code entry imported before with
    other content is; the same file again adds nothing, nor does a copy of the edited line."""
    path = pi_tree(tmp_path / "s.jsonl")
    assert run("import", path, "-n", "t").exit_code == 0
    path.write_text(path.read_text().replace("Try a mutex instead", "Try a semaphore instead"))
    edited = run("import", path, "-n", "t")
    assert edited.exit_code == 0 and edited.stdout.startswith("t: 1 imported, 6 already present"), edited.output
    last = messages()[-1]
    assert last["text"] == "Try a semaphore instead\n[image]" and last["meta"]["entry"].startswith("u2.")
    assert edited.stderr == (f"pimem: warning: {path}:9: entry id 'u2' was imported before with other content; "
                             f"logged as entry {last['meta']['entry']}\n")
    assert [m["text"] for m in messages()].count("Try a mutex instead\n[image]") == 1
    assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported, 0 already present")
    (tmp_path / "home" / "t" / "imports.json").unlink()
    assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported, 7 already present") and len(messages()) == 8
    # a line of NDJSON naming a pi entry, with no date (the import's own, another each time), is no edit of it
    export = write_jsonl(tmp_path / "x.ndjson", [{"kind": "user", "text": "hand-made", "meta": {"source": "pi", "entry": "e9"}}])
    monkeypatch.setenv("PIMEM_NOW", "2026-05-01T10:00:00Z")
    assert run("import", export, "-n", "t", "--format", "ndjson").stdout.startswith("t: 1 imported")
    monkeypatch.setenv("PIMEM_NOW", "2026-05-01T11:00:00Z")
    for name in ("imports.json", "imports.keys", "imports.journal"):  # (rebuilt from the log)
        (tmp_path / "home" / "t" / name).unlink(missing_ok=True)
    again = run("import", export, "-n", "t", "--format", "ndjson")
    assert again.stdout.startswith("t: 0 imported, 1 already present") and again.stderr == "", again.output


def test_pi_v1_is_linear_with_line_hashes_as_keys(run, tmp_path):
    path = write_jsonl(tmp_path / "v1.jsonl", [
        {"type": "session", "id": "old", "timestamp": "2025-11-20T23:33:50.805Z", "cwd": "/w/legacy"},
        {"type": "message", "timestamp": "2025-11-20T23:33:51.000Z", "message": {"role": "user", "content": [{"type": "text", "text": "hello"}]}},
        {"type": "thinking_level_change", "timestamp": "2025-11-20T23:33:52.000Z", "thinkingLevel": "high"},
        {"type": "message", "timestamp": "2025-11-20T23:33:53.000Z", "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}]}},
        {"type": "message", "message": {"role": "assistant", "content": [{"type": "text", "text": "hi"}], "timestamp": 1763681640000}},
    ])
    result = run("import", path)
    assert result.exit_code == 0
    assert "importing into memory 'legacy'" in result.stderr
    msgs = messages("legacy")
    assert brief(msgs) == [("user", "hello"), ("pi", "hi")]
    assert msgs[1]["date"] == "2025-11-20T23:34:00.000Z"  # from the message's epoch milliseconds
    assert re.fullmatch("[0-9a-f]{12}", msgs[0]["meta"]["entry"]) and "parent" not in msgs[0]["meta"]  # the line's hash
    assert on_lineage(msgs) == msgs


# ---- Claude Code -----------------------------------------------------------------------------------------

def test_a_v1_pi_session_pi_gave_ids_adds_nothing_and_neither_does_its_fork(run, home, tmp_path):
    """pi opening a v1 session (no ids) rewrites its file with an id and a parent id after each entry's fields:
    read again from the start, every message was logged a second time under its new id. An entry so migrated
    is the v1 line it was (the same key); what the session says after is logged, the same words as before
    among them, and a fork of it (its lines copied into another session) adds only its own."""
    say = lambda s, role, text: {"type": "message", "timestamp": f"2025-11-20T23:33:{s:02d}.000Z",  # noqa: E731
                                 "message": {"role": role, "content": [{"type": "text", "text": text}]}}
    v1 = [{"type": "session", "id": "old", "timestamp": "2025-11-20T23:33:00.000Z", "cwd": "/w/legacy"},
          say(1, "user", "hello"), say(2, "assistant", "hi"), say(3, "user", "hello"), say(3, "user", "hello"),
          {"type": "thinking_level_change", "timestamp": "2025-11-20T23:33:04.000Z", "thinkingLevel": "high"}]
    compact = lambda line: json.dumps(line, separators=(",", ":"), ensure_ascii=False)  # noqa: E731  (as pi writes)
    path = tmp_path / "v1.jsonl"
    path.write_text("".join(compact(line) + "\n" for line in v1))
    assert run("import", path, "-n", "t").stdout.startswith("t: 4 imported")
    ids = [None] + [f"e{n:07d}" for n in range(1, len(v1))]
    migrated = [{**v1[0], "version": 3}] + [{**line, "id": ids[n], "parentId": ids[n - 1]} for n, line in enumerate(v1) if n]
    new = {"type": "message", "id": "n1", "parentId": ids[-1], "timestamp": "2026-01-05T10:00:00.000Z",
           "message": {"role": "user", "content": "hello"}}
    path.write_text("".join(compact(line) + "\n" for line in migrated + [new]))
    assert run("import", path, "-n", "t").stdout == "t: 1 imported, 4 already present, 0 malformed skipped; 5 messages in all\n"
    assert messages()[-1]["meta"]["entry"] == "n1"
    fork = tmp_path / "fork.jsonl"
    fork.write_text("".join(compact(line) + "\n" for line in [{**migrated[0], "id": "new", "parentSession": str(path)}, *migrated[1:], new]))
    assert run("import", fork, "-n", "t").stdout.startswith("t: 0 imported, 5 already present")
    for derived in ("imports.json", "imports.keys"):
        (home / "t" / derived).unlink()
    for again in (fork, path):
        assert run("import", again, "-n", "t").stdout.startswith("t: 0 imported, 5 already present")
    assert run("import", fork, "-n", "u").stdout.startswith("u: 5 imported")
    assert run("import", path, "-n", "u").stdout.startswith("u: 0 imported, 5 already present")


def test_pi_keeps_how_a_failed_tool_ended(run, tmp_path):
    """pi flags a failed tool call (``isError``) and its bash tool ends the output with the exit code."""
    t = "2026-03-02T09:00:{:02d}.000Z".format
    result = lambda k, text, failed: {"type": "message", "id": f"r{k}", "parentId": f"a{k}", "timestamp": t(k + 1), "message": {
        "role": "toolResult", "toolCallId": f"call_{k}", "toolName": "bash", "content": [{"type": "text", "text": text}],
        "isError": failed}}
    call = lambda k, command: {"type": "message", "id": f"a{k}", "parentId": f"r{k - 2}" if k > 1 else None, "timestamp": t(k),
                               "message": {"role": "assistant", "content": [{"type": "toolCall", "id": f"call_{k}", "name": "bash",
                                                                             "arguments": {"command": command}}]}}
    path = write_jsonl(tmp_path / "s.jsonl", [
        {"type": "session", "version": 3, "id": "sess-1", "timestamp": t(0), "cwd": "/home/dev/shop"},
        call(1, "npm run check"), result(1, "npm error command failed\n\n\nCommand exited with code 2", True),
        call(3, "sleep 99"), result(3, "Command aborted", True),
        call(5, "cat src/net.ts"), result(5, "export type T = NodeJS.Timeout; // 400 errors", False),
    ])
    assert run("import", path, "--name", "t").exit_code == 0
    ended = [(m["meta"].get("exit_code"), m["meta"]["is_error"]) for m in messages() if m["kind"] == "echo"]
    assert ended == [(2, True), (None, True), (None, False)]
    marks = run("view", "t").stdout
    assert "echo: exit 2 (" in marks and "echo: error (" in marks and "Timeout" not in marks and "400" not in marks, marks


def claude_lines(session="cs-1"):
    base = {"sessionId": session, "cwd": "/home/dev/api", "version": "2.1", "isSidechain": False, "userType": "external"}
    t = "2026-02-10T22:57:{:02d}.000Z".format
    return [
        {"type": "file-history-snapshot", "messageId": "m0", "snapshot": {}},
        {**base, "type": "progress", "uuid": "p0", "parentUuid": None, "timestamp": t(1), "data": {}},
        {**base, "type": "user", "uuid": "u1", "parentUuid": "p0", "timestamp": t(2), "message": {"role": "user", "content": "start the server"}},
        {**base, "type": "user", "uuid": "meta1", "parentUuid": "u1", "timestamp": t(2), "isMeta": True,
         "message": {"role": "user", "content": "<local-command-caveat>ignore</local-command-caveat>"}},
        {**base, "type": "assistant", "uuid": "a1", "parentUuid": "u1", "timestamp": t(3),
         "message": {"id": "msg1", "model": "claude-x", "role": "assistant", "content": [{"type": "thinking", "thinking": "SECRET-THOUGHT", "signature": "s"}]}},
        {**base, "type": "assistant", "uuid": "a2", "parentUuid": "a1", "timestamp": t(4),
         "message": {"id": "msg1", "model": "claude-x", "role": "assistant", "content": [
             {"type": "text", "text": "Starting it."},
             {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "make serve"}}]}},
        {**base, "type": "user", "uuid": "r1", "parentUuid": "a2", "timestamp": t(5), "toolUseResult": {"stdout": "x"},
         "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                                  "content": [{"type": "text", "text": "Exit code 2\nno rule"}]}]}},
        {**base, "type": "user", "uuid": "s1", "parentUuid": None, "timestamp": t(6), "isSidechain": True,
         "message": {"role": "user", "content": "sub-agent: list the routes"}},
        {**base, "type": "user", "uuid": "cs", "parentUuid": None, "timestamp": t(7), "isCompactSummary": True,
         "message": {"role": "user", "content": "This session is being continued. Summary: server started."}},
        {**base, "type": "user", "uuid": "u2", "parentUuid": "cs", "timestamp": t(8),
         "message": {"role": "user", "content": [{"type": "text", "text": "look at this"}, {"type": "image", "source": {"data": "AAAA"}}]}},
        {**base, "type": "system", "subtype": "compact_boundary", "uuid": "sy", "parentUuid": None, "timestamp": t(9), "content": "x"},
        {"type": "summary", "summary": "Server start", "leafUuid": "u2"},
    ]


def test_claude_pairs_tools_marks_sidechains_and_summaries(run, home, tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", claude_lines())
    result = run("import", path)
    assert result.exit_code == 0, result.stderr
    msgs = messages("api")
    assert brief(msgs) == [
        ("user", "start the server"),
        ("pi", "Starting it."),
        ("tool", 'Bash({"command":"make serve"})'),
        ("echo", "Exit code 2\nno rule"),
        ("user", "sub-agent: list the routes"),
        ("work", "This session is being continued. Summary: server started."),
        ("user", "look at this\n[image]"),
    ]
    assert "SECRET-THOUGHT" not in "".join(p.read_text() for p in (home / "api" / "main").iterdir())
    call, result_ = msgs[2]["meta"], msgs[3]["meta"]
    assert (call["call_id"], call["tool"], call["command"], call["model"]) == ("toolu_1", "Bash", "make serve", "claude-x")
    assert (result_["call_id"], result_["tool"], result_["exit_code"], result_["is_error"]) == ("toolu_1", "Bash", 2, True)
    assert msgs[4]["meta"]["sidechain"] is True and "sidechain" not in msgs[0]["meta"]
    assert msgs[5]["meta"]["derived"] is True
    assert msgs[0]["meta"]["session"] == "cs-1" and msgs[0]["meta"]["entry"] == "u1" and msgs[0]["meta"]["parent"] == "p0"


def test_claude_bash_mode_and_command_output_are_tool_traffic(run, home, tmp_path):
    """``!cat .env`` in Claude Code comes as user lines (``<bash-input>``, ``<bash-stdout>``), a slash command's
    output too (``<local-command-stdout>``): they are tool traffic, private without --include-tools, as pi's
    bash executions are."""
    base = {"sessionId": "cs-2", "cwd": "/home/dev/api", "version": "2.1", "isSidechain": False, "userType": "external"}
    said = [("u1", "what is in the env file?"), ("b1", "<bash-input>cat .env.production</bash-input>"),
            ("b2", "<bash-stdout>STRIPE_SIGNING=whsec_quokka-lantern-9931</bash-stdout><bash-stderr></bash-stderr>"),
            ("c1", "<command-name>/mcp</command-name>\n<command-args></command-args>"),
            ("c2", "<local-command-stdout>Reconnected to tidewave-secret-server.</local-command-stdout>")]
    lines = [{**base, "type": "user", "uuid": uuid, "parentUuid": None, "timestamp": f"2026-02-10T22:57:0{k}.000Z",
              "message": {"role": "user", "content": text}} for k, (uuid, text) in enumerate(said)]
    assert run("import", write_jsonl(tmp_path / "c.jsonl", lines)).exit_code == 0
    msgs = messages("api")
    assert brief(msgs) == [(kind, text) for kind, (_, text) in zip(["user", "tool", "echo", "user", "echo"], said)]
    assert msgs[1]["meta"]["command"] == "cat .env.production" and msgs[2]["meta"]["tool"] == "Bash"
    shown = run("view", "api").stdout
    assert "quokka" not in shown and "tidewave" not in shown and "tool: ran cat (" in shown, shown
    assert "tidewave" not in run("list").stdout


# ---- Codex ---------------------------------------------------------------------------------------------

def codex_lines():
    t = "2026-05-11T08:27:{:02d}.000Z".format
    item = lambda s, payload: {"timestamp": t(s), "type": "response_item", "payload": payload}  # noqa: E731
    return [
        {"timestamp": t(0), "type": "session_meta", "payload": {"id": "cx-1", "timestamp": t(0), "cwd": "/repo/tool", "base_instructions": {"text": "You are Codex"}}},
        {"timestamp": t(1), "type": "turn_context", "payload": {"cwd": "/repo/tool", "model": "gpt-x"}},
        item(1, {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "<permissions instructions>sandbox"}]}),
        item(1, {"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "# AGENTS.md instructions for /repo/tool\n<INSTRUCTIONS>be nice</INSTRUCTIONS>"},
            {"type": "input_text", "text": "<environment_context>\n  <cwd>/repo/tool</cwd>\n</environment_context>"}]}),
        item(2, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the tests"}, {"type": "input_image", "image_url": "data:"}]}),
        {"timestamp": t(2), "type": "event_msg", "payload": {"type": "user_message", "message": "run the tests"}},
        item(3, {"type": "reasoning", "summary": [{"type": "summary_text", "text": "SECRET-THOUGHT"}], "encrypted_content": "zz"}),
        item(4, {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": "pytest -q"}), "call_id": "call_A"}),
        item(5, {"type": "function_call_output", "call_id": "call_A", "output": "Chunk ID: 1\nProcess exited with code 1\nOutput:\n3 failed"}),
        item(6, {"type": "custom_tool_call", "name": "apply_patch", "input": "*** Begin Patch", "call_id": "call_B"}),
        item(7, {"type": "custom_tool_call_output", "call_id": "call_B", "output": json.dumps({"output": "Success.", "metadata": {"exit_code": 0}})}),
        item(8, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Fixed; tests pass."}]}),
        {"timestamp": t(9), "type": "compacted", "payload": {"message": "summary of the turn", "replacement_history": []}},
    ]


def test_codex_pairs_calls_and_skips_boilerplate(run, home, tmp_path):
    path = write_jsonl(tmp_path / "rollout.jsonl", codex_lines())
    result = run("import", path, "--json")
    assert result.exit_code == 0, result.stderr
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert rows[-1] == {"name": "tool", "files": 1, "imported": 7, "present": 0, "malformed": 0, "messages": 7}
    assert rows[0]["format"] == "codex"
    msgs = messages("tool")
    assert brief(msgs) == [
        ("user", "run the tests\n[image]"),
        ("tool", 'exec_command({"cmd": "pytest -q"})'),
        ("echo", "Chunk ID: 1\nProcess exited with code 1\nOutput:\n3 failed"),
        ("tool", "apply_patch(*** Begin Patch)"),
        ("echo", "Success."),
        ("pi", "Fixed; tests pass."),
        ("work", "summary of the turn"),
    ]
    assert "SECRET-THOUGHT" not in "".join(p.read_text() for p in (home / "tool" / "main").iterdir())
    assert msgs[1]["meta"]["command"] == "pytest -q" and msgs[1]["meta"]["model"] == "gpt-x"
    assert [(m["meta"]["call_id"], m["meta"].get("exit_code"), m["meta"]["tool"]) for m in msgs[2:5:2]] == [
        ("call_A", 1, "exec_command"), ("call_B", 0, "apply_patch")]
    assert {m["meta"]["session"] for m in msgs} == {"cx-1"} and msgs[-1]["meta"]["derived"] is True
    assert msgs[0]["date"] == "2026-05-11T08:27:02.000Z"


def _rollout_time(s: int) -> str:
    return f"2026-05-11T08:27:{s:02d}.000Z"


def _item(s: int, payload: dict) -> dict:
    """A Codex rollout's response item at second ``s``."""
    return {"timestamp": _rollout_time(s), "type": "response_item", "payload": payload}


def _started(session: str, cmd: str) -> list[dict]:
    """A rollout whose command ``cmd`` (call ``run1``) still runs in session 7."""
    return [{"timestamp": _rollout_time(0), "type": "session_meta", "payload": {"id": session, "timestamp": _rollout_time(0),
                                                                               "cwd": "/repo"}},
            _item(1, {"type": "function_call", "name": "exec_command", "call_id": "run1", "arguments": json.dumps({"cmd": cmd})}),
            _item(2, {"type": "function_call_output", "call_id": "run1", "output": "Process running with session ID 7\nOutput:\n"})]


def _poll(s: int, call: str, output: str) -> list[dict]:
    """A ``write_stdin`` poll of session 7 at second ``s`` and its result."""
    return [_item(s, {"type": "function_call", "name": "write_stdin", "call_id": call,
                      "arguments": json.dumps({"session_id": 7, "chars": ""})}),
            _item(s + 1, {"type": "function_call_output", "call_id": call, "output": output})]


def test_codex_polls_say_the_program_they_poll_across_a_resumed_import(run, tmp_path):
    """A command still running is polled by ``write_stdin`` on its session: each poll and its result name the
    program polled (``npm``), also when the polls come in a later import of the grown file, so a line holding a
    poll without the command's call can say what ran."""
    path = write_jsonl(tmp_path / "rollout.jsonl", _started("cx-3", "cd /repo && npm test -- --run"))
    assert run("import", path, "-n", "t").exit_code == 0
    write_jsonl(path, [*_poll(3, "p1", "Process running with session ID 7\nOutput:\n"),
                       *_poll(5, "p2", "Process exited with code 1\nOutput:\n1 failed")])
    assert run("import", path, "-n", "t").exit_code == 0
    msgs = messages()
    assert [(m["meta"].get("polls"), m["meta"].get("polls_program")) for m in msgs] == [
        (None, None), (None, None)] + [("run1", "npm")] * 4


def test_a_codex_poll_after_its_command_exited_still_says_the_program(run, tmp_path):
    """A poll whose result says the command exited forgot its program: a later poll of the session said none."""
    path = write_jsonl(tmp_path / "rollout.jsonl", [*_started("cx-4", "sed -n 1,400p big.log"),
                                                    *_poll(3, "p1", "Process exited with code 0\nOutput:\nend"),
                                                    *_poll(5, "p2", "Process exited with code 0\nOutput:\n")])
    assert run("import", path, "-n", "t").exit_code == 0
    assert [(m["meta"].get("polls"), m["meta"].get("polls_program")) for m in messages()] == [
        (None, None), (None, None)] + [("run1", "sed")] * 4


def test_codex_legacy_rollout_without_envelope(run, tmp_path):
    path = write_jsonl(tmp_path / "rollout-old.jsonl", [
        {"id": "old-1", "timestamp": "2025-06-01T10:00:00.000Z", "instructions": None, "git": {}},
        {"record_type": "state"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "<user_instructions>x</user_instructions>"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list files"}]},
        {"type": "function_call", "name": "shell", "arguments": json.dumps({"command": ["ls", "-la"]}), "call_id": "c9"},
        {"type": "function_call_output", "call_id": "c9", "output": json.dumps({"output": "a\nb", "metadata": {"exit_code": 0}})},
    ])
    assert run("import", path, "-n", "t").exit_code == 0
    msgs = messages()
    assert brief(msgs) == [("user", "list files"), ("tool", 'shell({"command": ["ls", "-la"]})'), ("echo", "a\nb")]
    assert msgs[1]["meta"]["command"] == "ls -la" and msgs[2]["meta"]["exit_code"] == 0
    assert {m["date"] for m in msgs} == {"2025-06-01T10:00:00.000Z"} and msgs[0]["meta"]["session"] == "old-1"


# ---- NDJSON, malformed lines, the echo rules ------------------------------------------------------------

@pytest.mark.parametrize("odd", [[], {"a": 1}], ids=["list", "object"])
def test_a_line_whose_type_is_a_list_or_an_object_is_a_line_like_any_other(run, home, tmp_path, odd):
    """A line's "type" (or a Codex item's) that was a list or an object ended the import in a traceback
    (unhashable type: 'list'), whichever format the file was: telling the format looked it up in a set, and so
    did reading a Codex item. Such a line carries no message (or is said skipped); the rest is imported."""
    claude = write_jsonl(tmp_path / "claude.jsonl", [
        {"type": odd, "sessionId": "s1"},
        {"type": "user", "uuid": "u1", "sessionId": "s1", "cwd": "/w", "timestamp": "2026-01-01T10:00:00Z",
         "message": {"role": "user", "content": "hello from claude"}}])
    codex = write_jsonl(tmp_path / "codex.jsonl", [
        {"type": odd, "payload": {}},
        {"timestamp": "2026-01-01T10:00:00Z", "type": "session_meta", "payload": {"id": "c1", "cwd": "/w"}},
        {"timestamp": "2026-01-01T10:00:01Z", "type": "response_item", "payload": {"type": odd, "call_id": "x"}},
        {"timestamp": "2026-01-01T10:00:02Z", "type": "response_item",
         "payload": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hello from codex"}]}}])
    for path, name, text in ((claude, "c", "hello from claude"), (codex, "x", "hello from codex")):
        result = run("import", path, "-n", name)
        assert result.exit_code == 0 and result.exception is None or isinstance(result.exception, SystemExit), result.exception
        assert [m["text"] for m in messages(name)] == [text], result.output
    result = run("import", codex, "-n", "forced", "--format", "claude")
    assert result.exit_code == 2 and "looks like codex" in result.stderr, result.output


@pytest.mark.parametrize("odd", [["c1"], {"id": "c1"}, 7], ids=["list", "object", "number"])
def test_a_tool_call_id_that_is_no_string_is_taken_as_none(run, home, tmp_path, odd):
    """A tool call's id that was a list or an object ended the import in a traceback (unhashable type), and one
    that was a number when the import state was saved (Dict key must be str), after its batch was logged. Such
    an id is no id: the call and its output are imported, unpaired, and so is the rest of the file."""
    t = "2026-01-01T10:00:{:02d}Z".format
    files = {
        "claude": [{"type": "assistant", "uuid": "a1", "sessionId": "s1", "cwd": "/w", "timestamp": t(1), "message": {
                        "role": "assistant", "content": [{"type": "tool_use", "id": odd, "name": "Bash", "input": {"command": "ls"}}]}},
                   {"type": "user", "uuid": "u2", "sessionId": "s1", "cwd": "/w", "timestamp": t(2), "message": {
                        "role": "user", "content": [{"type": "tool_result", "tool_use_id": odd, "content": "a.txt"}]}},
                   {"type": "user", "uuid": "u3", "sessionId": "s1", "cwd": "/w", "timestamp": t(3),
                    "message": {"role": "user", "content": "and the rest"}}],
        "codex": [{"timestamp": t(0), "type": "session_meta", "payload": {"id": "c1", "cwd": "/w"}},
                  {"timestamp": t(1), "type": "response_item", "payload": {"type": "function_call", "name": "shell",
                                                                           "arguments": '{"command": ["ls"]}', "call_id": odd}},
                  {"timestamp": t(2), "type": "response_item", "payload": {"type": "function_call_output", "call_id": odd,
                                                                           "output": "Process running with session ID 5"}},
                  {"timestamp": t(3), "type": "response_item", "payload": {"type": "message", "role": "user",
                                                                           "content": [{"type": "input_text", "text": "and the rest"}]}}],
        "pi": [{"type": "session", "version": 3, "id": "p1", "timestamp": t(0), "cwd": "/w"},
               {"type": "message", "id": "a1", "parentId": None, "timestamp": t(1), "message": {
                   "role": "assistant", "content": [{"type": "toolCall", "id": odd, "name": "bash", "arguments": {"command": "ls"}}]}},
               {"type": "message", "id": "r1", "parentId": "a1", "timestamp": t(2), "message": {
                   "role": "toolResult", "toolCallId": odd, "toolName": "bash", "content": [{"type": "text", "text": "a.txt"}]}},
               {"type": "message", "id": "u3", "parentId": "r1", "timestamp": t(3), "message": {"role": "user", "content": "and the rest"}}],
    }
    for fmt, lines in files.items():
        result = run("import", write_jsonl(tmp_path / f"{fmt}.jsonl", lines), "-n", fmt)
        assert result.exit_code == 0 and "skipped" not in result.stderr, (fmt, result.exception, result.output)
        msgs = messages(fmt)
        assert [m["kind"] for m in msgs] == ["tool", "echo", "user"] and msgs[-1]["text"] == "and the rest", (fmt, msgs)
        assert all("call_id" not in m["meta"] for m in msgs), (fmt, msgs)
        again = run("import", tmp_path / f"{fmt}.jsonl", "-n", fmt)
        assert again.exit_code == 0 and "0 imported, 0 already present" in again.stdout, (fmt, again.output)


def test_ndjson_keeps_meta_and_reports_bad_lines(run, home, tmp_path):
    path = write_jsonl(tmp_path / "export.ndjson", [
        {"kind": "user", "text": "one", "date": "2026-01-01T10:00:00+01:00"},
        "{not json",
        {"kind": "assistant", "text": "two", "date": "2026-01-01T10:00:01+01:00", "meta": {"source": "irc", "entry": "e2"}},
        {"kind": "shout", "text": "bad kind"},
        [1, 2],
        {"kind": "tool_result", "text": "x" * 40_000, "date": "2026-01-01T10:00:02+01:00"},
        {"i": 7, "size": 3, "kind": "user", "text": "three", "date": "2026-01-01T10:00:03+01:00"},
    ])
    result = run("import", path, "-n", "t")
    assert result.exit_code == 0
    assert result.stdout == "t: 4 imported, 0 already present, 3 malformed skipped; 4 messages in all\n"
    where = str(path.resolve())
    assert f"pimem: warning: {where}:2: not valid JSON; skipped" in result.stderr
    assert f"{where}:4: unknown kind 'shout'" in result.stderr
    assert f"{where}:5: expected a JSON object" in result.stderr
    msgs = messages()
    assert [m["kind"] for m in msgs] == ["user", "pi", "echo", "user"]
    assert msgs[0]["date"] == "2026-01-01T10:00:00+01:00"
    assert msgs[1]["meta"] == {"source": "irc", "entry": "e2", "file": where}
    assert msgs[0]["meta"]["source"] == "ndjson" and re.fullmatch("[0-9a-f]{12}", msgs[0]["meta"]["entry"])
    assert len(msgs[2]["text"]) < 30_100 and "characters of tool output cut by pimem" in msgs[2]["text"]


def test_a_turn_of_whitespace_alone_is_imported_as_written(run, tmp_path):
    """A user turn of spaces, a tab or U+3000 alone is what was typed: pi, Claude Code and Codex dropped it and
    NDJSON skipped it as malformed (empty text)."""
    t = "2026-03-02T09:00:{:02d}.000Z".format
    write_jsonl(tmp_path / "pi.jsonl", [
        {"type": "session", "version": 3, "id": "sess-w", "timestamp": t(0), "cwd": "/home/dev/blank"},
        {"type": "message", "id": "u1", "parentId": None, "timestamp": t(1), "message": {"role": "user", "content": "   "}},
        {"type": "message", "id": "a1", "parentId": "u1", "timestamp": t(2),
         "message": {"role": "assistant", "content": [{"type": "text", "text": "you sent blanks"}]}}])
    write_jsonl(tmp_path / "claude.jsonl", [{**line, "message": {"role": "user", "content": [{"type": "text", "text": "\n\t"}]}}
                                            if line.get("uuid") == "u1" else line for line in claude_lines("cs-w")])
    cx = codex_lines()
    cx[4] = {**cx[4], "payload": {**cx[4]["payload"], "content": [{"type": "input_text", "text": "\u3000"}]}}
    write_jsonl(tmp_path / "codex.jsonl", cx)
    write_jsonl(tmp_path / "x.ndjson", [{"kind": "user", "text": "  ", "date": t(3)}, {"kind": "pi", "text": "ok", "date": t(4)}])
    out = [run("import", tmp_path / f, *name) for f, name in (("pi.jsonl", ()), ("claude.jsonl", ()), ("codex.jsonl", ()),
                                                              ("x.ndjson", ("-n", "nd")))]
    assert [(o.exit_code, " 0 malformed skipped" in o.stdout) for o in out] == [(0, True)] * 4, out
    assert brief(messages("blank")) == [("user", "   "), ("pi", "you sent blanks")]
    assert brief(messages("api"))[0] == ("user", "\n\t")
    assert brief(messages("tool"))[0] == ("user", "\u3000")
    assert brief(messages("nd")) == [("user", "  "), ("pi", "ok")]


def test_assistant_whitespace_before_a_tool_call_is_imported_as_its_own_block(run, home, tmp_path):
    """A text block of whitespace alone that a model wrote before a tool call (pi and Claude Code keep it as a
    content block of its own, Codex as an assistant message) was dropped; it is kept as written, in its place,
    and reading the files again (grown, or from the start without the import state) adds nothing twice."""
    from pimem.importers.state import read_state

    t = "2026-03-02T09:00:{:02d}.000Z".format
    pi = [{"type": "session", "version": 3, "id": "sess-p", "timestamp": t(0), "cwd": "/home/dev/pad"},
          {"type": "message", "id": "u1", "parentId": None, "timestamp": t(1), "message": {"role": "user", "content": "list it"}},
          {"type": "message", "id": "a1", "parentId": "u1", "timestamp": t(2), "message": {"role": "assistant", "content": [
              {"type": "thinking", "thinking": "look"}, {"type": "text", "text": "\n\n"},
              {"type": "toolCall", "id": "c1", "name": "ls", "arguments": {}}]}},
          {"type": "message", "id": "r1", "parentId": "a1", "timestamp": t(3),
           "message": {"role": "toolResult", "toolCallId": "c1", "toolName": "ls", "content": "a.py", "isError": False}},
          {"type": "message", "id": "a2", "parentId": "r1", "timestamp": t(4), "message": {"role": "assistant", "content": [
              {"type": "thinking", "thinking": "no text"}, {"type": "text", "text": ""},
              {"type": "toolCall", "id": "c2", "name": "ls", "arguments": {}}]}}]
    claude = claude_lines("cs-p")
    claude[5:6] = [{**claude[5], "uuid": "a2w", "message": {**claude[5]["message"], "content": [{"type": "text", "text": "\n\n"}]}},
                   {**claude[5], "parentUuid": "a2w", "message": {**claude[5]["message"], "content": claude[5]["message"]["content"][1:]}}]
    codex = codex_lines()
    codex[7:7] = [{**codex[11], "payload": {**codex[11]["payload"], "content": [{"type": "output_text", "text": " \n"}]}}]
    files = [(write_jsonl(tmp_path / "pi.jsonl", pi), "pad"), (write_jsonl(tmp_path / "c.jsonl", claude), "api"),
             (write_jsonl(tmp_path / "x.jsonl", codex), "tool")]
    for path, name in files:
        assert run("import", path, "-n", name).exit_code == 0
    assert brief(messages("pad")) == [("user", "list it"), ("pi", "\n\n"), ("tool", "ls({})"), ("echo", "a.py"), ("tool", "ls({})")]
    assert brief(messages("api"))[1:3] == [("pi", "\n\n"), ("tool", 'Bash({"command":"make serve"})')]
    assert brief(messages("tool"))[1:3] == [("pi", " \n"), ("tool", 'exec_command({"cmd": "pytest -q"})')]
    write_jsonl(files[0][0], [{"type": "message", "id": "a3", "parentId": "a2", "timestamp": t(5), "message": {
        "role": "assistant", "content": [{"type": "text", "text": "\t"}, {"type": "toolCall", "id": "c3", "name": "ls", "arguments": {}}]}}])
    grown = run("import", files[0][0], "-n", "pad")
    assert grown.stdout.startswith("pad: 2 imported, 0 already present"), grown.stdout
    assert brief(messages("pad"))[5:] == [("pi", "\t"), ("tool", "ls({})")]
    for path, name in files:
        positions = read_state(home / name)
        assert str(positions).count(f"'offset': {path.stat().st_size}") == 1, positions
        before = snapshot(home / name)
        assert run("import", path, "-n", name).stdout.startswith(f"{name}: 0 imported, 0 already present")
        assert snapshot(home / name) == before
        for derived in ("imports.json", "imports.keys"):
            (home / name / derived).unlink()
        count = len(messages(name))
        again = run("import", path, "-n", name)
        assert again.stdout.startswith(f"{name}: 0 imported, {count} already present"), again.stdout


def test_counts_are_written_with_thousands_separators_as_the_total_is(run, home, tmp_path):
    """1,200 messages read '1,200 imported', as '1,200 messages in all' already did (it read '1200 imported')."""
    path = write_jsonl(tmp_path / "big.ndjson", [
        {"kind": "user", "text": f"note {n}", "date": "2026-01-01T10:00:00+00:00"} for n in range(1200)])
    assert run("import", path, "-n", "t").stdout == "t: 1,200 imported, 0 already present, 0 malformed skipped; 1,200 messages in all\n"


def test_memory_copy_through_ndjson_adds_nothing_twice(run, tmp_path):
    run("import", pi_tree(tmp_path / "s.jsonl"), "-n", "t")
    export = tmp_path / "t.ndjson"
    export.write_text(run("since", "t", "#0", "--include-tools").stdout)
    first = run("import", export, "-n", "copy")
    assert first.stdout.startswith("copy: 7 imported")
    again = run("import", pi_tree(tmp_path / "other-place.jsonl"), "-n", "copy")
    assert again.stdout.startswith("copy: 0 imported, 7 already present")  # same pi entries, whatever the path
    assert off_lineage(messages("copy")) == {3, 4, 5}


def test_a_memory_s_own_export_read_back_into_it_adds_only_what_is_new(run, tmp_path):
    """Appended messages carry no source ids; an export's line names its message by ``i``, and the memory holds
    it there (same kind, text and date)."""
    run("import", pi_tree(tmp_path / "s.jsonl"), "-n", "own")  # imported messages: keyed
    for n, kind in enumerate(("user", "tool", "user", "user")):
        run("append", "own", "-k", kind, "the same words" if n > 1 else f"typed {n}")  # appended: no keys
    export = tmp_path / "own.ndjson"
    export.write_text(run("since", "own", "#0", "--include-tools").stdout)
    assert run("import", export, "-n", "own").stdout == "own: 0 imported, 11 already present, 0 malformed skipped; 11 messages in all\n"
    lines = export.read_text().splitlines(keepends=True)
    edited = json.loads(lines[8])
    edited["text"] = "other words"  # i 8 with another text is another message
    export.write_text("".join(lines[:8] + [json.dumps(edited) + "\n"] + lines[9:]))
    assert run("import", export, "-n", "own").stdout.startswith("own: 1 imported, 10 already present")
    assert [m["text"] for m in messages("own")][7:] == ["typed 0", "typed 1", "the same words", "the same words", "other words"]


def test_exports_that_overlap_or_differ_in_what_they_show_add_nothing_twice(run, tmp_path):
    """An export's line holds its ``i``: that, not the line's place in the file, says which message it is."""
    for n in range(10):
        run("append", "src", "-k", ("user", "tool", "echo", "pi")[n % 4], f"message {n}")
    def export(name, *args):
        path = tmp_path / name
        path.write_text(run("since", "src", *args).stdout)
        return path
    assert run("import", export("talk.ndjson", "#0"), "-n", "bk").stdout.startswith("bk: 5 imported")
    assert run("import", export("all.ndjson", "#0", "--include-tools"), "-n", "bk").stdout.startswith("bk: 5 imported, 5 already present")
    assert run("import", export("late.ndjson", "#5", "--include-tools"), "-n", "bk").stdout.startswith("bk: 0 imported, 5 already present")
    assert [m["text"] for m in messages("bk")] == [f"message {n}" for n in (0, 3, 4, 7, 8, 1, 2, 5, 6, 9)]
    same_text = tmp_path / "typed.ndjson"  # lines without an i (written by hand): their places tell them apart
    same_text.write_text('{"kind":"user","text":"again"}\n{"kind":"user","text":"again"}\n')
    assert run("import", same_text, "-n", "typed").stdout.startswith("typed: 2 imported")


# ---- re-import ----------------------------------------------------------------------------------------

def test_reimport_adds_nothing_twice_even_without_state(run, home, tmp_path):
    path = write_jsonl(tmp_path / "c.jsonl", claude_lines())
    assert run("import", path, "-n", "t").stdout.startswith("t: 7 imported")
    before = snapshot(home / "t")
    again = run("import", path, "-n", "t")
    assert again.stdout == "t: 0 imported, 0 already present, 0 malformed skipped; 7 messages in all (file unchanged since the last import)\n"
    assert snapshot(home / "t") == before
    for derived in ("imports.json", "imports.keys"):
        (home / "t" / derived).unlink()
    before = snapshot(home / "t" / "main")
    rebuilt = run("import", path, "-n", "t")
    assert rebuilt.stdout == "t: 0 imported, 7 already present, 0 malformed skipped; 7 messages in all\n"
    assert snapshot(home / "t" / "main") == before


def test_a_file_named_in_bytes_that_are_not_utf8_is_imported_with_the_others_and_once(sh, home, tmp_path):
    """A session file whose name is not UTF-8 (a directory named in another encoding) under the directory
    imported: its path went into meta.file as the system gave it, which the log cannot hold, so the import
    stopped with exit 2 at that file, every time, and the follower warned every round. Its name is kept
    with \\xff escapes for such bytes, so it imports with the others, and once."""
    folder = tmp_path / "d"
    folder.mkdir()
    odd = os.fsdecode(bytes(folder) + b"/bad\xffname.jsonl")
    pi_tree(Path(odd))
    write_jsonl(folder / "good.jsonl", codex_lines())
    first = sh("import", folder, "-n", "t")
    assert first.returncode == 0, first.stderr
    assert b"bad\\xffname.jsonl: 7 imported" in first.stdout
    files = {m["meta"]["file"] for m in messages()}
    assert files == {f"{folder}/bad\\xffname.jsonl", f"{folder.resolve()}/good.jsonl"}
    again = sh("import", folder, "-n", "t")
    assert again.returncode == 0 and again.stdout.endswith(b"; 14 messages in all\n"), again.stdout
    assert b"file unchanged since the last import" in again.stdout
    from pimem.importers.follow import Follower

    warnings: list[str] = []
    follower = Follower([str(folder)], name="f", on_warning=warnings.append)
    assert follower.poll() == 14 and warnings == []
    follower.close()


def test_a_name_not_utf8_and_a_name_spelling_its_escapes_are_two_files(sh, home, tmp_path):
    """A name holding the bytes ff fe and one spelling them as \\xff\\xfe were both said and kept as
    sess\\xff\\xfe.jsonl: one import-state entry for two files, each read again from line 1 every run. A
    name that is not UTF-8, or that spells such an escape, has its backslashes doubled; others stay as
    they are."""
    from pimem.importers.detect import Source

    folder = tmp_path / "d"
    folder.mkdir()
    raw = Path(os.fsdecode(bytes(folder) + b"/sess\xff\xfe.jsonl"))
    literal = folder / "sess\\xff\\xfe.jsonl"
    pi_tree(raw)
    write_jsonl(literal, codex_lines())
    shown = lambda path: Source(str(path), "pi", 0, None, None).shown  # noqa: E731
    assert shown(raw) == f"{folder}/sess\\xff\\xfe.jsonl" and shown(literal) == f"{folder}/sess\\\\xff\\\\xfe.jsonl"
    assert shown(folder / "a\\b.jsonl") == f"{folder}/a\\b.jsonl" and shown(folder / "a\\x41.jsonl") == f"{folder}/a\\x41.jsonl"
    first = sh("import", folder, "-n", "t")
    assert first.returncode == 0, first.stderr
    again = sh("import", folder, "-n", "t")
    assert again.returncode == 0 and again.stdout.count(b"file unchanged since the last import") == 2, again.stdout
    assert len({m["meta"]["file"] for m in messages()}) == 2


def test_grown_file_adds_only_the_new_lines(run, home, tmp_path):
    lines = codex_lines()
    path = write_jsonl(tmp_path / "rollout.jsonl", lines[:9])
    with open(path, "a") as f:
        f.write(json.dumps(lines[9])[:30])  # the agent is still writing this line
    first = run("import", path, "-n", "t")
    assert first.stdout.startswith("t: 3 imported, 0 already present, 0 malformed")  # being written: not malformed
    assert first.stderr == f"{path.resolve()}:10: last line still being written; left for the next import\n"
    # someone else logs in between: the import state catches up from the log
    Memory.at("t").append([{"kind": "note", "text": "typed meanwhile"}])
    with open(path, "a") as f:
        f.write(json.dumps(lines[9])[30:] + "\n")
    write_jsonl(path, lines[10:])
    second = run("import", path, "-n", "t", "--json")
    report = json.loads(second.stdout.splitlines()[0])
    assert (report["imported"], report["present"], report["malformed"], report["from_line"]) == (4, 0, 0, 10)
    kinds = [m["kind"] for m in messages()]
    assert kinds == ["user", "tool", "echo", "note", "tool", "echo", "pi", "work"]
    assert messages()[-3]["meta"]["tool"] == "apply_patch"  # the call's name carried over between imports


def test_a_message_over_the_cap_is_logged_once_the_cap_is_raised_and_the_file_imported_again(run, home, tmp_path):
    """A prompt over ``max_text_bytes`` is skipped with a warning that says how to log it. It said 'split it
    into several messages', which an import cannot do, and raising the cap did not help: the file counted as
    read, so the next import took it for unchanged and the prompt never reached the memory."""
    from pimem import config

    lines = claude_lines()
    lines[2]["message"]["content"] = "deploy plan: " + "step " * 600  # 3,013 bytes
    path = write_jsonl(tmp_path / "session.jsonl", lines)
    config.save_home(None, {"max_text_bytes": 2000})
    first = run("import", path, "-n", "t")
    assert first.exit_code == 0 and "1 malformed skipped" in first.stdout
    assert first.stderr == (f"pimem: warning: {path.resolve()}:3: text of 3013 bytes is over the cap of 2000 bytes (raise max_text_bytes "
                            "in config.json and import the file again to log it); skipped\n")
    assert "unchanged" in run("import", path, "-n", "t").stdout  # (the same cap: nothing to read again)
    before = brief(messages())
    config.save_home(None, {"max_text_bytes": 10_000})
    again = run("import", path, "-n", "t")
    assert again.exit_code == 0 and again.stdout.startswith(f"t: 1 imported, {len(before)} already present, 0 malformed")
    after = brief(messages())
    assert after[:-1] == before and after[-1] == ("user", "deploy plan: " + "step " * 600)
    assert "unchanged" in run("import", path, "-n", "t").stdout


def test_a_line_over_the_cap_still_being_written_is_said_once_it_is_whole(run, tmp_path, monkeypatch):
    """It was said twice, the first time with the size written so far, and its rest was then a line of its
    own ("not valid JSON"), every later line's number one too high."""
    from pimem.importers import job

    monkeypatch.setattr(job, "line_cap", lambda cap: 8192)
    lines = [json.dumps({"kind": "user", "text": text}) + "\n" for text in ("before", "z" * 20_000, "after")]
    path = tmp_path / "s.ndjson"
    path.write_text(lines[0] + lines[1][:12_000])
    first = run("import", path, "-n", "t", "--format", "ndjson")
    assert first.exit_code == 0 and first.stdout.startswith("t: 1 imported, 0 already present, 0 malformed")
    assert first.stderr == f"{path}:2: last line still being written; left for the next import\n"
    path.write_text("".join(lines))
    second = run("import", path, "-n", "t", "--format", "ndjson")
    assert second.stdout == "t: 1 imported, 0 already present, 1 malformed skipped; 2 messages in all (read on from line 2)\n"
    assert second.stderr == (f"pimem: warning: {path}:2: a line of {len(lines[1]):,} bytes is over the cap of 8,192 for one line "
                             "(raise max_text_bytes in config.json and import the file again to log it); skipped\n")
    with open(path, "a") as f:
        f.write(lines[0][:10] + "\n")
    assert f"{path}:4: not valid JSON" in run("import", path, "-n", "t", "--format", "ndjson").stderr


@pytest.mark.parametrize("late", ["\n", "  \n"])
def test_a_last_line_whose_newline_comes_late_moves_no_later_line_number(run, tmp_path, late):
    """A whole last line without its newline was read and its position saved after it; its newline, added
    later, was then counted as a line of its own, so every later warning named the line after the true one."""
    path = tmp_path / "g.ndjson"
    path.write_text('{"kind":"user","text":"x1"}\n{"kind":"user","text":"x2"}')
    assert run("import", path, "-n", "g").stdout.startswith("g: 2 imported")
    with open(path, "a") as f:
        f.write(late)
    assert run("import", path, "-n", "g").stdout == "g: 0 imported, 0 already present, 0 malformed skipped; 2 messages in all (read on from line 2)\n"
    with open(path, "a") as f:
        f.write('garbage\n{"kind":"user","text":"x4"}\n')
    third = run("import", path, "-n", "g")
    assert third.stderr == f"pimem: warning: {path}:3: not valid JSON; skipped\n"
    assert third.stdout == "g: 1 imported, 0 already present, 1 malformed skipped; 3 messages in all (read on from line 3)\n"


def test_a_last_line_without_its_newline_imported_again_unchanged_keeps_its_number(run, tmp_path):
    """Each import of a file whose last line still lacks its newline read nothing new: it recorded the file's
    line count one less each time, so the warnings named ever earlier lines once the file grew."""
    path = tmp_path / "g.ndjson"
    path.write_text('{"kind":"user","text":"x1"}\n{"kind":"user","text":"x2"}')
    for _ in range(3):
        run("import", path, "-n", "g")
    with open(path, "a") as f:
        f.write('\ngarbage\n{"kind":"user","text":"x4"}\n')
    assert run("import", path, "-n", "g").stderr == f"pimem: warning: {path}:3: not valid JSON; skipped\n"


def test_grown_pi_tree_links_across_imports(run, tmp_path):
    whole = pi_tree(tmp_path / "whole.jsonl").read_text().splitlines(keepends=True)
    path = tmp_path / "s.jsonl"
    path.write_text("".join(whole[:5]))  # ends with the model change, which gives no message
    assert run("import", path, "-n", "t").stdout.startswith("t: 4 imported")
    path.write_text("".join(whole))
    assert run("import", path, "-n", "t").stdout.startswith("t: 3 imported, 0 already present")
    msgs = messages()
    assert msgs[4]["meta"]["entry"] == "b1" and msgs[4]["meta"]["parent"] == "r1"
    assert off_lineage(msgs) == {3, 4, 5}


def test_rewritten_file_is_read_again_from_the_start(run, tmp_path):
    path = write_jsonl(tmp_path / "s.jsonl", [{"kind": "user", "text": "a"}, {"kind": "user", "text": "b"}])
    run("import", path, "-n", "t")
    path.write_text("")
    write_jsonl(path, [{"kind": "user", "text": "A"}, {"kind": "user", "text": "b"}, {"kind": "user", "text": "c"}])
    result = run("import", path, "-n", "t", "--json")
    report = json.loads(result.stdout.splitlines()[0])
    assert (report["from_line"], report["imported"], report["present"]) == (1, 2, 1)
    assert [m["text"] for m in messages()] == ["a", "b", "A", "c"]


def pi_v1_lines():
    t = "2025-11-20T23:33:{:02d}.000Z".format
    say = lambda s, role, text: {"type": "message", "timestamp": t(s), "message": {"role": role, "content": [{"type": "text", "text": text}]}}  # noqa: E731
    return [{"type": "session", "id": "old", "timestamp": t(0), "cwd": "/w/legacy"}] + [
        say(n, ("user", "assistant")[n % 2], f"line {n}") for n in range(1, 12)]


def ndjson_lines():
    return [{"kind": ("user", "pi")[n % 2], "text": f"line {n}"} for n in range(12)]


@pytest.mark.parametrize("lines", [codex_lines, pi_v1_lines, ndjson_lines], ids=["codex", "pi-v1", "ndjson"])
def test_a_line_deleted_or_inserted_leaves_the_other_lines_present(run, tmp_path, lines):
    """Lines without ids are keyed by their bytes, not their place: an edit elsewhere in the file moves no key."""
    lines = lines()
    path = write_jsonl(tmp_path / "s.jsonl", lines)
    first = json.loads(run("import", path, "-n", "t", "--json").stdout.splitlines()[-1])["imported"]
    path.unlink()  # as sed -i does: a new file at the path
    write_jsonl(path, lines[:4] + lines[5:])  # (line 5 is a user's message in each)
    assert run("import", path, "-n", "t").stdout == f"t: 0 imported, {first - 1} already present, 0 malformed skipped; {first} messages in all\n"
    typed = json.loads(json.dumps(lines[4]).replace("run the tests", "typed in between").replace("line 4", "typed in between"))
    path.unlink()
    write_jsonl(path, lines[:2] + [typed] + lines[2:])
    assert run("import", path, "-n", "t").stdout == f"t: 1 imported, {first} already present, 0 malformed skipped; {first + 1} messages in all\n"
    assert messages()[-1]["text"].startswith("typed in between")


def test_the_same_line_twice_is_two_messages_also_across_imports(run, home, tmp_path):
    same = {"kind": "user", "text": "yes"}
    path = write_jsonl(tmp_path / "s.ndjson", [{"kind": "pi", "text": "sure?"}, same, {"kind": "pi", "text": "really?"}, same])
    assert run("import", path, "-n", "t").stdout.startswith("t: 4 imported")
    write_jsonl(path, [{"kind": "pi", "text": "once more?"}, same])  # grown: read on from line 5
    grown = json.loads(run("import", path, "-n", "t", "--json").stdout.splitlines()[0])
    assert (grown["from_line"], grown["imported"]) == (5, 2)
    assert [m["text"] for m in messages()] == ["sure?", "yes", "really?", "yes", "once more?", "yes"]
    assert [m["meta"]["entry"].partition(".")[2] for m in messages() if m["text"] == "yes"] == ["", "1", "2"]
    text = path.read_text().splitlines(keepends=True)
    path.unlink()
    path.write_text("".join(text[1:]))  # the first line deleted: every "yes" is still the one it was
    assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported, 5 already present")
    for derived in ("imports.json", "imports.keys"):
        (home / "t" / derived).unlink()
    assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported, 5 already present")
    path.write_text("".join(text[1:4]))  # two of the three gone: nothing new, nothing lost
    assert run("import", path, "-n", "t").stdout == "t: 0 imported, 3 already present, 0 malformed skipped; 6 messages in all\n"


def claude_uuids(lines, ids: dict) -> list[dict]:
    """``lines`` with their ``uuid`` and ``parentUuid`` made UUIDs, as Claude Code writes them (the same id
    the same UUID wherever ``ids`` is shared)."""
    return [{**line, **{field: ids.setdefault(line[field], f"00000000-0000-4000-8000-{len(ids):012d}")
                        for field in ("uuid", "parentUuid") if line.get(field)}} for line in lines]


def test_a_resumed_claude_code_session_s_copy_of_earlier_entries_is_not_logged_again(run, home, tmp_path):
    """``claude --resume`` writes a new session file that repeats the earlier entries with their uuids: they
    were logged again, the session being part of the key; in a memory imported before too."""
    from pimem import hashes
    from pimem.importers.state import KEYS, STATE

    ids = {}
    first = write_jsonl(tmp_path / "a.jsonl", claude_uuids(claude_lines("s-1"), ids))
    resumed = write_jsonl(tmp_path / "b.jsonl", claude_uuids(claude_lines("s-2") + [
        {"sessionId": "s-2", "cwd": "/home/dev/api", "type": "user", "uuid": "u3", "parentUuid": "u2",
         "timestamp": "2026-02-10T23:00:00.000Z", "message": {"role": "user", "content": "and now?"}}], ids))
    assert run("import", first, "-n", "t").stdout.startswith("t: 7 imported")
    again = run("import", resumed, "-n", "t")
    assert again.stdout == "t: 1 imported, 7 already present, 0 malformed skipped; 8 messages in all\n", again.stdout
    assert messages()[-1]["meta"]["session"] == "s-2"
    old = {}  # what the keys were (each with its session), as an earlier pimem wrote them
    for msg in messages()[:7]:
        meta = msg["meta"]
        ident = json.dumps([meta["source"], meta["session"], meta["entry"], msg["kind"], meta.get("call_id")], separators=(",", ":"))
        old[msg["i"]] = hashes.blake2b(ident.encode(), digest_size=16).digest()
    state = json.loads((home / "t" / STATE).read_text())
    (home / "t" / KEYS).write_bytes(b"".join(old.values()))
    (home / "t" / STATE).write_text(json.dumps({**state, "version": 2, "covered": 7, "keys": 7, "files": {}}))
    Memory.open("t").append([{"kind": "user", "text": "typed", "date": "2026-02-11T00:00:00Z"}])
    assert run("import", resumed, "-n", "t").stdout.startswith("t: 0 imported, 8 already present")


def test_a_claude_code_uuid_written_again_with_other_content_is_logged_as_an_entry_of_its_own(run, home, tmp_path):
    """An entry whose uuid the memory held was taken for the message it held, whatever its content: a
    resumed session's entry written again with other text never reached the log. It is logged with the
    entry ``UUID.HASH`` (its content's hash), said with its line, as pi's repeated ids are; the same
    content again, in any session or after the state is rebuilt, adds nothing."""
    ids = {}
    first = write_jsonl(tmp_path / "a.jsonl", claude_uuids(claude_lines("s-1"), ids))
    changed = [dict(line, message={**line["message"], "content": "start the server on port 8080"}) if line.get("uuid") == "u1"
               else line for line in claude_lines("s-2")]
    resumed = write_jsonl(tmp_path / "b.jsonl", claude_uuids(changed, ids))
    again = write_jsonl(tmp_path / "c.jsonl", claude_uuids([dict(line, sessionId="s-3", timestamp="2026-02-11T08:00:00.000Z")
                                                              if "sessionId" in line else line for line in changed], ids))
    assert run("import", first, "-n", "t").stdout.startswith("t: 7 imported")
    result = run("import", resumed, "-n", "t")
    assert result.stdout == "t: 1 imported, 6 already present, 0 malformed skipped; 8 messages in all\n"
    entry = messages()[-1]["meta"]["entry"]
    uuid, _, digest = entry.partition(".")
    assert uuid == ids["u1"] and re.fullmatch(r"[0-9a-f]{12}", digest)
    assert result.stderr == f"pimem: warning: {resumed}:3: entry id {uuid!r} was imported before with other content; logged as entry {entry}\n"
    assert [(m["text"], m["meta"]["session"]) for m in messages() if m["meta"]["entry"].startswith(uuid)] == [
        ("start the server", "s-1"), ("start the server on port 8080", "s-2")]
    assert run("import", again, "-n", "t").stdout == "t: 0 imported, 7 already present, 0 malformed skipped; 8 messages in all\n"
    for derived in ("imports.json", "imports.keys"):
        (home / "t" / derived).unlink()
    for path in (resumed, first, again):
        rerun = run("import", path, "-n", "t")
        assert rerun.stdout == "t: 0 imported, 7 already present, 0 malformed skipped; 8 messages in all\n" and rerun.stderr == ""


def test_a_claude_code_uuid_repeated_with_other_content_in_a_growing_file_is_logged(run, tmp_path):
    """The same, for a line repeating an earlier line's uuid in the same file: in one import, and in a
    line added after the file was imported (read on from there); the same line again is one message."""
    ids = {}
    lines = claude_uuids(claude_lines("s-1"), ids)
    one = {**lines[2], "message": {"role": "user", "content": "stop the server"}}
    path = write_jsonl(tmp_path / "a.jsonl", lines + [one, one])
    first = run("import", path, "-n", "t")
    assert first.stdout == "t: 8 imported, 1 already present, 0 malformed skipped; 8 messages in all\n"
    assert first.stderr.startswith(f"pimem: warning: {path}:13: entry id {ids['u1']!r} was imported before with other content")
    two = {**lines[5], "message": {**lines[5]["message"], "content": [{"type": "text", "text": "Starting it again."}]}}
    write_jsonl(path, [two, one])
    grown = run("import", path, "-n", "t")
    assert grown.stdout.startswith("t: 1 imported, 1 already present, 0 malformed skipped; 9 messages in all (read on from line 15)")
    assert grown.stderr.startswith(f"pimem: warning: {path}:15: entry id {ids['a2']!r} was imported before with other content")
    assert brief(messages()[-2:]) == [("user", "stop the server"), ("pi", "Starting it again.")]
    assert messages()[-1]["meta"]["entry"].startswith(ids["a2"] + ".")


def test_a_memory_imported_before_content_was_kept_with_the_keys_takes_nothing_twice(run, home, tmp_path):
    """Keys written by the pimem before (version 3: a Claude Code entry's by its uuid alone, nothing of its
    content) are rebuilt from the log once, so a resumed session's copy of the entries is not taken for
    entries changed, and a changed one is still found."""
    from pimem.importers.state import KEYS, STATE, VERSION, key_of

    ids = {}
    first = write_jsonl(tmp_path / "a.jsonl", claude_uuids(claude_lines("s-1"), ids))
    resumed = write_jsonl(tmp_path / "b.jsonl", claude_uuids(claude_lines("s-2"), ids))
    assert run("import", first, "-n", "t").stdout.startswith("t: 7 imported")
    state = json.loads((home / "t" / STATE).read_text())
    (home / "t" / KEYS).write_bytes(b"".join(key_of(msg) for msg in messages()))
    (home / "t" / STATE).write_text(json.dumps({**state, "version": 3, "keys": 7}))
    assert run("import", resumed, "-n", "t").stdout == "t: 0 imported, 7 already present, 0 malformed skipped; 7 messages in all\n"
    assert json.loads((home / "t" / STATE).read_text())["version"] == VERSION
    write_jsonl(resumed, [{**claude_uuids(claude_lines("s-2"), ids)[2], "message": {"role": "user", "content": "stop it"}}])
    assert run("import", resumed, "-n", "t").stdout.startswith("t: 1 imported, 0 already present")


def pi_fork(parent: Path, path: Path, entries: int, session: str, own=(), cwd="/home/dev/shop") -> Path:
    """A session pi started from ``parent`` (/fork, --fork, a move to another directory): its own header
    naming the parent's file, the parent's first ``entries`` entries copied as they were (ids, parents, times),
    then ``own``."""
    lines = parent.read_text().splitlines()[1 : entries + 1]
    header = {"type": "session", "version": 3, "id": session, "timestamp": "2026-03-02T10:00:00.000Z", "cwd": cwd,
              "parentSession": str(parent)}
    return write_jsonl(path, [header, *lines, *own])


def test_a_pi_session_s_copy_of_another_session_s_entries_is_not_logged_again(run, home, tmp_path):
    """pi's /fork and --fork write a new session file (a new session id) that copies the entries they start
    from with their ids, parents and times: they were logged again under the new session. A copy adds
    nothing, in any order of import and after the state is rebuilt; the new session's own messages are
    logged, one saying what the parent said too among them."""
    parent = pi_tree(tmp_path / "a.jsonl")
    own = [{"type": "message", "id": "f1", "parentId": "r1", "timestamp": "2026-03-02T10:00:05.000Z",
            "message": {"role": "user", "content": "Fix token refresh in src/auth/session.ts"}},
           {"type": "message", "id": "f2", "parentId": "f1", "timestamp": "2026-03-02T10:00:09.000Z",
            "message": {"role": "assistant", "content": [{"type": "text", "text": "Reading the file."}]}}]
    fork = pi_fork(parent, tmp_path / "b.jsonl", 3, "sess-2", own)
    moved = pi_fork(fork, tmp_path / "c.jsonl", 5, "sess-3", cwd="/home/dev/elsewhere")
    assert run("import", parent, "-n", "t").stdout.startswith("t: 7 imported")
    assert run("import", fork, "-n", "t").stdout == "t: 2 imported, 4 already present, 0 malformed skipped; 9 messages in all\n"
    assert [(m["text"], m["meta"]["session"]) for m in messages()[-2:]] == [
        ("Fix token refresh in src/auth/session.ts", "sess-2"), ("Reading the file.", "sess-2")]
    assert run("import", moved, "-n", "t").stdout == "t: 0 imported, 6 already present, 0 malformed skipped; 9 messages in all\n"
    for derived in ("imports.json", "imports.keys"):
        (home / "t" / derived).unlink()
    for path in (moved, fork, parent):
        assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported")
    assert run("import", moved, "-n", "u").stdout.startswith("u: 6 imported")
    assert run("import", parent, "-n", "u").stdout.startswith("u: 3 imported, 4 already present")
    assert run("import", fork, "-n", "u").stdout.startswith("u: 0 imported, 6 already present")
    assert sorted(brief(messages("u"))) == sorted(brief(messages()))


def test_a_pi_id_another_session_gave_the_same_words_at_another_time_is_its_own(run, tmp_path):
    """pi draws an entry's id from 8 hex digits, so two sessions may share one: the same id and words at
    another time are no copy, and are logged."""
    for session, day in (("one", 3), ("two", 4)):
        path = write_jsonl(tmp_path / f"{session}.jsonl", [
            {"type": "session", "version": 3, "id": session, "timestamp": f"2026-03-0{day}T09:00:00.000Z", "cwd": "/w"},
            {"type": "message", "id": "7e21d05f", "parentId": None, "timestamp": f"2026-03-0{day}T09:00:01.000Z",
             "message": {"role": "user", "content": "yes"}}])
        assert run("import", path, "-n", "t").stdout.startswith("t: 1 imported, 0 already present")


def test_a_pi_entry_without_a_time_is_known_in_a_fork_by_its_parent(run, tmp_path):
    """An entry that gives no time takes the file's last date for its message: in the parent the date of an
    entry on a branch the user left, in a fork (which copies the active branch alone) an earlier one, so the
    copy was logged again. Its content key has its parent for the date the importer gave it; the same words
    under another parent, or with another id, are their own."""
    header = {"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-03-02T09:00:00.000Z", "cwd": "/w"}
    root = {"type": "message", "id": "1c9e4b7a", "parentId": None, "timestamp": "2026-03-02T09:00:05.000Z",
            "message": {"role": "user", "content": "Fix token refresh"}}
    left = {"type": "message", "id": "7e21d05f", "parentId": "1c9e4b7a", "timestamp": "2026-03-02T09:00:09.000Z",
            "message": {"role": "user", "content": "Try a lock"}}
    said = {"type": "message", "id": "a3f0c2d1", "parentId": "1c9e4b7a", "message": {"role": "user", "content": "yes"}}
    again = {"type": "message", "id": "b5e3d4c2", "parentId": "a3f0c2d1", "message": {"role": "user", "content": "yes"}}
    parent = write_jsonl(tmp_path / "a.jsonl", [header, root, left, said, again])
    own = [{**said, "parentId": "b5e3d4c2"}, {**again, "id": "c6f4e5d3"}]
    fork = write_jsonl(tmp_path / "b.jsonl", [{**header, "id": "sess-2", "timestamp": "2026-03-02T10:00:00.000Z",
                                               "parentSession": str(parent)}, root, said, again, *own])
    assert run("import", parent, "-n", "t").stdout.startswith("t: 4 imported")
    assert run("import", fork, "-n", "t").stdout.startswith("t: 2 imported, 3 already present")
    assert [(m["text"], m["meta"]["session"]) for m in messages()[4:]] == [("yes", "sess-2"), ("yes", "sess-2")]


def codex_turn(turn: int, s: int, said: str, answer: str, call: str) -> list[dict]:
    """One turn of a Codex rollout as Codex writes them now: its start and context naming the turn (a
    UUID), the user's words, a remark, a command and its output, the same remark again and the answer."""
    turn_id = f"019e1625-d031-75e3-a85f-f143e43c0d{turn:02d}"
    return [
        {"timestamp": _rollout_time(s), "type": "event_msg", "payload": {"type": "task_started", "turn_id": turn_id}},
        {"timestamp": _rollout_time(s), "type": "turn_context", "payload": {"turn_id": turn_id, "cwd": "/repo/tool", "model": "gpt-x"}},
        _item(s, {"type": "message", "role": "user", "content": [{"type": "input_text", "text": said}]}),
        {"timestamp": _rollout_time(s), "type": "event_msg", "payload": {"type": "user_message", "message": said}},
        _item(s + 1, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]}),
        _item(s + 1, {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": "pytest -q"}), "call_id": call}),
        _item(s + 2, {"type": "function_call_output", "call_id": call, "output": "Process exited with code 0\nOutput:\n3 passed"}),
        _item(s + 3, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]}),
        _item(s + 3, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": answer}]}),
        {"timestamp": _rollout_time(s + 3), "type": "event_msg", "payload": {"type": "task_complete", "turn_id": turn_id}},
    ]


def codex_meta(session: str, s: int = 0, **fields) -> dict:
    return {"timestamp": _rollout_time(s), "type": "session_meta",
            "payload": {"id": session, "timestamp": _rollout_time(s), "cwd": "/repo/tool", **fields}}


def codex_fork(parent: list[dict], session: str, lines: int, own=()) -> list[dict]:
    """A rollout ``codex fork`` (or going back to an earlier message) writes: its own session_meta naming
    the parent, then the parent's first ``lines`` lines written again as they were, each stamped with the
    time of the fork, then its own turns."""
    stamped = [{**line, "timestamp": _rollout_time(30)} for line in parent[:lines]]
    return [codex_meta(session, 30, forked_from_id=parent[0]["payload"]["id"]), *stamped, *own]


def test_a_codex_fork_s_copy_of_the_parent_rollout_is_not_logged_again(run, home, tmp_path):
    """A forked rollout holds the parent's lines again, each with the fork's time: they were logged again.
    A copy adds nothing (a message is known by its turn, what it says, and how often its turn said it before,
    a call and its output by their call id), after the state is rebuilt too; what the fork's own turns say
    is logged, the parent's words said again among them, and a remark said twice in a turn is two messages."""
    parent = [codex_meta("cx-P"), *codex_turn(1, 1, "run the tests", "Fixed; tests pass.", "call_A"),
              *codex_turn(2, 10, "continue", "All done.", "call_B")]
    first = write_jsonl(tmp_path / "rollout-P.jsonl", parent)
    forked = codex_fork(parent, "cx-F", 13, codex_turn(3, 40, "continue", "Fixed; tests pass.", "call_C"))
    fork = write_jsonl(tmp_path / "rollout-F.jsonl", forked)
    assert run("import", first, "-n", "t").stdout.startswith("t: 12 imported")
    assert run("import", fork, "-n", "t").stdout == "t: 6 imported, 6 already present, 0 malformed skipped; 18 messages in all\n"
    assert brief(messages()[-6:]) == [("user", "continue"), ("pi", "Checking."), ("tool", 'exec_command({"cmd": "pytest -q"})'),
                                      ("echo", "Process exited with code 0\nOutput:\n3 passed"), ("pi", "Checking."),
                                      ("pi", "Fixed; tests pass.")]
    again = write_jsonl(tmp_path / "rollout-G.jsonl", codex_fork(forked, "cx-G", len(forked)))
    assert run("import", again, "-n", "t").stdout.startswith("t: 0 imported, 12 already present")
    for derived in ("imports.json", "imports.keys"):
        (home / "t" / derived).unlink()
    for path in (again, fork, first):
        assert run("import", path, "-n", "t").stdout.startswith("t: 0 imported")
    assert run("import", fork, "-n", "u").stdout.startswith("u: 12 imported")
    assert run("import", first, "-n", "u").stdout.startswith("u: 6 imported, 6 already present")
    assert sorted(brief(messages("u"))) == sorted(brief(messages()))


def test_a_codex_fork_s_own_messages_carry_its_session_and_stay_on_the_lineage(run, tmp_path):
    """A forked rollout names two sessions: its own first, then the parent's in the lines it copies. The fork
    is the first (as Codex reads it): its own messages were labelled with the parent's session. The
    copy, imported first, is the fork's too (as a pi fork's is), and ``--scope lineage`` keeps every one."""
    parent = [codex_meta("cx-P"), *codex_turn(1, 1, "run the tests", "Fixed; tests pass.", "call_A")]
    forked = codex_fork(parent, "cx-F", len(parent), codex_turn(3, 40, "carry on", "Merged.", "call_C"))
    run("import", write_jsonl(tmp_path / "rollout-P.jsonl", parent), write_jsonl(tmp_path / "rollout-F.jsonl", forked), "-n", "t")
    assert [(m["text"], m["meta"]["session"]) for m in messages()[6:]] == [
        ("carry on", "cx-F"), ("Checking.", "cx-F"), ('exec_command({"cmd": "pytest -q"})', "cx-F"),
        ("Process exited with code 0\nOutput:\n3 passed", "cx-F"), ("Checking.", "cx-F"), ("Merged.", "cx-F")]
    assert {m["meta"]["session"] for m in messages()[:6]} == {"cx-P"}
    found = run("recall", "t", "Fixed", "Merged", "--scope", "lineage", "--json").stdout
    assert "Fixed; tests pass." in found and "Merged." in found
    run("import", write_jsonl(tmp_path / "rollout-G.jsonl", codex_fork(forked, "cx-G", len(forked))), "-n", "u")
    assert {m["meta"]["session"] for m in messages("u")} == {"cx-G"}


def test_a_codex_turn_saying_more_than_its_counter_keeps_loses_nothing(run, tmp_path, monkeypatch):
    """A turn's repeat counter keeps a bounded number of texts: one said again after the counter let it go
    was counted as said the first time, so its content key was the first time's and it was dropped as a
    copy. Once the counter is full, the turn's later words are known by their line alone: all logged, and a
    fork's copy adds nothing up to there (what comes after is logged again, never lost)."""
    from pimem.importers import codex

    monkeypatch.setattr(codex, "SAID_CAP", 3)
    said = ["Checking.", "one", "two", "three", "four", "Checking.", "one"]
    lines = [codex_meta("cx-P"), *codex_turn(1, 1, "go", "done", "call_A")[:3]]
    lines += [_item(5, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]}) for t in said]
    path = write_jsonl(tmp_path / "rollout-P.jsonl", lines)
    assert run("import", path, "-n", "t").stdout.startswith("t: 8 imported, 0 already present")
    assert [m["text"] for m in messages()] == ["go", *said]
    fork = write_jsonl(tmp_path / "rollout-F.jsonl", codex_fork(lines, "cx-F", 6))
    assert run("import", fork, "-n", "t").stdout.startswith("t: 0 imported, 3 already present")


@pytest.mark.parametrize("saved_by", ["this pimem", "the pimem before"])
def test_a_long_codex_turn_s_saved_state_stays_small_and_a_read_on_counts_its_repeats(sh, home, tmp_path, saved_by):
    """A turn's repeat counter was saved whole in ``imports.json`` (a digest and a count for each text it said,
    up to 10,000: ~170 KB, written again at each flush of ``import --follow``). The state now holds where the
    turn started and a digest of its counts; a later import (another process) reads the turn's lines again
    for them, so the words said again after it are counted on, none dropped as a copy, and a fork's copy adds
    nothing. A state the pimem before saved (its counts whole) is read on as it was."""
    from pimem import hashes
    from pimem.importers.state import STATE

    said = [f"remark {k}: the staging database is on port {5000 + k}" for k in range(3000)]
    lines = [codex_meta("cx-P"), *codex_turn(1, 1, "go", "done", "call_A")[:3]]
    lines += [_item(5, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]}) for t in said]
    path = write_jsonl(tmp_path / "rollout-P.jsonl", lines)
    assert sh("import", path, "-n", "t").returncode == 0
    state_file = home / "t" / STATE
    assert state_file.stat().st_size < 4_000, state_file.stat().st_size  # (it was 51 KB)
    if saved_by == "the pimem before":  # (its counts whole, as the pimem before saved them)
        data = json.loads(state_file.read_text())
        kept = data["files"][str(path)]["state"]
        for key in [key for key in kept if key.startswith(("said", "turn_"))]:
            del kept[key]
        kept["said"] = {hashes.blake2b(json.dumps([kind, t], separators=(",", ":")).encode(), digest_size=6).hexdigest(): 1
                        for kind, t in [("user", "go"), *(("pi", t) for t in said)]}
        state_file.write_text(json.dumps(data))
    again = [said[5], "a new remark", said[5], said[2999]]
    lines += [_item(6, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]}) for t in again]
    write_jsonl(path, lines[-4:])
    out = sh("import", path, "-n", "t")
    assert out.stdout.startswith(b"t: 4 imported, 0 already present"), out.stdout + out.stderr
    assert [(m["text"], m["meta"].get("repeat")) for m in messages()[-4:]] == [
        (said[5], 1), ("a new remark", None), (said[5], 2), (said[2999], 1)]
    fork = write_jsonl(tmp_path / "rollout-F.jsonl", codex_fork(lines, "cx-F", len(lines)))
    assert sh("import", fork, "-n", "t").stdout.startswith(b"t: 0 imported, 3,005 already present")


def test_a_codex_turn_read_on_takes_its_counts_from_the_last_read_or_else_loses_nothing(run, sh, home, tmp_path, monkeypatch):
    """A read on from an earlier one in the same process (``import --follow``'s rounds) takes the turn's counts
    from it, reading no line again; one whose saved digest of them the turn's lines do not give again (the state
    edited, say) knows the turn's later texts by their line alone: all logged, none dropped as a copy."""
    from pimem.importers import codex
    from pimem.importers.state import STATE, read_state

    said = ["one", "two", "three"]
    lines = [codex_meta("cx-P"), *codex_turn(1, 1, "go", "done", "call_A")[:3]]
    lines += [_item(5, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]}) for t in said]
    path = write_jsonl(tmp_path / "rollout-P.jsonl", lines)
    assert run("import", path, "-n", "t").exit_code == 0
    write_jsonl(path, [_item(6, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "two"}]})])
    with monkeypatch.context() as patch:
        patch.setattr(codex.CodexParser, "_recount", lambda *_: pytest.fail("read the turn's lines again"))
        assert run("import", path, "-n", "t").stdout.startswith("t: 1 imported, 0 already present")
    assert messages()[-1]["meta"]["repeat"] == 1
    data = read_state(home / "t")  # (written back without its journal's name: the journal is left out)
    data["files"][str(path)]["state"]["said_sum"] = [1, 1]
    (home / "t" / STATE).write_text(json.dumps(data))
    write_jsonl(path, [_item(7, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": t}]})
                       for t in ("two", "four", "two")])
    assert sh("import", path, "-n", "t").stdout.startswith(b"t: 3 imported, 0 already present")  # (another process)
    assert [(m["text"], "turn" in m["meta"]) for m in messages()[-3:]] == [("two", False), ("four", False), ("two", False)]


def test_a_codex_turn_read_on_in_another_process_makes_no_text_of_its_calls_read_before(run, home, tmp_path, monkeypatch):
    """A turn read on in another process counts its repeats from its lines read again; it made the text of every
    call and output among them too (a command's program read, an output's exit code), though a call's and an
    output's repeats are not counted (their call's id tells them apart): a recount did twice the work it needs.
    It makes the texts of the new lines alone, and counts on as before."""
    from pimem.importers import codex

    def call(k: int) -> list[dict]:
        return [_item(5, {"type": "function_call", "name": "exec_command", "arguments": json.dumps({"cmd": f"pytest -q -k t{k}"}),
                          "call_id": f"call_{k}"}),
                _item(5, {"type": "function_call_output", "call_id": f"call_{k}", "output": f"Process exited with code 0\nOutput:\n{k} passed"})]

    lines = [codex_meta("cx-P"), *codex_turn(1, 1, "go", "done", "call_A")[:3], _said(4, "checking")]
    lines += [line for k in range(40) for line in call(k)]
    path = write_jsonl(tmp_path / "rollout-P.jsonl", lines)
    assert run("import", path, "-n", "t").exit_code == 0
    write_jsonl(path, [*call(40), _said(6, "checking")])
    made = []
    monkeypatch.setattr(codex, "call_text", lambda name, args, made_by=codex.call_text: made.append(args) or made_by(name, args))
    monkeypatch.setattr(codex, "_output", lambda output, made_by=codex._output: made.append(output) or made_by(output))
    monkeypatch.setattr(codex, "_KEPT", {})  # (another process: the turn's counts read again from its lines)
    assert run("import", path, "-n", "t").stdout.startswith("t: 3 imported, 0 already present")
    assert made == [json.dumps({"cmd": "pytest -q -k t40"}), "Process exited with code 0\nOutput:\n40 passed"]
    assert [(m["text"], m["meta"].get("repeat")) for m in messages()[-1:]] == [("checking", 1)]


def _said(s: int, text: str) -> dict:
    return _item(s, {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": text}]})


@pytest.mark.parametrize("read_before", ["a line over the cap", "the pimem before"])
def test_a_codex_turn_read_on_again_in_another_process_keeps_its_counts(sh, home, tmp_path, read_before):
    """A turn read on in another process counts its repeats from its lines read again, checked against the
    digest saved. A line over the cap for one line, which the import skipped, was counted there (the digest
    not given again), and a turn whose counts the pimem before saved whole (no line of its start) was not read
    again at all: the turn's later texts were logged by their line alone, without their turn, so the parent's
    words a fork imported meanwhile (by their turn and repeats) were logged a second time."""
    from pimem import config, hashes
    from pimem.importers.state import STATE

    config.save_home(None, {"max_text_bytes": 2000})
    lines = [codex_meta("cx-P"), *codex_turn(1, 1, "go", "done", "call_A")[:3], _said(4, "one"), _said(4, "two")]
    if read_before == "a line over the cap":
        lines.append(_said(4, "x" * 300_000))
    path = write_jsonl(tmp_path / "rollout-P.jsonl", lines)
    assert sh("import", path, "-n", "t").returncode == 0
    if read_before == "the pimem before":  # (its counts whole, as the pimem before saved them)
        data = json.loads((home / "t" / STATE).read_text())
        kept = data["files"][str(path)]["state"]
        for key in [key for key in kept if key.startswith("said")]:
            del kept[key]
        kept["said"] = {hashes.blake2b(json.dumps([kind, t], separators=(",", ":")).encode(), digest_size=6).hexdigest(): 1
                        for kind, t in [("user", "go"), ("pi", "one"), ("pi", "two")]}
        (home / "t" / STATE).write_text(json.dumps(data))
    more = [_said(5, "one"), _said(5, "three")]
    lines += more
    write_jsonl(path, more[:1])
    assert sh("import", path, "-n", "t").stdout.startswith(b"t: 1 imported, 0 already present")
    write_jsonl(path, more[1:])
    fork = write_jsonl(tmp_path / "rollout-F.jsonl", codex_fork(lines, "cx-F", len(lines)))  # (forked meanwhile)
    assert sh("import", fork, "-n", "t").stdout.startswith(b"t: 1 imported, 4 already present")
    out = sh("import", path, "-n", "t")
    assert out.stdout.startswith(b"t: 0 imported, 1 already present"), out.stdout + out.stderr
    assert [(m["text"], m["meta"].get("turn"), m["meta"].get("repeat")) for m in messages()[-3:]] == [
        ("two", messages()[1]["meta"]["turn"], None), ("one", messages()[1]["meta"]["turn"], 1),
        ("three", messages()[1]["meta"]["turn"], None)]


def test_a_codex_turn_read_on_after_the_cap_was_lowered_keeps_its_counts(sh, home, tmp_path):
    """A turn read on in another process counts its repeats from its lines read again, each line as the read
    that took it saw it: a long text logged under the cap of then, which ``max_text_bytes`` lowered since puts
    over the cap for one line, was left out of the count (the digest saved not given again), so the turn's later
    texts were logged by their line alone, without their turn, and a fork's copy of them logged a second time."""
    from pimem import config

    lines = [codex_meta("cx-P"), *codex_turn(1, 1, "go", "done", "call_A")[:3], _said(4, "one"), _said(4, "x" * 300_000)]
    path = write_jsonl(tmp_path / "rollout-P.jsonl", lines)
    assert sh("import", path, "-n", "t").stdout.startswith(b"t: 3 imported")
    config.save_home(None, {"max_text_bytes": 2000})
    more = [_said(5, "one"), _said(5, "three")]
    lines += more
    write_jsonl(path, more)
    assert sh("import", path, "-n", "t").stdout.startswith(b"t: 2 imported, 0 already present")
    turn = messages()[0]["meta"]["turn"]
    assert [(m["text"], m["meta"].get("turn"), m["meta"].get("repeat")) for m in messages()[-2:]] == [
        ("one", turn, 1), ("three", turn, None)]
    fork = write_jsonl(tmp_path / "rollout-F.jsonl", codex_fork(lines, "cx-F", len(lines)))
    out = sh("import", fork, "-n", "t")  # (its copy of the long line is over the cap now: said and skipped)
    assert out.stdout.startswith(b"t: 0 imported, 4 already present, 1 malformed skipped"), out.stdout + out.stderr


def test_codex_turns_without_an_id_are_keyed_as_before(run, tmp_path):
    """A rollout of an older Codex names no turn (or not by a UUID): its messages have no turn to be told
    by, so the same words in two of its turns are two messages, as they were, and a call of another session
    is its own though its id and text are the same (a provider may count its calls)."""
    lines = [codex_meta("cx-old"), *codex_turn(1, 1, "continue", "ok", "c1"), *codex_turn(2, 10, "continue", "ok", "c2")]
    for line in lines:
        line["payload"].pop("turn_id", None)
    lines[11]["payload"]["turn_id"] = "1"
    path = write_jsonl(tmp_path / "rollout.jsonl", lines)
    assert run("import", path, "-n", "t").stdout.startswith("t: 12 imported")
    assert [m["text"] for m in messages()].count("continue") == 2 and not any("turn" in m["meta"] for m in messages())
    other = write_jsonl(tmp_path / "rollout-2.jsonl", [codex_meta("cx-other", 40), *lines[1:11]])
    assert run("import", other, "-n", "t").stdout.startswith("t: 6 imported, 0 already present")


def test_a_memory_imported_before_pi_and_codex_copies_were_known_takes_nothing_twice(run, home, tmp_path, monkeypatch):
    """Keys written by the pimem before (version 4: no content keys of pi's and Codex's messages) are
    rebuilt from the log once, so a pi fork imported after the upgrade adds only its own messages. A Codex
    message logged before has no turn in the log: once a fork names its parent's session (the session_meta
    its copy holds), the parent's rollout is read again for the turns of what the memory holds, so the
    fork's copy adds nothing either (it was logged once more), and what the fork says itself is logged."""
    from pimem.importers import codex
    from pimem.importers.state import KEYS, STATE, VERSION, key_of, read_state

    parent = pi_tree(tmp_path / "a.jsonl")
    fork = pi_fork(parent, tmp_path / "b.jsonl", 3, "sess-2")
    rollout = [codex_meta("cx-P"), *codex_turn(1, 1, "run the tests", "Fixed.", "call_A")]
    first = write_jsonl(tmp_path / "rollout-P.jsonl", rollout)
    forked = write_jsonl(tmp_path / "rollout-F.jsonl", codex_fork(rollout, "cx-F", len(rollout), codex_turn(2, 40, "go on", "Done.", "call_B")))
    with monkeypatch.context() as patched:
        patched.setattr(codex, "_UUID", re.compile("(?!)"))  # (logged as the pimem before logged it: no turn)
        for path in (parent, first):
            assert run("import", path, "-n", "t").exit_code == 0
    assert not any("turn" in m["meta"] for m in messages())
    state = read_state(home / "t")
    (home / "t" / KEYS).write_bytes(b"".join(key_of(msg) for msg in messages()))
    (home / "t" / STATE).write_text(json.dumps({**state, "version": 4, "keys": len(messages())}))
    assert run("import", fork, "-n", "t").stdout.startswith("t: 0 imported, 4 already present")
    assert json.loads((home / "t" / STATE).read_text())["version"] == VERSION
    assert run("import", forked, "-n", "t").stdout.startswith("t: 6 imported, 6 already present")
    assert [m["text"] for m in messages()[-6:]][::5] == ["go on", "Done."]
    write_jsonl(first, codex_turn(3, 50, "and then", "Ok.", "call_D"))  # (the parent grown: read on, its turns kept)
    assert run("import", first, "-n", "t").stdout.startswith("t: 6 imported, 0 already present")


def test_a_memory_imported_before_lines_were_keyed_by_their_hash_takes_nothing_twice(run, home, tmp_path):
    """What pimem wrote before ``imports.json`` had a version: each line's entry its number and hash, keys
    of those, no version. The first import after the upgrade rebuilds the keys once, positions kept."""
    from pimem import hashes
    from pimem.importers.state import VERSION, key_of, read_state

    lines = codex_lines() + [codex_lines()[4]]  # the user's line once more, later: two messages
    path = write_jsonl(tmp_path / "rollout.jsonl", lines)
    assert run("import", path, "-n", "new").stdout.startswith("new: 8 imported")
    number = {}
    for n, line in enumerate(path.read_bytes().splitlines(), 1):
        digest = hashes.blake2b(line.strip(), digest_size=6).hexdigest()
        number.setdefault(digest, []).append(n)
    old = []
    for msg in messages("new"):
        digest, _, repeat = msg["meta"]["entry"].partition(".")
        meta = {**msg["meta"], "entry": f"{number[digest][int(repeat or 0)]}-{digest}"}
        old.append({"kind": msg["kind"], "text": msg["text"], "date": msg["date"], "meta": meta})
    Memory.at("old").append(old)
    keys = b"".join(key_of(msg) for msg in messages("old"))
    (home / "old" / "imports.keys").write_bytes(keys)
    files = read_state(home / "new")["files"]
    (home / "old" / "imports.json").write_text(json.dumps({"covered": 8, "keys": 8, "files": files}))

    assert run("import", path, "-n", "old").stdout.endswith("8 messages in all (file unchanged since the last import)\n")
    path.unlink()
    write_jsonl(path, lines[:3] + lines[5:])  # a line deleted above the rest: read again from the start
    assert run("import", path, "-n", "old").stdout == "old: 0 imported, 7 already present, 0 malformed skipped; 8 messages in all\n"
    state = read_state(home / "old")
    assert state["version"] == VERSION and state["files"].keys() == files.keys()
    path.unlink()
    write_jsonl(path, lines)  # both user lines back
    assert run("import", path, "-n", "old").stdout.startswith("old: 0 imported, 8 already present")


def test_a_file_replaced_by_another_is_read_from_the_start(run, tmp_path):
    """Same bytes up to the last position, but a new inode (written aside and renamed over): read from the
    start, and the keys decide what is new."""
    path = write_jsonl(tmp_path / "s.jsonl", [{"kind": "user", "text": "a"}, {"kind": "user", "text": "b"}])
    run("import", path, "-n", "t")
    copy = write_jsonl(tmp_path / "copy.jsonl", [{"kind": "user", "text": "a"}, {"kind": "user", "text": "b"}, {"kind": "user", "text": "c"}])
    os.replace(copy, path)
    report = json.loads(run("import", path, "-n", "t", "--json").stdout.splitlines()[0])
    assert (report["from_line"], report["imported"], report["present"]) == (1, 1, 2)


# ---- several files, names, bad input ---------------------------------------------------------------------

def test_several_files_go_in_date_order_into_one_memory(run, tmp_path):
    late = pi_tree(tmp_path / "late.jsonl")
    early = write_jsonl(tmp_path / "early.jsonl", claude_lines())
    result = run("import", late, early, "--json", "--name", "api")
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    assert [Path(r["file"]).name for r in rows[:2]] == ["early.jsonl", "late.jsonl"]
    assert rows[-1]["name"] == "api" and rows[-1]["imported"] == 14
    dates = [m["date"] for m in messages("api")]
    assert dates[0].startswith("2026-02-10") and dates[-1].startswith("2026-03-02")


def test_without_a_name_each_project_gets_its_own_memory(run, home, tmp_path):
    """Sessions of three projects (pi in shop, Claude Code in api twice, Codex in tool): three memories, each
    named after its project's directory, each holding only its own sessions."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    pi_tree(folder / "pi.jsonl")
    write_jsonl(folder / "c1.jsonl", claude_lines("one"))
    write_jsonl(folder / "c2.jsonl", claude_lines("two"))
    write_jsonl(folder / "rollout.jsonl", codex_lines())
    result = run("import", folder, "--json")
    assert result.exit_code == 0, result.stderr
    totals = {r["name"]: r["imported"] for r in map(json.loads, result.stdout.splitlines()) if "files" in r}
    assert totals == {"api": 14, "shop": 7, "tool": 7}
    for name in ("api", "shop", "tool"):
        assert f"importing into memory '{name}'" in result.stderr
    assert {m["meta"]["session"] for m in messages("api")} == {"one", "two"}
    assert {m["meta"]["cwd"] for m in messages("shop")} == {"/home/dev/shop"}
    assert run("import", folder, "--json").stdout.count('"imported":0') == 7  # again: nothing new anywhere


def test_a_reader_that_went_away_stops_the_printing_not_the_import(home, tmp_path):
    """``pimem import … | head -1``: every file of every project is imported, exit 0, nothing said on stderr
    but the memories' names (the reader has gone before the first line here, which it cannot read)."""
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    folder = tmp_path / "sessions"
    folder.mkdir()
    pi_tree(folder / "pi.jsonl")
    write_jsonl(folder / "c1.jsonl", claude_lines("one"))
    write_jsonl(folder / "rollout.jsonl", codex_lines())
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = subprocess.run(pimem_cmd("import", folder), stdout=writer, stderr=subprocess.PIPE, timeout=60,
                              env=subprocess_env(PYTHONUNBUFFERED="1"))  # (each line written as printed)
    finally:
        os.close(writer)
    assert proc.returncode == 0, proc.stderr
    assert [line for line in proc.stderr.decode().splitlines() if not line.startswith("importing into")] == []
    assert {name: len(messages(name)) for name in ("api", "shop", "tool")} == {"api": 7, "shop": 7, "tool": 7}


def test_projects_in_directories_whose_names_keep_nothing_are_still_apart(home):
    from pimem.importers.detect import Source, default_name

    def name(cwd):
        return default_name([Source(path="/tmp/s.jsonl", format="claude", size=0, cwd=cwd)])

    assert name("/home/dev/shop") == "shop" and name("/home/dev/项目2") == "2"
    apart = {name("/home/dev/项目"), name("/home/dev/工作"), name("/"), name("/srv/проект")}
    assert len(apart) == 4 and all(n.startswith("dir-") and len(n) == 12 for n in apart), apart
    assert name("/home/dev/项目") == name("/home/dev/项目")  # the same project, the same memory


LONG = "customer-portal-frontend-monorepo-experimental-branch-with-new-auth"  # 68 characters


def in_project(cwd: str, session: str = "cs-1") -> list[dict]:
    return [dict(line, cwd=cwd) if "cwd" in line else line for line in claude_lines(session)]


def memory_names(home: Path) -> list[str]:
    return sorted(p.name for p in home.iterdir() if (p / "main").is_dir())


def test_two_projects_whose_long_names_start_alike_are_two_memories(run, home, tmp_path):
    """A name over 64 characters was cut to its first 64: two such projects went into one memory, and a
    project of 80 × a into an unrelated memory of 64 × a."""
    run("append", "a" * 64, "an unrelated memory")
    for n, cwd in enumerate((f"/home/x/{LONG}-backend", f"/home/x/{LONG}-zeta", "/home/x/" + "a" * 80)):
        result = run("import", write_jsonl(tmp_path / f"{n}.jsonl", in_project(cwd, f"s{n}")))
        assert result.exit_code == 0, result.stderr
    names = memory_names(home)
    assert len(names) == 4 and all(len(n) <= 64 for n in names), names
    assert len(messages("a" * 64)) == 1
    assert sum(bool(re.fullmatch(re.escape(LONG[:55]) + "-[0-9a-f]{8}", n)) for n in names) == 2
    assert re.fullmatch("a{55}-[0-9a-f]{8}", names[0]) and names[1] == "a" * 64


def test_a_name_of_64_characters_is_kept_whole_and_one_of_65_is_cut_with_a_hash(home):
    from pimem.importers.detect import Source, default_name

    def name(cwd):
        return default_name([Source(path="/tmp/s.jsonl", format="claude", size=0, cwd=cwd)])

    assert name("/x/" + "b" * 64) == "b" * 64 and name("/x/" + "b" * 64 + "--") == "b" * 64
    cut = name("/x/" + "b" * 65)
    assert re.fullmatch("b{55}-[0-9a-f]{8}", cut) and name("/y/" + "b" * 65) != cut and name("/x/" + "b" * 65) == cut
    assert re.fullmatch("b{54}-[0-9a-f]{8}", name("/x/" + "b" * 54 + "-" * 10 + "c"))  # (no "--" before the hash)
    assert re.fullmatch("s{55}-[0-9a-f]{8}", default_name([Source(path="/tmp/" + "s" * 70 + ".jsonl", format="ndjson", size=0)]))


def test_a_memory_an_earlier_pimem_named_by_the_first_64_characters_is_used_while_it_holds_the_project(run, home, tmp_path):
    """Earlier versions named a long project by its first 64 characters: the memory they made keeps the
    projects it holds (a session read on, a new one of the same project); another project whose name starts
    alike gets its own."""
    old = LONG[:64]
    first = write_jsonl(tmp_path / "1.jsonl", in_project(f"/home/x/{LONG}-backend", "s1"))
    assert run("import", first, "--name", old).exit_code == 0  # (as the earlier version named it)
    write_jsonl(first, [dict(in_project(f"/home/x/{LONG}-backend", "s1")[2], uuid="u9", timestamp="2026-02-10T23:00:00.000Z")])
    second = write_jsonl(tmp_path / "2.jsonl", in_project(f"/home/x/{LONG}-backend", "s2"))
    other = write_jsonl(tmp_path / "3.jsonl", in_project(f"/home/x/{LONG}-zeta", "s3"))
    for file in (first, second, other):
        result = run("import", file)
        assert result.exit_code == 0, result.stderr
    assert len(memory_names(home)) == 2
    assert len(messages(old)) == 7 + 1 + 7
    assert len(messages(next(n for n in memory_names(home) if n != old))) == 7


# ---- two projects of one directory name ----------------------------------------------------------------

CLIENT_A, CLIENT_B = "/home/x/client-a/api", "/home/x/client-b/api"


def apart(cwd: str) -> str:
    """The name a project gets when the memory of its directory's name holds another project's sessions."""
    import hashlib

    return "api-" + hashlib.sha256(cwd.encode()).hexdigest()[:8]


def projects_of(name: str) -> set[str]:
    return {m["meta"]["cwd"] for m in messages(name)}


def test_two_projects_of_one_directory_name_imported_in_one_run_are_two_memories_and_stay_so(run, home, tmp_path):
    """~/work/client-a/api and ~/work/client-b/api both went into 'api' (and a Claude Code entry of one, its uuid
    the other's, was taken for a copy): the project whose sessions start first takes 'api', the other 'api-' and
    8 hex digits of its path's hash; each later import, in either order, keeps them apart."""
    folder = tmp_path / "sessions"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", in_project(CLIENT_A, "sa"))
    write_jsonl(folder / "b.jsonl", in_project(CLIENT_B, "sb"))
    result = run("import", folder, "--json")
    assert result.exit_code == 0, result.stderr
    totals = {r["name"]: r["imported"] for r in map(json.loads, result.stdout.splitlines()) if "files" in r}
    assert totals == {"api": 7, apart(CLIENT_B): 7}
    assert f"importing into memory '{apart(CLIENT_B)}' ('api' holds another project's sessions; choose another with --name)" in result.stderr
    later = tmp_path / "later"
    later.mkdir()
    write_jsonl(later / "b2.jsonl", in_project(CLIENT_B, "sb2"))  # (b's first now: it keeps its own memory)
    write_jsonl(later / "z.jsonl", [dict(line, uuid=line["uuid"] + "z") if "uuid" in line else line for line in in_project(CLIENT_A, "sa2")])
    assert run("import", later).exit_code == 0
    assert projects_of("api") == {CLIENT_A} and projects_of(apart(CLIENT_B)) == {CLIENT_B}
    assert {m["meta"]["session"] for m in messages(apart(CLIENT_B))} == {"sb", "sb2"}
    assert {m["meta"]["session"] for m in messages("api")} == {"sa", "sa2"}
    assert memory_names(home) == sorted(["api", apart(CLIENT_B)])


def test_a_project_entered_through_a_link_is_one_project(run, home, tmp_path):
    """~/work/api a link to /srv/api: the sessions of either path were two projects (two memories, 'api' and
    'api-<hash>'). A project is its directory with links resolved: one memory, its project list the real path."""
    real = tmp_path / "srv" / "api"
    real.mkdir(parents=True)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "api").symlink_to(real)
    link = str(tmp_path / "work" / "api")
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(link, "sa"))).exit_code == 0
    result = run("import", write_jsonl(tmp_path / "b.jsonl", in_project(str(real), "sb")))
    assert result.exit_code == 0 and result.stdout.startswith("api: 7 imported"), (result.stdout, result.stderr)
    assert memory_names(home) == ["api"] and projects_of("api") == {link, str(real)}
    assert json.loads((home / "api" / "projects.json").read_text()) == {"version": 1, "projects": [str(real)]}


@pytest.mark.parametrize("recorded", ["projects.json", "imports.json"])
def test_a_memory_that_recorded_a_project_by_its_link_keeps_it(run, home, tmp_path, recorded):
    """A memory an earlier pimem gave a project entered through a link recorded the link's path (in its
    projects.json, or only in its imports.json): the project's sessions by either path still go to it, also
    when it is named after the link ('myapi', the real directory 'api'), and its list is not grown."""
    real = tmp_path / "srv" / "api"
    real.mkdir(parents=True)
    (tmp_path / "work").mkdir()
    (tmp_path / "work" / "myapi").symlink_to(real)
    link = str(tmp_path / "work" / "myapi")
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(link, "sa")), "--name", "myapi").exit_code == 0
    (home / "myapi" / "projects.json").unlink()
    if recorded == "projects.json":  # (as an earlier pimem recorded it: the path as given)
        (home / "myapi" / "projects.json").write_text(json.dumps({"version": 1, "projects": [link]}))
    write_jsonl(tmp_path / "a2.jsonl", in_project(link, "sa2"))
    result = run("import", tmp_path / "a2.jsonl")
    assert result.exit_code == 0 and result.stdout.startswith("myapi: 7 imported"), (result.stdout, result.stderr)
    assert json.loads((home / "myapi" / "projects.json").read_text())["projects"] == [link]
    assert memory_names(home) == ["myapi"]
    assert run("import", write_jsonl(tmp_path / "b.jsonl", in_project(str(real), "sb")), "--name", "api").exit_code == 0
    (home / "api" / "projects.json").write_text(json.dumps({"version": 1, "projects": [link]}))  # (its link's path)
    result = run("import", write_jsonl(tmp_path / "b2.jsonl", in_project(str(real), "sb2")))
    assert result.exit_code == 0 and result.stdout.startswith("api: 7 imported"), (result.stdout, result.stderr)
    assert json.loads((home / "api" / "projects.json").read_text())["projects"] == [link]


def test_naming_a_project_s_memory_only_looks(run, home, tmp_path):
    """``default_name`` is what a reader (the hook's answer) names a memory by: it says where the project's
    sessions are or would go, and writes nothing."""
    from pimem.importers.detect import Source, default_name

    def name(cwd):
        return default_name([Source(path="/tmp/s.jsonl", format="claude", size=0, cwd=cwd)])

    assert name(CLIENT_B) == "api" and not home.exists()
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).exit_code == 0
    before = snapshot(home)
    assert (name(CLIENT_A), name(CLIENT_B)) == ("api", apart(CLIENT_B))
    assert snapshot(home) == before


def test_a_memory_an_earlier_pimem_named_after_the_directory_keeps_its_project(run, home, tmp_path):
    """An earlier pimem recorded no projects: what the memory's import state says of the files it imported
    tells whose it is, and is recorded the first time it is asked; nothing in it is moved or renamed."""
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa")), "--name", "api").exit_code == 0
    (home / "api" / "projects.json").unlink()  # (as an earlier pimem left it)
    before = [m["text"] for m in messages("api")]
    result = run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_B, "sb")))
    assert result.exit_code == 0 and f"importing into memory '{apart(CLIENT_B)}'" in result.stderr, result.stderr
    assert [m["text"] for m in messages("api")] == before and projects_of(apart(CLIENT_B)) == {CLIENT_B}
    assert json.loads((home / "api" / "projects.json").read_text()) == {"version": 1, "projects": [CLIENT_A]}
    write_jsonl(tmp_path / "a.jsonl", [dict(in_project(CLIENT_A, "sa")[2], uuid="u9", timestamp="2026-02-10T23:00:00.000Z")])
    result = run("import", tmp_path / "a.jsonl")
    assert result.exit_code == 0 and result.stdout.startswith("api: 1 imported"), (result.stdout, result.stderr)


def test_a_memory_that_holds_no_project_goes_to_the_first_project_of_its_name(run, home, tmp_path):
    """A memory made by hand (append, remember) under a project's name is that project's, as before: the
    first project of the name to import takes it, and keeps what was in it; the next gets its own."""
    assert run("append", "api", "the notes of client-b's api").exit_code == 0
    assert run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_B, "sb"))).exit_code == 0
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).exit_code == 0
    assert [m["text"] for m in messages("api")][0] == "the notes of client-b's api"
    assert projects_of(apart(CLIENT_A)) == {CLIENT_A} and {m.get("meta", {}).get("cwd") for m in messages("api")} == {None, CLIENT_B}


def test_a_memory_given_a_project_by_name_is_that_project_s(run, home, tmp_path):
    """``import --name api`` of client-b's sessions makes 'api' client-b's too: client-a, importing later
    without a name, does not join it."""
    assert run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_B, "sb")), "--name", "api").exit_code == 0
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).exit_code == 0
    assert projects_of("api") == {CLIENT_B} and projects_of(apart(CLIENT_A)) == {CLIENT_A}


def test_a_project_goes_to_the_same_memory_from_every_process(sh, home, tmp_path):
    """Each import is a new process: the name is what the memories record, not anything a process keeps."""
    assert sh("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).returncode == 0
    for n in range(3):
        proc = sh("import", write_jsonl(tmp_path / f"b{n}.jsonl", in_project(CLIENT_B, f"sb{n}")))
        assert proc.returncode == 0 and f"importing into memory '{apart(CLIENT_B)}'".encode() in proc.stderr, proc.stderr
    assert {m["meta"]["session"] for m in messages(apart(CLIENT_B))} == {"sb0", "sb1", "sb2"}
    assert projects_of("api") == {CLIENT_A}


def test_a_project_whose_memory_of_the_name_was_deleted_keeps_its_own(run, home, tmp_path):
    """client-b went to api-<hash> while 'api' was client-a's; 'api' deleted, client-b stays where its sessions are."""
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).exit_code == 0
    assert run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_B, "sb"))).exit_code == 0
    assert run("delete", "api").exit_code == 0
    assert run("import", write_jsonl(tmp_path / "b2.jsonl", in_project(CLIENT_B, "sb2"))).exit_code == 0
    assert {m["meta"]["session"] for m in messages(apart(CLIENT_B))} == {"sb", "sb2"}
    assert not (home / "api").exists()


def test_a_broken_project_list_is_said_in_one_line_and_nothing_is_imported(run, home, tmp_path):
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).exit_code == 0
    (home / "api" / "projects.json").write_text("{not json")
    before = snapshot(home)
    result = run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_B, "sb")))
    assert result.exit_code == 5 and result.stderr.startswith(f"pimem: error: broken project list {home / 'api' / 'projects.json'}: ")
    assert result.stderr.count("\n") == 1 and "remove it to have it made again from the memory's imports" in result.stderr
    assert snapshot(home) == before
    (home / "api" / "projects.json").unlink()  # (as it says: made again from what api imported)
    assert run("import", tmp_path / "b.jsonl").exit_code == 0 and projects_of(apart(CLIENT_B)) == {CLIENT_B}


@pytest.mark.parametrize("lines", [
    [line for line in in_project(CLIENT_A, "sa") if line["type"] in ("file-history-snapshot", "progress", "summary")],
    [{**line, "type": "user", "message": 3} for line in in_project(CLIENT_A, "sa") if line["type"] == "user"],
], ids=["no message", "malformed only"])
def test_an_import_of_nothing_leaves_no_memory_behind_and_the_name_free(run, home, tmp_path, lines):
    """An import refused with nothing to import claimed 'api' for its project and left it, a directory
    holding only its lock and project list: not listed, not deleted (no memory named 'api'), and in the way
    of a rename to 'api' ('api' already exists). It leaves the home as it found it."""
    assert run("append", "notes", "the api's notes").exit_code == 0
    before = snapshot(home)
    result = run("import", write_jsonl(tmp_path / "a.jsonl", lines))
    assert result.exit_code == 1 and "nothing to import" in result.stderr, result.stderr
    assert snapshot(home) == before
    assert run("rename", "notes", "api").exit_code == 0

def test_fsck_names_a_broken_project_list_and_repair_makes_it_again(run, home, tmp_path):
    """import and the hook refuse a broken projects.json with exit 5, which says run pimem fsck: fsck said
    the memory was ok (exit 0). It names the file (exit 5), and --repair makes it again from the imports."""
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).exit_code == 0
    (home / "api" / "projects.json").write_text("{not json")
    result = run("fsck", "api")
    assert result.exit_code == 5 and result.stdout.startswith("api: files: projects.json: problem: "), result.stdout
    assert "(--repair: make it again from the memory's imports)" in result.stdout
    result = run("fsck", "--repair", "api")
    assert result.exit_code == 0, result.stdout
    assert json.loads((home / "api" / "projects.json").read_text()) == {"version": 1, "projects": [CLIENT_A]}
    assert run("fsck", "api").stdout == "api: ok (7 messages)\n"
    result = run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_B, "sb")))
    assert result.exit_code == 0 and projects_of(apart(CLIENT_B)) == {CLIENT_B}


def test_an_import_refused_on_its_second_project_s_list_leaves_no_claim_of_its_first(run, home, tmp_path):
    """The projects' memories are claimed before anything is imported: one refused (a broken project list) left
    the claims made before it, directories that are no memory, in a home the refused import was not to change."""
    assert run("import", write_jsonl(tmp_path / "w.jsonl", in_project("/home/x/web", "sw"))).exit_code == 0
    (home / "web" / "projects.json").write_text("{not json")
    folder = tmp_path / "both"
    folder.mkdir()
    write_jsonl(folder / "a.jsonl", in_project(CLIENT_A, "sa"))
    write_jsonl(folder / "w.jsonl", [dict(line, cwd="/home/x/other/web") if "cwd" in line else line for line in in_project("/", "sw2")])
    before = snapshot(home)
    result = run("import", folder)
    assert result.exit_code == 5 and result.stderr.startswith("pimem: error: broken project list"), result.stderr
    assert snapshot(home) == before


def test_a_project_list_that_cannot_be_read_is_named_in_one_line(run, home, tmp_path):
    """A directory where projects.json should be was said as 'Is a directory: 3' (a file descriptor's number)."""
    assert run("import", write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))).exit_code == 0
    (home / "api" / "projects.json").unlink()
    (home / "api" / "projects.json").mkdir()
    before = snapshot(home)
    result = run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_B, "sb")))
    assert result.exit_code == 7 and result.stderr == f"pimem: error: Is a directory: {home / 'api' / 'projects.json'}\n"
    assert snapshot(home) == before


def test_an_import_journal_that_cannot_be_read_is_named_in_one_line(run, home, tmp_path):
    """A directory where imports.journal should be was said as 'Is a directory: 4' (the descriptor's number,
    which was left open), as imports.json's is said by its path."""
    first = write_jsonl(tmp_path / "a.jsonl", in_project(CLIENT_A, "sa"))
    assert run("import", first, "-n", "api").exit_code == 0
    journal = home / "api" / "imports.journal"
    journal.unlink()
    journal.mkdir()
    before = snapshot(home)
    result = run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_A, "sb")), "-n", "api")
    assert result.exit_code == 7 and result.stderr.startswith(f"pimem: error: Is a directory: {journal};"), result.stderr
    assert snapshot(home) == before


def test_a_directory_at_the_import_journal_of_a_memory_never_imported_into_is_refused_first(run, home, tmp_path):
    """A memory with no import state yet (made by append): a directory at imports.journal was found only by the
    state's first write, imports.json and imports.keys written and left (or, into an empty memory, the messages
    logged) before the error. It is refused before anything is written, as where imports.json names a journal."""
    assert run("append", "api", "by hand").exit_code == 0
    journal = home / "api" / "imports.journal"
    journal.mkdir()
    before = snapshot(home)
    result = run("import", write_jsonl(tmp_path / "b.jsonl", in_project(CLIENT_A, "sb")), "-n", "api")
    assert result.exit_code == 7 and result.stderr.startswith(f"pimem: error: Is a directory: {journal};"), result.stderr
    assert {k: v for k, v in snapshot(home).items() if k != "api/projects.json"} == before  # (the project's record: its claim)


def test_a_claim_left_with_nothing_logged_is_no_obstacle_to_a_rename(run, home):
    """A claim whose project logged nothing (a follower or hook stopped before the first message, a crash
    after the claim) left 'api' a directory that is no memory yet (listed with 0 messages), and rename refused
    it ('api' already exists). A rename takes the name over it; a directory holding anything more is still
    refused."""
    from pimem import projects
    from pimem.importers.detect import choices

    assert run("append", "notes", "the api's notes").exit_code == 0
    assert projects.claim(CLIENT_A, choices(CLIENT_A)) == "api"
    assert [line.split()[:2] for line in run("list").stdout.splitlines()] == [["api", "0"], ["notes", "1"]]
    result = run("rename", "notes", "api")
    assert result.exit_code == 0, result.stderr
    assert [m["text"] for m in messages("api")] == ["the api's notes"] and not (home / "api" / "projects.json").exists()
    assert projects.claim(CLIENT_B, choices(CLIENT_B)) == "api"  # (its notes no project's: the next project's)
    assert projects.claim("/home/x/web", choices("/home/x/web")) == "web"
    (home / "web" / "imports.json").write_text("{}")  # (more than a claim: not taken over)
    result = run("rename", "api", "web")
    assert result.exit_code == 2 and "'web' already exists" in result.stderr


def test_a_claim_with_nothing_logged_is_listed_checked_and_deleted(run, home):
    """A memory claimed for a project (its projects.json written) before anything was logged in it (a hook or
    follower stopped before the first message) was not listed, and delete said there was no such memory: it
    is listed with 0 messages (in --json, the shape of any memory's row), fsck finds it ok, delete moves it to
    the trash; the next claim of the name takes it again."""
    from pimem import projects
    from pimem.importers.detect import choices

    assert run("append", "notes", "the notes").exit_code == 0
    assert projects.claim(CLIENT_A, choices(CLIENT_A)) == "api"
    result = run("list")
    assert result.exit_code == 0 and [line.split()[:3] for line in result.stdout.splitlines()] == [
        ["api", "0", "messages"], ["notes", "1", "message"]]
    rows = [json.loads(line) for line in run("list", "--json").stdout.splitlines()]
    assert rows[0] == {"name": "api", "messages": 0, "first": None, "last": None, "last_user": None}
    assert rows[0].keys() == rows[1].keys()
    result = run("fsck")
    assert result.exit_code == 0 and result.stdout == "api: ok (0 messages)\nnotes: ok (1 message)\n", result.stdout
    assert run("fsck", "api").stdout == "api: ok (0 messages)\n"
    before = snapshot(home / "api")
    result = run("delete", "api")
    assert result.exit_code == 0, result.stderr
    trash = Path(result.stdout.strip())
    assert trash.parent == home / ".trash" and snapshot(trash) == before and not (home / "api").exists()
    assert [line.split()[0] for line in run("list").stdout.splitlines()] == ["notes"]
    assert projects.claim(CLIENT_B, choices(CLIENT_B)) == "api"


def test_a_project_waiting_to_claim_a_memory_whose_unused_claim_is_released_chooses_again(home):
    """A claimer waiting on the lock of the memory of its directory's name while an import of nothing removes
    that memory's claim (``projects.release``) finds the directory gone: it chooses again and takes the name,
    not exit 3 (renamed or deleted while this waited)."""
    import threading

    from pimem import projects
    from pimem.importers.detect import choices

    mem = Memory.at("api")
    (home / "api").mkdir(parents=True)
    got = []
    with mem.lock():
        claimer = threading.Thread(target=lambda: got.append(projects.claim(CLIENT_B, choices(CLIENT_B), timeout=30)))
        claimer.start()
        lock = str(home / "api" / "write.lock")
        while sum(os.path.realpath(f"/proc/self/fd/{fd}") == lock for fd in os.listdir("/proc/self/fd")) < 2:
            assert claimer.is_alive()  # (until the claimer holds the lock file open, waiting)
        os.unlink(home / "api" / "write.lock")  # (as ``release`` removes an unused claim, under the lock)
        os.rmdir(home / "api")
    claimer.join(60)
    assert got == ["api"] and json.loads((home / "api" / "projects.json").read_text())["projects"] == [CLIENT_B]


def test_a_first_line_longer_than_the_peek_is_read_whole_to_tell_the_format(run, tmp_path, monkeypatch):
    """Detection reads a file's head a piece at a time: a first message longer than that piece (a pasted log)
    is not an empty file, and a first line over the line cap is passed over, as the import passes over it."""
    from pimem.importers import detect

    monkeypatch.setattr(detect, "PEEK_BYTES", 4096)
    long_first = claude_lines("long")
    long_first[2]["message"]["content"] = "start the server " + "x" * 10_000
    folder = tmp_path / "projects"
    folder.mkdir()
    write_jsonl(folder / "long.jsonl", long_first)
    result = run("import", folder, "-n", "t")
    assert result.exit_code == 0 and result.stdout.startswith("t: 7 imported"), (result.stdout, result.stderr)
    assert messages()[0]["text"].endswith("x" * 10_000)
    export = tmp_path / "t.ndjson"
    export.write_text(run("since", "t", "#0", "--include-tools").stdout)
    assert run("import", export, "-n", "copy").stdout.startswith("copy: 7 imported")  # its first line the long one
    monkeypatch.setattr(detect.ingest, "line_cap", lambda cap: 8192)  # a first line over the cap: the next ones tell
    assert detect.inspect_file(folder / "long.jsonl", "auto").format == "claude"
    (tmp_path / "one.jsonl").write_text(json.dumps({"kind": "user", "text": "y" * 20_000}) + "\n")
    with pytest.raises(BadInput, match="its only line is over the 8,192-byte line cap"):
        detect.inspect_file(tmp_path / "one.jsonl", "auto")


def test_a_directory_imports_its_sessions(run, tmp_path):
    folder = tmp_path / "projects"
    (folder / "subagents").mkdir(parents=True)
    write_jsonl(folder / "main.jsonl", claude_lines("one"))
    write_jsonl(folder / "subagents" / "agent-1.jsonl", claude_lines("two"))
    (folder / "notes.txt").write_text("not a session")
    result = run("import", folder, "-n", "t")
    assert result.exit_code == 0 and result.stdout.endswith("t: 14 imported, 0 already present, 0 malformed skipped; 14 messages in all\n")


@pytest.mark.parametrize(
    "args, error",
    [
        (["missing.jsonl"], "missing.jsonl: no such file"),
        (["plain.txt"], "not JSON lines"),
        (["odd.jsonl"], "cannot tell its format"),
        (["odd.jsonl", "--format", "gpt"], "unknown format 'gpt'"),
        (["--name", "../x"], "invalid memory name"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(run, home, tmp_path, monkeypatch, args, error):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plain.txt").write_text("hello\nworld\n")
    write_jsonl(tmp_path / "odd.jsonl", [{"hello": "world"}])
    write_jsonl(tmp_path / "ok.jsonl", [{"kind": "user", "text": "fine"}])
    before = snapshot(home)
    result = run("import", "ok.jsonl", *args)
    assert result.exit_code == 2
    assert error in result.stderr and result.stderr.startswith("pimem: error: ")
    assert snapshot(home) == before


def test_a_file_whose_first_line_is_still_being_written_is_left_for_the_next_import(run, home, tmp_path):
    """It was refused as "not JSON lines" (exit 2), and the finished sessions beside it with it."""
    folder = tmp_path / "projects"
    folder.mkdir()
    write_jsonl(folder / "old.jsonl", claude_lines())
    new = folder / "new.jsonl"
    new.write_text('\n{"type":"user","sessionId":"s2","uuid":"u1","mess')
    result = run("import", folder, "-n", "t")
    assert result.exit_code == 0 and result.stdout.startswith("t: 7 imported"), (result.stdout, result.stderr)
    assert f"{new}:2: last line still being written; left for the next import\n" in result.stderr
    alone = run("import", new, "-n", "t")
    assert alone.exit_code == 1 and alone.stdout == ""
    assert alone.stderr == f"pimem: error: nothing to import: {new}:2: last line still being written; left for the next import\n"
    (tmp_path / "plain.txt").write_text("hello\nworld")  # (whole lines that are no JSON: refused still)
    assert "not JSON lines" in run("import", tmp_path / "plain.txt", "-n", "t").stderr


@pytest.mark.parametrize("text", ["hello world", "[1,2,3]", "\ufeff  42"])
def test_a_lone_line_without_newline_that_cannot_open_an_object_is_not_json_lines(run, home, tmp_path, text):
    """Only the start of a JSON object (``{`` not yet closed) is a line still being written: any other lone line
    without its newline is refused, with the files beside it, as before."""
    good = write_jsonl(tmp_path / "ok.ndjson", [{"kind": "user", "text": "a"}])
    odd = tmp_path / "odd.jsonl"
    odd.write_bytes(text.encode())
    before = snapshot(home)
    result = run("import", good, odd, "-n", "q")
    assert result.exit_code == 2, (result.stdout, result.stderr)
    assert result.stderr == f"pimem: error: {odd}: not JSON lines; pimem imports pi, claude, codex and ndjson files\n"
    assert snapshot(home) == before
    odd.write_bytes(b'\xef\xbb\xbf \t{"kind": "us')  # (a BOM, blanks: being written)
    result = run("import", odd, "-n", "q")
    assert result.exit_code == 1 and "last line still being written" in result.stderr, result.stderr


def test_forced_format_reports_every_unreadable_line(run, home, tmp_path):
    path = write_jsonl(tmp_path / "x.jsonl", codex_lines()[:1] + ["[1, 2]"])
    result = run("import", path, "--format", "codex", "-n", "t")
    assert result.exit_code == 1 and result.stdout == "" and "x.jsonl:2: not a Codex rollout line" in result.stderr
    assert result.stderr.endswith("pimem: error: nothing to import: 1 malformed line skipped and no message read\n")
    assert not (home / "t").exists()  # nothing imported: the memory is not created


def test_a_transcript_holding_no_message_is_nothing_to_import(run, home, tmp_path):
    """A Claude Code transcript of progress and snapshot lines only: '0 imported' and exit 0, as if all were
    well. It says why nothing was imported and exits 1, the store untouched; a file read before that grew
    by such lines only is no news (exit 0)."""
    base = {"sessionId": "s", "cwd": "/home/dev/api", "timestamp": "2026-02-10T22:00:00.000Z"}
    path = write_jsonl(tmp_path / "c.jsonl", [{**base, "type": "progress", "uuid": "p1", "data": {}},
                                               {"type": "file-history-snapshot", "messageId": "m", "snapshot": {}}])
    result = run("import", path, "-n", "t")
    assert result.exit_code == 1 and result.stdout == ""  # (no summary of a memory never created)
    assert result.stderr == (f"pimem: error: nothing to import: {path} holds no message (only lines that carry none, "
                             "such as progress or snapshots)\n")
    assert not home.exists() or not (home / "t").exists()
    other = write_jsonl(tmp_path / "d.jsonl", [{**base, "type": "progress", "uuid": "p2", "data": {}}])
    both = run("import", path, other, "-n", "t", "--json")
    assert both.exit_code == 1 and both.stdout == "" and "none of the 2 files holds a message" in both.stderr
    write_jsonl(path, claude_lines())
    assert run("import", path, "-n", "t").exit_code == 0
    write_jsonl(path, [{**base, "type": "progress", "uuid": "p3", "data": {}}])
    grown = run("import", path, "-n", "t")
    assert grown.exit_code == 0 and grown.stdout.startswith("t: 0 imported, 0 already present"), grown.stdout


def test_a_nul_in_an_imported_text_keeps_the_message_and_says_so(run, home, tmp_path):
    lines = claude_lines()
    lines[6]["message"]["content"][0]["content"] = [{"type": "text", "text": "Exit code 2\nbinary\u0000output"}]
    result = run("import", write_jsonl(tmp_path / "c.jsonl", lines))
    assert result.exit_code == 0 and "7 imported" in result.stdout
    assert f"{(tmp_path / 'c.jsonl').resolve()}:7: its NUL characters are logged as \u2400 (U+2400)" in result.stderr
    assert brief(messages("api"))[2:4] == [("tool", 'Bash({"command":"make serve"})'), ("echo", "Exit code 2\nbinary\u2400output")]
    assert run("append", "api", "a\u0000b").exit_code == 2  # (what a person gives pimem itself is refused, not changed)


@pytest.mark.parametrize(
    "lines, fmt, looks",
    [(claude_lines(), "codex", "claude"), (codex_lines(), "claude", "codex"), (claude_lines(), "pi", "claude"),
     ([{"kind": "user", "text": "hi"}], "codex", "ndjson"), ([{"hello": "world"}], "ndjson", None)],
)
def test_a_file_with_no_line_in_the_format_asked_for_is_refused(run, home, tmp_path, lines, fmt, looks):
    path = write_jsonl(tmp_path / "x.jsonl", lines)
    result = run("import", path, "--format", fmt, "-n", "t")
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert f"x.jsonl: not a {fmt} file" in result.stderr
    assert (f"it looks like {looks} (give --format {looks}" if looks else "no format pimem knows") in result.stderr
    assert not home.exists() or not (home / "t").exists()  # refused before anything is written


def test_a_file_of_no_json_is_refused_whatever_the_format(run, home, tmp_path):
    (tmp_path / "plain.txt").write_text("hello\nworld\n")
    result = run("import", tmp_path / "plain.txt", "--format", "codex", "-n", "t")
    assert result.exit_code == 2 and "not JSON lines" in result.stderr and not (home / "t").exists()


def test_no_progress_bar_on_a_pipe(run, tmp_path, monkeypatch):
    from pimem.commands import import_

    monkeypatch.setattr(import_, "PROGRESS_MIN_BYTES", 0)
    result = run("import", pi_tree(tmp_path / "s.jsonl"), "-n", "t")
    assert result.exit_code == 0 and result.stderr == ""


def test_progress_bar_on_a_terminal_goes_to_stderr(home, tmp_path):
    import pty
    import subprocess

    from conftest import pimem_cmd, subprocess_env
    from pimem.commands.import_ import PROGRESS_MIN_BYTES

    path = tmp_path / "big.ndjson"
    line = json.dumps({"kind": "user", "text": "x" * 1000}) + "\n"
    path.write_text(line * (PROGRESS_MIN_BYTES // len(line) + 10))
    master, slave = pty.openpty()
    proc = subprocess.Popen(pimem_cmd("import", path, "-n", "t"), stdout=subprocess.PIPE, stderr=slave, env=subprocess_env())
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not chunk:
            break
        seen += chunk
    out, _ = proc.communicate(timeout=120)
    os.close(master)
    assert proc.returncode == 0
    assert b"importing" in seen and b"MB" in seen
    assert out.startswith(b"t: ") and b"importing" not in out


def test_import_in_a_real_process(sh, tmp_path):
    proc = sh("import", pi_tree(tmp_path / "s.jsonl"))
    assert proc.returncode == 0
    assert proc.stdout == b"shop: 7 imported, 0 already present, 0 malformed skipped; 7 messages in all\n"
    assert proc.stderr == b"importing into memory 'shop' (choose another with --name)\n"


# ---- the real samples -------------------------------------------------------------------------------------

def _samples() -> Path | None:
    """$PIMEM_SAMPLES, else ../shared/samples beside the checkout (or beside its worktree folder)."""
    if os.environ.get("PIMEM_SAMPLES"):
        return Path(os.environ["PIMEM_SAMPLES"])
    root = Path(__file__).resolve().parents[1]
    return next((p for p in (root.parent / "shared" / "samples", root.parent.parent / "shared" / "samples") if p.is_dir()), None)


def _sample(pattern: str) -> Path:
    folder = _samples()
    found = sorted(folder.glob(pattern)) if folder and folder.is_dir() else []
    if not found:
        pytest.skip(f"no sample {pattern} in {folder or '../shared/samples'}")
    return found[0]


def _json_lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _assert_paired(msgs):
    calls = {m["meta"]["call_id"] for m in msgs if m["kind"] == "tool" and m["meta"].get("call_id")}
    results = {m["meta"]["call_id"] for m in msgs if m["kind"] == "echo" and m["meta"].get("call_id")}
    assert calls and results <= calls


def test_sample_pi_session(run, tmp_path):
    path = _sample("pi-*.jsonl")
    lines = _json_lines(path)
    result = run("import", path, "-n", "s")
    assert result.exit_code == 0 and "0 malformed" in result.stdout
    msgs = messages("s")
    entries = [e for e in lines if e.get("type") == "message"]
    roles = lambda role: [e for e in entries if e["message"]["role"] == role]  # noqa: E731
    calls = sum(1 for e in roles("assistant") for b in e["message"]["content"] if b.get("type") == "toolCall")
    count = lambda kind: sum(1 for m in msgs if m["kind"] == kind)  # noqa: E731
    assert count("tool") == calls and count("echo") == len(roles("toolResult"))
    assert count("user") == sum(1 for e in roles("user") if any(b.get("text", "").strip() for b in e["message"]["content"]))
    _assert_paired(msgs)
    assert [m["date"] for m in msgs if m["kind"] == "user"] == [
        e["timestamp"] for e in roles("user") if any(b.get("text", "").strip() for b in e["message"]["content"])]
    assert {m["meta"]["session"] for m in msgs} == {lines[0]["id"]}


def test_sample_claude_transcript(run, tmp_path):
    path = _sample("*tool_heavy*.jsonl")
    lines = _json_lines(path)
    run("import", path, "-n", "s")
    msgs = messages("s")
    uses = [b for e in lines if e.get("type") == "assistant" for b in e["message"]["content"] if b.get("type") == "tool_use"]
    results = [b for e in lines if e.get("type") == "user" and isinstance(e["message"]["content"], list)
               for b in e["message"]["content"] if b.get("type") == "tool_result"]
    printed = [e for e in lines if e.get("type") == "user" and str(e["message"]["content"]).startswith("<local-command-stdout>")]
    assert sum(m["kind"] == "tool" for m in msgs) == len(uses)
    assert sum(m["kind"] == "echo" for m in msgs) == len(results) + len(printed)  # (a slash command's output too)
    _assert_paired(msgs)
    by_uuid = {e["uuid"]: e["timestamp"] for e in lines if "uuid" in e}
    assert all(m["date"] == by_uuid[m["meta"]["entry"]] for m in msgs)


def test_sample_codex_rollout(run, tmp_path):
    path = _sample("codex-*.jsonl")
    lines = _json_lines(path)
    run("import", path, "-n", "s")
    msgs = messages("s")
    items = [e["payload"] for e in lines if e["type"] == "response_item"]
    calls = [p for p in items if p["type"] in ("function_call", "custom_tool_call")]
    outputs = [p for p in items if p["type"] in ("function_call_output", "custom_tool_call_output")]
    assert sum(m["kind"] == "echo" for m in msgs) == len(outputs)
    assert sum(m["kind"] == "tool" and "call_id" in m["meta"] for m in msgs) == len(calls)
    _assert_paired(msgs)
    assert not any("<environment_context>" in m["text"] or "AGENTS.md instructions" in m["text"] for m in msgs)
    first_user = next(m for m in msgs if m["kind"] == "user")
    assert first_user["text"] == next(
        p["content"][0]["text"] for p in items if p["type"] == "message" and p["role"] == "user" and not p["content"][0]["text"].startswith(("#", "<")))
    assert msgs[0]["date"] >= lines[0]["timestamp"] and all(m["meta"]["session"] == lines[0]["payload"]["id"] for m in msgs)


def test_the_key_set_scans_for_a_few_keys_and_builds_a_set_for_many():
    from pimem.importers.state import KeySet

    keys = [bytes([n]) * 16 for n in range(1, 100)]
    data = b"".join(keys)
    straddling = data[8:24]  # the end of one key and the start of the next: not a key
    found = KeySet(data)
    assert keys[5] in found and straddling not in found and b"\0" * 16 not in found
    found.add(b"\0" * 16)
    assert b"\0" * 16 in found
    for _ in range(KeySet.SCANS):
        assert keys[7] in found
    assert found._set is not None and keys[98] in found and straddling not in found  # a set by now, same answers


def test_past_its_deadline_an_import_stops_after_a_line_and_the_next_reads_on(home, tmp_path, monkeypatch):
    import time

    from pimem.importers import job, plan, run

    monkeypatch.setattr(job, "BATCH_LINES", 3)
    path = write_jsonl(tmp_path / "n.jsonl", [{"kind": "user", "text": f"m{k}"} for k in range(10)])
    mem = Memory.at("t")
    first = run(mem, plan([str(path)]), deadline=time.monotonic())  # already past: one line read, then stop
    assert first[0].imported == 1 and [m["text"] for m in mem.messages()] == ["m0"]
    second = run(mem, plan([str(path)]))
    assert (second[0].from_line, second[0].imported, second[0].present) == (2, 9, 0)
    assert [m["text"] for m in mem.messages()] == [f"m{k}" for k in range(10)]


def test_an_unreadable_directory_under_an_imported_one_fails_the_import_as_an_unreadable_file_does(home, tmp_path):
    import subprocess

    from conftest import pimem_cmd, subprocess_env
    from test_follow import as_a_user

    folder = tmp_path / "sessions"
    for sub, text in (("ok", "a"), ("locked", "b")):
        write_jsonl((folder / sub).mkdir(parents=True) or folder / sub / "s.jsonl", [{"kind": "user", "text": text}])
    (folder / "locked").chmod(0)
    try:
        out = subprocess.run(as_a_user(pimem_cmd("import", folder, "-n", "t")), capture_output=True, env=subprocess_env(), timeout=60)
    finally:
        (folder / "locked").chmod(0o755)
    assert out.returncode == 7 and out.stderr.decode() == f"pimem: error: Permission denied: {folder / 'locked'}\n"
    assert not (home / "t").exists()  # nothing written, as for a file that cannot be read


def test_an_imported_edit_is_summarised_by_the_path_its_arguments_name_not_by_the_transcript(run, tmp_path):
    """An imported message's meta.file is the transcript it came from; the edited file is in the call."""
    typed = write_jsonl(tmp_path / "ed.ndjson", [
        {"kind": "user", "text": "please fix the bug in the app"},
        {"kind": "tool", "text": 'edit({"path":"src/app.py","old":"a","new":"b"})', "meta": {"tool": "edit", "call_id": "c1"}},
        {"kind": "echo", "text": "ok", "meta": {"tool": "edit", "call_id": "c1"}},
    ])
    assert run("import", typed, "-n", "ed").exit_code == 0
    lines = claude_lines()
    lines[5]["message"]["content"][1] = {"type": "tool_use", "id": "toolu_1", "name": "Edit",
                                         "input": {"old_string": "see docs/old.md", "new_string": "x", "file_path": "/home/dev/api/src/db.py"}}
    assert run("import", write_jsonl(tmp_path / "c.jsonl", lines), "-n", "cc").exit_code == 0
    for name, edited in (("ed", "src/app.py"), ("cc", "src/db.py")):
        shown = run("view", name).stdout
        assert f"tool: edited {edited} (" in shown and "ed.ndjson" not in shown and "c.jsonl" not in shown, shown


def test_a_fork_s_branch_goes_on_through_the_entries_it_copied(run, tmp_path):
    """The fork's copy of r1 is logged once, in the parent session, where r1 is on a branch the user left; the
    fork's active branch runs through it, so ``--scope lineage`` finds it (and still not the parent's b1 and c1)."""
    parent = pi_tree(tmp_path / "a.jsonl")
    own = [{"type": "message", "id": "f1", "parentId": "r1", "timestamp": "2026-03-02T10:00:05.000Z",
            "message": {"role": "user", "content": "Carry on from the read"}}]
    run("import", parent, pi_fork(parent, tmp_path / "b.jsonl", 3, "sess-2", own), "-n", "t")
    entries = {m["i"]: (m["meta"]["session"], m["meta"]["entry"]) for m in messages()}
    assert {entries[i] for i in off_lineage(messages())} == {("sess-1", "b1"), ("sess-1", "c1")}
    found = run("recall", "t", "refresh", "--include-tools", "--scope", "lineage", "--json")
    assert "export function refresh" in found.stdout


def test_a_line_whose_timestamp_cannot_be_stored_is_imported_dated_as_the_line_before(run, tmp_path):
    """A transcript line whose own time the log cannot store (a leap second, ``23:59:60``; an offset with seconds;
    text that is no date) still says what the user said: it was skipped as a malformed line, its message lost;
    now it takes the date of the line before, as a line that gives no time does, with a warning naming the line."""
    base = {"sessionId": "odd-1", "cwd": "/home/dev/api", "version": "2.1", "isSidechain": False, "userType": "external"}
    stamps = ["2016-12-31T23:59:59.000Z", "2016-12-31T23:59:60Z", "2017-01-01T05:30:00+05:30:15", "soon",
              "2017-01-01T00:00:01.000Z"]
    lines = [{**base, "type": "user", "uuid": f"u{n}", "parentUuid": f"u{n - 1}" if n else None, "timestamp": stamp,
              "message": {"role": "user", "content": f"said {n}"}} for n, stamp in enumerate(stamps)]
    path = tmp_path / "odd.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = run("import", path, "--name", "t")
    assert out.exit_code == 0, out.stderr
    assert [(m["text"], m["date"]) for m in messages()] == [
        ("said 0", "2016-12-31T23:59:59.000Z"), ("said 1", "2016-12-31T23:59:59.000Z"),
        ("said 2", "2016-12-31T23:59:59.000Z"), ("said 3", "2016-12-31T23:59:59.000Z"),
        ("said 4", "2017-01-01T00:00:01.000Z")]
    for line, stamp in ((2, "2016-12-31T23:59:60Z"), (3, "2017-01-01T05:30:00+05:30:15"), (4, "soon")):
        assert f"odd.jsonl:{line}: bad date {stamp!r}" in out.stderr and f"odd.jsonl:{line}:" in out.stderr, out.stderr
    assert "skipped" not in out.stderr and "1 malformed" not in out.stdout, (out.stdout, out.stderr)
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    assert run("import", copy, "--name", "t").stdout.startswith("t: 0 imported, 5 already present")


def test_a_file_removed_after_the_directory_was_listed_is_passed_over_and_the_others_imported(home, tmp_path):
    """A session file removed while a directory's import ran (an agent cleaning up its old sessions) stopped the
    whole import, exit 7 (`No such file or directory`): it is passed over with a warning, the others imported."""
    from pimem.importers import run as import_run
    from pimem.importers.detect import plan

    for n in range(3):
        (tmp_path / f"s{n}.jsonl").write_text(json.dumps({"kind": "user", "text": f"from file {n}"}) + "\n")
    sources = plan([str(tmp_path)])
    (tmp_path / "s1.jsonl").unlink()
    warned: list[str] = []
    reports = import_run(Memory.at("t"), sources, on_warning=warned.append)
    assert [m["text"] for m in messages()] == ["from file 0", "from file 2"] and len(reports) == 2
    assert warned == [f"{tmp_path / 's1.jsonl'}: removed since it was listed; skipped"]


def test_a_line_holding_bytes_that_are_not_utf8_is_imported_with_u_fffd_not_skipped(run, tmp_path):
    """One byte of Latin-1 in a text (`café` written by another program) skipped its line as "not valid JSON", the
    message lost. The line is read with U+FFFD for each such byte, said in a warning; a line that is no JSON
    either way is still skipped, and a copy of the file adds nothing twice."""
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"kind": "user", "text": "ok"}\n{"kind": "user", "text": "caf\xe9 au lait"}\n{"kind": "user", "text": "x\xff\n')
    out = run("import", path, "--name", "t")
    assert out.exit_code == 0 and out.stdout.startswith("t: 2 imported, 0 already present, 1 malformed skipped"), out.stdout
    assert [m["text"] for m in messages()] == ["ok", "caf\ufffd au lait"]
    assert out.stderr == (f"pimem: warning: {path}:2: not valid UTF-8 (byte 29); each byte that is not logged as U+FFFD\n"
                          f"pimem: warning: {path}:3: not valid JSON; skipped\n")
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(path.read_bytes())
    assert run("import", copy, "--name", "t").stdout.startswith("t: 0 imported, 2 already present")


def test_an_ndjson_line_whose_date_cannot_be_stored_is_imported_dated_as_the_line_before(run, tmp_path):
    """The ndjson importer skipped such a line as malformed (``5 malformed skipped``: the texts were lost), where the
    transcripts' importers keep it dated as the line before: it does too, epoch milliseconds read as they read them,
    a line with no date (or null) still logged at the time of import, as ``append --ndjson`` logs it."""
    dates = ["2026-01-01T00:00:00Z", "garbage", "2026-06-30T23:59:60Z", "2026-01-01T00:00:00+05:30:15", 1767225700000,
             True, None]
    path = tmp_path / "mine.ndjson"
    path.write_text("".join(json.dumps({"kind": "user", "text": f"said {n}", "date": date}) + "\n"
                            for n, date in enumerate(dates)))
    out = run("import", path, "--name", "t")
    assert out.exit_code == 0 and out.stdout.startswith("t: 7 imported, 0 already present, 0 malformed"), out.stdout
    got = [(m["text"], m["date"]) for m in messages()]
    assert got[:6] == [
        ("said 0", "2026-01-01T00:00:00Z"), ("said 1", "2026-01-01T00:00:00Z"), ("said 2", "2026-01-01T00:00:00Z"),
        ("said 3", "2026-01-01T00:00:00Z"), ("said 4", "2026-01-01T00:01:40.000Z"), ("said 5", "2026-01-01T00:01:40.000Z")]
    assert got[6][0] == "said 6" and got[6][1].startswith("2026-10-08")  # (now: the tests' clock)
    for line, said in ((2, "'garbage'"), (3, "'2026-06-30T23:59:60Z'"), (4, "'2026-01-01T00:00:00+05:30:15'"), (6, "true")):
        assert f"mine.ndjson:{line}: bad date {said}" in out.stderr, out.stderr
    assert out.stderr.count("the line before's date stands") == 4 and "skipped" not in out.stderr


def test_a_line_whose_epoch_milliseconds_pass_the_year_9999_is_imported_dated_as_the_line_before(run, tmp_path):
    """A time in epoch milliseconds past the year 9999 (``1e20``) stopped the whole import as if the disk had
    failed (``Value too large for defined data type``, exit 7, nothing imported): it is no date, as a string the
    log cannot store is."""
    base = {"sessionId": "odd-2", "cwd": "/home/dev/api", "version": "2.1", "isSidechain": False, "userType": "external"}
    stamps = [1767225600000, 1e20, 253402300800000, 1e308]
    lines = [{**base, "type": "user", "uuid": f"e{n}", "parentUuid": None, "timestamp": stamp,
              "message": {"role": "user", "content": f"said {n}"}} for n, stamp in enumerate(stamps)]
    path = tmp_path / "epoch.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = run("import", path, "--name", "t")
    assert out.exit_code == 0, out.stderr
    assert [(m["text"], m["date"]) for m in messages()] == [(f"said {n}", "2026-01-01T00:00:00.000Z") for n in range(4)]
    assert out.stderr.count("epoch milliseconds past the range of dates") == 3, out.stderr


def test_a_read_whose_write_found_the_memory_locked_leaves_the_next_read_as_it_was(home, tmp_path):
    """A follower's round reads a grown rollout and finds the memory locked when it writes (``Busy``); its next
    round reads the same lines again from where the state saved says. The importer keeps that state parsed
    between reads (88c4dfe) and handed its entry to the parser, which counted the lines into it: the next
    round read them on from a turn that had said them already (``one`` said again logged as its third time,
    ``two`` as its second)."""
    import os
    import time

    from pimem.errors import Busy
    from pimem.importers import plan
    from pimem.importers.job import run as import_job
    from pimem.importers.state import STATE, ImportState

    path = write_jsonl(tmp_path / "rollout-P.jsonl", [codex_meta("cx-P"), *codex_turn(1, 1, "go", "done", "call_A")[:3],
                                                      _said(4, "one")])
    mem = Memory.at("t", home)
    state = ImportState(mem)  # (a follower's, kept between its rounds)
    import_job(mem, plan([str(path)]), state=state)
    written = time.time() - 60  # (written a while ago: kept parsed)
    os.utime(home / "t" / STATE, (written, written))
    write_jsonl(path, [_said(5, "one"), _said(5, "two")])
    with Memory.at("t", home).lock():  # (another writer at it)
        with pytest.raises(Busy):
            import_job(mem, plan([str(path)]), state=state, timeout=0)
    import_job(mem, plan([str(path)]), state=state)
    assert [(m["text"], m["meta"].get("repeat")) for m in messages()[-3:]] == [("one", None), ("one", 1), ("two", None)]


def test_a_deleted_memory_s_import_positions_are_read_from_the_trash_newest_first(run, home, tmp_path):
    """``deleted_positions`` (the hook reads a transcript a deleted memory held on from there): the memory deleted
    last that imported the file answers; a link or a damaged state in the trash is passed over, not followed."""
    from pimem.importers.state import deleted_positions, read_state, trash_stamp

    session = tmp_path / "s.ndjson"
    session.write_text(json.dumps({"kind": "user", "text": "one", "date": "2026-10-01T09:00:00+00:00"}) + "\n")
    assert run("import", session, "-n", "a").exit_code == 0 and run("delete", "a").exit_code == 0
    with session.open("a") as f:
        f.write(json.dumps({"kind": "pi", "text": "two", "date": "2026-10-01T09:01:00+00:00"}) + "\n")
    assert run("import", session, "-n", "b").exit_code == 0 and run("delete", "b").exit_code == 0
    trash = home / ".trash"
    newest = max(trash.iterdir(), key=lambda p: p.name.split("-", 1)[1] + p.name[0])
    assert newest.name.startswith("b-")
    found = deleted_positions(home, [str(session), str(tmp_path / "never.ndjson")])
    assert list(found) == [str(session)] and found[str(session)]["offset"] == session.stat().st_size
    assert deleted_positions(home) == found  # (every file any of them imported: a follower's, read once a run)
    stamp = trash_stamp(home)
    assert run("import", session, "-n", "c").exit_code == 0 and run("delete", "c").exit_code == 0
    assert trash_stamp(home) != stamp and trash_stamp(tmp_path / "no-home") is None  # (read again after a delete)

    found = deleted_positions(home, [str(session)])  # (c's, the same file whole)
    (trash / "x-29991231T000000").mkdir()  # (newer, damaged: passed over)
    (trash / "x-29991231T000000" / "imports.json").write_text("{" + json.dumps(str(session)))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    other = read_state(newest)
    other["files"][str(session)]["offset"] = 1
    (elsewhere / "imports.json").write_text(json.dumps(other))
    assert read_state(elsewhere)["files"][str(session)]["offset"] == 1
    (trash / "y-29991231T000001").symlink_to(elsewhere)  # (a link: never followed)
    assert deleted_positions(home, [str(session)]) == found
    assert deleted_positions(tmp_path / "no-home", [str(session)]) == {}
