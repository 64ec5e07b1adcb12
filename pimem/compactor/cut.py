"""Size control by the harness: one line of at most 512 UTF-8 bytes, whatever the model wrote.

Models do not reliably obey "shorter, please" (DESIGN.md §3), so every reply is flattened, stripped of code
fences and of a leading label, and cut at the last clause or sentence end that fits. Positions are measured
in bytes, so a line of pure Chinese is cut at its own punctuation, never in the middle of a character.
"""

from __future__ import annotations

import re

from ..config import LINE_BYTES

_FENCE = re.compile(r"^\s*```[\w+-]*\s*$", re.M)
_WHITESPACE = re.compile(r"\s+")
# "12+4|", "Summary:", "摘要：", "**Line:**" … at the very start of a reply
_LABEL = re.compile(
    r"^(?:\d+\+\d+\s*\|\s*|[*_]{0,2}(?:summary|line|output|result|compaction|answer|摘要|总结|概括)[*_]{0,2}\s*[:：]\s*[*_]{0,2}\s*)",
    re.I,
)
# (separator bytes, how many of them the cut keeps): clause ends drop the separator, sentence ends keep the mark
_CLAUSE_ENDS = ((b"; ", 0), ("；".encode(), 0), ("。".encode(), 3), (b". ", 1), (b"! ", 1), (b"? ", 1),
                ("！".encode(), 3), ("？".encode(), 3), ("…".encode(), 3))
_COMMAS = ((b", ", 0), ("，".encode(), 0), ("、".encode(), 0))
_TRAILING = " \t;,:，、；：-—"


def flatten(text: str) -> str:
    """One line: code fences dropped, every run of whitespace (newlines included) made one space."""
    if "```" in text:
        text = _FENCE.sub(" ", text)
    return _WHITESPACE.sub(" ", text).strip()


def strip_label(text: str) -> str:
    """Drop a leading ``id+n|`` head or a label such as ``Summary:`` that models like to add."""
    for _ in range(2):  # "12+4| Summary: …"
        stripped = _LABEL.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    return text.strip()


def _last_cut(data: bytes, marks, floor: int, limit: int) -> int:
    """The furthest cut position past ``floor`` bytes at one of ``marks`` that keeps the line within ``limit``."""
    best = -1
    for mark, keep in marks:
        at = data.rfind(mark, floor, limit + len(mark))
        while at >= 0 and at + keep > limit:
            at = data.rfind(mark, floor, at)
        if at >= 0:
            best = max(best, at + keep)
    return best


def cut_line(text: str, limit: int = LINE_BYTES) -> str:
    """A model's reply as one line of at most ``limit`` bytes, cut at the last clause or sentence end.

    Past half the limit, cut after the last ``; `` / ``。`` / ``. `` / ``！`` …; failing that at the last comma
    (``, ``, ``，``, ``、``); failing that at a character boundary. Trailing separators are stripped."""
    line = strip_label(flatten(text))
    data = line.encode("utf-8")
    if len(data) <= limit:
        return line.rstrip(_TRAILING)
    window = data[: limit + 2]  # two more bytes so a ". " ending exactly at the limit is seen
    floor = limit // 2
    at = _last_cut(window, _CLAUSE_ENDS, floor, limit)
    if at < 0:
        at = _last_cut(window, _COMMAS, floor, limit)
    if at < 0:
        at = limit
    return data[:at].decode("utf-8", "ignore").rstrip(_TRAILING)
