"""Something other than a regular file where pimem keeps one: a named pipe at view.json, config.json, a day file
… made every reader that opened it wait for ever (an agent's wrapper runs ``pimem view`` and ``pimem context``
every turn); a directory there stopped fsck. Readers now say it in one line naming the file (exit 7), as they
say a directory there, or pass over it where they pass over a missing file; fsck names it as a problem and goes
on. Real processes, each with a timeout: a hang fails the test."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from conftest import pimem_cmd, snapshot, subprocess_env

DAYS = ("2026-10-07", "2026-10-08")
WAIT = 30  # seconds a command may take here before it counts as hung


@pytest.fixture
def memory(run, home, tmp_path):
    """Memory m: messages on two days, a built tree and view, a memory, a compaction window, its own settings and
    the home's, a consumer's cursor, an import; the session file imported is ``tmp_path/session.ndjson``."""
    for n in range(12):
        day = DAYS[n // 6]
        kind = "user" if n % 2 == 0 else "pi"
        assert run("append", "m", "-k", kind, "--date", f"{day}T09:{n:02d}:00+08:00", f"message {n} about the staging db " + "words " * 40 * n).exit_code == 0
    assert run("build-tree", "m").exit_code == 0
    assert run("remember", "m", "the staging db listens on 5433").exit_code == 0
    assert run("compact", "m", "--keep", "200").exit_code == 0
    assert run("model", "m", "extractive").exit_code == 0 and run("model", "--default", "extractive").exit_code == 0
    assert run("since", "m", "#0", "--cursor", "c").exit_code == 0
    session = tmp_path / "session.ndjson"
    session.write_text(json.dumps({"kind": "user", "text": "imported", "date": f"{DAYS[1]}T10:00:00+08:00"}) + "\n")
    assert run("import", session, "-n", "m").exit_code == 0
    assert run("search", "staging", "m").exit_code == 0 and run("view", "m").exit_code == 0
    for name in ("config.json", "memory.jsonl", "windows.jsonl", "cursors.json", "imports.json", "view.json",
                 f"main/{DAYS[0]}.jsonl", f"main/{DAYS[1]}.jsonl"):
        assert (home / "m" / name).is_file(), name
    assert (home / "config.json").is_file() and list((home / "m" / "tree").glob("*.jsonl"))
    return home / "m"


def pimem(*args, input: bytes = b""):
    """``pimem ARGS`` as a real process; one still running after ``WAIT`` seconds is killed and fails the test."""
    try:
        return subprocess.run(pimem_cmd(*args), input=input, capture_output=True, timeout=WAIT, env=subprocess_env())
    except subprocess.TimeoutExpired:
        pytest.fail(f"pimem {' '.join(map(str, args))} still waited after {WAIT} s")


def replace(path, by: str) -> None:
    """Put a named pipe (``pipe``) or a directory holding a file (``dir``) where ``path`` was."""
    if path.exists():
        path.unlink()
    if by == "pipe":
        os.mkfifo(path)
    else:
        path.mkdir()
        (path / "kept").write_text("the user's")


TREE = "tree/*"  # the memory's tree file (its name is the day it was built)

# (where, relative to the home; commands that stop at it in one line naming it, exit 7)
STOPPING = [
    ("config.json", [["view", "m"], ["context", "m"], ["status", "m"], ["append", "m", "x"], ["model", "m"]]),
    ("m/config.json", [["view", "m"], ["context", "m"], ["zoom", "m", "0+4"], ["map", "m"], ["recall", "m", "staging"],
                       ["append", "m", "x"], ["model", "m"]]),
    (f"m/main/{DAYS[0]}.jsonl", [["context", "m"], ["since", "m", "#0"], ["message", "m", "0"], ["status", "m"],
                                 ["append", "m", "x"], ["compact", "m", "--keep", "100"]]),
    (f"m/main/{DAYS[1]}.jsonl", [["context", "m"], ["since", "m", "#0"], ["zoom", "m", "0+8"]]),
    ("m/memory.jsonl", [["context", "m"], ["memories", "m"], ["remember", "m", "y"]]),
    ("m/windows.jsonl", [["compact", "m", "--keep", "100"]]),
    ("m/lock.json", [["context", "m"], ["status", "m"], ["build-tree", "m"]]),
    ("m/compactor.json", [["status", "m"], ["build-tree", "m"]]),
    ("m/cursors.json", [["since", "m", "#0", "--cursor", "c"]]),
    ("m/write.lock", [["append", "m", "x"], ["remember", "m", "y"]]),
    ("m/" + TREE, [["view", "m"], ["context", "m"], ["status", "m"], ["append", "m", "x"]]),
    # (SQLite said 'disk I/O error … is the disk full?' of a pipe, 'unable to open database file' of a directory)
    ("m/index.sqlite", [["search", "staging", "m"], ["recall", "m", "staging"], ["status", "m"]]),
    ("m/index-1.sqlite", [["search", "staging", "m"], ["recall", "m", "staging"]]),
]
# commands over several memories say which memory they were reading
OVER_MEMORIES = {"build-tree", "search", "list"}


def where_in(home, where: str):
    return next((home / where.removesuffix("*")).glob("*.jsonl")) if where.endswith("*") else home / where


@pytest.mark.parametrize("by", ["pipe", "dir"])
@pytest.mark.parametrize("where,commands", STOPPING, ids=[w for w, _ in STOPPING])
def test_a_reader_or_writer_stops_in_one_line_naming_what_stands_there(home, memory, where, commands, by):
    path = where_in(home, where)
    replace(path, by)
    said = "Is a named pipe, not a file" if by == "pipe" else "Is a directory"
    before = snapshot(memory / "main")
    for argv in commands:
        out = pimem(*argv)
        prefix = "m: " if argv[0] in OVER_MEMORIES else ""
        assert (out.returncode, out.stderr.decode()) == (7, f"pimem: error: {prefix}{said}: {path}\n"), argv
        assert snapshot(memory / "main") == before or path.parent.name == "main", argv  # nothing logged
    assert (path.is_fifo() if by == "pipe" else (path / "kept").read_text() == "the user's")  # left as it was


def test_a_pipe_at_the_view_is_passed_over_as_an_unusable_view_by_every_reader(home, memory):
    """view.json is derived: a pipe there is said as an unusable view, and the view folded afresh, as a directory
    there is; none of the readers that saw it waited on it for ever (search and recall read the lines of their
    hits from its saved shape, a map and append bring it forward). A reader that saves the view (the writer lock
    free) saves it in place of the pipe."""
    path = memory / "view.json"
    warning = f"pimem: warning: {path} is unusable (Is a named pipe, not a file); refolding the view from the log\n"
    shown = pimem("view", "m").stdout
    for argv in (["view", "m"], ["context", "m"], ["map", "m"], ["search", "staging", "m"], ["recall", "m", "staging"],
                 ["append", "m", "x"]):
        replace(path, "pipe")
        out = pimem(*argv)
        assert out.returncode == 0 and out.stderr.decode() in (warning, "") and out.stdout, (argv, out.stderr)
        if argv[0] == "view":
            assert out.stdout == shown and out.stderr.decode() == warning and path.is_file()
    replace(path, "pipe")
    out = pimem("fsck", "m")
    assert out.returncode == 5 and out.stdout.decode() == ("m: view: view.json: problem: a named pipe, not a file: pimem leaves it "
                                                           "(remove it: the view is folded afresh from the log)\n")


def test_a_directory_at_the_view_is_read_past_and_left_by_every_reader(home, memory):
    """A directory where view.json goes: the readers said it was unusable, refolded the view, then stopped with
    exit 7 trying to save the view over it (`pimem view`, `search` printing no hit). A reader does without the
    derived file it cannot save, as it does in a memory it cannot write; the directory and what it holds stay."""
    path = memory / "view.json"
    shown = pimem("view", "m").stdout
    replace(path, "dir")
    warning = f"pimem: warning: {path} is unusable (Is a directory); refolding the view from the log\n"
    for argv in (["view", "m"], ["context", "m"], ["search", "staging", "m"], ["recall", "m", "staging"], ["map", "m"]):
        out = pimem(*argv)
        assert (out.returncode, out.stderr.decode()) == (0, warning) and out.stdout, (argv, out.stderr)
        if argv[0] == "view":
            assert out.stdout == shown
    assert (path / "kept").read_text() == "the user's"


DERIVED = [("lines.json", [["view", "m"], ["context", "m"], ["map", "m"], ["build-tree", "m"]]),
           ("ranges.json", [["view", "m"], ["since", "m", "#0"], ["status", "m"], ["list"], ["append", "m", "x"]]),
           ("ranges.writing", [["append", "m", "x"]])]


@pytest.mark.parametrize("name,commands", DERIVED, ids=[n for n, _ in DERIVED])
def test_a_pipe_at_a_derived_file_its_readers_pass_over_hangs_nothing(home, memory, name, commands):
    """lines.json and ranges.json are derived, and a reader that cannot read them reads without them (the texts
    of the view's lines again, the day files' sizes from the files), as it does with a directory there; a writer's
    ranges.writing marks a write in progress and was opened for writing: it waited for a reader of the pipe."""
    replace(memory / name, "pipe")
    for argv in commands:
        out = pimem(*argv)
        assert out.returncode == 0 and "pimem:" not in out.stderr.decode(), (argv, out.stderr)


def test_the_mcp_tools_and_the_hook_say_a_pipe_they_cannot_read_and_answer(home, memory, tmp_path):
    """An MCP client's tool call gets the error in its answer, and the server answers the next; the Claude Code
    hook says it as a warning (exit 0)."""
    from test_mcp import raw_session

    replace(memory / "config.json", "pipe")
    calls = [{"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "view", "arguments": {"name": "m"}}},
             {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "list_memories", "arguments": {}}}]
    answers = {a["id"]: a["result"] for a in raw_session(home, [json.dumps(c).encode() for c in calls], 2)}
    assert answers[2]["isError"] and answers[2]["content"][0]["text"].endswith(f"Is a named pipe, not a file: {memory / 'config.json'}")
    assert not answers[3]["isError"]
    replace(memory / "memory.jsonl", "pipe")
    event = {"session_id": "s1", "transcript_path": str(tmp_path / "none.jsonl"), "cwd": str(tmp_path),
             "hook_event_name": "UserPromptSubmit", "prompt": "staging db"}
    out = pimem("hook", "claude-code", "--name", "m", input=json.dumps(event).encode())
    assert out.returncode == 0 and f"Is a named pipe, not a file: {memory / 'memory.jsonl'}" in out.stderr.decode()


def test_a_pipe_as_a_rename_pointer_is_said_not_waited_on(home, memory):
    """A rename pointer is a file ``<home>/OLD``: a pipe there stopped every command given the name OLD."""
    os.mkfifo(home / "old")
    out = pimem("view", "old")
    assert (out.returncode, out.stderr.decode()) == (7, f"pimem: error: Is a named pipe, not a file: {home / 'old'}\n")
    out = pimem("fsck")
    assert out.returncode == 5 and out.stdout.decode().splitlines()[-1] == (
        "old: pointer: old: problem: a rename pointer that cannot be read (Is a named pipe, not a file): commands given "
        "the name 'old' stop at it (exit 7); pimem leaves it: remove it, or write {\"renamedTo\": \"NAME\"} in it")


# (where, relative to the memory; the line fsck says it in, past "m: ", with WHAT for what stands there)
FSCK = [
    (f"main/{DAYS[0]}.jsonl", f"log: main/{DAYS[0]}.jsonl: problem: WHAT, not a file: every command reading the log stops "
                              "at it (exit 7); pimem leaves it (move it out of main/, and put the day file back if you have it)"),
    ("memory.jsonl", "memory: memory.jsonl: problem: WHAT, not a file: remember, memories, context and compact stop at it "
                     "(exit 7); pimem leaves it (move it away, and put the file back if you have it)"),
    ("windows.jsonl", "windows: windows.jsonl: problem: WHAT, not a file: compact stops at it (exit 7); pimem leaves it "
                      "(move it away, and put the file back if you have it)"),
    ("config.json", "settings: config.json: problem: WHAT, not a file: the commands reading its settings (view, context, "
                    "search, append …) stop at it (exit 7); pimem leaves it (move it away: the memory then has the default settings)"),
    (TREE, f"tree: {TREE}: problem: WHAT, not a file: every reader of the view stops at it (exit 7); pimem leaves it (remove "
           "it: its summaries are built again)"),
    ("lock.json", "files: lock.json: problem: WHAT, not a file: status, context and the builders stop at it (exit 7); pimem "
                  "leaves it (remove it: a builder writes its lease again)"),
    ("compactor.json", "files: compactor.json: problem: WHAT, not a file: status and the builders stop at it (exit 7); "
                       "pimem leaves it (remove it: the builders note the compactor's failures again)"),
    ("cursors.json", "files: cursors.json: problem: WHAT, not a file: since --cursor stops at it (exit 7); pimem leaves it "
                     "(move it away: each consumer's cursor then starts afresh)"),
    ("index.sqlite-shm", "index: index.sqlite-shm: problem: WHAT, not a file: pimem leaves it (remove it: the index is "
                         "built again from the log)"),
    ("index-1.sqlite-wal", "index: index-1.sqlite-wal: problem: WHAT, not a file: pimem leaves it (remove it: the index is "
                           "built again from the log)"),
]


@pytest.mark.parametrize("by", ["pipe", "dir"])
@pytest.mark.parametrize("where,said", FSCK, ids=[w for w, _ in FSCK])
def test_fsck_names_what_stands_where_a_file_is_kept_and_leaves_it(home, memory, where, said, by):
    """fsck stopped at a directory where a day file, memory.jsonl, windows.jsonl or config.json is kept (exit 7,
    'Is a directory', the memory not checked), and said nothing of one at lock.json or compactor.json, where
    context and status stop; with a pipe there it waited for ever. It is a problem, named with what to do, and
    left (by --repair too); once the file is back, the memory is ok."""
    path = where_in(memory, where)
    kept = path.read_bytes() if path.exists() else None  # (lock.json, compactor.json: none while no builder runs or fails)
    replace(path, by)
    line = "m: " + said.replace("WHAT", "a named pipe" if by == "pipe" else "a directory").replace(TREE, f"tree/{path.name}") + "\n"
    before = snapshot(memory / "main")
    for args in (["fsck", "m"], ["fsck"], ["fsck", "--repair", "m"]):
        out = pimem(*args)
        assert (out.returncode, out.stdout.decode(), out.stderr.decode()) == (5, line, "pimem: error: 1 problem found\n"), args
    assert snapshot(memory / "main") == before  # (nothing --repair could do: left as it was)
    assert path.is_fifo() if by == "pipe" else (path / "kept").read_text() == "the user's"
    (path.unlink() if by == "pipe" else (path / "kept").unlink() or path.rmdir())
    if kept is not None:
        path.write_bytes(kept)
    out = pimem("fsck", "m")
    assert (out.returncode, out.stdout.decode()) == (0, "m: ok (13 messages)\n")


@pytest.mark.parametrize("by", ["pipe", "dir"])
def test_fsck_names_what_stands_where_the_homes_settings_are_kept_once(home, memory, run, by):
    """The home's config.json is read for every memory's settings: fsck said 'Is a directory' for the first memory
    and exit 7; it names it once, for the home, and checks no memory (each would stop at it)."""
    assert run("append", "other", "x").exit_code == 0
    replace(home / "config.json", by)
    what = "a named pipe" if by == "pipe" else "a directory"
    for args in (["fsck"], ["fsck", "m"]):
        out = pimem(*args)
        assert (out.returncode, out.stdout.decode()) == (5, f"{home}: settings: config.json: problem: {what}, not a file: "
                                                            "the commands reading settings (view, context, search, append …) "
                                                            "stop at it (exit 7); pimem leaves it (move it away: every memory "
                                                            "then has the default settings and its own)\n"), args


@pytest.mark.parametrize("by", ["pipe", "file"])
def test_something_else_where_the_tree_directory_is_kept_is_named(home, memory, by):
    """A pipe or a file at tree/ was taken for no tree: readers warned that its files lost nodes and folded the
    view afresh without its summaries, while build-tree stopped at it ('Not a directory') and fsck said ok. Every
    reader stops at it as build-tree does, and fsck names it."""
    tree = memory / "tree"
    for file in tree.iterdir():
        file.unlink()
    tree.rmdir()
    os.mkfifo(tree) if by == "pipe" else tree.write_text("the user's")
    before = snapshot(memory / "main")
    for argv in (["view", "m"], ["context", "m"], ["build-tree", "m"], ["append", "m", "x"]):
        out = pimem(*argv)
        prefix = "m: " if argv[0] in OVER_MEMORIES else ""
        assert (out.returncode, out.stderr.decode().splitlines()[-1]) == (7, f"pimem: error: {prefix}Not a directory: {tree}"), argv
    assert snapshot(memory / "main") == before  # (append refused before it logged anything)
    out = pimem("fsck", "m")
    what = "a named pipe" if by == "pipe" else "a file"
    assert (out.returncode, out.stdout.decode()) == (5, f"m: tree: tree: problem: {what}, not a directory: every reader of "
                                                        "the view stops at it (exit 7); pimem leaves it (remove it: the "
                                                        "summaries are built again)\n")


@pytest.mark.parametrize("by", ["pipe", "file"])
def test_something_else_where_the_log_directory_is_kept_is_named(home, memory, by):
    """A pipe or a file at main/, the log's directory: a command given the memory said there was no memory of
    that name (exit 3), list and search said every message was lost from the end of the log (exit 5), and fsck
    offered to log a note in place of each. Every command says what stands there (exit 7), fsck names it."""
    main = memory / "main"
    for file in main.iterdir():
        file.unlink()
    main.rmdir()
    os.mkfifo(main) if by == "pipe" else main.write_text("the user's")
    for argv in (["view", "m"], ["since", "m", "#0"], ["status", "m"], ["append", "m", "x"], ["list"], ["search", "staging"]):
        out = pimem(*argv)
        prefix = "m: " if argv[0] in OVER_MEMORIES else ""
        assert (out.returncode, out.stderr.decode()) == (7, f"pimem: error: {prefix}Not a directory: {main}\n"), argv
    what = "a named pipe" if by == "pipe" else "a file"
    for argv in (["fsck", "m"], ["fsck"]):
        out = pimem(*argv)
        assert (out.returncode, out.stdout.decode()) == (5, f"m: log: main: problem: {what}, not a directory: every command "
                                                            "reading the log stops at it (exit 7); pimem leaves it (move it "
                                                            "away, and put the log's directory back if you have it)\n"), argv
    assert main.is_fifo() if by == "pipe" else main.read_text() == "the user's"
