"""JSON as other programs write it: a string cut inside a surrogate pair (JSON.stringify writes a lone
surrogate escape, ``"\\ud83d"``, valid JSON that orjson refuses) and a UTF-8 BOM opening a file, read by every
reader of another program's lines — import, append --ndjson, the Claude Code hook, memory.jsonl, fsck."""

from __future__ import annotations

import hashlib
import json
import subprocess

import orjson
import pytest

from conftest import pimem_cmd, snapshot, subprocess_env
from pimem import Memory, decoder, ingest
from pimem.chain import memory_chain

CUT = "a rocket \ud83d"  # a text cut after the first half of U+1F680
KEPT = "a rocket \ufffd"  # how pimem keeps it: half a character has no UTF-8
BOM = b"\xef\xbb\xbf"


def js(obj) -> bytes:
    """One line as JSON.stringify writes it for these ASCII objects: a lone surrogate as its escape."""
    return json.dumps(obj, separators=(",", ":")).encode() + b"\n"


def claude_line(uuid: str, text: str, second: int, kind: str = "user") -> dict:
    base = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": "/home/dev/api", "sessionId": "s1",
            "version": "2.1.38", "type": kind, "uuid": uuid, "timestamp": f"2026-10-01T09:00:{second:02d}.000Z"}
    if kind == "user":
        return {**base, "message": {"role": "user", "content": text}}
    return {**base, "message": {"id": f"msg_{uuid}", "role": "assistant", "model": "claude-x", "content": [{"type": "text", "text": text}]}}


def texts(name: str) -> list[str]:
    return [m["text"] for m in Memory.open(name).messages()]


def test_the_decoder_replaces_only_lone_surrogates_and_refuses_what_orjson_refuses():
    assert decoder.loads(js({"t": CUT, "pair": "\U0001f680", "n": [1, 2.5, None]})) == {"t": KEPT, "pair": "\U0001f680", "n": [1, 2.5, None]}
    assert decoder.loads(b'{"\\udc00k":"\\ude80 then \\ud83d\\ude80"}') == {"\ufffdk": "\ufffd then \U0001f680"}
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(js({"t": CUT}))  # (what the decoder is for)
    for bad in (b'{"t":"\\ud83d"', b'{"t":"\\ud83d","n":NaN}', b'{"t":"\\ud83d","n":1e400}', b'{"t":"\\ud83d"}x',
                b'{"t":"\\ud83d\xff"}', b'{"t":"fine","n":NaN}', b'{"t":"\\u12"}'):
        with pytest.raises(decoder.JSONDecodeError):
            decoder.loads(bad)
    assert decoder.loads(b'{"t":"\\ud83d","n":18446744073709551617}')["n"] == orjson.loads(b"18446744073709551617")  # numbers as orjson reads them
    value, kept = decoder.loads_keeping(js({"b": CUT, "a": "x\x01\"\\"}))
    assert value == {"b": KEPT, "a": "x\x01\"\\"} and kept == {"b": CUT, "a": "x\x01\"\\"}
    assert decoder.canonical(kept) == b'{"a":"x\\u0001\\"\\\\","b":"a rocket \\ud83d"}'  # as JSON.stringify writes it
    plain = {"z": [1, {"y": "\u00e9\u2028", "x": None}], "a": True, "f": 1.5e-7}
    assert decoder.canonical(plain) == orjson.dumps(plain, option=orjson.OPT_SORT_KEYS)
    assert decoder.loads_keeping(b'{"a":1}') == ({"a": 1}, None)


def test_a_transcript_line_cut_inside_a_surrogate_pair_is_imported(home, tmp_path):
    """The line is not skipped as "not valid JSON": the message is logged with U+FFFD, once."""
    transcript = tmp_path / "s1.jsonl"
    transcript.write_bytes(js(claude_line("u1", "ship it", 1)) + js(claude_line("a1", CUT, 2, "assistant")) + js(claude_line("u2", "next", 3)))
    out = subprocess.run(pimem_cmd("import", transcript, "-n", "api"), capture_output=True, env=subprocess_env(), timeout=60)
    assert out.returncode == 0 and b"skipped" not in out.stderr, out.stderr
    assert texts("api") == ["ship it", KEPT, "next"]
    again = subprocess.run(pimem_cmd("import", transcript, "-n", "api", "--json"), capture_output=True, env=subprocess_env(), timeout=60)
    assert again.returncode == 0 and texts("api") == ["ship it", KEPT, "next"]


def test_append_ndjson_takes_a_lone_surrogate_and_still_refuses_what_is_not_json(sh, home):
    out = sh("append", "main", "--ndjson", input=js({"kind": "user", "text": CUT}))
    assert out.returncode == 0 and out.stdout == b"0\n", out.stderr
    assert texts("main") == [KEPT]
    before = snapshot(home)
    out = sh("append", "main", "--ndjson", input=js({"kind": "user", "text": "fine"}) + b'{"kind":"user","text":"\\ud83d"\n')
    assert out.returncode == 2 and out.stderr == b"pimem: error: line 2: not valid JSON\n"
    assert snapshot(home) == before


def test_a_hook_payload_with_a_prompt_cut_inside_a_surrogate_pair_is_answered(home, tmp_path):
    """Exit 2 would make Claude Code erase the prompt: the payload is read, the prompt's turn captured."""
    transcript = tmp_path / "s1.jsonl"
    transcript.write_bytes(js(claude_line("u1", CUT, 1)))
    payload = js({"session_id": "s1", "transcript_path": str(transcript), "cwd": "/home/dev/api",
                  "hook_event_name": "UserPromptSubmit", "prompt": CUT})
    assert b"\\ud83d" in payload
    proc = subprocess.run(pimem_cmd("hook", "claude-code"), input=payload, capture_output=True, timeout=60, env=subprocess_env())
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
    assert texts("api") == [KEPT]
    proc = subprocess.run(pimem_cmd("hook", "claude-code"), input=b"\xef\xbb\xbf" + payload, capture_output=True,
                          timeout=60, env=subprocess_env())  # a byte order mark first: read past, not exit 2
    assert proc.returncode == 0 and proc.stderr == b"", proc.stderr


def _pi_compact_event(seq: int, prev: str, content: str) -> tuple[bytes, str]:
    """A memory.jsonl line as pi-compact writes it: its hash over canonical JSON.stringify output."""
    event = {"type": "create", "recordId": f"mem_{seq:016x}", "author": "user", "seq": seq, "ts": f"2026-03-02T09:0{seq}:00.000Z",
             "prevHash": prev, "payload": {"kind": "constraint", "content": content, "scope": "project", "status": "active",
                                           "priority": "normal", "sourceEntryIds": [], "sourceHash": "0" * 64, "provenance": "user:/remember"}}
    hashed = {k: event[k] for k in ("seq", "ts", "type", "recordId", "prevHash", "author", "payload")}
    canonical = json.dumps({**hashed, "sessionId": ""}, sort_keys=True, separators=(",", ":")).encode()  # (ASCII: as JS writes it)
    event["hash"] = hashlib.sha256(canonical).hexdigest()
    return js(event), event["hash"]


def test_a_memory_event_holding_a_lone_surrogate_verifies_and_later_memories_stay_visible(run, home):
    first, prev = _pi_compact_event(1, "", "use pnpm, " + CUT)
    second, _ = _pi_compact_event(2, prev, "node 22")
    (home / "main" / "main").mkdir(parents=True)
    (home / "main" / "memory.jsonl").write_bytes(first + second)
    reading = memory_chain(home / "main").read()
    assert reading.problem is None and [e["payload"]["content"] for e in reading.events] == ["use pnpm, " + KEPT, "node 22"]
    listed = orjson.loads(run("memories", "main", "--json").stdout)["records"]
    assert sorted(r["content"] for r in listed) == ["node 22", "use pnpm, " + KEPT]
    fsck = run("fsck", "main")
    assert fsck.exit_code == 0 and "torn" not in fsck.output, fsck.output
    assert run("remember", "main", "and yarn never").exit_code == 0
    data = (home / "main" / "memory.jsonl").read_bytes()
    assert data.startswith(first + second)  # the line as written: nothing is rewritten
    assert [e["seq"] for e in memory_chain(home / "main").read().events] == [1, 2, 3]
    tampered = first.replace(b"use pnpm", b"use npm!")  # a changed event with the escape is still caught
    (home / "main" / "memory.jsonl").write_bytes(tampered + second)
    assert "hash does not match" in memory_chain(home / "main").read().problem


# ---- a BOM opening a file or a stream --------------------------------------------------------------------


def test_a_pi_session_opening_with_a_bom_keeps_its_header_and_first_message(home, tmp_path):
    session = tmp_path / "2026-03-02_sess.jsonl"
    session.write_bytes(BOM + js({"type": "session", "version": 3, "id": "sess-1", "timestamp": "2026-03-02T09:00:00.000Z", "cwd": "/home/dev/shop"})
                        + js({"type": "message", "id": "u1", "parentId": None, "timestamp": "2026-03-02T09:00:05.000Z",
                              "message": {"role": "user", "content": "fix the refresh", "timestamp": 1}}))
    out = subprocess.run(pimem_cmd("import", session), capture_output=True, env=subprocess_env(), timeout=60)
    assert out.returncode == 0 and b"skipped" not in out.stderr, out.stderr
    assert texts("shop") == ["fix the refresh"]  # named after the session's cwd, which the header gives
    assert Memory.open("shop").message(0)["meta"]["session"] == "sess-1"


def test_a_claude_transcript_whose_first_line_opens_with_a_bom_keeps_it(home, tmp_path):
    transcript = tmp_path / "s1.jsonl"
    transcript.write_bytes(BOM + js(claude_line("u1", "first words", 1)) + js(claude_line("a1", "reply", 2, "assistant")))
    out = subprocess.run(pimem_cmd("import", transcript, "-n", "api"), capture_output=True, env=subprocess_env(), timeout=60)
    assert out.returncode == 0 and b"skipped" not in out.stderr, out.stderr
    assert texts("api") == ["first words", "reply"]


def test_append_ndjson_ignores_a_bom_opening_the_stream_only(sh, home):
    out = sh("append", "main", "--ndjson", input=BOM + js({"kind": "user", "text": "first"}) + js({"kind": "pi", "text": "second"}))
    assert out.returncode == 0 and out.stdout == b"0\n1\n", out.stderr
    assert texts("main") == ["first", "second"]
    out = sh("append", "main", "--ndjson", input=js({"kind": "user", "text": "x"}) + BOM + js({"kind": "user", "text": "y"}))
    assert (out.returncode, out.stderr) == (2, b"pimem: error: line 2: a byte order mark (BOM) opens it\n")  # (inside a stream it is refused)
    for argv in (["append", "main", "-"], ["remember", "main", "-"]):  # plain text from an editor's file
        assert sh(*argv, input=BOM + "tabs, not spaces".encode()).returncode == 0, argv
    assert texts("main")[-1] == "tabs, not spaces"
    assert "\ufeff" not in sh("memories", "main").stdout.decode()


def test_a_bom_arriving_a_byte_at_a_time_is_still_left_out():
    pieces = [b"\xef", b"\xbb", b"\xbf", b'{"kind":"user","text":"hi"}\n', b""]
    read = ingest._without_bom(lambda size: pieces.pop(0))
    assert read(100) == b'{"kind":"user","text":"hi"}\n' and read(100) == b""
    pieces = [b"\xef\xbb", b""]  # two bytes of a BOM and the end: they are the stream
    read = ingest._without_bom(lambda size: pieces.pop(0))
    assert read(100) == b"\xef\xbb" and read(100) == b""
