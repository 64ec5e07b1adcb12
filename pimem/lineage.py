"""Branches of imported tree-shaped sessions, for ``recall --scope lineage|all``.

A pi session (v2/v3) is a tree: each entry names its parent, and the active branch is the chain from the
last entry (the leaf) back to the root; the other branches are history the user stepped away from. The
importer keeps ``meta.entry`` and ``meta.parent`` (the nearest ancestor that became a message), so the
branch can be walked in the log alone. Messages outside such sessions (typed in, or from linear formats)
are on every lineage.
"""

from __future__ import annotations

from typing import Iterable

TREE_SOURCES = frozenset({"pi"})  # Claude Code's parent links chain parallel tool calls, not branches


def _tree_key(message: dict):
    meta = message.get("meta")
    if not isinstance(meta, dict) or meta.get("source") not in TREE_SOURCES or "parent" not in meta:
        return None
    entry = meta.get("entry")
    return (meta["source"], meta.get("session")) if isinstance(entry, str) else None


def off_lineage(messages: Iterable[dict], leaves: dict[tuple, str] | None = None) -> set[int]:
    """The ``i`` of every message on a branch that is not its session's active branch. A session's leaf is
    its last message in log order, or the entry ``leaves`` gives for it (by ``(source, session)``: where
    its file ends, which may be a line that gave no message) when that entry is among its messages. A branch
    whose parent is no entry of its own session goes on in the session that holds it: a fork (pi's
    ``/fork``) copies the entries it starts from, and the importer logs those once, in the first session."""
    parents: dict[tuple, dict[str, str | None]] = {}
    last: dict[tuple, str] = {}
    holders: dict[tuple, tuple] = {}  # (source, entry) -> the first session holding it
    members: list[tuple[int, tuple, str]] = []
    for msg in messages:
        session = _tree_key(msg)
        if session is None:
            continue
        entry = msg["meta"]["entry"]
        parents.setdefault(session, {})[entry] = msg["meta"]["parent"]
        last[session] = entry  # the last entry in log order is the leaf
        holders.setdefault((session[0], entry), session)
        members.append((msg["i"], session, entry))
    for session, leaf in (leaves or {}).items():
        if session in last and leaf in parents[session]:
            last[session] = leaf
    active: set[tuple] = set()
    for session, leaf in last.items():
        active |= _branch(parents, holders, session, leaf)
    return {i for i, session, entry in members if (session, entry) not in active}


def _branch(parents: dict, holders: dict, session: tuple, leaf: str) -> set[tuple]:
    """The ``(session, entry)`` pairs from ``leaf`` back to its root, crossing to the session holding a parent
    its own session lacks (stops at an unknown parent or a loop)."""
    branch = set()
    entry: str | None = leaf
    while entry is not None:
        if entry not in parents[session]:
            session = holders.get((session[0], entry))
            if session is None:
                break
        if (session, entry) in branch:
            break
        branch.add((session, entry))
        entry = parents[session][entry]
    return branch


def on_lineage(messages: Iterable[dict], leaves: dict[tuple, str] | None = None) -> list[dict]:
    """The messages on their session's active branch (and every message outside tree-shaped sessions).
    Pass whole sessions: the leaf is the last entry given, or as ``leaves`` says (``off_lineage``)."""
    messages = list(messages)
    off = off_lineage(messages, leaves)
    return [m for m in messages if m["i"] not in off]


def left_out(mem) -> dict[int, dict]:
    """``recall --scope lineage``: the messages on branches their sessions stepped away from, by ``i``. Only
    a message with a parent link can be one, so only the stored lines holding that key (``"parent":``, as
    the log writes it) are read (``Log.holding``), and of each only its number, kind and meta are kept; a
    session whose file ended on a line that gave no message ends where the import state says."""
    from .importers.state import ImportState

    linked = mem.log.holding([b'"parent":'], keep=lambda m: {"i": m["i"], "kind": m["kind"], "meta": m.get("meta")})
    off = off_lineage(linked, ImportState(mem).leaves())
    return {m["i"]: m for m in linked if m["i"] in off}
