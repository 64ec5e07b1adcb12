"""Words for the small in-process rankers of memories and recall: tokens, query terms, stopwords.

Text is NFKC-normalised and lowercased; a token is a run of letters, digits, ``_ . - /`` (so paths and
identifiers stay whole, and their parts count too) of at least two characters. Runs of CJK characters have no spaces between words, so
they are cut into overlapping character pairs, which a query's pairs then match.
"""

from __future__ import annotations

import re
import unicodedata

_TOKEN = re.compile(r"[\w./-]+")
_PARTS = re.compile(r"[./-]+")
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]+")
STOPWORDS = frozenset(
    "a an and are as at be but by can do for from has have how i in is it its me my not of on or our please "
    "that the then this to was we what when where which who why will with you your 之前 这个 那个 然后 需要 "
    "我们 可以 一下 什么".split()
)


def fold(text: str) -> str:
    """The form every comparison uses: NFKC, lowercase (ASCII is its own NFKC form, and common)."""
    return text.lower() if text.isascii() else unicodedata.normalize("NFKC", text).lower()


def tokens(text: str) -> list[str]:
    """Every token of ``text`` in order, repeats included (for term frequencies)."""
    out: list[str] = []
    for run in _TOKEN.findall(fold(text)):
        pos = 0
        for cjk in _CJK.finditer(run):
            _plain(run[pos : cjk.start()], out)
            chars = cjk.group()
            out.extend(chars[k : k + 2] for k in range(len(chars) - 1))
            pos = cjk.end()
        _plain(run[pos:], out)
    return out


def _plain(piece: str, out: list[str]) -> None:
    piece = piece.strip(".")
    if len(piece) >= 2:
        out.append(piece)
        if _PARTS.search(piece):  # src/auth/session.ts is also found by "auth" and "session"
            out.extend(part for part in _PARTS.split(piece) if len(part) >= 2)


def query_terms(query: str) -> list[str]:
    """The distinct, meaningful tokens of a query, in order (stopwords dropped)."""
    return list(dict.fromkeys(t for t in tokens(query) if t not in STOPWORDS))
