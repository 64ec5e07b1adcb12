"""Search the original messages of one or more memories (never the summaries), CJK included.

Semantics: case-insensitive substring matching on each message's text. A query is words and ``"quoted
phrases"``; every term must occur (``any_term`` for at least one). Hits come newest first, or by BM25 with
``rank``. Tool calls and results (``tool``, ``echo``) are searched only when asked for.

How: ``index.sqlite`` (see ``pimem.index``) narrows the messages down to candidates that contain the terms'
trigrams (or, for one- and two-character terms, any trigram starting with them); each candidate's line is
then read from the log and checked, so the index can only make search fast, never change its answer.
"""

from __future__ import annotations

import heapq
import math
import re
from datetime import datetime
from typing import Iterable, Iterator

from .errors import BadInput
from .index import Candidate, Filters, stderr_progress
from .message import KINDS, TOOL_KINDS

DEFAULT_LIMIT = 20
RANK_POOL = 10_000  # --rank scores at most this many matches, the newest ones
SNIPPET_CHARS = 160
_TERMS = re.compile(r'"([^"]*)(?:"|$)|(\S+)')


def parse(query: str) -> list[str]:
    """The terms of a query: ``"quoted phrases"`` kept whole, other words split on whitespace."""
    terms = [phrase or word for phrase, word in _TERMS.findall(query) if phrase or word]
    if not terms:
        raise BadInput("empty query: give a word or a \"quoted phrase\" to search for")
    return terms


def search(
    memories: Iterable,
    query: str,
    *,
    any_term: bool = False,
    rank: bool = False,
    kinds: Iterable[str] | None = None,
    include_tools: bool = False,
    since: datetime | None = None,
    until: datetime | None = None,
    before: int | None = None,
    limit: int = DEFAULT_LIMIT,
) -> list[dict]:
    """Hits ``{memory, i, date, kind, size, snippet}``, plus ``score`` with ``rank``, and once the memory has
    a view ``held`` (verbatim, summarized, pending or inside) with the ``label`` of the view line holding the
    message (``pimem zoom`` it); newest first or best first, at most ``limit``.

    ``kinds`` restricts the kinds searched (naming ``tool`` or ``echo`` asks for them); otherwise tool calls
    and results are left out unless ``include_tools``. ``before`` pages: only messages with ``i < before``.
    """
    if limit < 1:
        raise BadInput("--limit must be at least 1")
    terms = parse(query)
    wanted = set(kinds) if kinds else set(KINDS if include_tools else (k for k in KINDS if k not in TOOL_KINDS))
    filters = Filters(wanted, since, until, before)
    hits: list[dict] = []
    for mem in memories:
        index = mem.index()
        question = lambda: list(_memory_hits(mem, index, terms, any_term, rank, filters, limit))  # noqa: E731
        found = index.answer(question, stderr_progress(mem.name))
        _add_held(mem, found)
        hits.extend(found)
    if rank:
        hits.sort(key=lambda h: (-h["score"], -h["_epoch"]))
    else:
        hits.sort(key=lambda h: -h["_epoch"])
    hits = hits[:limit]
    for hit in hits:
        del hit["_epoch"]
    return hits


def _memory_hits(mem, index, terms, any_term, rank, filters, limit) -> Iterator[dict]:
    folded = [t.lower() for t in terms]
    verified = _verified(index, index.candidates(folded, any_term, filters), folded, any_term)
    if not rank:
        for _, row, msg, low in verified:
            yield _hit(mem, row, msg, low, folded)
            limit -= 1
            if not limit:
                return
        return
    pool = []
    for entry in verified:
        pool.append(entry)
        if len(pool) >= RANK_POOL:
            break
    scores = _bm25([low for _, _, _, low in pool], folded, index_size=index.size())
    best = heapq.nlargest(limit, range(len(pool)), key=lambda n: (scores[n], pool[n][0]))
    for n in best:
        _, row, msg, low = pool[n]
        yield {**_hit(mem, row, msg, low, folded), "score": round(scores[n], 4)}


def _verified(index, candidates: Iterator[Candidate], folded: list[str], any_term: bool) -> Iterator[tuple]:
    """``(i, candidate, message, folded text)`` for the candidates whose text really holds the terms."""
    test = any if any_term else all
    read, single = index.read_row, folded[0] if len(folded) == 1 else None
    for c in candidates:
        msg = read(c.file, c.offset, c.length)
        if msg is None or msg.get("i") != c.i:
            continue
        low = msg["text"].lower()
        if single in low if single is not None else test(term in low for term in folded):
            yield c.i, c, msg, low


def _hit(mem, candidate: Candidate, msg: dict, low: str, folded: list[str]) -> dict:
    return {
        "memory": mem.name,
        "i": msg["i"],
        "date": msg["date"],
        "kind": msg["kind"],
        "size": msg.get("size"),
        "snippet": snippet(msg["text"], low, folded),
        "_epoch": candidate.epoch,
    }


def _add_held(mem, hits: list[dict]) -> None:
    """``held`` and ``label`` on each hit of ``mem``, once the memory has a view."""
    if not hits:
        return
    each = mem.held_each([hit["i"] for hit in hits], {hit["i"]: hit["size"] for hit in hits}, lines=False)
    for hit in hits:
        held = each[hit["i"]]
        if held is not None:
            hit["held"], hit["label"] = held["held"], held["label"]


def snippet(text: str, low: str, folded: list[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` on one line, around the earliest match."""
    positions = [p for p in (low.find(t) for t in folded) if p >= 0]
    at = min(positions) if positions else 0
    if len(low) != len(text):  # lower() changed lengths (rare letters): positions are approximate
        at = min(at, len(text))
    start = max(0, at - width // 3)
    end = min(len(text), start + width)
    start = max(0, min(start, end - width))
    out = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + out + ("…" if end < len(text) else "")


def _bm25(texts: list[str], folded: list[str], index_size: int, k1: float = 1.2, b: float = 0.75) -> list[float]:
    """BM25 of each matching text for the terms (term frequency = substring occurrences). Computed a term
    at a time over all texts (list comprehensions: --rank scores up to 10,000 texts per query)."""
    if not texts:
        return []
    lengths = [len(t) for t in texts]
    average = sum(lengths) / len(lengths)
    norms = [k1 * (1 - b + b * length / average) for length in lengths]
    total = max(index_size, len(texts))
    scores = [0] * len(texts)
    for term in folded:
        counts = [t.count(term) for t in texts]
        df = len(counts) - counts.count(0)
        w = math.log(1 + (total - df + 0.5) / (df + 0.5))
        scores = [s + w * tf * (k1 + 1) / (tf + norm) if tf else s for s, tf, norm in zip(scores, counts, norms)]
    return scores


def highlight(snippet_text: str, terms: list[str], paint) -> str:
    """``snippet_text`` with each occurrence of a term passed through ``paint`` (for a terminal)."""
    words = sorted({t for t in terms if t.strip()}, key=len, reverse=True)
    if not words:
        return snippet_text
    pattern = re.compile("|".join(map(re.escape, words)), re.IGNORECASE)
    return pattern.sub(lambda m: paint(m.group(0)), snippet_text)

