"""The per-turn context: its parts, its budgets, and the prefix stability a prompt cache depends on."""

import os
import re

import orjson

from pimem import Memory, context


def view_of(text: str) -> str:
    return text.split("<chat>\n", 1)[1].split("</chat>", 1)[0]


def test_system_prompt_and_tools_are_byte_stable_and_stateless(run, sh, home):
    first = run("context", "--system").stdout
    run("append", "main", "hello")
    run("remember", "main", "--pin", "use pnpm")
    assert run("context", "--system").stdout == first
    assert sh("context", "--system", PIMEM_NOW="2030-01-01T00:00:00+00:00").stdout.decode() == first
    doc = orjson.loads(first)
    assert [t["name"] for t in doc["tools"]] == ["zoom", "search", "date", "recall", "memory_search", "memory_propose"]
    assert not re.search(r"20\d\d-\d\d-\d\d", doc["system"]) and "use pnpm" not in first
    for tool in doc["tools"]:
        assert tool["parameters"]["type"] == "object" and tool["description"]
    assert run("context", "main", "--system").stdout == first  # as a wrapper writes it: the name is ignored
    assert run("context", "no-such-memory", "--system").stdout == first


def test_context_holds_the_view_memories_previous_exchange_and_turn(run, home):
    run("append", "main", "the staging db listens on 5433")
    run("append", "main", "-k", "pi", "noted: 5433")
    run("append", "main", "-k", "tool", "bash(ls)")
    pinned = run("remember", "main", "--pin", "--kind", "constraint", "never touch prod").stdout.strip()
    active = run("remember", "main", "use pnpm").stdout.strip()
    run("remember", "main", "--propose", "model thinks: use yarn")
    run("remember", "main", "--scope", "session", "--session", "S1", "session only")
    out = run("context", "main", "--cwd", "/work/shop").stdout
    assert out == (
        "<chat>\n"
        f"{view_of(out)}"
        "</chat>\n\n"
        "<memories>\n"
        f"- [{pinned}] pinned constraint: never touch prod\n"
        f"- [{active}] fact: use pnpm\n"
        "</memories>\n\n"
        "<previous_exchange>\n"
        "#0 user: the staging db listens on 5433\n"
        "#1 pi: noted: 5433\n"
        "</previous_exchange>\n\n"
        "<turn>now: 2026-10-08T09:30:00+08:00 (Thursday) · cwd: /work/shop</turn>\n"
    )
    assert "0+1|user: the staging db listens on 5433" in view_of(out)
    assert "session only" in run("context", "main", "--session", "S1").stdout
    parts = orjson.loads(run("context", "main", "--json", "--cwd", "/x").stdout)
    assert sorted(parts) == ["memories", "previous_exchange", "turn", "view"]
    assert run("context", "nope").exit_code == 3 and not (home / "nope").exists()


def test_memories_fit_in_4000_chars_pinned_first(run, home):
    for n in range(40):
        run("remember", "main", f"active memory number {n} " + "x" * 150)
    run("remember", "main", "--pin", "the pinned one")
    block = context.memory_block(Memory.open("main"), None)
    assert len(block) <= 4000
    lines = block.splitlines()
    assert "the pinned one" in lines[0] and re.fullmatch(r"\(\d+ more: use memory_search\)", lines[-1])
    assert "active memory number 0 " in lines[1]


def test_the_previous_exchange_passes_over_messages_of_white_space_alone(run, home):
    """The padding a model writes before a tool call (logged as written since 44a3f2a) and white space
    appended alone are messages, but the exchange shows the last ones saying something, as list does."""
    run("append", "main", "where does staging listen?")
    run("append", "main", "-k", "pi", "on 5433")
    run("append", "main", "-k", "pi", "\n\n")
    run("append", "main", "-k", "tool", "bash(ls)")
    run("append", "main", "-k", "pi", " \t")
    run("append", "main", input=" \n")
    exchange = run("context", "main").stdout.split("<previous_exchange>\n")[1].split("</previous_exchange>")[0]
    assert exchange == "#0 user: where does staging listen?\n#1 pi: on 5433\n"
    assert orjson.loads(run("list", "--json").stdout)["last_user"] == "where does staging listen?"
    assert Memory.open("main").count() == 6


def test_the_previous_exchange_passes_over_messages_of_invisible_characters_alone(run, home):
    """A zero-width space, a lone escape sequence, a BOM: a message that shows nothing once ``tree.plain`` has
    left them out is passed over as white space is (the exchange showed #2 user: and #3 pi: empty)."""
    run("append", "main", "where does staging listen?")
    run("append", "main", "-k", "pi", "on 5433\u200b")
    lines = [{"kind": "user", "text": "\u200b"}, {"kind": "pi", "text": "\x1b[0m"},
             {"kind": "pi", "text": " \ufeff\u200b\x1b[31m \x1b[0m\n"}]
    assert run("append", "main", "--ndjson", input="".join(orjson.dumps(r).decode() + "\n" for r in lines)).exit_code == 0
    exchange = run("context", "main").stdout.split("<previous_exchange>\n")[1].split("</previous_exchange>")[0]
    assert exchange == "#0 user: where does staging listen?\n#1 pi: on 5433\n"
    assert orjson.loads(run("list", "--json").stdout)["last_user"] == "where does staging listen?"
    assert Memory.open("main").count() == 5


def test_a_previous_exchange_over_16000_bytes_is_left_to_the_view(run, home):
    run("append", "main", "问" * 3000)  # 9,000 bytes
    run("append", "main", "-k", "pi", "答" * 2000)  # 6,000 bytes
    assert "<previous_exchange>" in run("context", "main").stdout
    run("append", "main", "-k", "pi", "答" * 2500)  # 7,500 bytes: 16,500 together
    assert "<previous_exchange>" not in run("context", "main").stdout


def test_across_turns_the_prefix_only_grows_between_batches(run, home):
    """An agent loop with a small view budget: the system prompt and tools never change; each turn's view
    extends the previous one at its tail, except right after a batch, which only happens once the view has
    passed ``hi`` and shrinks it (towards ``lo``: with no compactor running it stops at unbuilt parents)."""
    hi, lo = 1500, 800
    home.mkdir()
    (home / "config.json").write_bytes(orjson.dumps({"view": {"hi": hi, "lo": lo}}))
    system = run("context", "--system").stdout
    run("append", "main", "hello")
    previous, batches, shrinking = None, 0, False
    for turn in range(60):
        view = view_of(run("context", "main", "--cwd", "/w").stdout)
        if previous is not None and not view.startswith(previous):
            grown = len(previous.encode()) + 2 * 40  # the two lines logged since
            assert shrinking or grown > hi, f"turn {turn}: the view changed before passing hi"
            assert len(view.encode()) < grown, f"turn {turn}: a batch grew the view"
            batches += not shrinking
            shrinking = len(view.encode()) > lo  # a batch waiting for a parent goes on at the next append
        previous = view
        run("append", "main", f"question {turn}")
        run("append", "main", "-k", "pi", f"answer {turn}")
        assert run("context", "--system").stdout == system
    assert 1 <= batches <= 10


def test_the_readme_agent_loop_runs(home, tmp_path):
    """The bash agent loop in the README, run as a script with a pimem that runs this checkout."""
    import os
    import subprocess
    import sys

    from conftest import ROOT, subprocess_env

    readme = (ROOT / "README.md").read_text()
    script = re.search(r"^```bash\n(#!/usr/bin/env bash\n# agent\.sh.*?)^```", readme, re.S | re.M).group(1)
    (tmp_path / "agent.sh").write_text(script)
    shim = tmp_path / "bin" / "pimem"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m pimem "$@"\n')
    shim.chmod(0o755)
    env = subprocess_env(PATH=f"{shim.parent}{os.pathsep}{os.environ['PATH']}")
    proc = subprocess.run(["bash", "agent.sh", "loop"], input="hello\nwhat did I say first?\n", cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    replies = proc.stdout.splitlines()
    assert len(replies) == 2 and all(r.startswith("I read ") for r in replies)
    logged = [(m["kind"], m["text"]) for m in Memory.open("loop").messages()]
    assert logged == [("user", "hello"), ("pi", replies[0]), ("user", "what did I say first?"), ("pi", replies[1])]
    assert orjson.loads((tmp_path / "system.json").read_text())["tools"]


def test_a_tool_result_not_summarised_yet_shows_its_marker_and_is_not_waited_for(run, home):
    """A long tool result whose summary a watcher has not written yet: a reader without tools would be shown
    that summary as a marker anyway, so it sees the marker at once, rather than "(not summarized yet: zoom
    it)" (zoom refuses it without tools), and `context` does not spend its wait on it."""
    from pimem import lease

    run("append", "main", "run the tests please")
    run("append", "main", "-k", "echo", "--meta", '{"exit_code": 0}', "all green here\n" * 300)
    mem = Memory.open("main")
    marker = "1+1|echo: exit 0 (hidden)"  # (in no more bytes than the placeholder the view counts)
    with lease.Lease(mem) as watcher:  # a watcher holds the memory (this process), the summary not written yet
        assert watcher.try_acquire() is None
        assert context.wait_for_summaries(Memory.open("main"), 0.3)  # nothing shown is waiting
        assert not context.wait_for_summaries(Memory.open("main"), 0.3, include_tools=True)
        assert view_of(run("context", "main", "--wait", "0").stdout).splitlines()[-1] == marker
        waited = run("view", "main", "--wait", "0.3")
        assert waited.stdout.splitlines()[-1] == marker and "still waits" not in waited.stderr
        assert "1 line still waits" in run("view", "main", "--wait", "0.3", "--include-tools").stderr
        assert orjson.loads(run("view", "main", "--json").stdout.splitlines()[-1])["text"] == marker.split("|", 1)[1]
        assert "1+1|(not summarized yet: zoom it)" in run("view", "main", "--include-tools").stdout
        assert "1+1|(not summarized yet: zoom it)" in view_of(run("context", "main", "--include-tools", "--wait", "0").stdout)
        assert run("view", "main").stdout.splitlines()[-1] == marker  # (as lines.json keeps it, too)
        assert "(1 waiting for a summary)" in run("view", "main", "--stats").stdout  # (it still is)


def test_status_says_when_a_failing_node_is_retried_whether_a_builder_runs_or_not(run, home):
    """A watcher stopped (or killed) leaves its failures in ``compactor.json`` with their retry times: ``status``
    said ``next`` a time past, and a hand edit's ``retry`` that is no time ("tomorrow") as it was, control
    characters and all. A time still to come is said with no builder running too: the next builder waits for
    it (``Builder._deferred``)."""
    from pimem import lease

    run("append", "main", "a long message " * 100)
    mem = Memory.open("main")
    (mem.path / "compactor.json").write_bytes(orjson.dumps({"failures": {
        "0+1": {"error": "HTTP 429: slow down", "at": "2026-10-08T09:30:00+08:00", "tries": 1,
                "retry": "2026-10-08T09:30:05+08:00"},
        "1+1": {"error": "HTTP 500", "at": "2026-10-08T09:30:01+08:00\x1b[2J", "tries": 2, "retry": "tomorrow\x07"}}}))
    alone = run("status", "main").stdout
    assert "failing   0+1: HTTP 429: slow down (1 try, last 2026-10-08T09:30:00+08:00, next 2026-10-08T09:30:05+08:00)\n" in alone
    assert "failing   1+1: HTTP 500 (2 tries, last 2026-10-08T09:30:01+08:00^[[2J)\n" in alone
    with lease.Lease(mem) as watcher:  # (this process builds it, as far as status can tell)
        assert watcher.try_acquire() is None
        held = run("status", "main").stdout
    assert "(1 try, last 2026-10-08T09:30:00+08:00, next 2026-10-08T09:30:05+08:00)\n" in held
    assert "(2 tries, last 2026-10-08T09:30:01+08:00^[[2J)\n" in held  # (no time: not retried, as context takes it)


def test_after_a_build_the_first_turn_has_nothing_to_catch_up(run, home):
    """``build-tree`` leaves what the next turn reads caught up: the search index (the tool-text mask asks it
    about lines over long spans) and the texts of the view's lines (``lines.json``), so the first turn after a
    bulk import and a build reads only what is new, as every later one does."""
    from bench.synth import messages
    from pimem.tree import label

    data = b"".join(orjson.dumps(msg) + b"\n" for msg in messages(3000, seed=7))
    assert run("append", "big", "--ndjson", input=data).exit_code == 0
    assert run("build-tree", "big").exit_code == 0
    mem = Memory.open("big")
    assert mem.index().behind() == []
    saved = orjson.loads((home / "big" / "lines.json").read_bytes())
    shown = [row for row in mem.views.current().view.rows() if row[2] is not None]
    assert shown and all(label(l, i) in saved["lines"] for l, i, _, _ in shown)
    before = (home / "big" / "lines.json").read_bytes()
    assert run("context", "big", "--wait", "0").exit_code == 0
    assert (home / "big" / "lines.json").read_bytes() == before  # (nothing was left to work out)


SECRET = "SECRETFILE32 contents: root password is swordfish32"
SAID = "the staging database moved to port 5433 last night"


def long_lined_memory(home) -> Memory:
    """4,096 messages (11 MiB of log, over ``index.LAG_BYTES``), every node built, a view small enough to show
    the first 2,048 messages as one line, which quotes a tool result and what the user said: its mask asks the
    index about it (``privacy.MASK_SPAN``)."""
    home.mkdir()
    (home / "config.json").write_bytes(orjson.dumps({"view": {"hi": 3000, "lo": 1500}}))
    pad = "We went through the deployment notes again and compared them with what the runbook says. " * 30
    msgs = [{"kind": "user" if k % 2 else "pi", "text": f"turn {k}: {pad}"} for k in range(4096)]
    msgs[700] = {"kind": "echo", "text": f"{SECRET} and {SAID}. {pad}"}
    msgs[900] = {"kind": "user", "text": f"remember: {SAID}. {pad}"}
    mem = Memory.at("main", home)
    mem.path.mkdir()
    mem.append(msgs)
    line = f"user: ports; the file says {SECRET}; user: {SAID}"
    Memory.open("main", home).write_nodes([(l, i, line if (l, i) == (11, 0) else f"summary {l}+{i}", {"model": "x"})
                                           for l in range(13) for i in range(4096 >> l)])
    for name in ("index.sqlite", "index-1.sqlite", "lines.json"):  # (the index lost; no line shown yet)
        for path in mem.path.glob(name + "*"):
            path.unlink()
    return mem


def test_a_turn_after_the_index_is_lost_hides_its_long_lines_and_leaves_the_catch_up_to_a_process_of_its_own(sh, home):
    """The index of a memory whose log is over 8 MiB was lost: context caught it up before answering (11 s at
    100,000 messages), as the tool-text mask asks it about lines over long spans. It answers at once with such
    a line hidden whole (never its tool output), says once why, and leaves the catch-up to a process of its
    own; the next turn after it shows the line masked as ever."""
    from test_hook import catching_up, gone

    mem = long_lined_memory(home)
    turn = sh("context", "main", "--cwd", "/w")
    assert turn.returncode == 0, turn.stderr
    chat = view_of(turn.stdout.decode()).splitlines()
    assert chat[0] == "0+2048|[tool output hidden]" and "swordfish32" not in turn.stdout.decode()
    assert turn.stderr.decode() == (
        "pimem: the search index of memory 'main' lacks 11 MiB of its log; a process of its own is catching it up, "
        "so lines over long spans are shown as [tool output hidden] until it is done\n")
    assert "0+2048" not in orjson.loads((mem.path / "lines.json").read_bytes())["lines"]  # (shown so this time only)
    pids = catching_up(mem.path)
    assert len(pids) == 1
    gone(pids)
    turn = sh("context", "main", "--cwd", "/w")
    assert (turn.returncode, turn.stderr) == (0, b"")
    assert view_of(turn.stdout.decode()).splitlines()[0] == f"0+2048|user: ports; the file says [tool output hidden]; user: {SAID}"
    assert catching_up(mem.path) == []


def test_a_turn_while_another_process_catches_the_index_up_does_not_wait_for_it(sh, home):
    """Another process holds index.lock (a rebuild, for many seconds) while the index lags the log: context
    waited for the lock (up to PIMEM_LOCK_TIMEOUT) before it showed anything. It hides the lines over long spans
    whole, says why, and starts no other catch-up."""
    from test_hook import catching_up, held_lock

    mem = long_lined_memory(home)
    with Memory.open("main", home) as caught:
        caught.index().catch_up()
        caught.append([{"kind": "user", "text": "one more thing"}])  # (the index lags by a line)
    holder = held_lock(mem.path / "index.lock")
    try:
        turn = sh("context", "main", PIMEM_LOCK_TIMEOUT="600")
        assert catching_up(mem.path) == []
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    assert turn.returncode == 0, turn.stderr
    assert view_of(turn.stdout.decode()).splitlines()[0] == "0+2048|[tool output hidden]"
    assert turn.stderr.decode() == ("pimem: the search index of memory 'main' is being caught up by another process, so "
                                    "lines over long spans are shown as [tool output hidden] until it is done\n")


def test_a_read_only_memory_without_an_index_gets_its_context_with_its_long_lines_hidden(home, monkeypatch, capsys):
    """A memory whose directory cannot be written (a backup, another account's) and has no index: context
    failed (the mask could not catch the index up: 'this memory has no search index yet …'). It answers, the
    lines over long spans hidden whole, and says why."""
    import pimem.index

    mem = long_lined_memory(home)
    access = os.access
    monkeypatch.setattr(pimem.index.os, "access", lambda path, mode, *a, **k: False if mode == os.W_OK and str(path) == str(mem.path)
                        else access(path, mode, *a, **k))  # (as root, every directory can be written)
    said = context.context(Memory.open("main", home), cwd="/w")
    assert view_of(said).splitlines()[0] == "0+2048|[tool output hidden]"
    assert capsys.readouterr().err == (
        f"pimem: {mem.path}: this memory has no search index yet and its directory cannot be written (read-only): search "
        "it where it can be written, or run 'pimem reindex' there; lines over long spans are shown as [tool output hidden]\n")


def test_a_view_or_zoom_after_the_index_is_lost_says_it_catches_it_up_first(sh, home):
    """view and zoom, typed by a user, wait for the catch-up the tool-text mask needs (lines over long spans),
    and said nothing when stderr was a pipe: each says the line search says, once, and shows the line masked."""
    long_lined_memory(home)
    said = b"pimem: the search index of memory 'main' lacks 11 MiB of its log; catching it up first\n"
    shown = sh("view", "main", timeout=300)
    assert (shown.returncode, shown.stderr) == (0, said)
    assert f"0+2048|user: ports; the file says [tool output hidden]; user: {SAID}" in shown.stdout.decode()
    assert (sh("view", "main").stderr, sh("zoom", "main", "0+2048").stderr) == (b"", b"")
    for path in (home / "main").glob("index*.sqlite*"):
        path.unlink()
    (home / "main" / "lines.json").unlink()
    zoomed = sh("zoom", "main", "0+4096", timeout=300)
    assert (zoomed.returncode, zoomed.stderr) == (0, said), zoomed.stderr
    assert "swordfish32" not in zoomed.stdout.decode()


def test_a_turn_with_tools_after_the_index_is_lost_shows_its_long_lines_and_says_nothing_of_them_hidden(sh, home):
    """--include-tools after a big memory's index was lost: the line over a long span was shown whole with its
    tool output, as asked, while stderr said such lines were shown as [tool output hidden]. It says nothing."""
    long_lined_memory(home)
    turn = sh("context", "main", "--cwd", "/w", "--include-tools")
    assert turn.returncode == 0, turn.stderr
    assert view_of(turn.stdout.decode()).splitlines()[0] == f"0+2048|user: ports; the file says {SECRET}; user: {SAID}"
    assert turn.stderr == b""


def test_a_program_asking_one_memory_for_its_context_each_turn_shows_the_long_lines_again_once_the_index_is_back(home):
    """A Python program that keeps one Memory open and asks ``context.parts`` each turn: once a turn had found
    the index far behind, every later turn on that Memory hid the lines over long spans whole, the index caught
    up or not (what it had looked at was kept). Each turn looks afresh."""
    from pimem import context

    mem = long_lined_memory(home)
    notes: list[str] = []
    with Memory.open("main", home) as kept:
        first = context.parts(kept, on_note=notes.append)["view"].splitlines()
        assert first[0] == "0+2048|[tool output hidden]" and len(notes) == 1
        with Memory.open("main", home) as other:
            while other.index().catch_up():
                pass
        later = context.parts(kept, on_note=notes.append)["view"].splitlines()
        assert later[0] == f"0+2048|user: ports; the file says [tool output hidden]; user: {SAID}" and len(notes) == 1
    from test_hook import catching_up, gone

    gone(catching_up(mem.path))


def test_a_thread_sharing_the_memory_while_another_takes_its_turn_is_not_hurried_by_it(home):
    """One ``Memory`` may be shared by threads. ``context.parts`` made the whole object hurried while it ran,
    so another thread reading the view meanwhile found the index 'far behind' for it too: its long line hidden
    whole and its note told to the other thread's turn. Hurrying is the turn's thread's own."""
    import threading

    from pimem import context

    long_lined_memory(home)
    turn_notes: list[str] = []
    in_turn, looked = threading.Event(), threading.Event()
    read: list = []

    def on_note(note: str) -> None:  # (the turn, hurried, holds here while the other thread looks)
        turn_notes.append(note)
        in_turn.set()
        looked.wait(60)

    with Memory.open("main", home) as shared:
        turn = threading.Thread(target=lambda: read.append(("turn", context.parts(shared, on_note=on_note)["view"])))
        turn.start()
        try:
            assert in_turn.wait(60)
            assert shared.hurried is None  # (while the turn is hurried)
        finally:
            looked.set()
        # (the view's read waits for the turn's, which holds the view's caches: it is not hurried for all that)
        read.append(("reader", context.view_text(shared)))
        turn.join(300)
    shown = dict(read)
    assert shown["reader"].splitlines()[0] == f"0+2048|user: ports; the file says [tool output hidden]; user: {SAID}"
    assert shown["turn"].splitlines()[0] == "0+2048|[tool output hidden]" and len(turn_notes) == 1


def test_context_from_a_removed_working_directory_says_the_shells_path(run, home, tmp_path):
    # a wrapper in a git worktree just removed: the turn goes on, naming the directory the shell still has
    import subprocess

    from conftest import ROOT, pimem_cmd, subprocess_env

    run("append", "main", "hello")
    gone = tmp_path / "worktree"
    gone.mkdir()
    proc = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone), *pimem_cmd("context", "main")],
                          capture_output=True, env=subprocess_env(PYTHONPATH=ROOT))  # no empty entry: it is the cwd
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().endswith(f" · cwd: {gone} (removed)</turn>\n") and proc.stderr == b""
    gone.mkdir()  # started with a $PWD that is another directory (a parent's, say): not named as the one removed
    proc = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && PWD="$0" exec "$@"', str(tmp_path), str(gone),
                           *pimem_cmd("context", "main")], capture_output=True, env=subprocess_env(PYTHONPATH=ROOT))
    assert proc.returncode == 0 and proc.stdout.decode().endswith(" · cwd: (removed)</turn>\n"), proc


def test_context_refuses_an_empty_cwd_rather_than_read_it_as_none_given(run, sh, home):
    # `--cwd "$DIR"` with DIR unset: the model is not told the process's directory as if it were the agent's
    run("append", "main", "hello")
    for cwd in ("", " "):
        out = sh("context", "main", "--cwd", cwd)
        assert out.returncode == 2 and out.stdout == b"", cwd
        assert out.stderr.decode() == (f"pimem: error: invalid value for '--cwd': {cwd!r}: give the working directory to "
                                       "report, not an empty one (see 'pimem context --help')\n"), out.stderr
