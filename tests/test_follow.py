"""pimem import --follow and pimem watch --import: real processes tailing session files that grow, rotate,
get truncated, appear in new directories, and a restart that reads on where the last run stopped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from conftest import pimem_cmd, subprocess_env
from pimem import Memory
from pimem.importers.follow import Follower


def claude_turn(session: str, n: int, cwd: str = "/home/dev/api") -> list[dict]:
    """One exchange of a Claude Code transcript: the user's line and the assistant's reply."""
    base = {"sessionId": session, "cwd": cwd, "version": "2.1", "isSidechain": False, "userType": "external"}
    t = f"2026-02-10T22:{n // 60:02d}:{n % 60:02d}.000Z"
    return [
        {**base, "type": "user", "uuid": f"{session}-u{n}", "parentUuid": None, "timestamp": t,
         "message": {"role": "user", "content": f"question {n} of {session}"}},
        {**base, "type": "assistant", "uuid": f"{session}-a{n}", "parentUuid": f"{session}-u{n}", "timestamp": t,
         "message": {"id": f"m{n}", "model": "claude-x", "role": "assistant", "content": [{"type": "text", "text": f"answer {n}"}]}},
    ]


def codex_rollout(session: str, cwd: str = "/repo/tool") -> list[dict]:
    t = "2026-05-11T08:27:00.000Z"
    item = lambda payload: {"timestamp": t, "type": "response_item", "payload": payload}  # noqa: E731
    return [
        {"timestamp": t, "type": "session_meta", "payload": {"id": session, "timestamp": t, "cwd": cwd}},
        item({"type": "message", "role": "user", "content": [{"type": "input_text", "text": "run the tests"}]}),
        item({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "they pass"}]}),
    ]


def append(path: Path, lines, handle=None) -> None:
    data = "".join(json.dumps(line) + "\n" for line in lines)
    if handle is not None:
        handle.write(data)
        handle.flush()
        return
    with open(path, "a") as f:
        f.write(data)


def watch_import(sessions: Path) -> subprocess.Popen:
    """A real ``pimem watch --import SESSIONS --json`` process."""
    return subprocess.Popen(pimem_cmd("watch", "--import", sessions, "--json"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env())


def texts(name: str) -> list[str]:
    mem = Memory.at(name)
    return [m["text"] for m in mem.messages()] if mem.exists() else []


def wait_for(predicate, seconds: float = 20.0):
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return
        time.sleep(0.05)
    assert predicate()


def start(*args):
    return subprocess.Popen(pimem_cmd("import", "--follow", *args, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env())


def stop(proc, sig=signal.SIGTERM) -> tuple[int, list[dict], str]:
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    return proc.returncode, [json.loads(line) for line in out.splitlines()], err.decode()


def test_a_file_truncated_and_rewritten_in_another_format_is_told_afresh(home, tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    session = sessions / "x.jsonl"
    append(session, claude_turn("s1", 0))
    proc = start(session, "--name", "rw")
    try:
        wait_for(lambda: texts("rw") and "answer 0" in texts("rw"))
        with open(session, "w") as f:  # truncated, then NDJSON where a Claude Code transcript was
            f.write(json.dumps({"kind": "user", "text": "after the rewrite"}) + "\n")
        wait_for(lambda: "after the rewrite" in texts("rw"))
    finally:
        code, _, err = stop(proc)
    assert code == 143 and "skipped" not in err, err


def test_follow_grows_rotates_truncates_and_resumes(home, tmp_path):
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    claude = sessions / "s1.jsonl"
    append(claude, claude_turn("s1", 0))
    notes = sessions / "notes.jsonl"
    append(notes, [{"kind": "note", "text": "first note", "meta": {"cwd": "/home/dev/api"}}])
    proc = start(sessions)
    try:
        wait_for(lambda: texts("api") and len(texts("api")) == 3)  # what was there already

        append(claude, claude_turn("s1", 1))  # grows
        wait_for(lambda: "answer 1" in texts("api"))

        day = sessions / "2026" / "05" / "11"  # a new directory with a new file (a Codex rollout)
        day.mkdir(parents=True)
        append(day / "rollout-1.jsonl", codex_rollout("cx-1"))
        wait_for(lambda: texts("tool") == ["run the tests", "they pass"])

        old = open(claude, "a")  # rotated: renamed away (the agent still writes to it), a new file at its path
        os.rename(claude, sessions / "s1.jsonl.1")
        append(claude, claude_turn("s1", 2), handle=old)
        old.close()
        append(claude, claude_turn("s2", 0))
        wait_for(lambda: "answer 2" in texts("api") and "question 0 of s2" in texts("api"))

        with open(notes, "w") as f:  # truncated and written again
            f.write(json.dumps({"kind": "note", "text": "after truncation", "meta": {"cwd": "/home/dev/api"}}) + "\n")
        wait_for(lambda: "after truncation" in texts("api"))
    finally:
        code, rows, err = stop(proc)
    assert code == 143, err
    assert err == f"pimem: interrupted: {sum(r['imported'] for r in rows)} messages imported while following; the next run reads on from where this one stopped\n"
    assert {(r["name"], Path(r["file"]).name) for r in rows} >= {("api", "s1.jsonl"), ("tool", "rollout-1.jsonl"), ("api", "notes.jsonl")}

    append(claude, claude_turn("s2", 1))  # written while nobody follows: the next run reads on from there
    proc = start(sessions)
    try:
        wait_for(lambda: "answer 1" in texts("api") and texts("api").count("answer 1") == 2)
    finally:
        code, rows, _ = stop(proc, signal.SIGINT)
    assert code == 130
    assert [(Path(r["file"]).name, r["imported"], r["from_line"]) for r in rows] == [("s1.jsonl", 2, 3)]
    assert sorted(texts("api")) == sorted([
        "question 0 of s1", "answer 0", "question 1 of s1", "answer 1", "question 2 of s1", "answer 2",  # s1, to its end
        "first note", "after truncation",
        "question 0 of s2", "answer 0", "question 1 of s2", "answer 1",  # the new file at s1's path
    ])  # each once


def test_sighup_stops_a_follower_between_two_reads_as_sigterm_does(home, tmp_path):
    """A closed terminal (SIGHUP) stops ``import --follow`` as SIGINT and SIGTERM do: exit 129 with the line
    counting what it imported (it took only SIGINT and SIGTERM, so SIGHUP ended it wherever it was, saying
    ``pimem: interrupted`` alone), and the next run reads on from there."""
    session = tmp_path / "s1.jsonl"
    append(session, claude_turn("s1", 0))
    proc = start(session, "--name", "hup")
    try:
        wait_for(lambda: "answer 0" in texts("hup"))
    finally:
        code, rows, err = stop(proc, signal.SIGHUP)
    assert (code, err) == (129, "pimem: interrupted: 2 messages imported while following; "
                                "the next run reads on from where this one stopped\n")
    assert [r["imported"] for r in rows] == [2]
    append(session, claude_turn("s1", 1))
    proc = start(session, "--name", "hup")
    try:
        wait_for(lambda: "answer 1" in texts("hup"))
    finally:
        code, rows, _ = stop(proc, signal.SIGHUP)
    assert code == 129 and [r["imported"] for r in rows] == [2]
    assert texts("hup") == ["question 0 of s1", "answer 0", "question 1 of s1", "answer 1"]


def test_a_file_still_being_started_is_waited_for_without_a_warning(home, tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text('{"kind": "user", "te')  # the first line is still being written
    warnings = []
    follower = Follower([str(tmp_path)], on_warning=warnings.append)
    assert follower.poll() == 0 and warnings == []
    with open(path, "a") as f:
        f.write('xt": "hello"}\n')
    assert follower.poll() == 1 and warnings == []
    path.with_name("odd.jsonl").write_text('{"hello": "world"}\n')
    follower.poll()
    follower.poll()
    assert len(warnings) == 1 and "cannot tell its format" in warnings[0]  # said once, not every round
    follower.close()


def test_a_link_pointed_at_another_file_is_a_file_rotated_at_its_path(home, tmp_path):
    """The follower resolved the link once, when it started, and followed the old file for good."""
    (tmp_path / "a.ndjson").write_text('{"kind": "user", "text": "one"}\n')
    (tmp_path / "b.ndjson").write_text('{"kind": "user", "text": "two"}\n')
    link = tmp_path / "cur.ndjson"
    link.symlink_to("a.ndjson")
    follower = Follower([str(link)], name="s", fmt="ndjson")
    assert follower.poll() == 1
    (tmp_path / "new").symlink_to("b.ndjson")
    (tmp_path / "new").replace(link)  # (ln -sfn b.ndjson cur.ndjson)
    with open(tmp_path / "a.ndjson", "a") as f:
        f.write('{"kind": "user", "text": "one more"}\n')  # (the old file, read to its end first)
    assert follower.poll() == 2
    with open(tmp_path / "b.ndjson", "a") as f:
        f.write('{"kind": "user", "text": "three"}\n')
    assert follower.poll() == 1 and texts("s") == ["one", "one more", "two", "three"]
    follower.close()
    assert json.loads(Memory.at("s").path.joinpath("imports.json").read_text())["files"].keys() == {
        str((tmp_path / "a.ndjson").resolve()), str((tmp_path / "b.ndjson").resolve())}  # (as import keeps them)


def test_follow_of_a_missing_path_exits_2(sh, tmp_path):
    proc = sh("import", "--follow", tmp_path / "nowhere")
    assert proc.returncode == 2 and proc.stderr.startswith(b"pimem: error: ") and b"no such file or directory" in proc.stderr


def test_watch_import_follows_the_sessions_and_builds_their_memories(home, tmp_path):
    sessions = tmp_path / "projects"
    sessions.mkdir()
    watcher = watch_import(sessions)
    try:
        turn = claude_turn("w1", 0)
        turn[1]["message"]["content"][0]["text"] = "a long answer about the staging database. " * 40  # needs a summary
        append(sessions / "w1.jsonl", turn)
        wait_for(lambda: len(texts("api")) == 2)
        from pimem import builder

        wait_for(lambda: builder.survey(Memory.open("api"))["pending"] == 0 and (home / "api" / "tree").exists(), 30)
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert {"event": "imported", "memory": "api", "file": str((sessions / "w1.jsonl").resolve()), "messages": 2} in events
    assert any(e["event"] == "built" and e["memory"] == "api" for e in events)


def test_the_real_codex_and_pi_samples_followed_as_they_grow_equal_their_import(home, tmp_path):
    from test_import import _sample

    folder = tmp_path / "live"
    folder.mkdir()
    follower = Follower([str(folder)])
    wholes = []
    for n, pattern in enumerate(("codex-*.jsonl", "pi-*.jsonl")):
        sample = _sample(pattern)
        raw = sample.read_bytes().splitlines(keepends=True)
        step = max(1, len(raw) // 7)
        with open(folder / sample.name, "ab") as f:
            for k in range(0, len(raw), step):  # the agent appends; the follower looks in between
                f.writelines(raw[k : k + step])
                f.flush()
                follower.poll()
        subprocess.run(pimem_cmd("import", sample, "-n", f"whole{n}"), capture_output=True, env=subprocess_env(), check=True)
        wholes.append(f"whole{n}")
    follower.close()
    strip = lambda name: [(m["kind"], m["text"], m["date"], m["meta"].get("entry")) for m in Memory.open(name).messages()]  # noqa: E731
    followed = {t.memory for t in follower.files.values()}
    assert len(followed) == 2 and sorted(map(strip, followed)) == sorted(map(strip, wholes))


def test_a_last_line_whose_newline_comes_late_moves_no_later_line_number(home, tmp_path):
    """A whole last line read before its newline came: the newline was counted as a line of its own and
    every later warning named the line after the true one."""
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in claude_turn("s1", 0)))
    warnings = []
    follower = Follower([str(path)], name="mine", on_warning=warnings.append)
    assert follower.poll() == 2
    with open(path, "a") as f:
        f.write("\n")
    assert follower.poll() == 0
    with open(path, "a") as f:
        f.write("garbage\n")
    follower.poll()
    follower.close()
    assert warnings == [f"{path}:3: not valid JSON; skipped"]


def test_a_resumed_session_followed_logs_only_its_changed_entry(home, tmp_path):
    """A resumed Claude Code session's copy of the earlier entries adds nothing; an entry of it written
    again with other text is logged once, under its uuid and its content's hash."""
    uuid, reply = (f"00000000-0000-4000-8000-00000000000{n}" for n in (1, 2))
    first = [dict(line, uuid=uuid if line["type"] == "user" else reply) for line in claude_turn("s1", 0)]
    append(tmp_path / "a.jsonl", first)
    warnings = []
    follower = Follower([str(tmp_path)], name="mine", on_warning=warnings.append)
    assert follower.poll() == 2
    resumed = [dict(line, sessionId="s2") for line in first]
    append(tmp_path / "b.jsonl", resumed)
    assert follower.poll() == 0
    resumed[0]["message"] = {"role": "user", "content": "question 0, asked again"}
    append(tmp_path / "b.jsonl", resumed)
    assert follower.poll() == 1 and follower.poll() == 0
    follower.close()
    assert texts("mine") == ["question 0 of s1", "answer 0", "question 0, asked again"]
    entry = list(Memory.at("mine").messages())[-1]["meta"]["entry"]
    assert entry.startswith(uuid + ".") and warnings == [
        f"{tmp_path / 'b.jsonl'}:3: entry id {uuid!r} was imported before with other content; logged as entry {entry}"]


def test_forks_followed_log_only_their_own_messages(home, tmp_path):
    """A Codex rollout read a part at a time counts what its turn said before across its reads (a remark said
    twice in a turn is two messages), so a fork's copy of it is known message for message; a pi fork's copy
    likewise adds nothing. Each fork's own messages are logged."""
    from test_import import codex_fork, codex_meta, codex_turn, pi_fork, pi_tree

    parent = [codex_meta("cx-P"), *codex_turn(1, 1, "run the tests", "Fixed.", "call_A")]
    (tmp_path / "live").mkdir()
    follower = Follower([str(tmp_path / "live")], name="mine")
    append(tmp_path / "live" / "rollout-P.jsonl", parent[:6])  # (its turn said "Checking." once so far)
    assert follower.poll() == 2
    append(tmp_path / "live" / "rollout-P.jsonl", parent[6:])
    assert follower.poll() == 4
    append(tmp_path / "live" / "rollout-F.jsonl", codex_fork(parent, "cx-F", len(parent), codex_turn(2, 20, "run the tests", "Fixed.", "call_B")))
    assert follower.poll() == 6
    tree = pi_tree(tmp_path / "live" / "a.jsonl")
    assert follower.poll() == 7
    own = {"type": "message", "id": "f1", "parentId": "u2", "timestamp": "2026-03-02T10:00:05.000Z",
           "message": {"role": "user", "content": "Try a mutex instead"}}
    pi_fork(tree, tmp_path / "live" / "b.jsonl", 9, "sess-2", [own])
    assert follower.poll() == 1 and follower.poll() == 0
    follower.close()
    said = texts("mine")
    assert said.count("Checking.") == 4 and said.count("run the tests") == 2 and said[-1] == "Try a mutex instead"
    assert len(said) == 20


def test_a_line_written_again_later_is_a_message_again_as_the_file_grows(home, tmp_path):
    """Lines without ids are keyed by their bytes and how often the same line came before in the file: the
    follower counts on across its reads as a fresh import counts from the start."""
    path = tmp_path / "agent.ndjson"
    yes = {"kind": "user", "text": "yes"}
    append(path, [{"kind": "pi", "text": "go on?"}, yes])
    follower = Follower([str(path)], name="mine", fmt="ndjson")
    assert follower.poll() == 2
    for question in ("really?", "sure?"):
        append(path, [{"kind": "pi", "text": question}, yes])
        assert follower.poll() == 2
    follower.close()
    assert texts("mine") == ["go on?", "yes", "really?", "yes", "sure?", "yes"]
    again = subprocess.run(pimem_cmd("import", path, "-n", "copy", "--format", "ndjson"), capture_output=True, env=subprocess_env())
    assert again.returncode == 0 and texts("copy") == texts("mine")
    entries = lambda name: [m["meta"]["entry"] for m in Memory.open(name).messages()]  # noqa: E731
    assert entries("copy") == entries("mine") and len(set(entries("mine"))) == 6


def as_a_user(argv: list[str]) -> list[str]:
    """``argv`` run so that file modes bind (root without its capabilities), or skip where that cannot be."""
    import shutil

    import pytest

    if os.geteuid() != 0:
        return argv
    if not shutil.which("setpriv"):
        pytest.skip("running as root without setpriv: file modes do not bind")
    return ["setpriv", "--bounding-set=-all", "--inh-caps=-all", *argv]


def test_an_unreadable_file_or_directory_is_said_once_and_the_others_are_followed(home, tmp_path):
    sessions = tmp_path / "projects"
    (sessions / "locked").mkdir(parents=True)
    append(sessions / "locked" / "l1.jsonl", claude_turn("l1", 0))
    append(sessions / "shut.jsonl", claude_turn("shut", 0))
    append(sessions / "open.jsonl", claude_turn("open", 0))
    (sessions / "locked").chmod(0)
    (sessions / "shut.jsonl").chmod(0)
    proc = subprocess.Popen(as_a_user(pimem_cmd("import", "--follow", sessions, "--json")), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env())
    try:
        wait_for(lambda: len(texts("api")) == 2)
        for n in (1, 2):  # rounds go on past the two that cannot be read
            append(sessions / "open.jsonl", claude_turn("open", n))
            wait_for(lambda: len(texts("api")) == 2 + 2 * n)
        (sessions / "shut.jsonl").chmod(0o644)
        (sessions / "locked").chmod(0o755)
        wait_for(lambda: len(texts("api")) == 10)  # both read once they can be
    finally:
        (sessions / "shut.jsonl").chmod(0o644)
        (sessions / "locked").chmod(0o755)
        code, rows, err = stop(proc)
    assert code == 143
    lines = err.splitlines()
    assert lines == [*(f"pimem: warning: {sessions.resolve() / name}: Permission denied; following the others, trying it again"
                       for name in ("locked", "shut.jsonl")),
                     "pimem: interrupted: 10 messages imported while following; the next run reads on from where this one stopped"], err
    assert {Path(r["file"]).name for r in rows} == {"open.jsonl", "shut.jsonl", "l1.jsonl"}


def test_a_followed_file_that_turns_into_a_directory_is_said_once_and_followed_again_when_it_is_a_file(home, tmp_path):
    single, other = tmp_path / "agent.ndjson", tmp_path / "other.ndjson"
    append(single, [{"kind": "user", "text": "one"}])
    append(other, [{"kind": "user", "text": "a"}])
    warnings = []
    follower = Follower([str(single), str(other)], name="mine", fmt="ndjson", on_warning=warnings.append)
    assert follower.poll() == 2
    single.unlink()
    single.mkdir()
    for text in ("b", "c"):
        append(other, [{"kind": "user", "text": text}])
        assert follower.poll() == 1
    assert warnings == [f"{single.resolve()}: a directory, not a session file; following the others, trying it again"]
    single.rmdir()
    append(single, [{"kind": "user", "text": "two"}])
    assert follower.poll() == 1
    follower.close()
    assert texts("mine") == ["one", "a", "b", "c", "two"] and len(warnings) == 1


def test_watch_import_goes_on_when_a_session_file_turns_into_a_directory(home, tmp_path):
    sessions = tmp_path / "projects"
    sessions.mkdir()
    watcher = watch_import(sessions)
    try:
        append(sessions / "w1.jsonl", claude_turn("w1", 0))
        wait_for(lambda: len(texts("api")) == 2)
        (sessions / "w1.jsonl").unlink()
        (sessions / "w1.jsonl").mkdir()
        append(sessions / "w2.jsonl", claude_turn("w2", 0))
        wait_for(lambda: len(texts("api")) == 4)  # (the follower's thread did not die on the directory)
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert err.decode().count("a directory, not a session file") == 1


def test_watch_import_says_once_what_stops_an_import_and_goes_on_once_it_is_mended(home, tmp_path):
    sessions = tmp_path / "projects"
    sessions.mkdir()
    watcher = watch_import(sessions)
    try:
        append(sessions / "w1.jsonl", claude_turn("w1", 0))
        wait_for(lambda: len(texts("api")) == 2)
        day = next((home / "api" / "main").glob("*.jsonl"))
        good = day.read_bytes()
        damaged = day.with_name(".damaged")  # a gap (exit 5), written atomically: a file truncated and rewritten
        damaged.write_bytes(good + good.splitlines(keepends=True)[0].replace(b'{"i":0,', b'{"i":7,'))  # in place
        os.replace(damaged, day)  # could be read, or appended to, while empty (1 CI run in many)
        append(sessions / "w1.jsonl", claude_turn("w1", 1))
        time.sleep(5.0)  # rounds of the follower meet the damage
        assert day.read_bytes().count(b"\n") == 3  # nothing logged past the damage
        assert watcher.poll() is None, watcher.communicate()  # it goes on, having stopped building that memory
        mended = day.with_name(".mended")  # mended by a person, atomically: a file truncated and rewritten in
        mended.write_bytes(good)           # place could be read, or appended to, while empty
        os.replace(mended, day)
        wait_for(lambda: len(texts("api")) == 4)
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    err = err.decode()
    # the import's failure said once, and once that the watcher stopped building the memory (said on stderr
    # with --json too: the events may go where nobody reads them)
    said = [line for line in err.splitlines() if "gap in the log" in line]
    assert len(said) == 2 and sum("stopped building api" in line for line in said) == 1, err
    assert "Traceback" not in err, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["memory"] for e in events if e["event"] == "refused"] == ["api"]


def test_a_follower_whose_reader_went_away_keeps_importing_and_blames_no_file(home, tmp_path):
    """``pimem import --follow DIR | head -1``: the reader of its lines is gone, the sessions it captures are
    not; it goes on importing each file as it grows, its lines going nowhere, until stopped as ever."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    append(sessions / "a.jsonl", claude_turn("s1", 0))
    reader, writer = os.pipe()
    os.close(reader)
    try:
        proc = subprocess.Popen(pimem_cmd("import", "--follow", sessions, "--name", "live"), stdout=writer,
                                stderr=subprocess.PIPE, env=subprocess_env(PYTHONUNBUFFERED="1"))
    finally:
        os.close(writer)
    try:
        wait_for(lambda: "answer 0" in texts("live"))
        append(sessions / "b.jsonl", claude_turn("s2", 1))
        wait_for(lambda: "answer 1" in texts("live"))
        append(sessions / "a.jsonl", claude_turn("s1", 2))
        wait_for(lambda: "answer 2" in texts("live"))
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert (proc.returncode, err.decode()) == (
        143, "pimem: interrupted: 6 messages imported while following; the next run reads on from where this one stopped\n")


def test_a_follower_takes_each_project_to_the_memory_import_and_the_hook_take_it_to(home, tmp_path):
    """client-a/api holds 'api'; a follower of client-b/api's sessions goes to client-b's own memory, as a later
    import does, not into 'api'."""
    import hashlib

    a, b = "/home/x/client-a/api", "/home/x/client-b/api"
    own = "api-" + hashlib.sha256(b.encode()).hexdigest()[:8]
    append(tmp_path / "a.jsonl", claude_turn("sa", 0, a))
    assert subprocess.run(pimem_cmd("import", tmp_path / "a.jsonl"), capture_output=True, env=subprocess_env()).returncode == 0
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    append(sessions / "b.jsonl", claude_turn("sb", 0, b))
    follower = Follower([str(sessions)])
    follower.poll()
    follower.close()
    assert texts(own) == ["question 0 of sb", "answer 0"] and texts("api") == ["question 0 of sa", "answer 0"]
    later = sessions / "b2.jsonl"
    append(later, claude_turn("sb2", 1, b))
    proc = subprocess.run(pimem_cmd("import", later), capture_output=True, env=subprocess_env())
    assert proc.returncode == 0 and f"importing into memory '{own}'".encode() in proc.stderr, proc.stderr


def test_a_follower_that_finds_the_memory_of_its_project_s_name_locked_says_so_once_and_goes_on(home, tmp_path):
    """'api', made by hand, is no project's: the first project of the name claims it, under its lock; held by
    another writer meanwhile, the follower says so once and claims it in a later round."""
    from pimem.lock import WriterLock

    mem = Memory.at("api")
    mem.append([{"kind": "user", "text": "notes"}])
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    append(sessions / "b.jsonl", claude_turn("sb", 0))
    warnings = []
    lock = WriterLock(mem.path / "write.lock")
    assert lock.acquire(0)
    try:
        follower = Follower([str(sessions)], on_warning=warnings.append, timeout=0)
        follower.poll()
        follower.poll()
        assert texts("api") == ["notes"]
        assert len(warnings) == 1 and "memory 'api' is locked by another writer" in warnings[0], warnings
    finally:
        lock.release()
    follower.poll()
    follower.close()
    assert texts("api") == ["notes", "question 0 of sb", "answer 0"]


def test_a_session_started_in_the_time_stamp_tick_of_the_last_listing_is_followed(home, tmp_path):
    """A directory is listed again when its mtime changes; a session file made in the same tick of the file
    system's clock as the listing before it (time stamps of a second on HFS+ and many network file systems, two
    on FAT, a clock stepped back) leaves the mtime as the listing saw it, and that session was never followed
    (until something else changed the directory: the next day's first session, say)."""
    sessions = tmp_path / "sessions"
    day = sessions / "2026" / "12" / "07"
    day.mkdir(parents=True)
    append(day / "rollout-1.jsonl", codex_rollout("cx-1"))
    proc = start(sessions)
    try:
        wait_for(lambda: texts("tool") == ["run the tests", "they pass"])
        tick = time.time_ns() + 1_000_000_000  # (the tick the listing and the next session share)
        os.utime(day, ns=(tick, tick))
        time.sleep(0.75)  # (a few rounds: the follower lists the day's directory as of that tick)
        append(day / "rollout-2.jsonl", codex_rollout("cx-2", cwd="/repo/web"))
        os.utime(day, ns=(tick, tick))
        wait_for(lambda: texts("web") == ["run the tests", "they pass"])
    finally:
        code, _, err = stop(proc)
    assert code == 143 and err.startswith("pimem: interrupted: 4 messages imported"), err


def test_a_session_whose_first_lines_name_no_directory_goes_to_its_project_s_memory(home, tmp_path):
    """A Claude Code session opens with lines of its own bookkeeping that name no working directory
    (file-history-snapshot, queue-operation, a resumed session's summary): a follower that found the file then
    took the memory of the file's name, where import of the same file takes the project's ('api')."""
    sessions = tmp_path / "projects" / "-home-dev-api"
    sessions.mkdir(parents=True)
    path = sessions / "0f1e2d3c-0000-4000-8000-000000000001.jsonl"
    append(path, [{"type": "file-history-snapshot", "messageId": "m0", "isSnapshotUpdate": False,
                   "snapshot": {"messageId": "m0", "trackedFileBackups": {}, "timestamp": "2026-02-10T22:00:00.000Z"}}])
    proc = start(tmp_path / "projects")
    try:
        time.sleep(1.5)  # (a few rounds: the follower finds the file of one line)
        append(path, claude_turn("s1", 0))
        wait_for(lambda: texts("api") == ["question 0 of s1", "answer 0"])
    finally:
        code, rows, err = stop(proc)
    assert code == 143 and [r["name"] for r in rows] == ["api"], (rows, err)


def test_a_follower_started_over_many_imported_sessions_reads_the_import_state_once(home, tmp_path, monkeypatch):
    """Each file found at the start was checked against imports.json read and parsed again: a year of Codex
    sessions (2,000 files, a state of 3 MB) took 30 s of CPU before the follower looked at a new session, and
    each line an agent wrote cost a parse of it again."""
    from pimem.importers import state

    sessions = tmp_path / "sessions"
    for n in range(40):
        day = sessions / f"2026/05/{n % 28 + 1:02d}"
        day.mkdir(parents=True, exist_ok=True)
        append(day / f"rollout-{n}.jsonl", codex_rollout(f"cx-{n}"))
    imported = subprocess.run(pimem_cmd("import", sessions), capture_output=True, env=subprocess_env())
    assert imported.returncode == 0, imported.stderr
    old = os.stat(Memory.at("tool").path / "imports.json").st_mtime - 10
    os.utime(Memory.at("tool").path / "imports.json", (old, old))  # (written a while ago: last session's)
    reads = []
    monkeypatch.setattr(state, "read_json", lambda *args: reads.append(args) or json.loads(Path(args[0]).read_text()))
    follower = Follower([str(sessions)])
    assert follower.poll() == 0 and len(follower.files) == 40
    follower.close()
    assert len(reads) == 1


CRASHING_FOLLOWER = """
import os, signal, sys
from pathlib import Path

from pimem.importers import state
from pimem.importers.follow import Follower

sessions, lines, at, torn = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "torn"
state.JOURNAL_MIN = 700  # (folded every few lines: the kills fall in folds too)
calls = []
real = {name: getattr(os, name) for name in ("write", "replace", "ftruncate", "unlink")}

def killing(name):
    def call(*args, **kw):
        calls.append(name)
        if len(calls) == at:  # killed before this write (or halfway through it: ``torn``)
            if torn and name == "write" and len(args[1]) > 1:
                real["write"](args[0], bytes(args[1])[: len(args[1]) // 2])
            os.kill(os.getpid(), signal.SIGKILL)
        return real[name](*args, **kw)
    return call

for name in real:
    setattr(os, name, killing(name))
rollout = sessions / "rollout.jsonl"
follower = Follower([str(sessions)], name="m")
for k in range(len(rollout.read_text().splitlines()) - 1, lines):
    with open(rollout, "a") as f:
        f.write(sys.argv[5 + k] + "\\n")
    follower.poll()
follower.poll()  # (lines written by a run killed before it logged them)
follower.close()
print(" ".join(calls))
"""


def test_a_follower_killed_between_any_two_writes_logs_each_line_once(home, tmp_path):
    """A batch's import state is one line appended to ``imports.journal`` (its whole ``imports.json`` written
    again every few lines, when the journal has grown past it): a follower killed (SIGKILL) before any one of its
    writes, or halfway through one, and then started again, has logged each line of the rollout once, none lost,
    none twice, and the state it leaves reads back as the log's."""
    from pimem.importers.state import read_state

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    turn = [{"timestamp": "2026-05-11T08:27:00.000Z", "type": "response_item", "payload": {
        "type": "message", "role": "user" if k % 2 else "assistant",
        "content": [{"type": "input_text" if k % 2 else "output_text", "text": f"line {k}"}]}} for k in range(4)]
    meta = {"timestamp": "2026-05-11T08:27:00.000Z", "type": "session_meta",
            "payload": {"id": "0196b5d2-0000-7000-8000-00000000c0de", "timestamp": "2026-05-11T08:27:00.000Z",
                        "cwd": "/repo/tool"}}
    lines = [json.dumps(line) for line in turn]

    def follow(at: int, torn: bool = False) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", CRASHING_FOLLOWER, sessions, str(len(lines)), str(at),
                               "torn" if torn else "whole", *lines], capture_output=True, env=subprocess_env())

    def fresh() -> None:
        shutil.rmtree(home / "m", ignore_errors=True)
        (sessions / "rollout.jsonl").write_text(json.dumps(meta) + "\n")

    fresh()
    clean = follow(0)
    assert clean.returncode == 0, clean.stderr
    calls = clean.stdout.split()
    expected = [f"line {k}" for k in range(4)]
    assert texts("m") == expected and len(calls) > 20
    for at, call in enumerate(calls, 1):
        for torn in (False, True) if call == b"write" else (False,):
            fresh()
            killed = follow(at, torn)
            assert killed.returncode == -signal.SIGKILL, (at, killed.stderr)
            again = follow(0)
            assert again.returncode == 0, (at, torn, again.stderr)
            assert texts("m") == expected, (at, torn)
            state = read_state(home / "m")
            assert state["covered"] == len(expected) and state["keys"] >= len(expected), (at, torn, state)


def test_a_followers_line_writes_what_it_changed_not_the_whole_import_state(home, tmp_path, monkeypatch):
    """Each batch wrote the whole ``imports.json`` again: a year of Codex sessions (3 MB of it) cost 8 ms a line.
    A batch appends its files' positions to ``imports.journal``, folded into ``imports.json`` once the journal
    is larger than it: what a line writes does not grow with the state (here 400 KB), and a restart, and a
    reader, find the positions."""
    from pimem import home as homes
    from pimem.importers.state import read_state

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    rollout = sessions / "rollout.jsonl"
    append(rollout, codex_rollout("cx-big"))
    follower = Follower([str(sessions)], name="tool")
    assert follower.poll() == 2
    follower.close()
    path = Memory.at("tool").path / "imports.json"
    state = json.loads(path.read_text())
    entry = next(iter(state["files"].values()))
    for n in range(2000):  # (sessions read before, as a year of them leaves)
        state["files"][f"/home/dev/.codex/sessions/rollout-{n:04d}.jsonl"] = entry
    state.pop("journal", None)  # (as a pimem before the journal wrote it: folded in at the next line)
    path.write_text(json.dumps(state))
    assert path.stat().st_size > 400_000
    follower = Follower([str(sessions)], name="tool")  # (started again: the state read from the disk)
    written = []
    for name in ("write_all", "write_atomic"):
        real = getattr(homes, name)
        monkeypatch.setattr(homes, name, lambda where, data, *a, real=real, **kw: (
            written.append(len(data)) if "imports." in str(kw.get("path", where)) else None, real(where, data, *a, **kw))[1])
    item = codex_rollout("cx-big")[1]
    for k in range(40):
        append(rollout, [{**item, "payload": {**item["payload"], "content": [{"type": "input_text", "text": f"more {k}"}]}}])
        assert follower.poll() == 1
    follower.close()  # (its stop folds the journal in: one write of the whole state, as the first line's)
    assert sum(written) < 2 * path.stat().st_size + 40 * 5_000, written
    assert len(read_state(path.parent)["files"]) == 2001 and json.loads(path.read_text())["covered"] == 42
    assert texts("tool")[-1] == "more 39"


def test_fsck_notes_a_journal_left_out_or_torn_and_repair_folds_it_in(sh, home, tmp_path):
    """``imports.journal`` ending in a line a killed write tore, or naming another ``imports.json`` (an older
    pimem rewrote it, which knows no journal): ``fsck`` notes it (readers leave it out: nothing is wrong), and
    ``--repair`` folds it into ``imports.json``; importing again logs nothing twice."""
    from pimem.importers.state import JOURNAL, read_state

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    rollout = sessions / "rollout.jsonl"
    append(rollout, codex_rollout("cx-fsck"))
    for argv in (["import", rollout, "-n", "m"], ["fsck", "m"]):
        done = sh(*argv)
        assert done.returncode == 0, done.stderr
    assert done.stdout == b"m: ok (2 messages)\n"
    journal = Memory.at("m").path / JOURNAL
    item = codex_rollout("cx-fsck")[1]
    append(rollout, [{**item, "payload": {**item["payload"], "content": [{"type": "input_text", "text": "more"}]}}])
    assert sh("import", rollout, "-n", "m").returncode == 0
    whole = journal.read_bytes()
    assert whole.count(b"\n") == 2  # (its name, then the second import's batch: the first wrote imports.json)
    state = Memory.at("m").path / "imports.json"
    for damage, said in ((lambda: journal.write_bytes(whole + whole.splitlines(True)[-1][:40]), "ends in a line a killed write tore"),
                         (lambda: state.write_text(json.dumps(read_state(Memory.at("m").path))), "names another imports.json")):
        damage()
        out = sh("fsck", "m")
        assert out.returncode == 0 and out.stdout.decode() == (
            f"m: files: {JOURNAL}: note: {said}" + out.stdout.decode().split(said)[1]), out.stdout
        assert b"readers" in out.stdout and b"found logged\n" in out.stdout
        out = sh("fsck", "--repair", "m")
        assert out.returncode == 0 and out.stdout.startswith(f"m: files: {JOURNAL}: repaired: ".encode()), out.stdout
        assert sh("fsck", "m").stdout == b"m: ok (3 messages)\n"
        assert journal.read_bytes().count(b"\n") == 1 and json.loads(state.read_text())["covered"] == 3
        assert sh("import", rollout, "-n", "m").stdout.startswith(b"m: 0 imported, 0 already present")
        assert texts("m") == ["run the tests", "they pass", "more"]


def test_fsck_names_imports_json_where_it_is_a_link_or_a_directory_not_the_journal(sh, home, tmp_path):
    """A link or a directory at ``imports.json`` (which import and the hook stop at) was said by ``fsck`` as
    ``imports.journal: problem: cannot be read (…imports.json is a symbolic link…)``: the file named was the
    journal, which is fine. It names ``imports.json``, and leaves both alone."""
    from pimem.importers.state import JOURNAL, STATE

    rollout = tmp_path / "rollout.jsonl"
    append(rollout, codex_rollout("cx-named"))
    assert sh("import", rollout, "-n", "m").returncode == 0
    state = Memory.at("m").path / STATE
    kept = tmp_path / "kept.json"
    state.rename(kept)
    for plant, said in ((lambda: state.symlink_to(kept), "a symbolic link"), (state.mkdir, "Is a directory")):
        plant()
        for argv in (["fsck", "m"], ["fsck", "--repair", "m"]):
            out = sh(*argv)
            assert out.returncode == 5 and out.stdout.decode().startswith(f"m: files: {STATE}: problem: "), out.stdout
            assert said in out.stdout.decode() and JOURNAL not in out.stdout.decode(), out.stdout
        assert os.path.lexists(state) and (state.is_symlink() or state.is_dir())
        state.unlink() if state.is_symlink() else state.rmdir()


def test_a_journal_line_the_disk_had_no_room_for_is_cut_back_not_left_torn(run, home, tmp_path, monkeypatch):
    """A batch's line that the disk had room for in part only (ENOSPC after some of its bytes) was left in
    ``imports.journal``, torn: ``fsck`` said a killed write tore it, as a failed write of any other file leaves
    nothing. It is cut back: the journal is as before, ``fsck`` finds nothing, the same import again logs
    nothing twice."""
    import errno

    from pimem import home as homes
    from pimem.importers.state import JOURNAL

    rollout = tmp_path / "rollout.jsonl"
    append(rollout, codex_rollout("cx-full"))
    assert run("import", rollout, "-n", "m").exit_code == 0
    item = codex_rollout("cx-full")[1]
    append(rollout, [{**item, "payload": {**item["payload"], "content": [{"type": "input_text", "text": "more"}]}}])
    journal = Memory.at("m").path / JOURNAL
    before = journal.read_bytes()
    real = homes.write_all

    def full(fd, data, durable=True, path=None):
        if path is not None and Path(path).name == JOURNAL:
            os.write(fd, bytes(data)[: len(data) // 2])  # (as much as there was room for)
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(fd, data, durable, path)

    monkeypatch.setattr(homes, "write_all", full)
    result = run("import", rollout, "-n", "m")
    assert result.exit_code == 7 and "No space left on device" in result.stderr, result.stderr
    assert journal.read_bytes() == before
    monkeypatch.setattr(homes, "write_all", real)
    assert run("fsck", "m").stdout == "m: ok (3 messages)\n"
    assert run("import", rollout, "-n", "m").stdout.startswith("m: 0 imported, 1 already present")
    assert texts("m") == ["run the tests", "they pass", "more"]


def _keys_full(monkeypatch):
    """``imports.keys`` written on a full disk (the log has room: its batch is logged first); undone by the
    function returned."""
    import errno

    from pimem import home as homes
    from pimem.importers.state import KEYS

    real = homes.write_all

    def full(fd, data, durable=True, path=None):
        if path is not None and Path(path).name == KEYS:
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(fd, data, durable, path)

    monkeypatch.setattr(homes, "write_all", full)
    return lambda: monkeypatch.setattr(homes, "write_all", real)


def test_an_import_whose_state_could_not_be_saved_says_what_it_logged(run, home, tmp_path, monkeypatch):
    """A batch logged whose import state (imports.keys, imports.json, its journal) could not be written then
    said '0 messages imported; the same import again reads on from where this one stopped', the batch in the
    log. It says what was logged and that the state was not saved (exit 7, the system's refusal); the same import
    again finds the batch held and logs nothing twice."""
    rollout = tmp_path / "rollout.jsonl"
    append(rollout, codex_rollout("cx-state")[:2])
    assert run("import", rollout, "-n", "m").exit_code == 0
    append(rollout, codex_rollout("cx-state")[2:] + [{**codex_rollout("cx-state")[1], "payload": {
        "type": "message", "role": "user", "content": [{"type": "input_text", "text": "and the docs"}]}}])
    undo = _keys_full(monkeypatch)
    result = run("import", rollout, "-n", "m")
    assert (result.exit_code, result.stderr) == (7, (
        f"pimem: error: the import state could not be saved (No space left on device: {home / 'm' / 'imports.keys'}); "
        "2 messages imported, kept in the log: the same import again finds them held and adds only the rest\n"))
    assert texts("m") == ["run the tests", "they pass", "and the docs"]
    undo()
    assert run("import", rollout, "-n", "m").stdout.startswith("m: 0 imported, 2 already present")
    assert texts("m") == ["run the tests", "they pass", "and the docs"]
    assert run("fsck", "m").stdout == "m: ok (3 messages)\n"


def test_a_followers_state_that_could_not_be_saved_is_read_again_not_trusted(home, tmp_path, monkeypatch):
    """A follower keeps its import state between rounds. A round whose state could not be saved kept the batch's
    keys in memory, not on disk: its next round saved a state that said the log was covered past them, and an
    import of the file read again from its start (replaced) logged that batch a second time. The state is read
    again from disk and the log after such a failure."""
    import pytest

    from pimem.errors import PimemError
    from pimem.importers import plan
    from pimem.importers.job import run as import_job
    from pimem.importers.state import ImportState

    first, second = tmp_path / "rollout-1.jsonl", tmp_path / "rollout-2.jsonl"
    append(first, codex_rollout("cx-1"))
    append(second, codex_rollout("cx-2")[:2])
    mem = Memory.at("m")
    state = ImportState(mem)  # (a follower's, kept between its rounds)
    import_job(mem, plan([str(first)]), state=state)
    undo = _keys_full(monkeypatch)
    with pytest.raises(PimemError, match="the import state could not be saved"):
        import_job(mem, plan([str(second)]), state=state)
    undo()
    append(second, codex_rollout("cx-2")[2:])
    import_job(mem, plan([str(second)]), state=state)
    copy = tmp_path / "copy"
    shutil.copyfile(second, copy)
    os.replace(copy, second)  # (the file written again: read from its start)
    assert [r.imported for r in import_job(Memory.at("m"), plan([str(second)]))] == [0]
    assert texts("m") == ["run the tests", "they pass", "run the tests", "they pass"]


def test_a_follower_in_a_program_says_a_memory_the_system_refuses_as_watch_does(home, tmp_path):
    """``Follower`` used from Python (no command's boundary: the library raises what the system refuses as a
    ``PimemError`` that is an ``OSError`` too) says a memory the system refuses as watch says it (not as a
    refused batch), and tries it again next round."""
    path = tmp_path / "s.jsonl"
    path.write_text("\n".join(json.dumps(line) for line in claude_turn("s1", 0)) + "\n")
    (tmp_path / "file").write_text("x")
    warnings = []
    follower = Follower([str(path)], home=str(tmp_path / "file" / "home"), name="mine", on_warning=warnings.append)
    assert follower.poll() == 0
    follower.close()
    assert warnings == [f"{path}: Not a directory: {tmp_path / 'file' / 'home' / 'config.json'} ({tmp_path / 'file'} is a "
                        "file); following the others, trying it again"]


def pimem_run(*args) -> subprocess.CompletedProcess:
    return subprocess.run(pimem_cmd(*args), capture_output=True, env=subprocess_env(), timeout=60)


def following_api(tmp_path):
    """A follower of ``tmp_path/sessions`` once it has imported the first turn of its one session into memory
    ``api``: the directory, that session's file and the process."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    first = sessions / "s1.jsonl"
    append(first, claude_turn("s1", 0))
    proc = start(sessions)
    try:
        wait_for(lambda: texts("api") == ["question 0 of s1", "answer 0"])
    except BaseException:
        stop(proc)
        raise
    return sessions, first, proc


def test_a_memory_renamed_while_followed_is_followed_into_its_new_name(home, tmp_path):
    """``pimem rename`` of a memory a follower feeds: the follower says so once and goes on into the new name (its
    import state moved with it: nothing logged twice, nothing left out), its reports name it, and a new session
    of the project goes there too; a follower started again reads on from where this one stopped."""
    sessions, first, proc = following_api(tmp_path)
    try:
        renamed = pimem_run("rename", "api", "work")
        assert renamed.returncode == 0, renamed.stderr
        append(first, claude_turn("s1", 1))
        append(sessions / "s2.jsonl", claude_turn("s2", 2))  # (a new session of the project, after the rename)
        wait_for(lambda: "answer 1" in texts("work") and "answer 2" in texts("work"))
    finally:
        code, reports, err = stop(proc)
    assert code == 143
    assert sorted(texts("work")) == sorted(["question 0 of s1", "answer 0", "question 1 of s1", "answer 1",
                                            "question 2 of s2", "answer 2"])
    assert err.count("memory 'api' was renamed to 'work'; following on into 'work'") == 1, err
    assert "nothing more was written" not in err, err
    assert [r["name"] for r in reports][1:] == ["work"] * (len(reports) - 1), reports
    assert not (home / "api").is_dir()  # (the pointer only: nothing made again at the old name)
    append(first, claude_turn("s1", 3))
    proc = start(sessions)
    try:
        wait_for(lambda: "answer 3" in texts("work"))
    finally:
        code, reports, err = stop(proc)
    assert len(texts("work")) == 8 and [r["from_line"] for r in reports] == [5], (reports, err)


def test_a_memory_deleted_while_followed_is_not_made_again_from_its_files(home, tmp_path):
    """``pimem delete`` of a memory a follower feeds: one line says so, and neither the file it was fed from (grown
    since) nor a new session of its project makes it again in this run; other memories are followed on. A
    follower started again reads them on from where the deleted memory stood (it imported them whole, bringing
    back what was deleted): the new lines and the new session only; with the memory taken out of the trash
    for good, whole."""
    sessions, first, proc = following_api(tmp_path)
    try:
        deleted = pimem_run("delete", "api")
        assert deleted.returncode == 0, deleted.stderr
        append(first, claude_turn("s1", 1))
        append(sessions / "s2.jsonl", claude_turn("s2", 2))
        append(sessions / "z.jsonl", claude_turn("z1", 0, cwd="/home/dev/other"))  # (written last, and read last in
        wait_for(lambda: "answer 0" in texts("other"))  # its round: once it is in, the others were read)
    finally:
        code, reports, err = stop(proc)
    assert code == 143
    assert not (home / "api").exists(), sorted(os.listdir(home))  # (not even claimed again for the project)
    assert err.count("memory 'api' was deleted while followed") == 1, err
    assert "nothing more was written" not in err, err
    assert err.endswith("pimem: interrupted: 4 messages imported while following; the next run reads on from where this "
                        "one stopped\n"), err
    assert {r["name"] for r in reports} == {"api", "other"}, reports
    proc = start(sessions)
    try:
        wait_for(lambda: len(texts("api")) == 4)
        time.sleep(1.5)  # (a round or two more: nothing else comes)
    finally:
        stop(proc)
    assert sorted(texts("api")) == sorted(["question 1 of s1", "answer 1", "question 2 of s2", "answer 2"])
    assert pimem_run("delete", "api").returncode == 0
    shutil.rmtree(home / ".trash")  # (emptied: nothing says the files were deleted any more)
    proc = start(sessions)
    try:
        wait_for(lambda: len(texts("api")) == 6)
    finally:
        stop(proc)


def test_a_memory_renamed_or_deleted_during_a_followers_read_is_followed_or_left_at_once(home, tmp_path, monkeypatch):
    """A move that lands while a read is under way (after the round's look for moves) is noticed at the read's
    first write: a rename is followed and the read done again there at once, a delete leaves the file; never the
    'run again' of a one-off import, never a memory made again at the deleted name."""
    from pimem import housekeeping
    from pimem.importers import follow

    path = tmp_path / "s.jsonl"
    append(path, claude_turn("s1", 0))
    warnings, reports = [], []
    follower = Follower([str(path)], on_report=lambda memory, report: reports.append(memory), on_warning=warnings.append)
    assert follower.poll() == 2
    real, moves = follow.run, []

    def moved_first(*args, **kwargs):  # (the move lands as the read starts, after the round looked)
        if moves:
            moves.pop(0)()
        return real(*args, **kwargs)

    monkeypatch.setattr(follow, "run", moved_first)
    moves.append(lambda: housekeeping.rename("api", "work"))
    append(path, claude_turn("s1", 1))
    assert follower.poll() == 2
    assert texts("work") == ["question 0 of s1", "answer 0", "question 1 of s1", "answer 1"] and reports == ["api", "work"]
    assert warnings == ["memory 'api' was renamed to 'work'; following on into 'work'"]
    moves.append(lambda: housekeeping.delete("work"))
    append(path, claude_turn("s1", 2))
    assert follower.poll() == 0
    append(path, claude_turn("s1", 3))
    assert follower.poll() == 0
    follower.close()
    assert os.listdir(home) == [".trash"]  # (the pointer that led to it went with it)
    assert warnings[1:] == ["memory 'work' was deleted while followed; nothing more is imported into it until this "
                            "follower is started again (which reads its files on from where it stood)"]


def test_watch_import_follows_a_rename_of_a_memory_it_feeds_but_does_not_build(home, tmp_path):
    """``watch NAME --import DIR`` builds NAME only: the project memories its follower feeds hold no lease of it, so
    ``rename`` goes ahead, and the follower goes on into the new name, as ``import --follow`` does. (Without NAME
    the watcher builds them too, and its lease has ``rename`` and ``delete`` refused, exit 4, until it stops.)"""
    sessions = tmp_path / "projects"
    sessions.mkdir()
    assert pimem_run("append", "keep", "a note").returncode == 0
    append(sessions / "w1.jsonl", claude_turn("w1", 0))
    watcher = subprocess.Popen(pimem_cmd("watch", "keep", "--import", sessions, "--json"), stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=subprocess_env())
    try:
        wait_for(lambda: len(texts("api")) == 2)
        renamed = pimem_run("rename", "api", "work")
        assert renamed.returncode == 0, renamed.stderr
        append(sessions / "w1.jsonl", claude_turn("w1", 1))
        wait_for(lambda: len(texts("work")) == 4)
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    events = [json.loads(line) for line in out.splitlines()]
    assert [e["memory"] for e in events if e["event"] == "imported"] == ["api", "work"], events
    assert err.decode().count("memory 'api' was renamed to 'work'; following on into 'work'") == 1, err


def test_a_projects_claim_let_go_of_while_followed_is_chosen_again_not_taken_for_a_delete(home, tmp_path):
    """A session that names its project before any message (a Codex rollout's first line) has the follower claim
    the project's memory, nothing logged in it; a rename over that claim takes the name (the claim let go of).
    That is no memory deleted: the session's memory is chosen again when it gives messages, as import chooses it."""
    from pimem import housekeeping

    path = tmp_path / "rollout.jsonl"
    meta, *messages = codex_rollout("cx-1")
    append(path, [meta])
    warnings = []
    follower = Follower([str(path)], on_warning=warnings.append)
    assert follower.poll() == 0 and Memory.at("tool").claimed()
    Memory.at("other").append([{"kind": "note", "text": "kept"}])
    housekeeping.rename("other", "tool")
    append(path, messages)
    follower.poll()
    follower.poll()
    follower.close()
    assert texts("tool") == ["kept", "run the tests", "they pass"] and warnings == [], warnings


def test_a_memory_deleted_after_a_followers_read_of_it_failed_is_not_made_again(home, tmp_path):
    """A read that failed (the memory locked past the timeout, say) has the file found again next round, its
    memory opened afresh; deleted in between, it is still the memory the file fed, not a new one to make."""
    from pimem import housekeeping

    path = tmp_path / "s.jsonl"
    append(path, claude_turn("s1", 0))
    warnings = []
    follower = Follower([str(path)], on_warning=warnings.append, timeout=0.05)
    assert follower.poll() == 2
    append(path, claude_turn("s1", 1))
    other = Memory.at("api")
    with other.lock():
        assert follower.poll() == 0 and "locked by another writer" in warnings[-1]
    housekeeping.delete("api")
    append(path, claude_turn("s1", 2))
    assert follower.poll() == 0
    follower.close()
    assert os.listdir(home) == [".trash"] and warnings[-1].startswith("memory 'api' was deleted while followed"), warnings
