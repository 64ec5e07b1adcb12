"""The faithfulness guard: a summary's numbers, paths and identifiers must occur in its span's messages.

A model may write a port, a version or a file name its input never held. ``unfounded(summary, texts)`` lists
the facts of a summary found in none of ``texts`` (exact substrings, whole: ``9999`` is not one of ``19999``);
the builder asks for a model summary that names one again, once, and keeps the second reply with its
unfounded facts as ``suspect`` in the node's metadata, which ``status``, ``fsck`` and ``view --stats`` report.
A merge's facts are looked up in its two child lines first (they come from the span), and only those missing
there in the span's messages; a fact a child line was itself marked for is no evidence, so a merge repeating it
is marked too (without asking again: it said what it was given).
The offline compactor copies facts from the messages, so it is not checked.
"""

from __future__ import annotations

import re
from typing import Callable, Iterable

# numbers of two characters or more (ports, versions, sizes, dates), paths and file names, identifiers
_FACT = re.compile(
    r"""(?x)
    (?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]+)+
    | \b[\w-]+\.(?:py|js|mjs|ts|tsx|jsx|go|rs|c|h|cc|cpp|hpp|java|kt|rb|php|sh|md|json|jsonl|toml|yaml|yml|txt|sql|html|css|lock|cfg|ini|xml|csv|log)\b
    | \b[a-z]+(?:[A-Z][a-z0-9]*)+\b | \b[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]*)+\b | \b[A-Za-z][A-Za-z0-9]*_\w+\b
    | \b\d[\d.:,/-]*\d\b
    """
)
MAX_LISTED = 8  # facts kept in a node's ``suspect`` mark


def facts(text: str) -> list[str]:
    """The numbers, paths and identifiers of ``text``, in order, once each."""
    return list(dict.fromkeys(m.group().rstrip(".,:") for m in _FACT.finditer(text)))


def unfounded(summary: str, texts: Iterable[str], more: Callable[[], Iterable[str]] | None = None,
              distrust: Iterable[str] = ()) -> list[str]:
    """The facts of ``summary`` that occur in none of ``texts`` nor (looked up only if some are missing)
    in the texts ``more()`` yields; a fact of ``distrust`` (a child line's own unfounded ones) is looked up in
    ``more()`` alone."""
    distrust = set(distrust)
    found = {f: re.compile(rf"(?<![\w.]){re.escape(f)}(?!\w)") for f in facts(summary)}  # whole: not 9999 of 19999
    missing = [f for f, holds in found.items() if f in distrust or not any(holds.search(t) for t in texts)]
    if missing and more is not None:
        rest = list(more())
        missing = [f for f in missing if not any(found[f].search(t) for t in rest)]
    return missing
