"""Hard output budgets (DESIGN.md §5): text for agent tools is measured in characters, never exceeds the
budget, never cuts a JSON document, and says what it left out.

The helpers search for the most that fits rather than estimating: JSON escaping (``\\n``, ``\\u0000``,
quotes) makes the printed length of a string hard to predict, so every candidate is rendered and measured.
"""

from __future__ import annotations

from typing import Callable, Sequence

import orjson

DEFAULT = 16_000


def dumps(obj) -> str:
    """Compact JSON text (what is measured and printed)."""
    return orjson.dumps(obj).decode()


def clip(text: str, limit: int) -> str:
    """``text`` if it has at most ``limit`` characters, else its head and a marker counting what was cut;
    never longer than ``limit``."""
    if len(text) <= limit:
        return text
    head = limit
    while head > 0:
        marker = f" …[{len(text) - head} more chars]"
        if head + len(marker) <= limit:
            return text[:head] + marker
        head = limit - len(marker)  # the marker's length settles within two rounds
    return text[:limit]


def largest(fits: Callable[[int], bool], hi: int) -> int:
    """The largest ``n`` in ``0..hi`` with ``fits(n)``, assuming ``fits`` is monotone (true up to a point);
    -1 when even 0 does not fit."""
    if not fits(0):
        return -1
    lo = 0
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid - 1
    return lo


def listed(ids: Sequence, room: int) -> tuple[list, int]:
    """As many of ``ids`` as fit in about ``room`` characters of JSON, and how many were left unlisted."""
    shown: list = []
    used = 2
    for n, ident in enumerate(ids):
        cost = len(dumps(ident)) + 1
        if used + cost > room:
            return shown, len(ids) - n
        shown.append(ident)
        used += cost
    return shown, 0


def fit_text(budget: int, candidates: Sequence[str]) -> str:
    """The first candidate that fits the budget (candidates go from richest to barest), else ``""``."""
    for text in candidates:
        if len(text) <= budget:
            return text
    return ""


def counted(max_chars: int, as_json: bool, count: int, doc: dict, head: str, counts: str = "") -> str:
    """What a budget too small for even a bare listing still says, as ``fit_text`` fits it: how many there
    were (``doc`` with ``count`` and ``truncated``, then those two alone, then ``{}``; in text ``head (count
    counts; none fits in N characters)``, then ``(count counts)``, then ``…``)."""
    if as_json:
        return fit_text(max_chars, [dumps({**doc, "count": count, "truncated": True}),
                                    dumps({"count": count, "truncated": True}), "{}"])
    shown = f"{count} {counts}" if counts else str(count)
    return fit_text(max_chars, [f"{head} ({shown}; none fits in {max_chars} characters)", f"({shown})", "…"])


def pack(max_chars: int, count: int, render: Callable[[int, dict], str], lists: Callable[[int], dict] = lambda k: {}) -> str | None:
    """Render as many of ``count`` items as fit in ``max_chars``, then list in the room left the ids that
    ``lists(k)`` names (e.g. what was omitted). ``render(k, notes)`` gets ``notes[name] = (shown_ids,
    unlisted_count)`` and must only grow as ``k`` or the shown ids grow. None when nothing fits."""

    def bare(k: int) -> str:
        return render(k, {name: ([], len(ids)) for name, ids in lists(k).items()})

    k = largest(lambda n: len(bare(n)) <= max_chars, count)
    if k < 0:
        return None
    room = max_chars - len(bare(k))
    notes = {}
    for name, ids in lists(k).items():
        shown, rest = listed(ids, room + 2)
        notes[name] = (shown, rest)
        room -= max(0, len(dumps(shown)) - 2)
    text = render(k, notes)
    return text if len(text) <= max_chars else bare(k)
