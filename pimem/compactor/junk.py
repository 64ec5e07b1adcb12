"""An answer that is no summary: bytes that were not text, characters no text holds, one phrase over and over.

A command printing binary or a server sending garbage answers with something the harness would cut to a line and
the tree keep for good (nodes are written once). ``why(line, reply, sources)`` says in a few words why a model's
answer is no summary, or None: the call then fails as any failed call does (retried, backed off, given up), and
nothing is written. Each rule spares what the call's input holds (``sources``: the message or the two child
lines, and the ``<chat>`` context), so a line copying it is never refused:

- a U+FFFD, which stands for bytes that were not UTF-8, or a lone surrogate (``\\ud800`` in a JSON reply: made a
  U+FFFD); one ending the answer, a character its last bytes cut, is dropped before the line is cut (``text_of``);
- a control character other than the tab and line breaks (LF, VT, FF, CR and NEL, U+0085, made spaces as any
  white space is), anywhere in the answer (a terminal's escape sequences are no such character: they are dropped
  from the line, as the other control characters are made spaces);
- a noncharacter, a private-use character, or a code point Unicode had not assigned in the
  version Python's ``unicodedata`` knows, but for the emoji blocks (U+1F000–U+1FAFF, which gain emoji every
  year);
- a phrase of 1 to 64 characters said at least 4 times in a row that makes up more than half of the line (of its
  first 4,096 characters, when ``line_bytes`` allows more).

Words of any language, emoji and code are none of these.
"""

from __future__ import annotations

import re
import unicodedata

from ..privacy import ANSI

PHRASE = 64  # characters: the longest phrase the repetition rule looks for
TIMES = 4  # a phrase said this many times in a row, or more
HEAD = 4096  # characters of a line the repetition rule reads (a line is 512 bytes unless line_bytes says more)
EMOJI = ("\U0001f000", "\U0001faff")  # new emoji are assigned here every year; an older Python calls them unassigned
_REPEATS = [re.compile(rf"(.{{{n}}})\1{{{TIMES - 1},}}", re.S) for n in range(1, PHRASE + 1)]
_SURROGATE = re.compile("[\ud800-\udfff]")
_REFUSED = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x84\x86-\x9f]")  # ``cut.CONTROLS`` but NEL, which breaks a line
_RARE = re.compile(r"[^\x00-\u036f]")  # what may be one of the rule's characters (the rest is Latin and ASCII)


def text_of(reply: str) -> str:
    """``reply`` as text: each lone surrogate (``\\ud800`` in a JSON reply, which no UTF-8 can hold) a U+FFFD,
    as bytes that are not UTF-8 are, and without the U+FFFD that end it (a character whose last bytes the token
    limit, or a command's first MiB, cut off)."""
    if _SURROGATE.search(reply):
        reply = _SURROGATE.sub("\ufffd", reply)
    end = reply.rstrip()
    return end.rstrip("\ufffd") if end.endswith("\ufffd") else reply


def why(line: str, reply: str, sources: list[str]) -> str | None:
    """Why the answer ``reply``, cut to ``line``, is no summary (a few words, one line), or None."""
    held = lambda ch: any(ch in source for source in sources)
    if "\ufffd" in line and not held("\ufffd"):
        return f"its answer is not UTF-8 text ({line.count(chr(0xfffd))} U+FFFD in its line)"
    if _REFUSED.search(reply):
        odd = sorted({ch for ch in _REFUSED.findall(ANSI.sub("", reply)) if not held(ch)})
        if odd:
            return f"its answer holds control character U+{ord(odd[0]):04X}" + _more(len(odd))
    odd = {}
    for ch in set(_RARE.findall(line)):
        kind = _kind(ch)
        if kind and not held(ch):
            odd.setdefault(kind, []).append(ch)
    if odd:
        kind, chars = next(iter(sorted(odd.items())))
        return f"its line holds {kind} U+{ord(min(chars)):04X}" + _more(sum(map(len, odd.values())))
    run = _repeated(line[:HEAD])
    if run is not None:
        flat = [" ".join(source.split()) for source in sources]
        phrase, times, stretch = run
        if not any(stretch in source for source in flat):
            shown = phrase if len(phrase) <= 40 else phrase[:40] + "…"
            return f"its line is mostly one phrase repeated ({shown.strip()!r} {times} times)"
    return None


def _more(n: int) -> str:
    return f" (and {n - 1} more)" if n > 1 else ""


def _kind(ch: str) -> str | None:
    """What rare character ``ch`` is, or None for one that text uses."""
    category = unicodedata.category(ch)
    if category == "Co":
        return "a private-use character"
    if category == "Cn":
        code = ord(ch)
        if 0xFDD0 <= code <= 0xFDEF or code & 0xFFFE == 0xFFFE:
            return "a noncharacter"
        return None if EMOJI[0] <= ch <= EMOJI[1] else "an unassigned code point"
    return None


def _repeated(line: str) -> tuple[str, int, str] | None:
    """The phrase, its count and the stretch it fills, of the longest run of one phrase said ``TIMES`` times or
    more in a row, when it makes up more than half of ``line``; None otherwise."""
    best = None
    for pattern in _REPEATS:
        for m in pattern.finditer(line):
            if best is None or len(m.group()) > len(best.group()):
                best = m
    if best is None or 2 * len(best.group()) <= len(line):
        return None
    return best.group(1), len(best.group()) // len(best.group(1)), best.group()
