"""Size control by the harness: one line of at most 512 UTF-8 bytes, whatever the model wrote.

Models do not reliably obey "shorter, please" (DESIGN.md §3), so every reply is stripped of control characters
and terminal escape sequences, flattened, stripped of code fences and of a leading label, and cut at the last
clause or sentence end that fits. Positions are measured in bytes, so a line of pure Chinese is cut at its own
punctuation, never in the middle of a character.
"""

from __future__ import annotations

import re
import unicodedata

from ..config import LINE_BYTES
from ..privacy import ANSI

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
# a terminal's escape sequences (colours, titles, cursor moves: 7-bit and 8-bit), and the control characters,
# C0 (but the tab and line breaks, which ``flatten`` makes spaces), DEL and C1
CONTROLS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")


def flatten(text: str) -> str:
    """One line: code fences dropped, every run of whitespace (newlines included) made one space."""
    if "```" in text:
        text = _FENCE.sub(" ", text)
    return _WHITESPACE.sub(" ", text).strip()


def strip_controls(text: str) -> str:
    """``text`` without terminal escape sequences, each other control character (NUL, BEL, …) a space: a model
    may echo them from a transcript, and kept in a line they reach ``view --json``'s readers, and the
    faithfulness guard read ``\\x1b[31m`` as the number 31."""
    if not CONTROLS.search(text):  # (ESC is one: a reply without any is as it came)
        return text
    return CONTROLS.sub(" ", ANSI.sub("", text))


def strip_label(text: str) -> str:
    """Drop a leading ``id+n|`` head or a label such as ``Summary:`` that models like to add."""
    for _ in range(2):  # "12+4| Summary: …"
        stripped = _LABEL.sub("", text, count=1)
        if stripped == text:
            break
        text = stripped
    return text.strip()


def boundary(text: str, at: int) -> int:
    """The last position at or before ``at`` that does not cut ``text`` inside what reads as one character (a
    grapheme cluster, as far as a few rules tell): not before a combining mark, a variation selector, a zero-width
    joiner, a skin tone, a tag or a Hangul vowel or final jamo; not after a joiner; not between the two halves of a
    flag. 0 when ``text[:at]`` is one cluster."""
    while 0 < at < len(text):
        before, after = text[at - 1], text[at]
        if not (before == "\u200d" or _extends(after) or _flag_half(text, at)):
            break
        at -= 1
    return max(at, 0)


def _extends(ch: str) -> bool:
    """True for a character that belongs to the one before it."""
    if ch < "\u0300":
        return False
    return (unicodedata.category(ch)[0] == "M" or ch == "\u200d" or "\U0001f3fb" <= ch <= "\U0001f3ff"
            or "\U000e0020" <= ch <= "\U000e007f" or "\u1160" <= ch <= "\u11ff")


def _flag_half(text: str, at: int) -> bool:
    """True when ``at`` falls between the two regional indicators of a flag (they pair from the start of a run)."""
    flag = lambda ch: "\U0001f1e6" <= ch <= "\U0001f1ff"
    if not (flag(text[at - 1]) and flag(text[at])):
        return False
    k = at
    while k and flag(text[k - 1]):
        k -= 1
    return (at - k) % 2 == 1


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
    (``, ``, ``，``, ``、``); failing that at the last whole character (``boundary``: an emoji, a letter with
    its accents). Trailing separators are stripped."""
    line = strip_label(flatten(text))
    data = line.encode("utf-8")
    if len(data) <= limit:
        return line.rstrip(_TRAILING)
    window = data[: limit + 2]  # two more bytes so a ". " ending exactly at the limit is seen
    floor = limit // 2
    at = _last_cut(window, _CLAUSE_ENDS, floor, limit)
    if at < 0:
        at = _last_cut(window, _COMMAS, floor, limit)
    if at < 0:  # no clause or comma: at the last whole character (a cluster larger than a line is cut in it)
        head = data[:limit].decode("utf-8", "ignore")
        return head[: boundary(line, len(head)) or len(head)].rstrip(_TRAILING)
    return data[:at].decode("utf-8", "ignore").rstrip(_TRAILING)
