"""Hash-chained event logs: exact hashes, trusted prefixes, refused appends, torn lines, real concurrency
and kernel-released locks."""

import hashlib
import json
import os
import signal
import subprocess
import sys

import orjson
import pytest

from conftest import snapshot, subprocess_env
from pimem import Memory
from pimem.chain import memory_chain, window_chain


def _canonical(obj) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


def _lines(home, name="main", log="memory.jsonl"):
    return [orjson.loads(l) for l in (home / name / log).read_bytes().splitlines() if l.strip()]


def test_memory_events_hash_the_pi_compact_object(run, home):
    run("remember", "main", "use pnpm")
    run("remember", "main", "--session", "s1", "--scope", "session", "only here")
    first, second = _lines(home)
    for event, prev in ((first, ""), (second, first["hash"])):
        hashed = {k: event[k] for k in ("seq", "ts", "type", "recordId", "prevHash", "author", "payload")}
        hashed["sessionId"] = event.get("sessionId", "")
        assert event["prevHash"] == prev
        assert event["hash"] == hashlib.sha256(_canonical(hashed)).hexdigest()
    assert (first["seq"], second["seq"]) == (1, 2)
    assert "sessionId" not in first and second["sessionId"] == "s1"
    # each line is itself canonical JSON, so the file is stable byte for byte
    assert (home / "main" / "memory.jsonl").read_bytes().splitlines()[0] == _canonical(first)


def _three_events(run):
    for text in ("one", "two", "three"):
        assert run("remember", "main", text).exit_code == 0


def _rewrite(home, lines):
    (home / "main" / "memory.jsonl").write_bytes(b"".join(_canonical(e) + b"\n" for e in lines))


@pytest.mark.parametrize("damage", ["tampered", "duplicated", "skipped", "bad_prev_hash", "not_an_event", "garbled"])
def test_damage_keeps_the_prefix_and_refuses_appends(run, home, damage):
    _three_events(run)
    events = _lines(home)
    if damage == "tampered":
        events[1]["payload"]["content"] = "TWO"  # hash left as it was
    elif damage == "duplicated":
        events.insert(2, events[1])
    elif damage == "skipped":
        del events[1]
    elif damage == "bad_prev_hash":
        events[1]["prevHash"] = "0" * 64
    elif damage == "not_an_event":
        events.insert(1, [1, 2, 3])
    _rewrite(home, events)
    if damage == "garbled":  # an event garbled where it starts (not a write cut short): the next would fork it
        path = home / "main" / "memory.jsonl"
        first, rest = path.read_bytes().split(b"\n", 1)
        second, rest = rest.split(b"\n", 1)
        path.write_bytes(first + b"\n" + b"#" + second[1:] + b"\n" + rest)
    reading = memory_chain(home / "main").read()
    trusted = 2 if damage == "duplicated" else 1
    assert [e["seq"] for e in reading.events] == list(range(1, trusted + 1))
    assert reading.problem and "line" in reading.problem
    before = snapshot(home)
    out = run("remember", "main", "four")
    assert out.exit_code == 5
    assert "refused" in out.stderr and "nothing was written" in out.stderr
    assert snapshot(home) == before
    # readers still get the trusted prefix, and are told what is left out
    listed = run("memories", "main", "--json")
    assert orjson.loads(listed.stdout)["count"] == trusted
    assert listed.exit_code == 5 and listed.stderr.count("\n") == 1 and "left out until a person repairs it" in listed.stderr
    trusted_id, past = events[0]["recordId"], events[-1]["recordId"]  # (one read before the damage, one after)
    one = run("memories", "main", "--id", trusted_id)
    assert one.exit_code == 5 and '"id"' in one.stdout and "left out until a person repairs it" in one.stderr
    gone = run("memories", "main", "--id", past)
    assert gone.exit_code == 5 and "left out until a person repairs it" in gone.stderr  # not "no memory …"
    context = run("context", "main")
    assert context.exit_code == 0 and "- [" in context.stdout  # the agent's turn goes on, with the trusted ones
    assert "pimem: warning: main: memory.jsonl line" in context.stderr
    from pimem import api

    assert "left out" in api.memory_search("main", home=home)["damaged"]


def test_a_byte_order_mark_an_editor_put_first_keeps_the_first_event(run, home):
    _three_events(run)
    path = home / "main" / "memory.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    assert [e["seq"] for e in memory_chain(home / "main").read().events] == [1, 2, 3]
    assert run("remember", "main", "four").exit_code == 0
    reading = memory_chain(home / "main").read()
    assert reading.problem is None and [e["seq"] for e in reading.events] == [1, 2, 3, 4]  # no second seq 1
    assert run("fsck", "main").exit_code == 0


def test_torn_last_line_is_tolerated_then_sealed(run, home):
    _three_events(run)
    path = home / "main" / "memory.jsonl"
    with open(path, "ab") as f:
        f.write(b'{"author":"user","hash":"ab')  # a crash mid-write
    assert len(memory_chain(home / "main").read().events) == 3
    assert run("remember", "main", "four").exit_code == 0
    data = path.read_bytes()
    assert b'"hash":"ab\n{' in data  # sealed: the new event starts a line of its own
    reading = memory_chain(home / "main").read()
    assert reading.problem is None and [e["seq"] for e in reading.events] == [1, 2, 3, 4]


@pytest.mark.parametrize("last", [True, False, "unsealed"])
def test_an_event_damaged_inside_is_damage_not_a_torn_write(run, home, last):
    """An event whole on its line whose JSON an edit (or a flipped byte) broke inside it is not a write a crash
    cut short: it was skipped as one, so the last memory vanished without a word (exit 0, fsck a note) and the
    next remember wrote its seq again, forking the chain past repair; in the middle it was blamed on the next
    line (\"an event was skipped\")."""
    _three_events(run)
    path = home / "main" / "memory.jsonl"
    lines = path.read_bytes().split(b"\n")
    n = 2 if last else 1  # (0-based: the third event, or the second)
    lines[n] = lines[n].replace(b'"content":"', b'"content":', 1)  # an opening quote deleted by hand
    path.write_bytes(b"\n".join(lines).removesuffix(b"\n" if last == "unsealed" else b""))  # (an editor's last line)
    reading = memory_chain(home / "main").read()
    assert [e["seq"] for e in reading.events] == list(range(1, n + 1))
    assert reading.line == n + 1 and "damaged" in reading.what
    before = snapshot(home)
    out = run("remember", "main", "four")
    assert out.exit_code == 5 and f"memory.jsonl line {n + 1}: " in out.stderr
    assert snapshot(home) == before
    listed = run("memories", "main")
    assert listed.exit_code == 5 and f"memory.jsonl line {n + 1}: a damaged event" in listed.stderr
    checked = run("fsck", "main")
    assert checked.exit_code == 5 and checked.stdout.splitlines() == [
        f"main: memory: memory.jsonl:{n + 1}: problem: a damaged event: its JSON is broken inside it, not cut short as a "
        "crash leaves a write; later events are not trusted and appends are refused"]  # (said once, as what it is)


@pytest.mark.parametrize("cut", [b'{', b'{"author":"us', b'{"author":"user","hash":"ab', b'{"a":"caf\xc3',
                                 b'{"a":"x\\', b'{"a":"\\u00e', b'{"a":tr', b'{"a":nul', b'{"a":-', b'{"a":[1,',
                                 b'{"payload":{"x":1}', b'{"seq":3,'])
def test_every_event_a_crash_cut_short_is_a_torn_write(run, home, cut):
    """A write cut anywhere (inside a string, an escape, a character, a literal; after a nested object) is
    skipped as torn, sealed, and the next event follows it."""
    _three_events(run)
    path = home / "main" / "memory.jsonl"
    with open(path, "ab") as f:
        f.write(cut)
    assert memory_chain(home / "main").read().problem is None
    assert run("remember", "main", "four").exit_code == 0
    reading = memory_chain(home / "main").read()
    assert reading.problem is None and [e["seq"] for e in reading.events] == [1, 2, 3, 4]
    out = run("fsck", "main")
    assert out.exit_code == 0 and "note: a write torn by a crash and later sealed" in out.stdout


def test_window_chain_break_refuses_compaction(run, home):
    lines = "\n".join(orjson.dumps({"kind": k, "text": f"{k} {n}"}).decode() for n in range(6) for k in ("user", "pi"))
    run("append", "main", "--ndjson", input=lines + "\n")
    assert run("compact", "main", "--keep", "10").exit_code == 0
    events = _lines(home, log="windows.jsonl")
    events[0]["sourceCount"] = 99
    (home / "main" / "windows.jsonl").write_bytes(_canonical(events[0]) + b"\n")
    assert window_chain(home / "main").read().events == []
    run("append", "main", "more")
    before = snapshot(home)
    for dry in ([], ["--dry-run"]):  # the dry run says what the run would refuse
        out = run("compact", "main", "--keep", "10", *dry)
        assert out.exit_code == 5 and "windows.jsonl line 1" in out.stderr, dry
        assert snapshot(home) == before


WRITER = """
import sys
from pimem import Memory, memories
n = int(sys.argv[1])
for k in range(5):
    memories.remember(Memory.at("main"), f"process {n} note {k}")
"""


def test_eight_processes_remember_into_one_contiguous_chain(home):
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(n)], env=subprocess_env(), stderr=subprocess.PIPE)
        for n in range(8)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0, p.stderr.read()
    reading = memory_chain(home / "main").read()
    assert reading.problem is None
    assert [e["seq"] for e in reading.events] == list(range(1, 41))
    contents = sorted(e["payload"]["content"] for e in reading.events)
    assert contents == sorted(f"process {n} note {k}" for n in range(8) for k in range(5))


HOLDER = """
import sys, time
from pimem import Memory
mem = Memory.at("main")
with mem.lock():
    print("locked", flush=True)
    time.sleep(120)
"""


def _hold_lock(home):
    Memory.at("main").append([{"kind": "user", "text": "hi"}])
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], env=subprocess_env(), stdout=subprocess.PIPE)
    assert proc.stdout.readline() == b"locked\n"
    return proc


def test_a_live_lock_holder_makes_writers_wait_then_exit_4(sh, home):
    proc = _hold_lock(home)
    try:
        before = snapshot(home)
        out = sh("remember", "main", "--timeout", "0.3", "blocked")
        assert out.returncode == 4 and b"locked by another writer" in out.stderr
        assert snapshot(home) == before
    finally:
        proc.kill()
        proc.wait()


def test_a_killed_lock_holder_never_blocks_the_next_writer(sh, home):
    proc = _hold_lock(home)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    out = sh("remember", "main", "--timeout", "5", "after the crash")
    assert out.returncode == 0, out.stderr
    assert [e["payload"]["content"] for e in memory_chain(home / "main").read().events] == ["after the crash"]


def test_a_pi_compact_memory_log_reads_as_is(run, home):
    """Events as pi-compact writes them (its field order, millisecond UTC stamps, no sessionId, its later
    ``workspace`` scope) chain and project without conversion, and pimem appends after them."""
    events, prev = [], ""
    for seq, (kind, rid, payload) in enumerate([
        ("create", "mem_3f9a0c1d2e4b5a6c", {"kind": "constraint", "content": "use pnpm", "scope": "workspace", "status": "active",
                                            "priority": "normal", "sourceEntryIds": [], "sourceHash": "0" * 64, "provenance": "user:/remember"}),
        ("pin", "mem_3f9a0c1d2e4b5a6c", {}),
    ], 1):
        event = {"type": kind, "recordId": rid, "author": "user", "payload": payload, "seq": seq,
                 "ts": f"2026-03-02T09:0{seq}:00.000Z", "prevHash": prev}
        hashed = {k: event[k] for k in ("seq", "ts", "type", "recordId", "prevHash", "author", "payload")}
        event["hash"] = prev = hashlib.sha256(_canonical({**hashed, "sessionId": ""})).hexdigest()
        events.append(json.dumps(event))
    (home / "main" / "main").mkdir(parents=True)
    (home / "main" / "memory.jsonl").write_text("\n".join(events) + "\n")
    listed = orjson.loads(run("memories", "main", "--json").stdout)["records"]
    assert [(r["id"], r["status"], r["scope"]) for r in listed] == [("mem_3f9a0c1d2e4b5a6c", "pinned", "workspace")]
    assert run("remember", "main", "and node 22").exit_code == 0
    assert [e["seq"] for e in memory_chain(home / "main").read().events] == [1, 2, 3]
