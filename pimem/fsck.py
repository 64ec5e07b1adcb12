"""Checking a memory on disk, and repairing what can be repaired without deleting anything.

Each check reads one part of the memory and returns findings. A finding is a problem (``pimem fsck`` exits 5
while one remains) or a note (something the readers already tolerate, reported so a person knows). Repair
only ever adds (a newline sealing a torn line) or rebuilds derived state from the sources of truth; a damaged
line, a gap or a duplicate is explained, never rewritten.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

import orjson

from . import message as msgs, when
from .errors import PimemError
from .memory import Memory

_TORN_WRITE = re.compile(rb'\{"i":\d+[,}]')


@dataclass
class Finding:
    memory: str
    area: str  # log, tree, view, memory, windows, index
    where: str  # file:line, or the file
    problem: str
    fatal: bool = True  # False for a note: readers tolerate it and nothing needs doing
    repair: str | None = None  # what --repair does about it, when it can
    repaired: bool = False
    action: Callable[[Memory], None] | None = field(default=None, repr=False, compare=False)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("memory", "area", "where", "problem", "fatal", "repair", "repaired")}

    def __str__(self) -> str:
        tag = "repaired" if self.repaired else ("problem" if self.fatal else "note")
        fix = f" (--repair: {self.repair})" if self.repair and self.fatal and not self.repaired else ""
        return f"{self.memory}: {self.area}: {self.where}: {tag}: {self.problem}{fix}"


def check(mem: Memory, repair: bool = False, timeout: float | None = None) -> list[Finding]:
    """Every finding for one memory; with ``repair``, the repairable ones are fixed under the writer lock
    and marked ``repaired``."""
    findings = _run_checks(mem)
    actions = list(dict.fromkeys(f.action for f in problems(findings) if f.action))
    if not repair or not actions:
        return findings
    with mem.lock(timeout):
        for action in actions:
            action(mem)
    after = _run_checks(mem)
    remaining = {_key(f) for f in problems(after)}
    for f in problems(findings):
        f.repaired = _key(f) not in remaining
    before = {_key(f) for f in findings}
    return findings + [f for f in after if _key(f) not in before and f.fatal]


def _key(f: Finding) -> tuple:
    return f.area, f.where, f.problem


def _run_checks(mem: Memory) -> list[Finding]:
    return check_log(mem)


def check_log(mem: Memory) -> list[Finding]:
    """The message log: torn and damaged lines, contiguity of ``i``, and each message's schema."""
    found: list[Finding] = []
    where_is: dict[int, str] = {}
    duplicates: dict[int, list[str]] = {}

    def add(where: str, problem: str, **kw) -> None:
        found.append(Finding(mem.name, "log", where, problem, **kw))

    for path in mem.log.files():
        rel = f"main/{path.name}"
        data = path.read_bytes()
        lines = data.split(b"\n")
        tail = lines.pop()  # bytes after the last newline: empty unless the last line is torn
        for n, raw in enumerate(lines, 1):
            where = f"{rel}:{n}"
            try:
                obj = orjson.loads(raw)
            except orjson.JSONDecodeError:
                obj = None
            if type(obj) is not dict or type(obj.get("i")) is not int:
                if _TORN_WRITE.match(raw) and obj is None:
                    add(where, f"a write torn by a crash and later sealed ({len(raw)} bytes); skipped on read", fatal=False)
                else:
                    add(where, f"damaged line ({len(raw)} bytes) is not a message; readers skip it, so anything it held is missing")
                continue
            i = obj["i"]
            if i in where_is:
                duplicates.setdefault(i, [where_is[i]]).append(where)
            else:
                where_is[i] = where
            for problem in _message_problems(obj, path.name[:10]):
                add(where, f"message {i}: {problem}")
        if tail:
            add(f"{rel}:{len(lines) + 1}", f"torn last line ({len(tail)} bytes, no newline): a write cut by a crash",
                repair="seal it with a newline (readers already skip it)", action=_seal)
    for i, places in sorted(duplicates.items()):
        add(places[1], f"duplicate i={i}: also at {', '.join(p for p in places if p != places[1])}")
    if where_is:
        present = sorted(where_is)
        expected = 0
        for i in present:
            if i > expected:
                missing = f"i={expected}" if i == expected + 1 else f"i={expected}…{i - 1}"
                after = f" after {where_is[expected - 1]}" if expected else ""
                add(where_is[i], f"gap: no message {missing}{after}; readers stop here with exit 5")
            expected = i + 1
    return found


def _message_problems(msg: dict, day: str) -> list[str]:
    out = []
    kind, text = msg.get("kind"), msg.get("text")
    if kind not in msgs.KINDS:
        out.append(f"unknown kind {kind!r}")
    if not isinstance(text, str):
        out.append("text is not a string")
    elif kind in msgs.KINDS and msg.get("size") != msgs.size_of(kind, text):
        out.append(f"size is {msg.get('size')!r}, the text makes it {msgs.size_of(kind, text)}")
    date = msg.get("date")
    try:
        when.parse_stored(date)
    except PimemError:
        out.append(f"bad date {date!r}")
    else:
        if not re.search(r"(Z|z|[+-]\d\d:\d\d)$", date):
            out.append(f"date {date!r} has no UTC offset")
        if msgs.day_of(date) != day:
            out.append(f"dated {date} but stored in {day}.jsonl")
    meta = msg.get("meta")
    if meta is not None and not isinstance(meta, dict):
        out.append("meta is not an object")
    return out


def problems(findings: list[Finding]) -> list[Finding]:
    """The findings that still need a person (or ``--repair``)."""
    return [f for f in findings if f.fatal and not f.repaired]


def _seal(mem: Memory) -> None:
    mem.log.seal()
