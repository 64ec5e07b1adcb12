"""Hash-chained event logs: ``memory.jsonl`` (authoritative memories) and ``windows.jsonl`` (compaction
window manifests), DESIGN.md §5.

Each line is one event carrying ``seq`` (1, 2, …), ``prevHash`` (the previous event's ``hash``, ``""`` for the
first) and ``hash``: SHA-256 (lowercase hex) of canonical JSON (keys sorted at every level, no spaces). Memory
events hash exactly the object pi-compact hashes, so a pi-compact ``memory.jsonl`` reads as is.

A line holding a lone surrogate escape (``JSON.stringify`` writes one for a string cut inside a surrogate
pair) reads with U+FFFD in its place, and its hash is checked over the escape as written
(``pimem.decoder``); the file is never rewritten.

Reading trusts the longest valid prefix: a torn write (an event cut short, ``cut_short``) is skipped wherever it
is, and the first other line that is not JSON (an event damaged inside it) or parsable event that is malformed,
out of sequence, or whose hashes do not match ends the trusted part.
Such an event blocks every later append (``IntegrityError``, exit 5) and the file is left as it is: a person
must look at it, because silently truncating would destroy whatever came after. A torn last line is sealed
with a newline before the next event is written, so a crash mid-write never blocks anything.

Appends are made by callers holding the memory's writer lock (a kernel lock, released if the process dies).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import orjson

from . import decoder, hashes
from .errors import IntegrityError
from .home import append_durably
from .nofollow import read_bytes

MEMORY_TYPES = frozenset({"create", "supersede", "pin", "unpin", "resolve"})
AUTHORS = frozenset({"user", "model", "rule"})


def canonical(obj) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)


def sha256(data: bytes | str) -> str:
    return hashes.sha256(data.encode() if isinstance(data, str) else data).hexdigest()


def _is_int(value) -> bool:
    return type(value) is int


def _memory_hashed(ev: dict) -> dict:
    return {
        "seq": ev["seq"], "ts": ev["ts"], "type": ev["type"], "recordId": ev["recordId"], "prevHash": ev["prevHash"],
        "author": ev["author"], "sessionId": ev.get("sessionId") or "", "payload": ev["payload"],
    }


def _memory_shape(ev: dict) -> str | None:
    if not (_is_int(ev.get("seq")) and ev["seq"] >= 1):
        return "no valid seq"
    if not isinstance(ev.get("ts"), str):
        return "no ts"
    if ev.get("type") not in MEMORY_TYPES:
        return f"unknown type {str(ev.get('type'))[:40]!r}"
    if not (isinstance(ev.get("recordId"), str) and ev["recordId"]):
        return "no recordId"
    if ev.get("author") not in AUTHORS:
        return "unknown author"
    if ev.get("sessionId") is not None and not isinstance(ev["sessionId"], str):
        return "sessionId is not a string"
    if not isinstance(ev.get("payload"), dict):
        return "payload is not an object"
    return None


def _window_hashed(ev: dict) -> dict:
    return {k: v for k, v in ev.items() if k != "hash"}


def _window_shape(ev: dict) -> str | None:
    if not (_is_int(ev.get("seq")) and ev["seq"] >= 1):
        return "no valid seq"
    if ev.get("type") != "open":
        return "type is not 'open'"
    for key in ("ts", "windowId", "sourceHash", "previousHash"):
        if not isinstance(ev.get(key), str):
            return f"no {key}"
    for key in ("sourceStart", "keptStart", "sourceCount"):
        if not _is_int(ev.get(key)):
            return f"no {key}"
    return None


def cut_short(raw: bytes) -> bool:
    """Whether ``raw``, a line that is not JSON, is an event a crash cut short: the start of a JSON object,
    each of its bytes where JSON may have one, ending before the object does. An event damaged inside it (an
    edit, a flipped byte) breaks before its end: skipping it as torn would hide what it held without a word
    and let the next append write its seq again, forking the chain."""
    if not raw.startswith(b"{"):
        return False
    try:
        text = raw.decode()
    except UnicodeDecodeError as e:  # (a character cut by the crash is the end of the write)
        if e.reason != "unexpected end of data" or e.end != len(raw):
            return False
        text = raw[:e.start].decode()
    import json  # (here: only a line that is not JSON gets this far)

    text = text.rstrip()
    try:
        json.JSONDecoder().raw_decode(text)
    except json.JSONDecodeError as e:
        rest = text[e.pos:]
        return (e.pos >= len(text) or e.msg.startswith("Unterminated string")  # (a string or an escape cut)
                or (e.msg.startswith("Invalid \\uXXXX") and re.fullmatch(r"u[0-9a-fA-F]{0,4}", rest) is not None)
                or (e.msg == "Expecting value" and any(w.startswith(rest) for w in ("true", "false", "null", "-")))
                or (e.msg.startswith("Expecting ','") and re.fullmatch(r"\.|[eE][+-]?", rest) is not None))  # (1., 1e)
    return False  # (whole JSON that orjson refuses, or more after it)


@dataclass
class Reading:
    """The trusted prefix of a chain, and the first problem after it (None when the whole file is sound)."""

    events: list[dict] = field(default_factory=list)
    problem: str | None = None  # "memory.jsonl line 3: " and what is wrong there
    line: int = 0  # the line of the first problem
    what: str = ""  # what is wrong there

    def stop(self, file: str, line: int, what: str) -> "Reading":
        """This reading, ended at the first problem: ``what`` is wrong at ``line`` of ``file``."""
        self.problem, self.line, self.what = f"{file} line {line}: {what}", line, what
        return self

    @property
    def last_hash(self) -> str:
        return self.events[-1]["hash"] if self.events else ""


class Chain:
    """One hash-chained JSONL file."""

    def __init__(self, path: Path, hashed: Callable[[dict], dict], shape: Callable[[dict], str | None]):
        self.path = path
        self._hashed = hashed
        self._shape = shape

    def hash_of(self, event: dict) -> str:
        return sha256(canonical(self._hashed(event)))

    def read(self) -> Reading:
        try:
            data = read_bytes(self.path)
        except FileNotFoundError:
            return Reading()
        reading = Reading()
        prev, expected = "", 1
        if data.startswith(decoder.BOM):  # (an editor's byte order mark: its first event is still an event)
            data = data[len(decoder.BOM):]
        for number, raw in enumerate(data.split(b"\n"), 1):
            if not raw.strip():
                continue
            try:
                event, written = decoder.loads_keeping(raw)
            except decoder.JSONDecodeError:
                if cut_short(raw):
                    continue  # a torn write (an event cut short): tolerated wherever it is
                # anything else is damage, and an event it was would be forked by the next append
                return reading.stop(self.path.name, number, "a damaged event: its JSON is broken inside it, not cut "
                                    "short as a crash leaves a write" if raw.startswith(b"{")
                                    else "a damaged line that is not an event")
            problem = self._check(event, expected, prev, written)
            if problem:
                return reading.stop(self.path.name, number, problem)
            reading.events.append(event)
            prev, expected = event["hash"], expected + 1
        return reading

    def _check(self, event, expected: int, prev: str, written=None) -> str | None:
        """The problem with ``event``, None if it is the next sound event. ``written`` is the event with its
        lone surrogates as written, when it held any (``decoder.loads_keeping``): its writer hashed those,
        so they are hashed again as written, not as the U+FFFD the event holds."""
        if not isinstance(event, dict):
            return "not an event object"
        bad = self._shape(event)
        if bad:
            return f"malformed event ({bad})"
        if event["seq"] != expected:
            what = "duplicated" if event["seq"] < expected else "skipped"
            return f"seq {event['seq']} where {expected} was expected (an event was {what})"
        if event.get("prevHash") != prev:
            return f"seq {expected}: prevHash does not match the hash of the event before it"
        digest = self.hash_of(event) if written is None else sha256(decoder.canonical(self._hashed(written)))
        if event.get("hash") != digest:
            return f"seq {expected}: hash does not match the event's content (it was changed)"
        return None

    def append(self, build: Callable[[list[dict]], list[dict]]) -> list[dict]:
        """Read the chain, let ``build`` turn its trusted events into new events (without seq/prevHash/hash),
        then chain and write them with one fsync. The caller holds the memory's writer lock.

        ``IntegrityError`` (exit 5), with the file untouched, when a bad event follows the trusted prefix."""
        reading = self.read()
        if reading.problem:
            raise IntegrityError(
                f"{reading.problem}; appends to {self.path.name} are refused until a person repairs it "
                "(nothing was written)"
            )
        new = build(reading.events)
        if not new:
            return []
        seq, prev = len(reading.events), reading.last_hash
        chained = []
        for event in new:
            seq += 1
            event = {**event, "seq": seq, "prevHash": prev}
            event["hash"] = prev = self.hash_of(event)
            chained.append(event)
        self._write(b"".join(canonical(e) + b"\n" for e in chained))
        return chained

    def _write(self, data: bytes) -> None:
        append_durably(self.path, data)


def memory_chain(directory: Path) -> Chain:
    return Chain(directory / "memory.jsonl", _memory_hashed, _memory_shape)


def window_chain(directory: Path) -> Chain:
    return Chain(directory / "windows.jsonl", _window_hashed, _window_shape)
