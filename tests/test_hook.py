"""pimem hook claude-code with Claude Code's payloads (SessionStart, UserPromptSubmit, PreCompact, Stop) over a
growing transcript, as real processes; malformed payloads; bounded time; pimem hook install."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import pimem_cmd, snapshot, subprocess_env
from pimem import Memory
from pimem import terms
from pimem.claude_code import merge, relevant
from pimem.importers.job import READ_SHARE

CWD = "/home/dev/api"


def line(session: str, kind: str, uuid: str, text: str, second: int) -> dict:
    """A Claude Code transcript line (the fields Claude Code writes on every user and assistant line)."""
    base = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": CWD, "sessionId": session,
            "version": "2.1.38", "gitBranch": "main", "type": kind, "uuid": uuid, "timestamp": f"2026-10-0{1 + second // 60}T09:{second % 60:02d}:00.000Z"}
    if kind == "user":
        return {**base, "message": {"role": "user", "content": text}}
    return {**base, "requestId": "req_1", "message": {"id": f"msg_{uuid}", "type": "message", "role": "assistant", "model": "claude-x",
                                                     "content": [{"type": "text", "text": text}], "stop_reason": None}}


def grow(path, *lines) -> None:
    with open(path, "a") as f:
        for item in lines:
            f.write(json.dumps(item) + "\n")


def payload(event: str, session: str, transcript, **extra) -> bytes:
    """What Claude Code writes on the hook's stdin."""
    return json.dumps({"session_id": session, "transcript_path": str(transcript), "cwd": CWD, "permission_mode": "default",
                       "hook_event_name": event, **extra}).encode()


def hook(data: bytes, *args, **env):
    proc = subprocess.run(pimem_cmd("hook", "claude-code", *args), input=data, capture_output=True, timeout=60, env=subprocess_env(**env))
    answer = json.loads(proc.stdout) if proc.stdout.strip() else None
    return proc.returncode, answer, proc.stderr.decode()


def context_of(answer) -> str:
    assert answer is not None and set(answer) == {"hookSpecificOutput"}, answer
    return answer["hookSpecificOutput"]["additionalContext"]


def texts(name="api") -> list[str]:
    return [m["text"] for m in Memory.open(name).messages()]


def test_a_session_captured_event_by_event_and_answered_from_earlier_ones(home, tmp_path):
    earlier = tmp_path / "earlier.jsonl"
    grow(earlier, line("s-old", "user", "o1", "how do we deploy the staging database?", 1),
         line("s-old", "assistant", "o2", "Run make deploy-staging; the staging db listens on port 5433.", 2),
         line("s-old", "user", "o3", "and the tests?", 3))
    code, answer, err = hook(payload("Stop", "s-old", earlier, stop_hook_active=False))
    assert (code, answer, err) == (0, None, "")  # Stop: captured, nothing to say
    assert texts() == ["how do we deploy the staging database?", "Run make deploy-staging; the staging db listens on port 5433.", "and the tests?"]
    assert Memory.open("api").message(0)["meta"]["session"] == "s-old"
    assert subprocess.run(pimem_cmd("remember", "api", "--pin", "never deploy on fridays"), capture_output=True, env=subprocess_env()).returncode == 0

    current = tmp_path / "current.jsonl"  # a new session: Claude Code has not written its transcript yet
    code, answer, err = hook(payload("SessionStart", "s-new", current, source="startup"))
    assert code == 0 and err == ""
    said = context_of(answer)
    assert answer["hookSpecificOutput"]["hookEventName"] == "SessionStart"
    assert "<memories>" in said and "never deploy on fridays" in said and "earlier_sessions" not in said

    prompt = "which port does the staging db listen on?"
    grow(current, line("s-new", "user", "n1", "the staging db is slow today, which port does it listen on", 10))
    code, answer, err = hook(payload("UserPromptSubmit", "s-new", current, prompt=prompt))
    assert code == 0 and err == ""
    said = context_of(answer)
    assert "never deploy on fridays" in said
    assert "#1 " in said and "listens on port 5433" in said  # the earlier session's answer
    assert "slow today" not in said  # the current session's own line is the agent's already
    assert "and the tests?" not in said  # below the threshold: no word of the prompt
    assert len(said) <= 4000
    assert texts()[-1] == "the staging db is slow today, which port does it listen on"  # captured as well

    grow(current, line("s-new", "assistant", "n2", "Port 5433, as before.", 11), line("s-new", "user", "n3", "thanks", 12))
    code, answer, err = hook(payload("PreCompact", "s-new", current, trigger="auto", custom_instructions=""))
    assert (code, answer, err) == (0, None, "")
    assert texts()[-2:] == ["Port 5433, as before.", "thanks"]
    agent = tmp_path / "current" / "subagents" / "agent-a1.jsonl"  # a sub-agent's transcript, beside the session's
    agent.parent.mkdir(parents=True)
    grow(agent, {**line("s-new", "user", "sa1", "sub-agent: list the routes", 13), "isSidechain": True})
    for _ in range(2):  # Stop, and Stop again: nothing twice
        assert hook(payload("Stop", "s-new", current, stop_hook_active=False)) == (0, None, "")
    assert len(texts()) == 7 and texts()[-1] == "sub-agent: list the routes"
    assert Memory.open("api").message(6)["meta"]["sidechain"] is True

    subprocess.run(pimem_cmd("import", earlier, current, agent, "-n", "copy"), capture_output=True, env=subprocess_env(), check=True)
    assert texts("copy") == texts("api")  # the hook logs exactly what import logs


def test_a_project_with_a_long_name_keeps_the_memory_an_earlier_pimem_made_and_another_gets_its_own(home, tmp_path):
    """Earlier versions named a project by the first 64 characters of its name (hooks run every turn, so such
    memories exist): it goes on into that memory; another project whose name starts alike no longer joins it."""
    long = "/home/x/customer-portal-frontend-monorepo-experimental-branch-with-new-auth"
    old = long.rsplit("/", 1)[1][:64]
    earlier = tmp_path / "earlier.jsonl"
    grow(earlier, {**line("s1", "user", "o1", "the staging db listens on port 5433", 1), "cwd": long + "-backend"})
    assert subprocess.run(pimem_cmd("import", earlier, "-n", old), capture_output=True, env=subprocess_env()).returncode == 0

    current = tmp_path / "current.jsonl"
    grow(current, {**line("s2", "user", "n1", "which port does the staging db listen on?", 10), "cwd": long + "-backend"})
    code, answer, err = hook(payload("UserPromptSubmit", "s2", current, cwd=long + "-backend", prompt="staging db port"))
    assert code == 0 and err == "" and "port 5433" in context_of(answer)
    assert texts(old)[-1] == "which port does the staging db listen on?"

    other = tmp_path / "other.jsonl"
    grow(other, {**line("s3", "user", "z1", "another project", 20), "cwd": long + "-zeta"})
    assert hook(payload("Stop", "s3", other, cwd=long + "-zeta")) == (0, None, "")
    assert len(texts(old)) == 2
    names = [p.name for p in home.iterdir() if p.name != old]
    assert len(names) == 1 and len(names[0]) == 64 and texts(names[0]) == ["another project"]


def test_after_its_memory_is_deleted_a_session_is_captured_from_where_the_deleted_memory_stood(home, tmp_path):
    """The next event after ``pimem delete`` imported the whole transcript again into a new memory: what the user
    had deleted (a secret said in the session, say) came back. It reads on from where the deleted memory stood
    while that is in the trash (its sub-agents' files too); another session, and an import by hand, are whole."""
    current = tmp_path / "current.jsonl"
    agents = tmp_path / "current" / "subagents"
    agents.mkdir(parents=True)
    grow(current, line("s1", "user", "u1", "the staging password is hunter2", 1),
         line("s1", "assistant", "a1", "Noted.", 2))
    grow(agents / "agent-1.jsonl", {**line("s1", "user", "g1", "sub-agent: look up hunter2", 3), "isSidechain": True})
    assert hook(payload("Stop", "s1", current, stop_hook_active=False))[:2] == (0, None)
    assert texts() == ["the staging password is hunter2", "Noted.", "sub-agent: look up hunter2"]
    sh = lambda *args: subprocess.run(pimem_cmd(*args), capture_output=True, env=subprocess_env())  # noqa: E731
    assert sh("delete", "api").returncode == 0

    assert hook(payload("Stop", "s1", current, stop_hook_active=False)) == (0, None, "")  # (nothing new: nothing
    assert texts() == []  # logged, the project's memory only claimed)
    grow(current, line("s1", "user", "u2", "now deploy the api", 10))
    grow(agents / "agent-1.jsonl", {**line("s1", "assistant", "g2", "sub-agent: deployed", 11), "isSidechain": True})
    assert hook(payload("Stop", "s1", current, stop_hook_active=False)) == (0, None, "")
    assert texts() == ["now deploy the api", "sub-agent: deployed"]

    other = tmp_path / "other.jsonl"  # (another session of the project: whole)
    grow(other, line("s2", "user", "v1", "what about the cache?", 20))
    assert hook(payload("Stop", "s2", other, stop_hook_active=False))[:2] == (0, None)
    assert texts()[-1] == "what about the cache?"
    assert sh("delete", "api").returncode == 0
    assert sh("import", str(current), "--name", "api").returncode == 0  # (by hand: the whole file, as asked)
    assert texts() == ["the staging password is hunter2", "Noted.", "now deploy the api"]


def test_a_prompt_with_nothing_relevant_gets_only_the_memories(home, tmp_path):
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "rename the billing module", 1))
    hook(payload("Stop", "s1", earlier))
    code, answer, _ = hook(payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt="what is the weather like"))
    assert (code, answer) == (0, None)  # no memories, no relevant hit: nothing to add


def test_the_context_stays_within_the_budget(home, tmp_path):
    earlier = tmp_path / "e.jsonl"
    grow(earlier, *[line("s1", "user", f"u{k}", f"staging deploy step {k}: " + "details " * 30, k) for k in range(20)])
    hook(payload("Stop", "s1", earlier))
    mem = Memory.open("api")
    from pimem import memories

    for k in range(30):
        memories.remember(mem, f"rule {k}: " + "be careful " * 20, pin=k % 2 == 0)
    for budget in (4000, 1200, 300):
        args = () if budget == 4000 else ("--budget", budget)
        code, answer, _ = hook(payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt="staging deploy"), *args)
        said = context_of(answer)
        assert code == 0 and len(said) <= budget
        if budget > 300:
            assert "<memories>" in said and "<earlier_sessions>" in said and "more: `pimem memories api` lists them)" in said


@pytest.mark.parametrize(
    "data, reason",
    [
        (b"", "empty"),
        (b"not json", "not JSON"),
        (b"[1, 2]", "not a JSON object"),
        (b"[]", "not a JSON object"),
        (b'"x"', "not a JSON object"),
        (b"{}", "no hook_event_name"),
        (b'{"session_id": "s"}', "no hook_event_name"),
        (b'{"hook_event_name": "Stop"}', "no session_id"),
        (b'{"hook_event_name": "Stop", "session_id": 5}', "session_id is not a string"),
        (b'{"hook_event_name": ["Stop"], "session_id": "s"}', "hook_event_name is not a string"),
    ],
)
def test_a_malformed_payload_exits_1_with_one_line_and_writes_nothing(home, tmp_path, data, reason):
    """A payload that is no hook event exited 2, which Claude Code takes as blocking: a prompt erased, a
    stopping agent told to go on. It is Claude Code's non-blocking error, 1: its line shown to the user."""
    Memory.at("api").append([{"kind": "user", "text": "hi"}])
    before = snapshot(home)
    code, answer, err = hook(data)
    assert code == 1 and answer is None
    assert err.startswith("pimem: error: hook payload: ") and reason in err and err.count("\n") == 1
    assert snapshot(home) == before


@pytest.mark.parametrize(
    "args, reason",
    [
        (("--budget", "x"), "invalid value for '--budget': 'x'"), (("--timeout=-1",), "invalid value for '--timeout'"),
        (("--timeout",), "option '--timeout' requires an argument"), (("--bogus",), "no such option: --bogus"),
        (("--budget", "5", "extra"), "unknown agent 'claude-code extra'"), (("--project",), "are for 'pimem hook install'"),
    ],
)
def test_an_option_the_hook_cannot_take_exits_1_not_2_which_blocks_every_event(home, tmp_path, args, reason):
    """A hook command in settings.json with an option this pimem cannot take (one a later pimem wrote, a value
    edited by hand) exited 2 on every event, a usage error's exit: Claude Code erased every prompt and told every
    stopping agent to go on. It exits 1, Claude Code's non-blocking error, its one line shown to the user; the
    same options to install are a usage error still (exit 2), and so is an unknown agent to install."""
    Memory.at("api").append([{"kind": "user", "text": "hi"}])
    before = snapshot(home)
    for event in ("UserPromptSubmit", "Stop"):
        code, answer, err = hook(payload(event, "s1", tmp_path / "none.jsonl", prompt="hi"), *args)
        assert (code, answer) == (1, None) and err.startswith("pimem: error: ") and reason in err, (event, err)
        assert err.count("\n") == 1 and snapshot(home) == before
    for words in (("claude",), ()):  # (no agent Claude Code can run: the same)
        proc = subprocess.run(pimem_cmd("hook", *words), input=b"{}", capture_output=True, timeout=60, env=subprocess_env())
        assert proc.returncode == 1 and proc.stderr.count(b"\n") == 1 and proc.stderr.startswith(b"pimem: error: "), proc.stderr
    if args != ("--project",):
        proc = subprocess.run(pimem_cmd("hook", "install", "claude-code", "--dry-run", *args), capture_output=True,
                              timeout=60, env=subprocess_env(HOME=tmp_path))
        assert proc.returncode == 2 and reason.encode() in proc.stderr, proc.stderr
    proc = subprocess.run(pimem_cmd("hook", "install", "cursor"), capture_output=True, timeout=60, env=subprocess_env())
    assert proc.returncode == 2 and b"unknown agent 'cursor'" in proc.stderr


def test_a_transcript_of_another_agent_is_said_without_advice_the_hook_cannot_take(home, tmp_path):
    """A pi session given as the transcript: the warning said 'give --format pi, or leave --format out',
    options the hook has not."""
    other = tmp_path / "pi.jsonl"
    grow(other, {"type": "session", "version": 3, "id": "p1", "timestamp": "2026-01-01T00:00:00Z", "cwd": CWD},
         {"type": "message", "id": "a1", "parentId": None, "message": {"role": "user", "content": "hi"}})
    code, answer, err = hook(payload("Stop", "s1", other))
    assert code == 0 and answer == {"systemMessage": f"pimem: {other}: not a claude file: it looks like pi (the hook reads "
                                                     "Claude Code transcripts; import other sessions with pimem import)"}, answer
    assert "--format" not in err


def test_an_event_over_the_payload_limit_is_a_warning_not_a_blocked_prompt(home, tmp_path):
    from pimem.claude_code import PAYLOAD_BYTES

    Memory.at("api").append([{"kind": "user", "text": "hi"}])
    before = snapshot(home)
    code, answer, err = hook(payload("UserPromptSubmit", "s1", tmp_path / "none.jsonl", prompt="x" * (PAYLOAD_BYTES + 1)))
    assert code == 0 and "over 16 MiB and was not read" in answer["systemMessage"], (code, err)
    assert err.count("\n") == 1 and snapshot(home) == before


def test_a_damaged_memory_log_is_told_to_the_user_not_only_to_stderr(home, tmp_path):
    from pimem import memories

    mem = Memory.at("api")
    mem.append([{"kind": "user", "text": "hi"}])
    memories.remember(mem, "the staging db listens on 5433")
    path = mem.path / "memory.jsonl"
    path.write_bytes(path.read_bytes().replace(b"5433", b"5434", 1))  # changed behind pimem's back
    code, answer, err = hook(payload("SessionStart", "s1", tmp_path / "none.jsonl", source="startup"))
    assert code == 0 and "hash does not match" in answer["systemMessage"] and "left out" in answer["systemMessage"], (answer, err)


def test_a_full_disk_under_the_index_is_a_warning_not_a_failed_hook(home, tmp_path):
    """A prompt whose answer needs the index built while the disk takes no byte more: SQLite's disk I/O error
    left the hook (exit 7, nothing printed, Claude Code's hook error instead of the context); it is a warning
    in systemMessage, exit 0, like any other failure after the payload is read."""
    import resource

    transcript = tmp_path / "t.jsonl"
    grow(transcript, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    assert hook(payload("Stop", "s1", transcript)) == (0, None, "")  # (logged; no index yet)
    full = lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (0, 0))  # noqa: E731 (no file grows: EFBIG, as ENOSPC)
    proc = subprocess.run(pimem_cmd("hook", "claude-code"), input=payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt="staging db port"),
                          capture_output=True, timeout=60, env=subprocess_env(), preexec_fn=full)
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert "disk I/O error" in answer["systemMessage"] and "disk I/O error" in proc.stderr.decode(), answer
    assert texts() == ["the staging db listens on 5433"]


def test_a_failure_met_twice_in_one_event_is_said_once(home, tmp_path):
    """A log changed behind pimem's back: the answer and the capture each met it, and the user read the same
    sentence twice in one systemMessage."""
    transcript = tmp_path / "t.jsonl"
    grow(transcript, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", transcript))
    [log] = (home / "api" / "main").glob("*.jsonl")
    with open(log, "a") as f:
        f.write('{"i": 999}\n')
    grow(transcript, line("s1", "user", "u2", "which port", 2))
    code, answer, err = hook(payload("UserPromptSubmit", "s1", transcript, prompt="staging db port"))
    assert code == 0 and "changed behind pimem's back" in answer["systemMessage"], (answer, err)
    assert answer["systemMessage"].count("changed behind pimem's back") == 1, answer


def held_lock(path):
    """A process holding the lock file ``path`` (``flock``), once it holds it; killed by the caller."""
    holder = subprocess.Popen(["flock", "-o", str(path), "sleep", "600"], start_new_session=True)
    while subprocess.run(["flock", "-n", str(path), "true"]).returncode == 0:
        time.sleep(0.05)  # (until it holds the lock)
    return holder


def test_a_prompt_while_another_process_catches_the_index_up_is_answered_from_it_as_it_is(home, tmp_path):
    """The index caught up by another process (a rebuild of a big memory's index holds index.lock for long): the
    prompt waited for the lock past the hook's time and got no context. It reads the index as it is."""
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", earlier))  # (logged; the index is made by the first reader)
    subprocess.run(pimem_cmd("search", "staging", "api"), capture_output=True, env=subprocess_env(), check=True)
    grow(earlier, line("s1", "user", "u2", "the staging cache listens on 6380", 2))
    hook(payload("Stop", "s1", earlier))  # (logged, not indexed)
    holder = held_lock(home / "api" / "index.lock")
    try:
        code, answer, err = hook(payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt="staging port"),
                                 "--timeout", "5", PIMEM_LOCK_TIMEOUT="600")
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    assert (code, err) == (0, ""), err
    said = context_of(answer)
    assert "5433" in said and "6380" not in said  # (the line logged since is for the next prompt)


def test_out_of_time_while_the_context_is_made_says_so_not_that_an_import_was_left(home, tmp_path):
    """The context not made in time (a damaged index is deleted under index.lock, which another process holds
    here): the watchdog said 'the next event imports the rest', though no import was cut and the prompt got no
    context. It says that the context was not made."""
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", earlier))
    subprocess.run(pimem_cmd("search", "staging", "api"), capture_output=True, env=subprocess_env(), check=True)
    (home / "api" / "index.sqlite").write_bytes(b"not a database" * 1000)
    holder = held_lock(home / "api" / "index.lock")
    try:
        code, answer, err = hook(payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt="staging db port"),
                                 "--timeout", "0.5", PIMEM_LOCK_TIMEOUT="600")
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    assert code == 0 and set(answer) == {"systemMessage"}, (answer, err)
    assert "out of time after 0.5 s making the context" in answer["systemMessage"], answer
    assert "imports the rest" not in answer["systemMessage"], answer


def test_memories_left_out_of_the_context_are_pointed_to_by_a_command_claude_code_can_run(home, tmp_path):
    """Memories past the budget were counted as '(N more: use memory_search)', a tool of pimem's MCP server
    that Claude Code's model may not have; it is pointed to the command that lists them."""
    from pimem import memories

    mem = Memory.at("api")
    mem.append([{"kind": "user", "text": "hi"}])
    for n in range(8):
        memories.remember(mem, f"rule {n}: run the widget tests before pushing, and stage on port 54{n}{n}")
    code, answer, err = hook(payload("SessionStart", "s1", tmp_path / "none.jsonl", source="startup"), "--budget", "600")
    text = context_of(answer)
    assert code == 0 and len(text) <= 600 and "more: `pimem memories api` lists them)" in text, text
    assert "memory_search" not in text


def test_a_prompt_is_not_offered_another_project_s_messages_whose_directory_has_the_same_name(home, tmp_path):
    """~/work/client-a/api and ~/work/client-b/api: the hook captures both into the memory 'api' and offers
    client-b's words to a prompt in client-a as 'this project's messages' (api, app, web, backend, docs are
    common names)."""
    for client, words in (("client-a", "the client-a invoice service"), ("client-b", "the client-b secret payroll export")):
        cwd = tmp_path / client / "api"
        cwd.mkdir(parents=True)
        transcript = tmp_path / f"{client}.jsonl"
        grow(transcript, {**line(client, "user", f"u-{client}", f"{words} runs on port 8443", 1), "cwd": str(cwd)})
        code, _, err = hook(payload("Stop", client, transcript, cwd=str(cwd)))
        assert code == 0 and err == ""
    here = tmp_path / "client-a" / "api"
    code, answer, err = hook(payload("UserPromptSubmit", "a2", tmp_path / "none.jsonl", cwd=str(here), prompt="which port, payroll export"))
    said = answer["hookSpecificOutput"]["additionalContext"] if answer else ""
    assert code == 0 and "client-b" not in said, said


def apart(cwd) -> str:
    import hashlib

    return f"{os.path.basename(cwd)}-" + hashlib.sha256(str(cwd).encode()).hexdigest()[:8]


def test_each_event_of_a_project_reads_the_memory_its_stop_events_wrote(home, tmp_path):
    """client-a imported into 'api' first; client-b's events, each a new process, all go to its own memory: a
    Stop writes it, a SessionStart and a prompt without a transcript yet read it, and a later import too."""
    a, b = tmp_path / "client-a" / "api", tmp_path / "client-b" / "api"
    first = tmp_path / "a.jsonl"
    grow(first, {**line("sa", "user", "ua", "client-a deploys with make ship-invoices", 1), "cwd": str(a)})
    assert subprocess.run(pimem_cmd("import", first), capture_output=True, env=subprocess_env()).returncode == 0
    transcript = tmp_path / "b.jsonl"
    grow(transcript, {**line("sb", "user", "ub", "client-b deploys with make ship-payroll", 1), "cwd": str(b)})
    assert hook(payload("Stop", "sb", transcript, cwd=str(b))) == (0, None, "")
    assert texts(apart(b)) == ["client-b deploys with make ship-payroll"]
    assert texts("api") == ["client-a deploys with make ship-invoices"]
    assert subprocess.run(pimem_cmd("remember", apart(b), "--pin", "payroll ships on tuesdays"), capture_output=True, env=subprocess_env()).returncode == 0
    code, answer, err = hook(payload("SessionStart", "sb2", tmp_path / "none.jsonl", cwd=str(b), source="startup"))
    assert code == 0 and err == "" and "payroll ships on tuesdays" in context_of(answer)
    code, answer, err = hook(payload("UserPromptSubmit", "sb2", tmp_path / "none.jsonl", cwd=str(b), prompt="how does it deploy, make ship?"))
    said = context_of(answer)
    assert code == 0 and f"pimem memory '{apart(b)}'" in said and "ship-payroll" in said and "ship-invoices" not in said, said
    code, answer, err = hook(payload("UserPromptSubmit", "sa2", tmp_path / "none.jsonl", cwd=str(a), prompt="how does it deploy, make ship?"))
    said = context_of(answer)
    assert code == 0 and "pimem memory 'api'" in said and "ship-invoices" in said and "ship-payroll" not in said, said
    later = tmp_path / "b2.jsonl"
    grow(later, {**line("sb2", "user", "ub2", "client-b's second session", 2), "cwd": str(b)})
    proc = subprocess.run(pimem_cmd("import", later), capture_output=True, env=subprocess_env())
    assert proc.returncode == 0 and f"importing into memory '{apart(b)}'".encode() in proc.stderr, proc.stderr


def test_two_projects_of_one_name_starting_at_once_take_two_memories(home, tmp_path):
    """Two hooks, of client-a/svc and client-b/svc, each a process, given their first events together: one
    takes 'svc', the other its own; neither memory holds a message of the other project."""
    for round in range(4):
        name = f"svc{round}"
        procs = []
        for client in ("client-a", "client-b"):
            cwd = tmp_path / client / name
            cwd.mkdir(parents=True)
            transcript = tmp_path / f"{client}-{round}.jsonl"
            grow(transcript, {**line(client, "user", f"u-{client}-{round}", f"{client} words", 1), "cwd": str(cwd)})
            procs.append((cwd, payload("Stop", client, transcript, cwd=str(cwd)),
                          subprocess.Popen(pimem_cmd("hook", "claude-code"), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, env=subprocess_env())))
        time.sleep(0.3)  # (both started and waiting on their stdin: the events come at once)
        for _, data, proc in procs:
            proc.stdin.write(data)
        for _, _, proc in procs:
            proc.stdin.close()
        for _, _, proc in procs:
            out, err = proc.stdout.read(), proc.stderr.read()
            assert proc.wait(timeout=60) == 0 and out == b"" and err == b"", err
        held = {n: texts(n) for n in (name, apart(tmp_path / "client-a" / name), apart(tmp_path / "client-b" / name))
                if Memory.at(n).exists()}
        assert len(held) == 2 and name in held, held
        assert sorted(map(tuple, held.values())) == [("client-a words",), ("client-b words",)], held


def test_an_answer_read_from_a_memory_another_project_claimed_meanwhile_is_not_given(home, monkeypatch):
    """A memory of no project (made by hand) is read for a project that has not captured yet; another project of
    the same directory name claims it while that answer is made: the answer is left out, not given."""
    from pimem import claude_code, memories, projects
    from pimem.importers.detect import choices

    mem = Memory.at("api")
    mem.append([{"kind": "user", "text": "hi"}])
    memories.remember(mem, "run the widget tests before pushing")
    event = {"hook_event_name": "SessionStart", "session_id": "s1", "cwd": CWD}
    assert "widget tests" in context_of(claude_code.Hook(event).run())  # (the memory is no project's: this one's to read)
    real = claude_code.answer

    def claimed_meanwhile(*args, **kwargs):
        said = real(*args, **kwargs)
        assert projects.claim("/srv/other/api", choices("/srv/other/api")) == "api"
        return said

    monkeypatch.setattr(claude_code, "answer", claimed_meanwhile)
    assert claude_code.Hook(event).run() is None
    assert claude_code.Hook(event).run() is None  # (and from then on it is the other's)


def test_a_project_s_memory_locked_while_it_is_claimed_is_said_and_the_next_event_captures(home, tmp_path):
    from pimem.claude_code import Hook
    from pimem.home import ensure_dir
    from pimem.lock import WriterLock

    transcript = tmp_path / "s1.jsonl"
    grow(transcript, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    lock = WriterLock(ensure_dir(home / "api") / "write.lock")
    assert lock.acquire(0)
    try:
        event = Hook(json.loads(payload("Stop", "s1", transcript)), deadline=time.monotonic() + 0.3)
        assert event.run() == {"systemMessage": "pimem: memory 'api' is locked by another writer; the next event imports "
                                                "the transcript's new lines"}
    finally:
        lock.release()
    assert not Memory.at("api").exists()
    assert hook(payload("Stop", "s1", transcript)) == (0, None, "")
    assert texts() == ["the staging db listens on 5433"]


def hook_on_a_silent_stdin(sent: bytes = b"") -> subprocess.CompletedProcess:
    """The hook given ``sent`` on a stdin that then stays open and silent."""
    read, write = os.pipe()
    os.write(write, sent)
    try:
        return subprocess.run(pimem_cmd("hook", "claude-code", "--timeout", "0.5"), stdin=read, capture_output=True,
                              timeout=30, env=subprocess_env())
    finally:
        os.close(read)
        os.close(write)


def test_no_payload_at_all_never_blocks_the_agent_for_long(home):
    proc = hook_on_a_silent_stdin()
    assert proc.returncode == 1 and b"nothing on stdin" in proc.stderr


def test_a_payload_cut_off_says_so(home):
    proc = hook_on_a_silent_stdin(b'{"hook_event_name":')
    assert proc.returncode == 1 and proc.stderr.count(b"\n") == 1 and b"cut off (19 bytes came" in proc.stderr, proc.stderr


def test_a_whole_event_on_a_stdin_left_open_is_taken(home, tmp_path):
    """A complete event whose stdin was not closed was 'cut off', exit 2: Claude Code erases the prompt."""
    transcript = tmp_path / "t.jsonl"
    grow(transcript, line("s1", "user", "u1", "captured from a stdin left open", 1))
    proc = hook_on_a_silent_stdin(payload("Stop", "s1", transcript))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b"") and texts() == ["captured from a stdin left open"]
    brace = hook_on_a_silent_stdin(b'{"hook_event_name": "Stop", "session_id": "s1", "cwd": "}')  # not whole yet: read on
    assert brace.returncode == 1 and b"cut off" in brace.stderr


@pytest.mark.parametrize("sent", [b"[1]", b'"x"', b"3", b"true", b"null", b' [1, {"a": 2}]\n'])
def test_a_whole_value_that_is_no_object_on_a_stdin_left_open_is_refused_at_once(home, sent):
    """Only a whole object was seen to have come (it ends with "}"): any other JSON value on a stdin left open
    was waited on until the timeout and then said to be cut off."""
    proc = hook_on_a_silent_stdin(sent)
    assert (proc.returncode, proc.stdout, proc.stderr) == (1, b"", b"pimem: error: hook payload: not a JSON object\n")


def test_a_wrong_typed_optional_field_is_a_warning_and_the_rest_is_done(home, tmp_path):
    """"transcript_path": 5 (or a prompt or cwd of another type) blocked the prompt with exit 2; the event is a
    hook event all the same: that field is left out, said, and the rest is done."""
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", earlier))
    code, answer, err = hook(json.dumps({"session_id": "s2", "hook_event_name": "UserPromptSubmit", "cwd": CWD,
                                         "transcript_path": 5, "prompt": "staging db port"}).encode())
    assert code == 0 and "5433" in answer["hookSpecificOutput"]["additionalContext"], (answer, err)
    assert answer["systemMessage"] == "pimem: the event's transcript_path is not a string; left out" and err.count("\n") == 1
    code, answer, _ = hook(json.dumps({"session_id": "s2", "hook_event_name": "UserPromptSubmit", "cwd": CWD, "prompt": 3}).encode())
    assert (code, answer) == (0, {"systemMessage": "pimem: the event's prompt is not a string; left out"})
    code, answer, _ = hook(payload("Stop", "s1", earlier, cwd=["/x"]))
    assert (code, answer) == (0, {"systemMessage": "pimem: the event's cwd is not a string; left out"})


def test_a_busy_memory_is_a_warning_not_a_blocked_prompt(home, tmp_path):
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", earlier))
    current = tmp_path / "c.jsonl"
    grow(current, line("s2", "user", "u2", "hello", 2))
    with Memory.open("api").lock(60):  # another writer holds the memory past the hook's time
        code, answer, err = hook(payload("UserPromptSubmit", "s2", current, prompt="staging db port"), "--timeout", "1")
    assert code == 0
    assert "5433" in answer["hookSpecificOutput"]["additionalContext"]  # the answer still comes
    assert answer["systemMessage"].startswith("pimem: ") and "lock" in answer["systemMessage"]
    assert hook(payload("Stop", "s2", current)) == (0, None, "")  # the next event catches up
    assert texts()[-1] == "hello"


def test_a_prompt_is_answered_without_waiting_out_a_busy_memory(home, tmp_path):
    """With write.lock held by another process, UserPromptSubmit waited its whole --timeout for the lock
    before printing a context that needs none. Capture waits a moment at most on the events the user waits
    for; the next event imports what it left (the prompt's own line included). (Claude Code gives up on the
    hook long before subprocess.run's timeout here.)"""
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", earlier))
    current = tmp_path / "c.jsonl"
    grow(current, line("s2", "user", "u2", "which port does staging use", 2))
    holder = subprocess.Popen(["flock", "-o", str(home / "api" / "write.lock"), "sleep", "600"], start_new_session=True)
    try:
        while subprocess.run(["flock", "-n", str(home / "api" / "write.lock"), "true"]).returncode == 0:
            time.sleep(0.05)  # (until it holds the lock)
        proc = subprocess.run(pimem_cmd("hook", "claude-code", "--timeout", "300"), capture_output=True, timeout=120,
                              input=payload("UserPromptSubmit", "s2", current, prompt="staging db port"), env=subprocess_env())
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    answer = json.loads(proc.stdout)
    assert proc.returncode == 0 and "5433" in answer["hookSpecificOutput"]["additionalContext"]
    assert answer["systemMessage"] == "pimem: memory 'api' is locked by another writer; the next event imports the transcript's new lines"
    assert hook(payload("Stop", "s2", current)) == (0, None, "") and texts()[-1] == "which port does staging use"


def test_a_line_still_being_written_is_no_skipped_line_for_the_user(home, tmp_path):
    current = tmp_path / "c.jsonl"
    current.write_text(json.dumps(line("s1", "user", "u1", "hello", 1))[:40])  # its first line, even
    assert hook(payload("Stop", "s1", current)) == (0, None, "")
    current.write_text("")
    grow(current, line("s1", "user", "u1", "hello", 1))
    with open(current, "a") as f:
        f.write(json.dumps(line("s1", "assistant", "a1", "hi there", 2))[:40])  # Claude Code is writing it
    assert hook(payload("Stop", "s1", current)) == (0, None, "")  # nothing said: nothing was skipped
    with open(current, "a") as f:
        f.write(json.dumps(line("s1", "assistant", "a1", "hi there", 2))[40:] + "\n")
    assert hook(payload("Stop", "s1", current)) == (0, None, "") and texts() == ["hello", "hi there"]


def test_a_resumed_session_s_entry_written_again_with_other_text_is_captured_and_no_skipped_line(home, tmp_path):
    """A resumed session's copy of an entry adds nothing; one written again with other text is logged
    (under its uuid and its content's hash) and not said to the user as a skipped line."""
    uuid = "00000000-0000-4000-8000-000000000001"
    grow(tmp_path / "s1.jsonl", line("s1", "user", uuid, "hello", 1))
    assert hook(payload("Stop", "s1", tmp_path / "s1.jsonl")) == (0, None, "")
    resumed = tmp_path / "s2.jsonl"
    grow(resumed, line("s2", "user", uuid, "hello", 1))
    assert hook(payload("Stop", "s2", resumed)) == (0, None, "") and texts() == ["hello"]
    grow(resumed, line("s2", "user", uuid, "hello, once more", 1))
    assert hook(payload("Stop", "s2", resumed)) == (0, None, "") and texts() == ["hello", "hello, once more"]


def uuid_of(k: int) -> str:
    return f"00000000-0000-4000-8000-{k:012d}"  # (a uuid as Claude Code writes them: an entry in any session)


def compaction(session: str, second: int, summary: str) -> list[dict]:
    """What Claude Code writes when it compacts a conversation: a boundary, then the summary as a user line."""
    boundary = {"parentUuid": None, "logicalParentUuid": uuid_of(second - 1), "isSidechain": False, "type": "system",
                "subtype": "compact_boundary", "content": "Conversation compacted", "compactMetadata": {"trigger": "auto", "preTokens": 150000},
                "sessionId": session, "uuid": uuid_of(900 + second), "timestamp": "2026-10-01T09:59:00.000Z", "cwd": CWD}
    return [boundary, {**line(session, "user", uuid_of(901 + second), summary, second + 1), "isCompactSummary": True}]


def hits_of(answer) -> list[str]:
    said = context_of(answer) if answer else ""
    return [row.split(": ", 1)[1] for row in said.partition("<earlier_sessions>\n")[2].partition("\n</earlier_sessions>")[0].splitlines()]


def test_after_a_compaction_the_session_s_own_earlier_turns_are_offered(home, tmp_path):
    """The hook never offered the current session's messages, taking them for the agent's context; after a
    compaction the agent has only the summary of the turns before it, so a prompt about them found nothing.
    What the transcript holds after its last compaction boundary is in context; what came before is not."""
    current = tmp_path / "s1.jsonl"
    grow(current, *(line("s1", kind, uuid_of(k), f"{kind} {k}: the ibex enclosure needs a {k}-metre fence", k)
                    for k, kind in enumerate(["user", "assistant"] * 2)))
    code, answer, err = hook(payload("UserPromptSubmit", "s1", current, prompt="the ibex fence"))
    assert (code, err) == (0, "") and hits_of(answer) == []  # all in the agent's context
    grow(current, *compaction("s1", 4, "Summary: we talked about the ibex fence."))
    assert hook(payload("SessionStart", "s1", current, source="compact")) == (0, None, "")
    grow(current, line("s1", "user", uuid_of(10), "what did we say about the ibex fence", 10))
    code, answer, err = hook(payload("UserPromptSubmit", "s1", current, prompt="what did we say about the ibex fence"))
    assert (code, err) == (0, "")
    assert sorted(hits_of(answer)) == sorted(f"{kind} {k}: the ibex enclosure needs a {k}-metre fence"
                                             for k, kind in enumerate(["user", "assistant"] * 2))  # not the summary, not the prompt
    grow(current, *compaction("s1", 20, "Summary: the ibex fence again."))  # compacted once more: the last boundary counts
    code, answer, err = hook(payload("UserPromptSubmit", "s1", current, prompt="what did we say about the ibex fence"))
    assert "what did we say about the ibex fence" in hits_of(answer) and "Summary: the ibex fence again." not in hits_of(answer)


def test_the_help_says_a_prompt_is_offered_what_is_not_in_the_agent_s_context(sh):
    """It said "messages of earlier sessions", which the hook no longer keeps to (the test above)."""
    said = " ".join(sh("hook", "--help").stdout.decode().split())
    assert "relevant messages that are not in the agent's context (not what its transcript holds after its last " \
           "compaction boundary)" in said and "earlier sessions" not in said


def test_a_resumed_session_is_not_offered_the_messages_its_transcript_holds_again(home, tmp_path):
    """``claude --resume`` writes the earlier session's lines again (same uuids) into the new session's
    transcript: they are in its context, yet the hook offered them as an earlier session's."""
    first = tmp_path / "sa.jsonl"
    words = [f"{kind} {k}: lemur feeding is at {k + 9} o'clock" for k, kind in enumerate(["user", "assistant"] * 2)]
    said = [line("sa", kind, uuid_of(k), text, k) for k, (kind, text) in enumerate(zip(["user", "assistant"] * 2, words))]
    grow(first, *said)
    other = tmp_path / "so.jsonl"
    grow(other, line("so", "user", uuid_of(50), "the lemur feeding moved to the afternoon", 50))
    assert hook(payload("Stop", "sa", first)) == (0, None, "") and hook(payload("Stop", "so", other)) == (0, None, "")
    resumed = tmp_path / "sb.jsonl"
    grow(resumed, *({**entry, "sessionId": "sb"} for entry in said), line("sb", "user", uuid_of(60), "and the lemur feeding?", 60))
    code, answer, err = hook(payload("UserPromptSubmit", "sb", resumed, prompt="lemur feeding"))
    assert (code, err) == (0, "") and hits_of(answer) == ["the lemur feeding moved to the afternoon"]
    grow(resumed, *compaction("sb", 61, "Summary: lemurs."))  # compacted: the copies are no longer in its context
    code, answer, err = hook(payload("UserPromptSubmit", "sb", resumed, prompt="lemur feeding"))
    assert set(words) <= set(hits_of(answer)) and "and the lemur feeding?" in hits_of(answer)


def test_with_its_transcript_gone_the_session_s_own_messages_are_not_offered(home, tmp_path):
    """With no transcript to tell what the agent has in its context (deleted, unreadable), the session's own
    messages are taken as in it, as before the hook read the transcript: it offered them all, and said nothing."""
    mine, other = tmp_path / "s1.jsonl", tmp_path / "s0.jsonl"
    grow(other, line("s0", "user", uuid_of(1), "the otter pool closes at noon", 1))
    grow(mine, line("s1", "user", uuid_of(2), "the otter feeding is at nine", 2))
    assert hook(payload("Stop", "s0", other)) == (0, None, "") and hook(payload("Stop", "s1", mine)) == (0, None, "")
    mine.unlink()
    code, answer, err = hook(payload("UserPromptSubmit", "s1", mine, prompt="otter"))
    assert (code, err) == (0, "") and hits_of(answer) == ["the otter pool closes at noon"]


def test_a_nul_logged_as_its_sign_is_no_skipped_line(home, tmp_path):
    """A tool's NUL logged as ␀, the message kept, was said to the user as "1 transcript line skipped"."""
    grow(tmp_path / "s1.jsonl", line("s1", "user", "u1", "a\x00b", 1))
    assert hook(payload("Stop", "s1", tmp_path / "s1.jsonl")) == (0, None, "") and texts() == ["a\u2400b"]


def test_a_relative_transcript_path_is_the_session_s_directory_s(home, tmp_path):
    """It was taken as the hook process's: nothing captured, nothing said."""
    project = tmp_path / "project"
    project.mkdir()
    grow(project / "t.jsonl", line("s1", "user", "u1", "hello", 1))
    data = json.dumps({"session_id": "s1", "transcript_path": "t.jsonl", "cwd": str(project), "hook_event_name": "Stop"}).encode()
    assert hook(data) == (0, None, "") and texts() == ["hello"]


def test_a_skipped_line_is_counted_in_words(home, tmp_path):
    """One malformed line is "1 transcript line skipped", two are "2 transcript lines" (it said "line(s)")."""
    current = tmp_path / "c.jsonl"
    grow(current, line("s1", "user", "u1", "hello", 1))
    with open(current, "a") as f:
        f.write("{not json\n")
    code, answer, _ = hook(payload("Stop", "s1", current))
    assert code == 0 and "pimem: 1 transcript line skipped: " in answer["systemMessage"], answer
    with open(current, "a") as f:
        f.write("{not json\n[1]\n")
    code, answer, _ = hook(payload("Stop", "s1", current))
    assert code == 0 and "pimem: 2 transcript lines skipped: " in answer["systemMessage"], answer


def test_an_odd_sub_agent_file_or_a_bad_name_or_home_is_a_warning_not_a_blocked_prompt(home, tmp_path):
    transcript = tmp_path / "s1.jsonl"
    grow(transcript, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    agents = tmp_path / "s1" / "subagents"
    agents.mkdir(parents=True)
    (agents / "agent-gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")  # a dangling link
    (agents / "agent-dir.jsonl").mkdir()  # a directory named like a transcript
    grow(agents / "agent-a.jsonl", line("s1", "user", "a1", "sub-agent: list the routes", 2))
    assert hook(payload("Stop", "s1", transcript)) == (0, None, "")  # the odd ones passed over, the others captured
    assert sorted(texts()) == ["sub-agent: list the routes", "the staging db listens on 5433"]
    before = snapshot(home)
    for args, why in ((("-n", "bad name"), "invalid memory name 'bad name'"), (("--home", "/dev/null"), "the home /dev/null is not a directory")):
        code, answer, err = hook(payload("UserPromptSubmit", "s1", transcript, prompt="staging port"), *args)
        assert code == 0 and why in answer["systemMessage"] and err.count("\n") == 1, (args, answer, err)
    assert snapshot(home) == before


def test_an_event_with_many_warnings_says_the_first_few_and_counts_the_others(home, tmp_path):
    """500 sub-agent files that are no transcripts gave a 58 KB systemMessage (and stderr line), one clause each,
    on every event: the agent's screen filled with it. The first three are said, then how many more."""
    transcript = tmp_path / "s1.jsonl"
    grow(transcript, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    agents = tmp_path / "s1" / "subagents"
    agents.mkdir(parents=True)
    for n in range(40):
        (agents / f"agent-{n:02d}.jsonl").write_text("hello\n")
    code, answer, err = hook(payload("Stop", "s1", transcript))
    said = answer["systemMessage"]
    assert code == 0 and said.endswith("; and 37 more") and said.count("agent-") == 3 and err == said + "\n"
    assert texts() == ["the staging db listens on 5433"]


def test_a_relative_home_is_a_warning_as_a_relative_pimem_home_is_not_a_home_in_the_project(home, tmp_path):
    """A relative --home given to the hook (which Claude Code runs in the session's directory, not the user's) made
    a home there, one in each project and each directory the session moved to, while a relative $PIMEM_HOME was
    refused. Both are said alike, a warning (exit 0), and nothing is read or written, there or in the home."""
    transcript = tmp_path / "s1.jsonl"
    grow(transcript, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    project = tmp_path / "project"
    project.mkdir()
    before = snapshot(home)
    for args, env, source in ((("--home", "memory"), {}, "--home"), ((), {"PIMEM_HOME": "memory"}, "$PIMEM_HOME"),
                              (("--home", "memory", "-n", "api"), {}, "--home")):
        for event in ("Stop", "UserPromptSubmit"):
            proc = subprocess.run(pimem_cmd("hook", "claude-code", *args), cwd=project, capture_output=True, timeout=60,
                                  env=subprocess_env(**env), input=payload(event, "s1", transcript, prompt="staging port"))
            said = (f"pimem: {source} is a relative path ('memory'): set it to an absolute one (it would name another home "
                    "in each directory a command runs in)")
            assert (proc.returncode, json.loads(proc.stdout), proc.stderr.decode()) == (0, {"systemMessage": said}, said + "\n"), args
            assert list(project.iterdir()) == [] and snapshot(home) == before, args


def test_out_of_time_is_said_only_when_the_transcript_was_left_unread(home, tmp_path):
    from pimem.claude_code import Hook

    transcript = tmp_path / "s1.jsonl"
    grow(transcript, *(line("s1", "user", f"u{k}", f"message {k}", k) for k in range(3)))

    def past_its_deadline():  # one line a file, then it stops if there is more
        return Hook(json.loads(payload("Stop", "s1", transcript)), deadline=time.monotonic() - 1).run()

    for k in (1, 2):
        assert "out of time" in past_its_deadline()["systemMessage"] and len(texts()) == k
    assert past_its_deadline() is None and len(texts()) == 3  # the rest read to its end: nothing to warn of


def test_a_capture_out_of_time_stops_within_its_batch(home, tmp_path):
    """The deadline was looked at only between batches of 10,000 lines: a long transcript's first event read
    and logged a whole batch, seconds past the second the user waits for. Out of time, it stops at the line
    it is at (one at least), logs what it read, and the next event reads on from there."""
    transcript = tmp_path / "s1.jsonl"
    grow(transcript, *(line("s1", "user", f"u{k}", f"message {k}", k) for k in range(50)))
    code, answer, err = hook(payload("Stop", "s1", transcript), "--timeout", "0")  # (out of time at once)
    assert code == 0 and list(answer) == ["systemMessage"] and "out of time" in answer["systemMessage"]
    assert 1 <= len(texts()) < 50
    assert hook(payload("Stop", "s1", transcript)) == (0, None, "")
    assert texts() == [f"message {k}" for k in range(50)]


def test_relevance_keeps_hits_holding_enough_of_the_words_and_near_the_best_score():
    words = terms.query_terms("staging db port listening deploys")  # five terms, stemmed: a hit must hold two
    hits = [({"i": 1, "text": "the Staging DB listens on port 5433"}, 9.0), ({"i": 2, "text": "staging is down"}, 8.0),
            ({"i": 3, "text": "deploy to staging"}, 3.0), ({"i": 4, "text": "db port 5432 for deploying"}, 5.0)]
    assert [m["i"] for m, _ in relevant(hits, words)] == [1, 4]  # 2: one word; 3: under half the best score
    assert relevant([({"i": 5, "text": "nothing here"}, 1.0)], terms.query_terms("staging")) == []


def test_a_prompt_finds_what_an_earlier_session_said_in_other_forms_of_its_words(home, tmp_path):
    """The prompt goes to the ranker as typed, stemmed once: "databases" finds "database" (stemming the
    stems again made it "databa", which no message holds)."""
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging database was moved to db2.internal", 1),
         line("s1", "user", "u2", "happy with the new happiness metric", 2))
    hook(payload("Stop", "s1", earlier))
    for prompt, said in (("where did the databases go?", "db2.internal"), ("are we happy", "happiness metric")):
        code, answer, _ = hook(payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt=prompt))
        assert code == 0 and said in context_of(answer), prompt


def test_a_long_pasted_prompt_is_searched_by_its_head_and_not_stemmed_whole(home, tmp_path, monkeypatch):
    """A 13 MB log pasted as a prompt cost seconds a prompt (every word stemmed, then tokenized again, for the
    first 12 terms), and a bigger one ran past the hook's time, so no context: only its head is read."""
    from pimem import claude_code

    grow(tmp_path / "e.jsonl", line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", tmp_path / "e.jsonl"))
    read: list[int] = []
    stem = terms.query_terms
    monkeypatch.setattr(terms, "query_terms", lambda text: read.append(len(text)) or stem(text))
    prompt = "which port does the staging db listen on? " + "ERROR timeout in worker 7\n" * 500_000
    found = claude_code.earlier(Memory.open("api"), "s2", prompt)
    assert [hit["snippet"] for hit in found][:1] == ["the staging db listens on 5433"]
    assert read and max(read) <= claude_code.QUERY_CHARS


def test_the_hook_writes_through_the_environment_streams(home, tmp_path):
    import io

    from pimem import claude_code, env

    def stdin(data: bytes):
        read, write = os.pipe()
        os.write(write, data)
        os.close(write)
        return open(read, "rb")

    earlier, current = tmp_path / "e.jsonl", tmp_path / "c.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    grow(current, line("s2", "user", "u2", "hello", 2))
    stdout, stderr = io.TextIOWrapper(io.BytesIO()), io.StringIO()
    with env.using(env.Environment(stdout=stdout, stderr=stderr)):
        assert claude_code.handle(stdin(payload("Stop", "s1", earlier))) == 0
        assert stdout.buffer.getvalue() == b"" and stderr.getvalue() == ""  # Stop: captured, nothing to say
        with Memory.open("api").lock(60):  # busy: the answer comes, with its warning on stderr
            assert claude_code.handle(stdin(payload("UserPromptSubmit", "s2", current, prompt="staging db port")), timeout=1) == 0
    answer = json.loads(stdout.buffer.getvalue())
    assert "5433" in answer["hookSpecificOutput"]["additionalContext"]
    assert stderr.getvalue() == answer["systemMessage"] + "\n"


# ---- install ---------------------------------------------------------------------------------------------


def install(*args, home_dir, cwd=None, **env):
    """pimem hook install claude-code ARGS with the user's home ``home_dir`` (and no $PIMEM_HOME unless given)."""
    return subprocess.run(pimem_cmd("hook", "install", "claude-code", *args), capture_output=True, text=True, timeout=60, cwd=cwd,
                          env=subprocess_env(HOME=home_dir, **{"PIMEM_HOME": "", **env}))


def test_install_refuses_an_empty_home_and_a_claude_folder_that_is_no_directory(tmp_path):
    """`--home ''` was taken as none given and the environment's home passed over too: the hooks captured into
    ~/.pi/memory. A `.claude` that is a file, or a link to nothing, stopped with `File exists: …/.claude`,
    exit 7, where `--dry-run` said it would add the hooks. Each is refused in one line, exit 2, nothing written."""
    user = tmp_path / "user"
    user.mkdir()
    out = install("--home", "", home_dir=user, PIMEM_HOME=str(tmp_path / "store"))
    assert (out.returncode, out.stderr) == (2, "pimem: error: empty home: give the store's directory, or none for "
                                               "$PIMEM_HOME or ~/.pi/memory\n")
    folder = user / ".claude"
    folder.write_text("a file of the user's")
    for args in ([], ["--dry-run"]):
        out = install(*args, home_dir=user)
        assert (out.returncode, out.stderr) == (2, f"pimem: error: {folder} is not a directory, where settings.json "
                                                   "goes; fix it by hand first\n"), args
    folder.unlink()
    folder.symlink_to(tmp_path / "gone")
    out = install(home_dir=user)
    assert (out.returncode, out.stderr) == (2, f"pimem: error: {folder}: a link to {tmp_path / 'gone'}, which is not "
                                               "there; fix the link first\n")
    assert sorted(p.name for p in user.iterdir()) == [".claude"] and not (tmp_path / "gone").exists()


def test_install_merges_into_the_settings_keeping_everything_and_a_backup(home, tmp_path):
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    theirs = {"model": "opus", "permissions": {"allow": ["Bash(ls:*)"]},
              "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}],
                        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "guard.sh"}]}]}}
    settings.write_text(json.dumps(theirs, indent=4))
    os.chmod(settings, 0o640)
    original = settings.read_bytes()

    dry = install("--dry-run", home_dir=user)
    assert dry.returncode == 0 and settings.read_bytes() == original and len(list(settings.parent.iterdir())) == 1
    assert "would add SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd" in dry.stderr

    done = install(home_dir=user)
    assert done.returncode == 0, done.stderr
    merged = json.loads(settings.read_text())
    assert json.loads(dry.stdout) == merged
    assert merged["model"] == "opus" and merged["permissions"] == theirs["permissions"]
    assert merged["hooks"]["PreToolUse"] == theirs["hooks"]["PreToolUse"]
    assert merged["hooks"]["Stop"][0] == theirs["hooks"]["Stop"][0] and len(merged["hooks"]["Stop"]) == 2
    for event in ("SessionStart", "UserPromptSubmit", "PreCompact", "Stop", "SessionEnd"):
        ours = merged["hooks"][event][-1]["hooks"][0]
        assert ours["type"] == "command" and ours["command"].endswith(" hook claude-code") and ours["timeout"] == 30
    backups = [p for p in settings.parent.iterdir() if p.name.endswith(".bak")]
    assert len(backups) == 1 and backups[0].read_bytes() == original and f"(backup: {backups[0]})" in done.stdout
    assert settings.stat().st_mode & 0o777 == 0o640

    again = install(home_dir=user)
    assert again.returncode == 0 and "already" in again.stdout
    assert json.loads(settings.read_text()) == merged and len(list(settings.parent.iterdir())) == 2

    # the command written there works as Claude Code runs it: through a shell, the payload on stdin
    transcript = tmp_path / "t.jsonl"
    grow(transcript, line("s9", "user", "u1", "captured through the installed hook", 1))
    command = merged["hooks"]["Stop"][-1]["hooks"][0]["command"]
    ran = subprocess.run(["sh", "-c", command], input=payload("Stop", "s9", transcript), capture_output=True, env=subprocess_env())
    assert ran.returncode == 0, ran.stderr
    assert texts() == ["captured through the installed hook"]


def test_the_installed_command_runs_this_pimem_not_a_project_s_own(home, tmp_path):
    """Installed from ``python -m pimem``, the command was ``python -m pimem hook claude-code``: Claude Code runs
    hooks in the project's directory and ``-m`` looks there first, so a project's own ``pimem.py`` (or
    ``pimem/``) ran instead, on every event. It is ``python -P -m pimem``; a hook an earlier install wrote
    without ``-P`` is still pimem's: install changes it, uninstall removes it."""
    user, project = tmp_path / "user", tmp_path / "project"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    old = f"{sys.executable} -m pimem hook claude-code"  # (as installs before -P wrote it)
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": old, "timeout": 30}]}]}}))
    done = install(home_dir=user)
    assert done.returncode == 0 and f"changed pimem's Stop hooks in {settings} from {old} to " in done.stdout, done.stdout
    command = json.loads(settings.read_text())["hooks"]["Stop"][0]["hooks"][0]["command"]
    assert command == f"{sys.executable} -P -m pimem hook claude-code"
    for mine in (project / "pimem.py", project / "pimem" / "__main__.py"):
        mine.parent.mkdir(parents=True, exist_ok=True)
        mine.write_text("print('HIJACKED')\n")
        (mine.parent / "__init__.py").write_text("")  # (a package of the project's: with pimem.py, one it may import)
        transcript = tmp_path / f"{mine.stem}.jsonl"
        grow(transcript, line("s9", "user", f"u-{mine.stem}", f"captured from beside {mine.name}", 1))
        ran = subprocess.run(["sh", "-c", command], input=payload("Stop", "s9", transcript), capture_output=True, cwd=project,
                             env=subprocess_env())
        assert (ran.returncode, ran.stdout, ran.stderr) == (0, b"", b"")
        (project / "pimem.py").unlink(missing_ok=True)
    assert texts() == ["captured from beside pimem.py", "captured from beside __main__.py"]
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": old}]}]}}))
    assert uninstall(home_dir=user).returncode == 0 and json.loads(settings.read_text()) == {}


def test_install_again_with_other_options_changes_pimem_s_hooks_and_says_so(home, tmp_path):
    """Installing again with another --name (or --budget, --home, --timeout) said 'already in …; nothing
    changed' and kept the old command, so the option given had no effect. pimem's hooks take the new
    command (and Claude Code's timeout with it), the change said, the file backed up; others stay."""
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text(json.dumps({"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "notify-send done"}]}]}}))
    assert install(home_dir=user).returncode == 0
    old = json.loads(settings.read_text())["hooks"]["Stop"][-1]["hooks"][0]["command"]
    before = settings.read_bytes()
    dry = install("--name", "shop", "--timeout", "40", "--dry-run", home_dir=user)
    assert dry.returncode == 0 and settings.read_bytes() == before
    new = f"{old} --name shop --timeout 40"
    assert dry.stderr == (f"would change pimem's SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd hooks in "
                          f"{settings} from {old} to {new}\n")
    done = install("--name", "shop", "--timeout", "40", home_dir=user)
    assert done.returncode == 0 and done.stdout.startswith(f"changed pimem's SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd hooks in {settings} from {old} to {new} (backup: ")
    hooks = json.loads(settings.read_text())["hooks"]
    assert hooks["Stop"][0]["hooks"][0]["command"] == "notify-send done" and len(hooks["Stop"]) == 2
    assert all([h["command"], h["timeout"]] == [new, 45] for event in hooks.values() for g in event for h in g["hooks"][-1:] if "pimem" in h["command"])
    assert sum(p.name.endswith(".bak") for p in settings.parent.iterdir()) >= 1
    again = install("--name", "shop", "--timeout", "40", home_dir=user)
    assert again.returncode == 0 and again.stdout.endswith("; nothing changed\n")


def test_install_into_the_project_and_refusals(home, tmp_path):
    user, work = tmp_path / "user", tmp_path / "work"
    user.mkdir()
    work.mkdir()
    done = install("--project", home_dir=user, cwd=work)
    assert done.returncode == 0 and "backup" not in done.stdout  # a new file: nothing to back up
    assert set(json.loads((work / ".claude" / "settings.json").read_text())["hooks"]) >= {"SessionStart", "Stop"}
    assert not (user / ".claude").exists()

    broken = user / ".claude" / "settings.json"
    broken.parent.mkdir()
    broken.write_text('{"hooks": ')
    refused = install(home_dir=user)
    assert refused.returncode == 2 and "not JSON" in refused.stderr and broken.read_text() == '{"hooks": '
    assert len(list(broken.parent.iterdir())) == 1
    both = install("--project", "--user", home_dir=user)
    assert both.returncode == 2 and "not both" in both.stderr
    wrong = subprocess.run(pimem_cmd("hook", "install", "cursor"), capture_output=True, text=True, env=subprocess_env())
    assert wrong.returncode == 2 and "unknown agent 'cursor'" in wrong.stderr
    for verb in ("install", "uninstall"):  # (no agent: it said unknown agent '')
        none = subprocess.run(pimem_cmd("hook", verb), capture_output=True, text=True, env=subprocess_env())
        assert (none.returncode, none.stderr) == (2, f"pimem: error: give the agent: pimem hook {verb} claude-code\n")


def test_install_refuses_a_home_whose_path_is_not_utf8(home, tmp_path):
    """settings.json holds text: a --home under a directory named in another encoding was written with a lone
    surrogate, and the hook Claude Code ran wrote to another directory (U+FFFD for the byte). Refused in one
    line, nothing written."""
    import os

    user = tmp_path / "user"
    user.mkdir()
    other = os.fsdecode(os.fsencode(str(tmp_path)) + b"/p\xffm")
    refused = install("--home", other, home_dir=user)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "p\\xffm" in refused.stderr and "not UTF-8" in refused.stderr, refused.stderr
    assert not (user / ".claude").exists()


def test_install_refuses_a_bad_name_a_link_loop_and_an_empty_hooks_value_and_keeps_a_lone_surrogate(home, tmp_path):
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    bad = install("--name", "../x", home_dir=user)
    assert bad.returncode == 2 and "invalid memory name" in bad.stderr and not settings.exists()
    settings.symlink_to(settings)
    loop = install(home_dir=user)
    assert loop.returncode == 2 and "loop of symbolic links" in loop.stderr and loop.stderr.count("\n") == 1, loop.stderr
    settings.unlink()
    for empty in ("{}", '""', "0", "false", "null"):
        settings.write_text('{"hooks": {"Stop": [{"hooks": %s}]}}' % empty)
        refused = install(home_dir=user)
        assert refused.returncode == 2 and "is not a list" in refused.stderr, (empty, refused.stderr)
    settings.write_text('{"s": "\\ud800x", "e": "\\ud83d\\ude00"}')
    assert install(home_dir=user).returncode == 0
    written = settings.read_bytes()
    assert b'"s": "\\ud800x"' in written and json.loads(written.decode("utf-8"))["e"] == "\U0001F600"


def test_merge_leaves_odd_settings_alone():
    settings = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "/opt/pimem hook claude-code --home /x"}]}]}}
    added, updated = merge(settings, "pimem hook claude-code")
    assert added == ["SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"]
    assert updated == {"/opt/pimem hook claude-code --home /x": ["Stop"]}  # (installed before with other options)
    assert settings["hooks"]["Stop"] == [{"hooks": [{"type": "command", "command": "pimem hook claude-code", "timeout": 30}]}]
    from pimem.errors import BadInput

    with pytest.raises(BadInput):
        merge({"hooks": []}, "x")


def test_a_stuck_import_is_cut_off_by_the_watchdog_and_the_context_still_comes(home, tmp_path):
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", earlier))
    current = tmp_path / "c.jsonl"
    grow(current, line("s2", "user", "u2", "hello", 2))
    stuck = ("import sys, time; import pimem.importers as imp; imp.run = lambda *a, **k: time.sleep(600); "
             "from pimem.cli import main; main(sys.argv[1:])")  # an import that never ends (a hung disk)
    proc = subprocess.run([sys.executable, "-c", stuck, "hook", "claude-code", "--timeout", "0.5"], capture_output=True, timeout=60,
                          input=payload("UserPromptSubmit", "s2", current, prompt="staging db port"), env=subprocess_env())
    assert proc.returncode == 0 and b"out of time after 0.5 s" in proc.stderr
    answer = json.loads(proc.stdout)
    assert "5433" in answer["hookSpecificOutput"]["additionalContext"] and "out of time" in answer["systemMessage"]


def test_the_real_claude_code_sample_captured_as_it_grows_equals_its_import(home, tmp_path):
    from test_import import _sample

    sample = _sample("*tool_heavy*.jsonl")
    raw = sample.read_bytes().splitlines(keepends=True)
    first = next(json.loads(l) for l in raw if b'"sessionId"' in l)
    transcript = tmp_path / "live.jsonl"
    for cut in (len(raw) // 3, 2 * len(raw) // 3, len(raw)):  # Claude Code writes it while the hooks fire
        with open(transcript, "wb") as f:
            f.writelines(raw[:cut])
        code, _, err = hook(payload("Stop", first["sessionId"], transcript))
        assert code == 0 and err == ""
    subprocess.run(pimem_cmd("import", sample, "-n", "whole"), capture_output=True, env=subprocess_env(), check=True)
    project = first["cwd"].rstrip("/").rsplit("/", 1)[-1]
    strip = lambda msgs: [(m["kind"], m["text"], m["date"], m["meta"]["entry"]) for m in msgs]  # noqa: E731
    assert strip(Memory.open(project).messages()) == strip(Memory.open("whole").messages())


def test_a_prompt_is_answered_without_the_semantic_extra_or_openssl(home, tmp_path):
    """The hook runs every turn: its ranked search reads no sentence vectors and imports nothing of the extra,
    and its hashes are CPython's own (``pimem.hashes``: hashlib would load OpenSSL first)."""
    earlier = tmp_path / "e.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    hook(payload("Stop", "s1", earlier))
    probe = ("import atexit, sys\n"  # (the hook ends without the interpreter's teardown, after atexit's handlers)
             "atexit.register(lambda: sys.stderr.write(' '.join(m for m in ('pimem.semantic', 'numpy', 'onnxruntime', 'hashlib', 'pimem.cli')"
             " if m in sys.modules)))\nfrom pimem.cli import main; main(sys.argv[1:])")
    proc = subprocess.run([sys.executable, "-c", probe, "hook", "claude-code"], capture_output=True, timeout=60, env=subprocess_env(),
                          input=payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt="staging db port"))
    assert proc.returncode == 0 and "5433" in context_of(json.loads(proc.stdout))
    assert proc.stderr == b"pimem.cli"  # (the probe ran: pimem's own modules are listed)


def test_an_event_imports_no_summary_code(home, tmp_path):
    """Every event of every turn pays for what the hook imports: reading a transcript needs none of the
    offline compactor's tool-work reader (``pimem.toolwork``, ~8 ms with what it loads: the Codex importer,
    which the hook's importer lookup loads, reads a command's program only when it meets one), nor the search
    index (``pimem.index`` and sqlite3, ~12 ms: looked at after a capture of a backlog only)."""
    session = tmp_path / "s.jsonl"
    grow(session, line("s1", "user", "u1", "run the tests", 1))
    probe = ("import atexit, sys\n"
             "atexit.register(lambda: sys.stderr.write(' '.join(m for m in ('pimem.toolwork', 'pimem.index', 'pimem.cli')"
             " if m in sys.modules)))\nfrom pimem.cli import main; main(sys.argv[1:])")
    for event in ("SessionStart", "Stop"):
        proc = subprocess.run([sys.executable, "-c", probe, "hook", "claude-code"], capture_output=True, timeout=60,
                              env=subprocess_env(), input=payload(event, "s1", session))
        assert proc.returncode == 0
        assert proc.stderr == b"pimem.cli", event  # (the probe ran, and did not list it)


def test_pimem_hashes_are_hashlibs():
    import hashlib

    from pimem import hashes

    for data in (b"", b"abc", bytes(range(256)) * 300):
        assert hashes.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
        assert hashes.blake2b(data, digest_size=16).digest() == hashlib.blake2b(data, digest_size=16).digest()


def test_a_working_directory_gone_is_a_warning_not_a_blocked_prompt(home, tmp_path):
    gone = tmp_path / "gone"
    gone.mkdir()
    data = json.dumps({"session_id": "s1", "transcript_path": str(tmp_path / "none.jsonl"), "permission_mode": "default",
                       "hook_event_name": "UserPromptSubmit", "prompt": "staging port"}).encode()  # no cwd in it
    from conftest import ROOT

    command = " ".join(f"'{part}'" for part in pimem_cmd("hook", "claude-code"))
    # (PYTHONPATH without an empty entry: Python itself cannot start with one in a deleted directory)
    proc = subprocess.run(["sh", "-c", f"cd '{gone}' && rmdir '{gone}' && exec {command}"], input=data,
                          capture_output=True, timeout=60, env=subprocess_env(PYTHONPATH=ROOT))
    assert proc.returncode == 0, proc.stderr  # (the system's `No such file or directory` named nothing)
    assert json.loads(proc.stdout)["systemMessage"] == ("pimem: the event names no working directory and the hook's own "
                                                        "was removed: nothing to capture it into")


def test_install_keeps_big_numbers_writes_through_a_link_and_takes_the_hooks_options(home, tmp_path):
    user, dotfiles = tmp_path / "user", tmp_path / "dotfiles"
    (user / ".claude").mkdir(parents=True)
    dotfiles.mkdir()
    (dotfiles / "settings.json").write_text('{"x": 123456789012345678901234567890, "y": [1.50, 1E2, -0, 1e400], "hooks": {}}')
    settings = user / ".claude" / "settings.json"
    settings.symlink_to(dotfiles / "settings.json")
    done = install("-n", "shop", "--budget", "100", "--timeout", "40", home_dir=user)
    assert done.returncode == 0, done.stderr
    assert settings.is_symlink()  # the link stays; the file it names gets the hooks
    written = (dotfiles / "settings.json").read_text()
    assert '"x": 123456789012345678901234567890' in written  # as written, not a float
    assert json.loads(written)["y"] == [1.5, 100.0, 0, float("inf")]  # (1e400 as written: not Infinity, which
    assert '"y": [1.50, 1E2, -0, 1e400]' in written                    # JavaScript's JSON.parse refuses)
    ours = json.loads(written)["hooks"]["Stop"][0]["hooks"][0]
    assert ours["command"].endswith(" hook claude-code --name shop --budget 100 --timeout 40") and ours["timeout"] == 45
    settings.unlink()
    settings.write_text('{"hooks": {"Stop": [{"hooks": 5}]}}')
    refused = install(home_dir=user)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "is not a list" in refused.stderr
    assert sorted(p.name for p in settings.parent.iterdir()) == ["settings.json"]  # no backup, no temporary file


def test_install_writes_a_budget_or_timeout_of_zero_and_keeps_every_backup(home, tmp_path, monkeypatch):
    """--budget 0 (a capture-only hook) and --timeout 0 were dropped from the installed command, which then
    ran with the defaults; a timeout is written as given (1234567 was 1.23457e+06). Two installs within one
    second wrote one backup name, the second over the first: the original settings were lost."""
    from pimem import claude_code

    base = claude_code.hook_command()
    assert claude_code.hook_command(budget=0, timeout=0) == f"{base} --budget 0 --timeout 0"
    assert claude_code.hook_command(timeout=1234567) == f"{base} --timeout 1234567"
    assert claude_code.hook_command(timeout=0.5) == f"{base} --timeout 0.5"
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"model": "opus"}')
    done = install("--budget", "0", "--timeout", "0", home_dir=user)
    assert done.returncode == 0, done.stderr
    ours = json.loads(settings.read_text())["hooks"]["Stop"][0]["hooks"][0]
    assert ours["command"].endswith(" hook claude-code --budget 0 --timeout 0") and ours["timeout"] == 30
    ran = subprocess.run(["sh", "-c", ours["command"]], input=payload("UserPromptSubmit", "s1", tmp_path / "none.jsonl", prompt="x"),
                         capture_output=True, env=subprocess_env())
    assert ran.returncode == 0, ran.stderr
    monkeypatch.setattr(claude_code.time, "strftime", lambda fmt, *args: "20261206T090000")
    settings.write_text('{"model": "opus"}')
    first = claude_code.install(settings, "pimem hook claude-code")[3]
    second = claude_code.install(settings, "pimem hook claude-code --name shop")[3]
    third = claude_code.install(settings, "pimem hook claude-code --name api")[3]
    assert [first.name, second.name, third.name] == ["settings.json.20261206T090000.bak", "settings.json.20261206T090000.1.bak",
                                                      "settings.json.20261206T090000.2.bak"]
    assert first.read_text() == '{"model": "opus"}' and "--name shop" in third.read_text()


def test_a_timeout_of_zero_still_reads_the_payload_there(home, tmp_path):
    code, answer, err = hook(payload("Stop", "s1", tmp_path / "none.jsonl"), "--timeout", "0")
    assert code == 0, err


def uninstall(*args, home_dir, cwd=None):
    return subprocess.run(pimem_cmd("hook", "uninstall", "claude-code", *args), capture_output=True, text=True, timeout=60,
                          cwd=cwd, env=subprocess_env(HOME=home_dir))


def test_uninstall_takes_out_pimem_s_hooks_and_nothing_else(home, tmp_path):
    """There was no uninstall ('unknown agent'): a user had to find the first backup, later ones holding pimem's
    hooks. It removes what install wrote (the groups and keys install made, once empty), keeps the rest as
    install writes it, backs up first, and says so; with nothing there, one line and exit 0."""
    user, work = tmp_path / "user", tmp_path / "work"
    work.mkdir()
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    theirs = ('{\n  "model": "opus",\n  "n": 1.50,\n  "hooks": {\n    "Stop": [\n      {\n        "hooks": [\n'
              '          {\n            "type": "command",\n            "command": "notify-send done"\n          }\n        ]\n'
              '      }\n    ],\n    "PreToolUse": [\n      {\n        "matcher": "Bash",\n        "hooks": [\n          {\n'
              '            "type": "command",\n            "command": "guard.sh"\n          }\n        ]\n      }\n    ]\n  }\n}\n')
    settings.write_text(theirs)
    os.chmod(settings, 0o640)
    assert install("--name", "shop", home_dir=user).returncode == 0
    installed = settings.read_bytes()

    for args in (["--name", "shop"], ["--budget", "5", "--home", str(home)]):  # (ignored, as if they chose the hooks)
        out = uninstall(*args, home_dir=user)
        assert (out.returncode, settings.read_bytes()) == (2, installed) and out.stderr.startswith(
            f"pimem: error: {', '.join(a for a in args if a.startswith('--'))}: 'pimem hook uninstall' takes pimem's hooks "
            "out whatever their options"), out.stderr
    dry = uninstall("--dry-run", home_dir=user)
    assert dry.returncode == 0 and settings.read_bytes() == installed and dry.stdout == theirs, dry.stderr
    assert dry.stderr == f"would remove pimem's SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd hooks from {settings}\n"

    done = uninstall(home_dir=user)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert settings.read_text() == theirs and settings.stat().st_mode & 0o777 == 0o640
    backup = done.stdout.split("(backup: ")[1].rstrip(")\n")
    assert open(backup, "rb").read() == installed
    assert done.stdout == (f"removed pimem's SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd hooks from {settings} "
                           f"(backup: {backup})\n")

    again = uninstall(home_dir=user)
    assert (again.returncode, again.stdout, again.stderr) == (0, f"no pimem claude-code hooks in {settings}; nothing changed\n", "")
    assert settings.read_text() == theirs and sum(p.name.endswith(".bak") for p in settings.parent.iterdir()) == 2

    # the project's file, made by install: emptied back to an object; a pimem hook sharing a group stays out of it alone
    assert install("--project", home_dir=user, cwd=work).returncode == 0
    project = work / ".claude" / "settings.json"
    shared = json.loads(project.read_text())
    shared["hooks"]["Stop"][0]["hooks"].insert(0, {"type": "command", "command": "say done"})
    project.write_text(json.dumps(shared))
    done = uninstall("--project", home_dir=user, cwd=work)
    assert done.returncode == 0 and done.stdout.startswith(f"removed pimem's SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd hooks from {project} (backup: ")
    assert json.loads(project.read_text()) == {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": "say done"}]}]}}
    nowhere = uninstall("--project", home_dir=user, cwd=tmp_path)
    assert (nowhere.returncode, nowhere.stdout) == (0, f"no pimem claude-code hooks in {tmp_path / '.claude' / 'settings.json'}; nothing changed\n")
    assert not (tmp_path / ".claude").exists()
    broken = uninstall("--project", "--user", home_dir=user)
    assert broken.returncode == 2 and "not both" in broken.stderr


def test_a_user_s_hook_that_only_looks_like_pimem_s_survives_install_and_uninstall(home, tmp_path):
    """Any command holding "pimem" and "hook claude-code" was taken for pimem's: install rewrote a user's own
    wrapper or audit hook into pimem's command, and uninstall removed it. Only the command install writes is
    pimem's (by this pimem or another, with any of its options); the rest is left as it is."""
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    lookalikes = ["audit-log --tag pimem -- hook claude-code", "my-wrapper /opt/pimem hook claude-code --name shop",
                  "pimem hook claude-code", "/opt/pimem hook claude-code; notify-send pimem", "/opt/pimem hook claude-code --verbose",
                  "/opt/pimem hook claude-code --name shop --home /x", "/opt/pimem  hook claude-code"]
    theirs = {"hooks": {"Stop": [{"hooks": [{"type": "command", "command": c} for c in lookalikes]}],
                        "UserPromptSubmit": [{"hooks": [{"type": "command", "command": lookalikes[0]}]}]}}
    earlier = {"type": "command", "command": "/opt/old/bin/pimem hook claude-code --home /x --timeout 1e+06", "timeout": 30}
    settings.write_text(json.dumps({"hooks": {**theirs["hooks"], "PreCompact": [{"hooks": [earlier]}]}}))
    done = install(home_dir=user)
    assert done.returncode == 0, done.stderr
    assert f"added pimem's SessionStart, UserPromptSubmit, Stop, SessionEnd hooks to {settings}; changed pimem's PreCompact " \
           f"hooks in {settings} from {earlier['command']} to " in done.stdout, done.stdout  # (an earlier install's: pimem's)
    hooks = json.loads(settings.read_text())["hooks"]
    assert hooks["Stop"][0] == theirs["hooks"]["Stop"][0] and hooks["UserPromptSubmit"][0] == theirs["hooks"]["UserPromptSubmit"][0]
    assert len(hooks["Stop"]) == len(hooks["UserPromptSubmit"]) == 2
    done = uninstall(home_dir=user)
    assert done.returncode == 0 and "removed pimem's SessionStart, UserPromptSubmit, PreCompact, Stop, SessionEnd hooks" in done.stdout
    assert json.loads(settings.read_text()) == theirs


def test_install_in_both_scopes_warns_that_claude_code_runs_both(home, tmp_path):
    """Installed for the user and then for the project, Claude Code ran both hooks (the context twice a prompt)
    and nothing said so."""
    user, work = tmp_path / "user", tmp_path / "work"
    user.mkdir()
    work.mkdir()
    first = install(home_dir=user, cwd=work)
    assert first.returncode == 0 and first.stderr == ""
    both = install("--project", home_dir=user, cwd=work)
    assert both.returncode == 0 and both.stderr == (
        f"pimem: warning: pimem's hooks are in {user / '.claude' / 'settings.json'} as well: Claude Code runs both, so each "
        "prompt gets the context twice; remove one with pimem hook uninstall claude-code\n")
    again = install(home_dir=user, cwd=work)
    assert again.returncode == 0 and again.stderr.endswith("remove one with pimem hook uninstall claude-code --project\n")
    assert uninstall("--project", home_dir=user, cwd=work).returncode == 0
    assert install(home_dir=user, cwd=work).stderr == ""
    home_itself = install("--project", home_dir=user, cwd=user)  # (the project is the home: one file)
    assert home_itself.returncode == 0 and home_itself.stderr == ""


def test_install_writes_the_pimem_home_set_then_into_the_hooks_and_says_so(home, tmp_path):
    """$PIMEM_HOME set at install was neither written nor said: Claude Code started without it captured into
    ~/.pi/memory."""
    user = tmp_path / "user"
    user.mkdir()
    done = install(home_dir=user, PIMEM_HOME=home)
    assert done.returncode == 0 and done.stderr == (f"the hooks capture into $PIMEM_HOME as set now, {home}, written into them as "
                                                    "--home (Claude Code may start without it); give --home to choose another\n")
    hooks = json.loads((user / ".claude" / "settings.json").read_text())["hooks"]
    command = hooks["Stop"][0]["hooks"][0]["command"]
    assert command.endswith(f" hook claude-code --home {home}")
    transcript = tmp_path / "t.jsonl"
    grow(transcript, line("s1", "user", "u1", "captured where the install said", 1))
    bare = {k: v for k, v in subprocess_env().items() if k not in ("PIMEM_HOME", "PI_MEM_HOME")}  # Claude Code's environment
    ran = subprocess.run(["sh", "-c", command], input=payload("Stop", "s1", transcript), capture_output=True, env={**bare, "HOME": str(user)})
    assert ran.returncode == 0 and texts() == ["captured where the install said"] and not (user / ".pi").exists()
    other = tmp_path / "other"
    chosen = install("--home", other, home_dir=user, PIMEM_HOME=home)
    assert chosen.returncode == 0 and chosen.stderr == "" and f" to {hooks['Stop'][0]['hooks'][0]['command'].replace(str(home), str(other))} (backup: " in chosen.stdout


def test_install_refuses_a_home_that_is_a_file_writing_nothing(home, tmp_path):
    """$PIMEM_HOME naming a file went into the hooks as --home, and every event then failed on it."""
    user = tmp_path / "user"
    user.mkdir()
    afile = tmp_path / "afile"
    afile.write_text("not a directory")
    for args, env, said in [((), {"PIMEM_HOME": str(afile)}, "$PIMEM_HOME"), (("--dry-run",), {"PIMEM_HOME": str(afile)}, "$PIMEM_HOME"),
                            (("--home", str(afile)), {}, "--home"), (("--home", "~/../afile"), {}, "--home")]:
        refused = install(*args, home_dir=user, **env)
        assert (refused.returncode, refused.stdout) == (2, ""), refused
        assert refused.stderr == f"pimem: error: {said} {afile} is not a directory: the hooks would capture nowhere; " \
                                 "give --home a directory\n", refused.stderr
    assert list(user.iterdir()) == [] and afile.read_text() == "not a directory"


def test_a_sub_agent_s_prompt_is_not_shown_as_the_user_s_last_words(home, tmp_path):
    """A sub-agent's prompt (its transcript's first line, a user line) is logged as kind user: list showed it
    as what the user said last. It is marked sidechain (by isSidechain, or by its file being a sub-agent's) and
    list passes it over; its kind stays user, so a file imported before is not logged again."""
    transcript = tmp_path / "s1.jsonl"
    grow(transcript, line("s1", "user", "u1", "find every caller of refresh()", 1),
         line("s1", "assistant", "a1", "I will ask a sub-agent.", 2))
    agents = tmp_path / "s1" / "subagents"
    agents.mkdir(parents=True)
    grow(agents / "agent-a1.jsonl", {**line("s1", "user", "t1", "Search the repo for callers of refresh()", 3), "isSidechain": True, "agentId": "a1"},
         {**line("s1", "assistant", "t2", "Found 3 callers.", 4), "isSidechain": True, "agentId": "a1"})
    grow(agents / "agent-b2.jsonl", line("s1", "user", "t3", "List the routes", 5))  # (isSidechain false, as some write it)
    assert hook(payload("Stop", "s1", transcript)) == (0, None, "")
    listed = subprocess.run(pimem_cmd("list", "--json"), capture_output=True, text=True, env=subprocess_env())
    assert listed.returncode == 0 and json.loads(listed.stdout)["last_user"] == "find every caller of refresh()", listed.stdout
    kinds = {m["text"]: (m["kind"], m["meta"].get("sidechain")) for m in Memory.open("api").messages()}
    assert kinds["Search the repo for callers of refresh()"] == ("user", True) and kinds["List the routes"] == ("user", True)
    assert kinds["find every caller of refresh()"] == ("user", None)
    again = subprocess.run(pimem_cmd("import", tmp_path, "-n", "api", "--json"), capture_output=True, text=True, env=subprocess_env())
    assert again.returncode in (0, 1) and len(texts()) == 5, (again.stdout, again.stderr)


def test_claude_code_s_interrupt_markers_are_not_shown_as_the_user_s_last_words(home, tmp_path):
    """Claude Code writes ``[Request interrupted by user]`` (``… for tool use`` when a tool call was stopped) as a
    user line when the user stops a turn: list showed it as what the user said last, and context's previous
    exchange as the user's message. It is logged as written (kind user, its import key unchanged: the file
    imported again adds nothing), marked ``meta.marker``, and passed over; one logged before that mark is known
    by its exact text, from Claude Code only (a user may type those words elsewhere)."""
    from pimem.importers.state import key_of

    def marker(uuid, text, second):
        return {**line("s1", "user", uuid, "", second), "message": {"role": "user", "content": [{"type": "text", "text": text}]}}

    transcript = tmp_path / "s1.jsonl"
    grow(transcript, line("s1", "user", "u1", "rename the deploy script", 1), line("s1", "assistant", "a1", "Renaming it.", 2),
         marker("u2", "[Request interrupted by user]", 3), marker("u3", "[Request interrupted by user for tool use]", 4))
    assert hook(payload("Stop", "s1", transcript)) == (0, None, "")
    logged = [(m["kind"], m["text"], m["meta"].get("marker")) for m in Memory.open("api").messages()]
    assert logged == [("user", "rename the deploy script", None), ("pi", "Renaming it.", None),
                      ("user", "[Request interrupted by user]", True), ("user", "[Request interrupted by user for tool use]", True)]
    stopped = list(Memory.open("api").messages())[2]  # its key is as before the mark: logged then, it is found
    assert key_of(stopped) == key_of({**stopped, "meta": {k: v for k, v in stopped["meta"].items() if k != "marker"}})
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "s1.jsonl").write_bytes(transcript.read_bytes())  # (read from its start: the keys decide)
    again = subprocess.run(pimem_cmd("import", tmp_path / "copy", "-n", "api", "--json"), capture_output=True, text=True,
                           env=subprocess_env())
    assert again.returncode in (0, 1) and len(texts()) == 4, (again.stdout, again.stderr)
    Memory.at("old").append([  # (as an import before the mark logged them)
        {"kind": "user", "text": "tidy the README", "meta": {"source": "claude", "session": "s0", "entry": "o1"}},
        {"kind": "user", "text": "[Request interrupted by user]", "meta": {"source": "claude", "session": "s0", "entry": "o2"}}])
    Memory.at("typed").append([{"kind": "user", "text": "[Request interrupted by user]"}])
    listed = subprocess.run(pimem_cmd("list", "--json"), capture_output=True, text=True, env=subprocess_env())
    assert listed.returncode == 0, listed.stderr
    last = {row["name"]: row["last_user"] for row in map(json.loads, listed.stdout.splitlines())}
    assert last == {"api": "rename the deploy script", "old": "tidy the README", "typed": "[Request interrupted by user]"}
    context = subprocess.run(pimem_cmd("context", "api"), capture_output=True, text=True, env=subprocess_env())
    assert context.returncode == 0, context.stderr
    exchange = context.stdout.split("<previous_exchange>\n")[1].split("</previous_exchange>")[0]
    assert exchange == "#0 user: rename the deploy script\n#1 pi: Renaming it.\n"


# ---- the fast path: `python -m pimem hook claude-code` without typer ---------------------------------------

# `python -m pimem` (and the installed `pimem` script) as Claude Code runs it, and the typer app (``pimem.cli.main``);
# each writes which of typer, click and pimem.cli it imported to $PROBE as it ends
PROBE = ("import atexit, os, sys\n"
         "atexit.register(lambda: open(os.environ['PROBE'], 'w').write(' '.join(m for m in ('typer', 'click', 'pimem.cli') if m in sys.modules)))\n")
FAST = PROBE + "import runpy; runpy.run_module('pimem', run_name='__main__', alter_sys=True)"
TYPER = PROBE + "sys.argv[0] = 'pimem'; from pimem.cli import main; main()"


def probed(program: str, data: bytes, args, tmp_path, **env):
    probe = tmp_path / "probe"
    probe.unlink(missing_ok=True)
    proc = subprocess.run([sys.executable, "-c", program, *args], input=data, capture_output=True, timeout=60,
                          env=subprocess_env(PROBE=probe, **env), cwd=tmp_path)
    return proc, probe.read_text() if probe.exists() else None


def test_an_event_imports_neither_typer_nor_click(home, tmp_path):
    """Claude Code runs the hook on every event: typer and click (~25 ms of a ~65 ms event) parse nothing the
    hook needs, with its options in any form typer takes."""
    earlier, current = tmp_path / "e.jsonl", tmp_path / "c.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1))
    grow(current, line("s2", "user", "u2", "hello", 2))
    assert hook(payload("Stop", "s1", earlier))[0] == 0
    for args in ((), ("--home", home, "-n", "api", "--budget", "2000", "--timeout", "5"),
                 (f"--home={home}", "--name=api", "--budget=2000", "--timeout=5.5"), ("--name", "api", "--timeout", "0.5")):
        for event in ("SessionStart", "UserPromptSubmit", "Stop"):
            proc, imported = probed(FAST, payload(event, "s2", current, prompt="staging db port"), ["hook", "claude-code", *args], tmp_path)
            assert proc.returncode == 0 and proc.stderr == b"", (event, args, proc.stderr)
            assert imported == "", (event, args, imported)
            if event == "UserPromptSubmit":
                assert "5433" in context_of(json.loads(proc.stdout))


def test_the_fast_path_says_and_exits_exactly_what_the_typer_app_does(tmp_path, monkeypatch):
    """Every event, payload and option the hook may get, run by `python -m pimem` and by the typer app over two
    homes given the same events: the same stdout, stderr and exit code; what the fast path does not take
    (a bad value, an unknown option, --help, install) goes to the typer app, which says what is wrong."""
    monkeypatch.setenv("PIMEM_NOW", "2026-10-08T09:30:00+08:00")
    monkeypatch.delenv("PI_MEM_HOME", raising=False)
    monkeypatch.delenv("PIMEM_MEMORY", raising=False)
    earlier, current = tmp_path / "e.jsonl", tmp_path / "c.jsonl"
    grow(earlier, line("s1", "user", "u1", "the staging db listens on 5433", 1), line("s1", "assistant", "a1", "noted: port 5433", 2))
    grow(current, line("s2", "user", "u2", "which port does staging use", 3))
    afile = tmp_path / "a-file"
    afile.write_text("not a home\n")
    event = lambda name, session="s2", path=current, **extra: payload(name, session, path, **extra)  # noqa: E731
    cases = [(event("Stop", "s1", earlier), (), True), (event("SessionStart", source="startup"), (), True),
             (event("UserPromptSubmit", prompt="staging db port"), (), True), (event("PreCompact", trigger="auto"), (), True),
             (event("Stop", stop_hook_active=False), (), True), (event("SessionEnd", reason="exit"), (), True),
             (event("UserPromptSubmit", prompt="staging port"), ("--budget", "300", "-n", "api", "--timeout", "5"), True),
             (event("UserPromptSubmit", prompt="staging port"), ("--budget=120", "--name=api", "--timeout=5.25"), True),
             (event("SessionStart"), ("--home", "{home}"), True), (event("SessionStart"), ("--home={home}", "--budget", "0"), True),
             (event("SessionStart"), ("--home", afile), True), (event("Stop"), ("--name", "no/such"), True),
             (event("Stop"), ("-n", ""), True), (event("Stop"), ("--home=",), True),
             (b"{", (), True), (b"[]", (), True), (b"", (), True), (b"\xff", (), True), (b'{"hook_event_name": 3}', (), True),
             (event("Stop"), ("--budget", "x"), False), (event("Stop"), ("--budget=-1",), False), (event("Stop"), ("--timeout", "1e3"), False),
             (event("Stop"), ("--timeout",), False), (event("Stop"), ("--bogus",), False), (event("Stop"), ("--projec",), False),
             (event("Stop"), ("--project",), False), (event("Stop"), ("--help",), False), (event("Stop"), ("extra",), False),
             (event("Stop"), ("-n", "api", "-n", "api"), False), (event("Stop"), ("-napi",), False), (event("Stop"), ("--", "x"), False),
             (event("Stop"), ("--name", "-x"), False)]
    answers = []
    for data, args, taken in cases:
        said = []
        for side, program in (("a", FAST), ("b", TYPER)):
            side_home = tmp_path / side / "home"
            given = [str(a).replace("{home}", str(side_home)) for a in args]
            proc, imported = probed(program, data, ["hook", "claude-code", *given], tmp_path, PIMEM_HOME=side_home)
            mask = lambda b: b.decode().replace(str(side_home), "HOME")  # noqa: E731
            said.append((proc.returncode, mask(proc.stdout), mask(proc.stderr)))
            if side == "a":
                assert imported == ("" if taken else "typer pimem.cli"), (args, imported)
        assert said[0] == said[1], (data, args)
        answers.append(said[0])
    assert "5433" in context_of(json.loads(answers[2][1]))  # (the cases ran: the prompt was answered from s1)
    assert answers[14][0] == 1 and answers[20][0] == 1 and "--budget" in answers[20][2]  # (bad JSON; a bad value)


def catching_up(memory) -> list[int]:
    """The processes a hook started to catch up the index of the memory at ``memory`` (``index.catch_up_in_background``)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                command = f.read()
        except OSError:
            continue
        if b"catch_up_detached" in command and os.fsencode(memory) in command.split(b"\0"):
            found.append(int(pid))
    return found


def indexed(memory) -> int:
    """How many messages the index of the memory at ``memory`` holds, read as another reader would (0: no index yet)."""
    import sqlite3

    try:
        db = sqlite3.connect(f"file:{memory / 'index.sqlite'}?mode=ro", uri=True)
        try:
            return db.execute("SELECT count(*) FROM msgs").fetchone()[0]
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def sound(memory) -> bool:
    import sqlite3

    for name in ("index.sqlite", "index-1.sqlite"):
        db = sqlite3.connect(f"file:{memory / name}?mode=ro", uri=True)
        try:
            if db.execute("PRAGMA integrity_check").fetchall() != [("ok",)]:
                return False
        finally:
            db.close()
    return True


def gone(pids, bound=300) -> None:
    started = time.monotonic()
    while any(os.path.exists(f"/proc/{pid}/cmdline") and open(f"/proc/{pid}/cmdline", "rb").read() for pid in pids):
        assert time.monotonic() - started < bound, "the catch-up never ended"
        time.sleep(0.1)


def test_a_prompt_after_the_index_is_lost_is_answered_at_once_and_the_index_rebuilt_by_a_process_of_its_own(home, tmp_path):
    """A memory of 100,000 messages (25 MiB) whose index was deleted: the prompt's hook rebuilt it before answering
    (11 s for a memory of 150 MB, past its 10 s, so the watchdog gave no context at all). It answers with the
    user's memories at once, says once why earlier messages are missing, and leaves the rebuild to a process of
    its own; that process killed with SIGKILL halfway leaves an index every reader reads and goes on from."""
    feed = tmp_path / "feed.ndjson"
    with open(feed, "w") as f:
        for i in range(100_000):
            text = "the staging db listens on port 5433" if i == 500 else f"filler line {i} about nothing much at all" + ", and some more words of it" * 5
            f.write(json.dumps({"kind": "user" if i % 2 == 0 else "pi", "text": text}) + "\n")
    subprocess.run(pimem_cmd("append", "big", "--ndjson"), stdin=open(feed, "rb"), capture_output=True, env=subprocess_env(), check=True)
    subprocess.run(pimem_cmd("remember", "big", "--pin", "never deploy on fridays"), capture_output=True, env=subprocess_env(), check=True)
    memory = home / "big"
    for name in ("index.sqlite", "index-1.sqlite"):  # (none made yet: as if deleted)
        assert not (memory / name).exists()
    ask = payload("UserPromptSubmit", "s2", tmp_path / "none.jsonl", prompt="which port does the staging db listen on?")

    code, answer, err = hook(ask, "--name", "big")
    assert code == 0, err
    said = answer["hookSpecificOutput"]["additionalContext"]
    assert "never deploy on fridays" in said and "earlier_sessions" not in said
    note = ("pimem: the search index of memory 'big' lacks 25 MiB of its log; a process of its own is catching it up, so this "
            "prompt gets no earlier messages (the next prompts do once it is done)")
    assert answer["systemMessage"] == note and err == note + "\n", (answer, err)
    pids = catching_up(memory)
    assert len(pids) == 1
    while indexed(memory) == 0:  # (its first batch committed)
        time.sleep(0.01)
    os.kill(pids[0], 9)
    gone(pids)
    assert 0 < indexed(memory) < 100_000 and sound(memory)  # killed halfway: what it committed, whole

    code, answer, err = hook(ask, "--name", "big")  # (still far behind: another process takes it on from there)
    assert code == 0 and "earlier_sessions" not in answer["hookSpecificOutput"]["additionalContext"], (answer, err)
    assert "lacks" in answer["systemMessage"]
    pids = catching_up(memory)
    gone(pids)
    assert indexed(memory) == 100_000 and sound(memory)
    code, answer, err = hook(ask, "--name", "big")
    assert (code, err) == (0, "") and "#500 " in answer["hookSpecificOutput"]["additionalContext"], (answer, err)
    found = subprocess.run(pimem_cmd("search", "port 5433", "big", "--json"), capture_output=True, env=subprocess_env())
    assert [json.loads(row)["i"] for row in found.stdout.splitlines()] == [500]
    assert catching_up(memory) == []


def test_a_session_end_with_a_big_backlog_captures_it_and_leaves_the_index_to_a_process_of_its_own(home, tmp_path):
    """SessionEnd with 1,500 lines (9 MB) to import: the hook indexed them as well, waiting for index.lock while
    another process caught the index up, past its time ('out of time'). It logs them, leaves the index to a
    process of its own (none while another holds the lock), and says nothing."""
    transcript = tmp_path / "t.jsonl"
    words = " ".join(f"word{k}" for k in range(900))
    grow(transcript, *[line("s1", "user" if k % 2 == 0 else "assistant", f"u{k}", f"{k} {words}", k % 500) for k in range(1_500)])
    grow(transcript, line("s1", "user", "last", "the staging db listens on port 5433", 2))
    (home / "api").mkdir(parents=True)
    holder = held_lock(home / "api" / "index.lock")
    try:
        code, answer, err = hook(payload("SessionEnd", "s1", transcript, reason="exit"), "--timeout", "30",
                                 PIMEM_LOCK_TIMEOUT="600")
        assert catching_up(home / "api") == []  # (another process holds the lock: it catches up, not a second one)
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    assert (code, answer, err) == (0, None, "")
    assert len(texts()) == 1_501 and indexed(home / "api") == 0
    transcript.write_text("")
    transcript2 = tmp_path / "t2.jsonl"
    grow(transcript2, *[line("s3", "user", f"v{k}", f"{k} {words}", k % 500) for k in range(1_500)])
    assert hook(payload("SessionEnd", "s3", transcript2, reason="exit")) == (0, None, "")
    gone(catching_up(home / "api"))
    assert indexed(home / "api") == 3_001 and sound(home / "api")


def test_the_catch_up_process_finds_the_standard_library_before_what_sits_beside_an_installed_pimem(home, tmp_path):
    """The process ``index.catch_up_in_background`` starts had pimem's directory put first on its path
    (PYTHONPATH). For a pimem installed in site-packages every package there then came before the standard
    library, so one named as a standard module (enum34's ``enum``) made it die at start: the index never caught
    up, while each prompt said a process was catching it up. Here a pimem in a venv's site-packages beside an
    ``fcntl.py``: the index is caught up."""
    import shutil
    import sysconfig
    from pathlib import Path

    import pimem

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    shutil.copytree(Path(pimem.__file__).parent, site / "pimem", ignore=shutil.ignore_patterns("__pycache__"))
    (site / "fcntl.py").write_text("raise ImportError('a module beside pimem named as a standard one')\n")
    (site / "deps.pth").write_text("\n".join(sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})) + "\n")
    subprocess.run(pimem_cmd("append", "m", "the staging db listens on port 5433"), capture_output=True, env=subprocess_env(), check=True)
    memory = home / "m"
    assert indexed(memory) == 0
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    started = subprocess.run([python, "-c", "import sys; from pathlib import Path; import pimem.index as x; "
                              "assert x.__file__.startswith(sys.argv[2]); x.catch_up_in_background(Path(sys.argv[1]))",
                              str(memory), str(site)], env=env, capture_output=True, text=True, cwd=tmp_path)
    assert started.returncode == 0, started.stderr
    started = time.monotonic()
    while indexed(memory) == 0:
        assert time.monotonic() - started < 60, "the catch-up process never caught the index up"
        time.sleep(0.05)
    gone(catching_up(memory))


def test_a_session_end_with_a_backlog_reads_for_more_of_its_time_than_an_importer_leaves_it(home, tmp_path):
    """A capture no longer indexes what it logged (a process of its own does), yet a SessionEnd read a transcript for
    the importers' fifth of its time (the rest was for indexing): 2.5 s of its 10 with a backlog of 150 MB, so a
    backlog took many events to log. It reads for three quarters of two thirds of its time, half of it: 2.5 times
    as many lines as the same hook with the importers' share, on a clock of the reader's own that ticks 0.2 ms a
    line (so that the count is the share's, not the machine's load); on the real clock, within its time (no 'out of
    time after' from the watchdog), exit 0."""
    transcript = tmp_path / "t.jsonl"
    words = " ".join(f"word{k}" for k in range(40))
    grow(transcript, *[line("s1", "user" if k % 2 == 0 else "assistant", f"u{k}", f"{k} {words}", k % 500) for k in range(60_000)])
    end = payload("SessionEnd", "s1", transcript, reason="exit")
    cut = "pimem: out of time; the next event imports the rest of the transcript"  # (read cut short, not by the watchdog)
    ticking = ("import itertools, time, types, pimem.importers.job as j; start, ticks = time.monotonic(), itertools.count(); "
               "j.time = types.SimpleNamespace(monotonic=lambda: start + next(ticks) * 0.0002); ")
    logged = {}
    for name, patch in (("importers", ticking + f"import pimem.claude_code as c; c.CAPTURE_SHARE, c.CAPTURE_SPAN = {READ_SHARE!r}, 1.0; "),
                        ("hook", ticking), ("real", "")):
        proc = subprocess.run([sys.executable, "-c", f"import runpy, sys; {patch}sys.argv = ['pimem', 'hook', 'claude-code', "
                               f"'--name', '{name}']; runpy.run_module('pimem', run_name='__main__')"],
                              input=end, capture_output=True, timeout=60, env=subprocess_env())
        said = (json.loads(proc.stdout) if proc.stdout else None, proc.stderr.decode())
        assert proc.returncode == 0 and said in ((None, ""), ({"systemMessage": cut}, cut + "\n")), said
        if name != "real":
            assert said[1] == cut + "\n"
        logged[name] = len(texts(name))
        for pid in catching_up(home / name):  # (its index: not this test's matter)
            os.kill(pid, 9)
    assert 0 < logged["real"] and 9_000 < logged["importers"] < 11_000 and 2 * logged["importers"] < logged["hook"] < 27_000, logged


def test_install_and_uninstall_keep_the_user_s_text_byte_for_byte_where_they_change_nothing(home, tmp_path):
    """install wrote the whole file again as json.dumps(indent=2) does: a user's 4-space indent, one-line
    groups, escapes ("\\u00e9", "\\/") and a missing last newline were all rewritten, so a settings file kept in
    dotfiles showed a diff of every line. Now only what pimem adds or takes out changes, written in the file's
    own indent; install then uninstall gives back the very bytes."""
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    theirs = ('\ufeff{\n    "model": "opus",\n    "env": {"A": "\\u00e9\\/x", "N": 1.50},\n    "hooks": {\n'
              '        "Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "notify-send done"}]}],\n'
              '        "PreToolUse" : [ ]\n    },\n\t"permissions": {"allow": ["Bash(ls:*)"]}\n}')
    settings.write_bytes(theirs.encode())
    done = install("--name", "shop", home_dir=user)
    assert done.returncode == 0, done.stderr
    merged = settings.read_text(encoding="utf-8-sig")
    for kept in ('{\n    "model": "opus",\n    "env": {"A": "\\u00e9\\/x", "N": 1.50},\n    "hooks": {\n',
                 '        "Stop": [{"matcher": "", "hooks": [{"type": "command", "command": "notify-send done"}]}, {"hooks": [',
                 '        "PreToolUse" : [ ],\n        "SessionStart": [\n            {\n                "hooks": [\n',
                 '\n    },\n\t"permissions": {"allow": ["Bash(ls:*)"]}\n}'):
        assert kept in merged, merged
    hooks = json.loads(merged)["hooks"]
    assert [list(hooks), len(hooks["Stop"])] == [["Stop", "PreToolUse", "SessionStart", "UserPromptSubmit", "PreCompact", "SessionEnd"], 2]
    assert all(h[-1]["hooks"][0]["command"].endswith("hook claude-code --name shop") for h in (hooks["Stop"], hooks["SessionEnd"]))
    dry = install("--name", "other", "--dry-run", home_dir=user)
    assert dry.returncode == 0 and dry.stdout == "\ufeff" + merged.replace("--name shop", "--name other") + "\n", dry.stdout

    done = uninstall(home_dir=user)
    assert done.returncode == 0, done.stderr
    assert settings.read_bytes() == theirs.encode()


def test_install_and_uninstall_leave_a_read_only_settings_file_alone(home, tmp_path):
    """A settings file the user made read-only (chmod 444: kept from Claude Code's own edits, or managed by a
    tool) was replaced all the same, the rename needing only its directory's permission. It is refused now
    (exit 7, one line saying how to go on), nothing written, no backup; --dry-run still shows the result."""
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    settings.write_text('{"model": "opus"}\n')
    os.chmod(settings, 0o444)
    refused = install(home_dir=user)
    assert (refused.returncode, refused.stdout) == (7, ""), refused
    assert refused.stderr == f"pimem: error: {settings} is read-only (mode 444): pimem leaves it as it is; make it " \
                             "writable (chmod u+w) and run this again\n", refused.stderr
    assert sorted(p.name for p in settings.parent.iterdir()) == ["settings.json"] and settings.read_text() == '{"model": "opus"}\n'
    dry = install("--dry-run", home_dir=user)
    assert dry.returncode == 0 and json.loads(dry.stdout)["model"] == "opus"
    os.chmod(settings, 0o644)
    assert install(home_dir=user).returncode == 0
    os.chmod(settings, 0o400)
    refused = uninstall(home_dir=user)
    assert refused.returncode == 7 and "read-only (mode 400)" in refused.stderr and "hook claude-code" in settings.read_text()


def test_install_refuses_a_settings_path_that_is_no_file_and_a_link_into_no_directory(home, tmp_path):
    """A pipe at ~/.claude/settings.json made install wait on it for ever (and so the check of the other scope's
    file: uninstall too); a link whose file's directory is gone (a dotfiles checkout moved away) had that
    directory made, wherever it named, and the hooks written there. Both are refused now (exit 2, one line),
    nothing written; a link to a file not made yet, in a directory that is there, still gets it."""
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    os.mkfifo(settings)
    for run in (install, uninstall):
        refused = run(home_dir=user)
        assert (refused.returncode, refused.stdout) == (2, ""), refused
        assert refused.stderr == f"pimem: error: {settings}: not a regular file; fix it by hand first\n", refused.stderr
    settings.unlink()
    gone = tmp_path / "moved" / "dotfiles" / "settings.json"
    settings.symlink_to(gone)
    refused = install(home_dir=user)
    assert (refused.returncode, refused.stdout) == (2, ""), refused
    assert refused.stderr == f"pimem: error: {settings}: a link to {gone}, whose directory is not there; fix the link first\n"
    assert not (tmp_path / "moved").exists() and sorted(p.name for p in settings.parent.iterdir()) == ["settings.json"]
    (tmp_path / "moved" / "dotfiles").mkdir(parents=True)
    done = install(home_dir=user)
    assert done.returncode == 0 and settings.is_symlink() and "hook claude-code" in gone.read_text(), done.stderr


def test_install_writes_a_crlf_settings_file_s_lines_with_crlf(home, tmp_path):
    """A settings file with Windows line ends (CRLF, as an editor on Windows or WSL writes it) got pimem's
    hooks with bare LF line ends, a file of mixed ends. Its lines added end as the file's do."""
    user = tmp_path / "user"
    settings = user / ".claude" / "settings.json"
    settings.parent.mkdir(parents=True)
    theirs = b'{\r\n  "model": "opus",\r\n  "hooks": {}\r\n}\r\n'
    settings.write_bytes(theirs)
    assert install(home_dir=user).returncode == 0
    written = settings.read_bytes()
    assert written.count(b"\n") == written.count(b"\r\n") > 20 and b'  "hooks": {\r\n    "SessionStart": [\r\n      {\r\n' in written
    assert uninstall(home_dir=user).returncode == 0 and settings.read_bytes() == b'{\r\n  "model": "opus"\r\n}\r\n'
