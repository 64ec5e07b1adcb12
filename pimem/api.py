"""The read-only API for consumers outside the agent: other agents, scripts and MCP clients.

Every function takes plain arguments, returns JSON-ready data, never takes the writer lock and never writes
to a memory (the one exception, ``memory_propose``, writes a provisional memory, as the model would). Every
message or hit carries ``held``: how the view holds it today. Tool calls and tool results appear only with
``include_tools``. Outputs are bounded so an MCP client's output limit is never hit by surprise.
"""

from __future__ import annotations

import os

from .errors import BadInput
from .memory import Memory
from .message import TOOL_KINDS

Home = str | os.PathLike | None

SINCE_LIMIT = 100  # messages per since call by default
MAX_LIMIT = 1000
MESSAGE_CHARS = 50_000  # characters of one message per call by default
VIEW_LINES = 200  # the latest view lines by default


def _bounded(value: int, name: str, top: int = MAX_LIMIT) -> int:
    if not 1 <= value <= top:
        raise BadInput(f"{name} must be between 1 and {top}")
    return value


def held(mem: Memory, i: int):
    """How the view holds message ``i`` (None while the memory has no view yet)."""
    return mem.held(i) if hasattr(mem, "held") else None


def _with_held(mem: Memory, msg: dict) -> dict:
    return {**msg, "held": held(mem, msg["i"])}


def list_memories(home: Home = None) -> list[dict]:
    """Every memory: name, message count, first and last dates, the last thing the user said."""
    return [mem.summary() for mem in Memory.all(home)]


def message(name: str, i: int, include_tools: bool = False, offset: int = 0, max_chars: int = MESSAGE_CHARS, home: Home = None) -> dict:
    """Message ``i`` whole, or a window of its text (``offset``, ``max_chars``) with ``next_offset`` when more
    remains."""
    mem = Memory.open(name, home)
    msg = mem.message(i)
    if msg["kind"] in TOOL_KINDS and not include_tools:
        raise BadInput(f"message {i} is a {msg['kind']} message (tool traffic); ask again with include_tools")
    _bounded(max_chars, "max_chars", 1_000_000)
    text = msg["text"]
    if offset < 0 or offset > len(text):
        raise BadInput(f"offset must be between 0 and {len(text)}")
    out = _with_held(mem, {**msg, "text": text[offset : offset + max_chars]})
    if offset or offset + max_chars < len(text):
        out.update(offset=offset, chars=len(text), next_offset=offset + max_chars if offset + max_chars < len(text) else None)
    return out


def since(name: str, start: int = 0, when: str | None = None, limit: int = SINCE_LIMIT, include_tools: bool = False, home: Home = None) -> dict:
    """Up to ``limit`` messages from message ``start`` (or from the date/time ``when``), and ``next``: the ``i``
    to ask for next (None at the end)."""
    from . import when as whens

    mem = Memory.open(name, home)
    _bounded(limit, "limit")
    if when is not None:
        first = mem.first_at(whens.parse_when(when))
        start = mem.count() if first is None else first
    if start < 0:
        raise BadInput("start must be 0 or more")
    out, position = [], start
    for msg in mem.messages(start):
        if len(out) == limit:
            break
        position = msg["i"] + 1
        if msg["kind"] in TOOL_KINDS and not include_tools:
            continue
        out.append(_with_held(mem, msg))
    return {"messages": out, "next": position if position < mem.count() else None}
