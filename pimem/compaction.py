"""Deterministic compaction checkpoints (pi-compact's, over pimem's log; DESIGN.md §5).

A compaction replaces messages ``[sourceStart, keptStart)`` by a checkpoint and keeps the tail from
``keptStart``. ``sourceStart`` is where the previous window kept from (0 for the first), so windows chain.

- **Boundary.** The latest ``keptStart`` that keeps at least ``keep`` bytes of tail (message ``size``s) and at
  least one message, moved earlier until it is safe: not a tool result (``echo`` with ``meta.call_id``: a
  host refuses a context that starts with one), no call/result pair (``tool`` and ``echo`` with the same
  ``call_id``, paired first-in-first-out, in either order: a result may be logged before its call) with one
  before it and the other at or after it, and no unanswered call before it that may still be running (an
  unanswered call counts as abandoned once a later user message exists). A result whose call is not in the
  window binds nothing. No safe boundary: ``BadInput`` (exit 2), nothing written.
- **Checkpoint.** ``{"compactor":"pimem","sourceCount":N,"sourceHash":"<sha256>"}``: counts and a hash,
  never history text, so nothing from the log can speak through it. ``sourceHash`` is SHA-256 of the
  canonical JSON array of the source messages as stored.
- **Window manifest** in ``windows.jsonl``: id ``win_`` + 24 hex of SHA-256 over the range and hash, its
  parent window and the parent's event hash (``previousHash``: the lineage chain, beside the file chain).
  A compaction that would not move the boundary writes nothing and answers with the last window.
- **Rule-derived memories** (provisional, author ``rule``, with provenance and the source message): files
  named by tool calls and commands, commands with their exit codes, test counts; at most 50 a compaction,
  deduplicated by content against what the rules wrote before.
"""

from __future__ import annotations

import math
import re
import unicodedata
from dataclasses import dataclass, field

from . import env, hashes, when
from .chain import canonical, memory_chain, sha256, window_chain
from .errors import BadInput, IntegrityError, shown
from .memories import derive, unwritten
from .recall import files_of
from .output import count

MAX_DERIVED = 50
_PASSED = re.compile(r"(\d+)\s+(?:passed|passing)\b", re.I)
_FAILED = re.compile(r"(\d+)\s+(?:failed|failing)\b", re.I)


@dataclass
class Plan:
    """What a compaction does (or did): the range, the checkpoint and what it writes."""

    source_start: int
    kept_start: int
    proposed: int
    is_split_turn: bool
    source_hash: str
    window_id: str
    parent: dict | None
    proposals: list[dict] = field(default_factory=list)
    existing: dict | None = None  # the last window, when this compaction would not move the boundary

    @property
    def source_count(self) -> int:
        return self.kept_start - self.source_start

    @property
    def checkpoint(self) -> str:
        return checkpoint(self.source_count, self.source_hash)


def checkpoint(source_count: int, source_hash: str, max_chars: int = 12_000) -> str:
    """The checkpoint text: compact JSON with exactly compactor, sourceCount and sourceHash; ``{}`` when the
    limit is below that, ``""`` below 2."""
    text = f'{{"compactor":"pimem","sourceCount":{source_count},"sourceHash":"{source_hash}"}}'
    return text if len(text) <= max_chars else "{}" if max_chars >= 2 else ""


def _call_id(msg: dict):
    meta = msg.get("meta")
    cid = meta.get("call_id") if isinstance(meta, dict) else None
    return cid if isinstance(cid, (str, int)) and not isinstance(cid, bool) and cid != "" else None


def safe_cuts(messages: list[tuple[int, str, object]], start: int, total: int) -> list[bool]:
    """``ok[c - start]`` for every cut ``c`` in ``start..total``: True when message ``c`` is not a tool result,
    no call/result pair spans it and no possibly running call lies before it. ``messages``: ``(i, kind,
    call_id)`` of ``[start, total)``."""
    forbid = [0] * (total - start + 2)  # difference array over cut positions

    def block(first: int, last: int) -> None:  # cuts first..last are unsafe
        if first <= last:
            forbid[first - start] += 1
            forbid[last - start + 1] -= 1

    open_calls: dict[object, list[int]] = {}
    early_results: dict[object, list[int]] = {}  # results logged before any call of their id, for the next one
    last_user = -1
    for i, kind, cid in messages:
        if kind == "user":
            last_user = i
        if cid is None:
            continue
        if kind == "tool":
            if early_results.get(cid):
                block(early_results[cid].pop(0) + 1, i)
            else:
                open_calls.setdefault(cid, []).append(i)
        elif kind == "echo":
            block(i, i)
            if open_calls.get(cid):
                block(open_calls[cid].pop(0) + 1, i)
            else:
                early_results.setdefault(cid, []).append(i)
    for calls in open_calls.values():
        for p in calls:
            if last_user < p:  # no user turn since: it may still be running
                block(p + 1, total)
    ok, depth = [], 0
    for c in range(start, total + 1):
        depth += forbid[c - start]
        ok.append(depth == 0)
    return ok


def _proposal(sizes: list[int], start: int, total: int, keep: int) -> int:
    """The latest cut keeping at least ``keep`` bytes of tail, and at least one message (``sizes``: of the
    messages from ``start`` on), not before ``start``."""
    proposed, tail = total - 1, sizes[-1] if sizes else 0
    while proposed > start and tail < keep:
        proposed -= 1
        tail += sizes[proposed - start]
    return proposed


def _nothing_to_compact(name: str, keep: int, sizes: list[int], ok: list[bool], option: str = "--keep") -> str:
    """Why a first compaction of messages of ``sizes`` finds no message to put before the tail kept, and
    which ``keep`` would find one: the tail from the first safe cut (``ok``, as ``safe_cuts`` gives it);
    ``option`` names it (the CLI's ``--keep``, the API's ``keep``)."""
    if len(sizes) < 2:
        held = "no messages" if not sizes else "one message, and the last message is always kept"
        return f"nothing to compact: {name} holds {held}"
    said = (f"nothing to compact: keeping {count(keep, 'byte')} of tail keeps all {len(sizes):,} messages of {name} "
            f"({count(sum(sizes), 'byte')}); ")
    first = next((c for c in range(1, len(sizes)) if ok[c]), None)  # (a later cut keeps less)
    if first is None:
        return said + (f"no {option} compacts it: every cut would start the kept part with a tool result, separate a tool "
                       "call from its result (meta.call_id) or drop a call that may still be running")
    return said + f"{option} {sum(sizes[first:]):,} or less compacts the first {count(first, 'message') if first > 1 else 'message'}"


def plan(mem, keep: int, option: str = "--keep") -> Plan:
    """Choose the boundary and build the checkpoint, window and derived memories, writing nothing; ``option``
    names ``keep`` in what is refused."""
    if type(keep) is not int or keep < 0:
        raise BadInput(f"{option} must be 0 or more bytes, not {shown(keep):.40}")
    windows = window_chain(mem.path).read().events
    parent = windows[-1] if windows else None
    start = parent["keptStart"] if parent else 0
    total = mem.count()
    if start > total:  # (a window keeps the log from a message there was: the log lost its end since)
        raise IntegrityError(f"{mem.name}: messages lost from the end of the log, from #{total} (windows.jsonl keeps "
                             f"the log from #{start}); see 'pimem fsck {mem.name}'")
    shape, sizes = [], []
    for msg in mem.messages(start):
        shape.append((msg["i"], msg["kind"], _call_id(msg)))
        sizes.append(int(msg.get("size", 0)))
    proposed = _proposal(sizes, start, total, keep)
    ok = safe_cuts(shape, start, total) if proposed > start else []
    cut = next((c for c in range(proposed, start, -1) if ok[c - start]), None)
    if cut is None and parent is not None:  # the boundary cannot move: the last compaction still stands, and
        # is said as it was chosen (its proposal over the same messages: the same details, run after run)
        source = parent["sourceStart"]
        before = [int(msg.get("size", 0)) for msg in mem.messages(source, start)] if source < start else []
        return Plan(source, parent["keptStart"], _proposal(before + sizes, source, total, keep),
                    parent.get("isSplitTurn", False), parent["sourceHash"], parent["windowId"], None, existing=parent)
    if proposed <= start:  # (the first compaction: a later one returned its parent above)
        raise BadInput(_nothing_to_compact(mem.name, keep, sizes, safe_cuts(shape, start, total), option))
    if cut is None:
        where = (f"at #{proposed}: a cut there" if proposed == start + 1
                 else f"between #{start + 1} and #{proposed}: every cut there")
        raise BadInput(
            f"no safe boundary {where} would start the kept part with a tool result, separate a tool call from its "
            "result (meta.call_id) or drop a call that may still be running; nothing was written"
        )
    digest = hashes.sha256(b"[")
    proposals = _proposals(mem, start, cut, lambda n, msg: digest.update((b"," if n else b"") + canonical(msg)))
    digest.update(b"]")
    source_hash = digest.hexdigest()
    window_id = "win_" + sha256(f"{start}\n{cut}\n{source_hash}")[:24]
    return Plan(start, cut, proposed, shape[cut - start][1] != "user", source_hash, window_id, parent, proposals)


def _proposals(mem, start: int, cut: int, each=None) -> list[dict]:
    """The rule memories of messages ``start <= i < cut`` (at most ``MAX_DERIVED``); ``each(n, msg)`` sees
    every message on the way."""
    proposals, seen = [], set()
    for n, msg in enumerate(mem.messages(start, cut)):
        if each is not None:
            each(n, msg)
        if len(proposals) < MAX_DERIVED:
            for found in _derivations(msg):
                if found["id"] not in seen and len(proposals) < MAX_DERIVED:
                    seen.add(found["id"])
                    proposals.append(found)
    return proposals


def _derivations(msg: dict) -> list[dict]:
    """What the rules take from one primary message: files, a command with its exit code, test counts."""
    meta = msg.get("meta") if isinstance(msg.get("meta"), dict) else {}
    if meta.get("derived") is True:
        return []
    found = [("file", f"file: {path}") for path in files_of(msg)]
    if msg["kind"] == "echo":
        command = meta.get("command")
        if isinstance(command, str) and command.strip():
            code = meta.get("exit_code")
            found.append(("command", f"command: {command}" + (f" exitCode={code}" if type(code) is int else "")))
        passed, failed = _PASSED.search(msg["text"]), _FAILED.search(msg["text"])
        if passed or failed:
            found.append(("tests", f"tests: {passed.group(1) if passed else 'unknown'} passed, {failed.group(1) if failed else 'unknown'} failed"))
    out = []
    for rule, content in found:
        content = " ".join(unicodedata.normalize("NFKC", content).split())
        out.append({"id": "mem_rule_" + sha256(f"{rule}\n{content}")[:16], "content": content,
                    "provenance": f"rule:{rule}", "sourceEntryIds": [msg["i"]]})
    return out


def compact(mem, keep: int, dry_run: bool = False, timeout: float | None = None, option: str = "--keep") -> dict:
    """Compact ``mem`` keeping ``keep`` bytes of tail; returns the checkpoint and its details. With
    ``dry_run`` nothing is written (and no lock is taken). Idempotent: repeating it writes nothing new.
    ``option`` names ``keep`` in what is refused (the API's ``keep``)."""
    if type(dry_run) is not bool:
        raise BadInput(f"dry_run is True or False, not {shown(dry_run):.40}")
    if dry_run:  # what the run would write, and refuse
        chosen = plan(mem, keep, option)
        if chosen.existing is None:
            _refuse_damage(mem, chosen)
        return details(chosen, written=False, derived=[p["id"] for p in _to_derive(mem, chosen)])
    with mem.lock(timeout):
        chosen = plan(mem, keep, option)
        if chosen.existing is not None:
            window, proposals = chosen.existing, _to_derive(mem, chosen)
            derived = derive(mem, proposals, window["hash"], when.rfc3339(env.now())) if proposals else []
            return details(chosen, written=False, derived=derived)
        _refuse_damage(mem, chosen)
        stamp = when.rfc3339(env.now())
        written = window_chain(mem.path).append(lambda events: [] if any(e["windowId"] == chosen.window_id for e in events) else [_window_event(chosen, stamp)])
        derived = derive(mem, chosen.proposals, written[0]["hash"], stamp) if written else []
    return details(chosen, written=bool(written), derived=derived)


def _to_derive(mem, chosen: Plan) -> list[dict]:
    """The rule memories this compaction would write: its proposals that ``memory.jsonl`` lacks. A standing
    window's are written now if they were not then (the disk was full, or the process died between the two
    writes); a damaged ``memory.jsonl`` is left to a person then."""
    reading = memory_chain(mem.path).read()
    if chosen.existing is None:
        return unwritten(reading.events, chosen.proposals)
    if reading.problem:
        return []
    window = chosen.existing
    return unwritten(reading.events, _proposals(mem, window["sourceStart"], window["keptStart"]))


def _refuse_damage(mem, chosen: Plan) -> None:
    """``IntegrityError`` when a log this compaction would append to is damaged: refused before the window is
    written, so a repaired log gets the whole compaction."""
    for chain, needed in ((window_chain(mem.path), True), (memory_chain(mem.path), bool(chosen.proposals))):
        damaged = chain.read().problem if needed else None
        if damaged:
            raise IntegrityError(f"{damaged}; appends to {chain.path.name} are refused until a person repairs it "
                                 "(nothing was written)")


def _window_event(chosen: Plan, stamp: str) -> dict:
    parent = chosen.parent
    return {
        "ts": stamp, "type": "open", "windowId": chosen.window_id, "parentWindowId": parent["windowId"] if parent else "",
        "previousHash": parent["hash"] if parent else "", "sourceStart": chosen.source_start, "keptStart": chosen.kept_start,
        "sourceCount": chosen.source_count, "sourceHash": chosen.source_hash, "reason": "manual", "isSplitTurn": chosen.is_split_turn,
    }


def details(chosen: Plan, written: bool, derived: list[str]) -> dict:
    text = chosen.checkpoint
    return {
        "checkpoint": text, "compactor": "pimem", "version": 1, "windowId": chosen.window_id,
        "sourceStart": chosen.source_start, "keptStart": chosen.kept_start, "sourceCount": chosen.source_count,
        "sourceHash": chosen.source_hash, "proposedKeptStart": chosen.proposed, "fellBack": chosen.kept_start < chosen.proposed,
        "isSplitTurn": chosen.is_split_turn, "checkpointChars": len(text), "estimatedTokensAfter": math.ceil(len(text) / 4),
        "alreadyCompacted": chosen.existing is not None, "written": written, "derived": derived,
    }
