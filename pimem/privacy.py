"""What read paths show of tool traffic: tool calls and results (``tool``, ``echo``) only on request.

The view the model reads holds tool traffic like anything else: a short tool call is its own verbatim line,
and short lines are joined verbatim into their parents. So a reader that shows view lines (the MCP server,
``map``) takes tool messages out of them unless asked: a tool leaf becomes a marker, and every verbatim copy
of a tool leaf inside a joined line is replaced by that marker. Summaries written by the compactor are kept:
secrets were redacted before the compactor saw anything.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from .message import is_tool
from .tree import leaf_text

# a join of n verbatim leaves is n lines of at least "user: x" within one line's bytes, so only lines
# covering at most this many messages can hold a tool leaf verbatim
MAX_JOINED = 64


def marker(kind: str) -> str:
    return f"{kind}: (hidden; include tools to see it)"


def hide_tools(messages: Callable[[int, int], Iterator[dict]], lines: Iterable[tuple[int, int, str | None]],
               known: dict[int, dict] | None = None) -> list[str | None]:
    """The texts of view lines ``(l, i, text)`` with tool traffic taken out, reading only the messages under
    lines short enough to hold verbatim copies (``messages(start, stop)``, e.g. ``Memory.messages``, or
    ``known``, messages by ``i`` the caller has read already, when it holds them all)."""
    lines = list(lines)
    spans = [(i << l, (i + 1) << l) for l, i, _ in lines]
    small = [k for k, (l, _, text) in enumerate(lines) if text is not None and (1 << l) <= MAX_JOINED]
    if not small:
        return [text for _, _, text in lines]
    start, stop = min(spans[k][0] for k in small), max(spans[k][1] for k in small)
    if known is not None and all(k in known for k in range(start, stop)):
        source = (known[k] for k in range(start, stop))
    else:
        source = messages(start, stop)
    tools = {m["i"]: m for m in source if is_tool(m)}
    out = []
    for k, (l, i, text) in enumerate(lines):
        if text is not None and (1 << l) <= MAX_JOINED:
            first, end = spans[k]
            inside = [tools[j] for j in range(first, end) if j in tools] if len(tools) else []
            if l == 0 and inside:
                text = marker(inside[0]["kind"])
            for msg in inside:
                text = text.replace(leaf_text(msg), marker(msg["kind"]))
        out.append(text)
    return out
