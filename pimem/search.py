"""Search the original messages of one or more memories (never the summaries), CJK included.

Semantics: case-insensitive substring matching on each message's text. A query is words and ``"quoted
phrases"``; every term must occur (``any_term`` for at least one). Hits come newest first. With ``rank``
the search is ranked retrieval instead: the ranker (``pimem.ranker``) over the index's term tables, any of
the query's terms, best first; several memories are ranked as one collection (each term weighed by how
many messages of them all hold it), so their scores compare. Tool calls and results (``tool``, ``echo``) are
searched only when asked for.

How: ``index.sqlite`` (see ``pimem.index``) narrows the messages down to candidates that contain the terms'
trigrams (or, for one- and two-character terms, any trigram starting with them); each candidate's line is
then read from the log and checked, so the index can only make search fast, never change its answer.
"""

from __future__ import annotations

import heapq
import re
from datetime import datetime
from typing import Callable, Iterable, Iterator

from .errors import BadInput, as_error
from .index import Candidate, Filters, stderr_progress
from .message import KINDS, TOOL_KINDS

DEFAULT_LIMIT = 20
SNIPPET_CHARS = 160
MAX_TERMS = 1_000  # terms a query may hold
_TERMS = re.compile(r'"([^"]*)(?:"|$)|(\S+)')


def parse(query: str) -> list[str]:
    """The terms of a query: ``"quoted phrases"`` kept whole, other words split on whitespace."""
    if "\x00" in query:  # (no message holds one, and SQLite's full-text syntax would end the query there)
        raise BadInput("query contains a NUL byte")
    terms = [phrase or word for phrase, word in _TERMS.findall(query) if phrase or word]
    if not terms:
        raise BadInput("empty query: give a word or a \"quoted phrase\" to search for")
    if len(terms) > MAX_TERMS:  # (a document pasted as a query: 100,000 words kept an MCP server busy for 30 s)
        raise BadInput(f"a query of {len(terms):,} terms: give at most {MAX_TERMS:,} (a \"quoted phrase\" is one)")
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
    start: int | None = None,
    before: int | None = None,
    limit: int = DEFAULT_LIMIT,
    offset: int = 0,
    unread: Callable | None = None,
    on_note: Callable[[str], None] | None = None,
) -> list[dict]:
    """Hits ``{memory, i, date, kind, size, snippet}``, plus ``score`` with ``rank``, and once the memory has
    a view ``held`` (verbatim, summarized, pending or inside) with the ``label`` of the view line holding the
    message (``pimem zoom`` it); newest first or best first, at most ``limit`` after the first ``offset`` (the
    next page of ranked hits; --before pages the others).

    ``kinds`` restricts the kinds searched (naming ``tool`` or ``echo`` asks for them); otherwise tool calls
    and results are left out unless ``include_tools``. ``before`` pages: only messages with ``i < before`` (and
    ``i >= start``).
    ``unread(mem, error)``, when given, takes a memory that cannot be read (its log damaged, or its
    ``config.json``, which ``held`` needs: the view is folded by its budgets) and the others are searched;
    without it the error is raised.
    Each memory's index is caught up first; ``on_note`` is told once when that is long (it lacks over
    ``index.LAG_BYTES`` of the log, or another process is catching it up: its lock waited for); a ``hurried``
    memory's is not caught up at length (see ``asked``).
    """
    if limit < 1:
        raise BadInput("--limit must be at least 1")
    if offset < 0:
        raise BadInput("--offset must be at least 0")
    limit += offset  # every hit up to the page's end is found; the page is those after the first offset
    terms = parse(query)
    wanted = set(kinds) if kinds else set(KINDS if include_tools else (k for k in KINDS if k not in TOOL_KINDS))
    filters = Filters(wanted, since, until, before, start)
    memories, pooled = list(memories), None
    ask = _Asking(on_note)
    if rank and len(memories) > 1:  # ranked as one collection, so that scores of different memories compare
        from . import ranker

        query = " ".join(terms)
        parts = _each(memories, unread, lambda mem, index: ranker.collection([index.ranked(filters)], query), ask)
        memories = [mem for mem, _ in parts]
        pooled = (tuple(map(sum, zip(*(size for _, (size, _) in parts)))),
                  {term: sum(counts[term] for _, (_, counts) in parts) for term in ranker.query_words(query)})
    per_memory: list[list[dict]] = []
    for mem, found in _each(memories, unread, lambda mem, index: _add_held(mem, list(
            _memory_hits(mem, index, terms, any_term, rank, filters, limit, pooled))), ask):
        per_memory.append([{**hit, "_n": n} for n, hit in enumerate(found)])
    if rank:  # (equal scores: in the ranker's order within a memory, then newest first)
        hits = sorted((h for found in per_memory for h in found), key=lambda h: (-h["score"], h["_n"], -h["_epoch"]))
    else:  # each memory's hits newest logged first (what --before pages by), the memories merged by date
        hits = list(heapq.merge(*per_memory, key=lambda h: -h["_epoch"]))
    hits = hits[offset:limit]
    for hit in hits:
        del hit["_epoch"], hit["_n"]
    return hits


def bounds(since: str | None, until: str | None, before: int | None, named: tuple[str, str]) -> dict:
    """``search``'s ``since``, ``until``, ``start`` and ``before`` for a range given as ``since`` and ``until``
    (each ``#I`` or a WHEN; None: open): an ``until`` of ``#I`` bounds each memory's numbering, as ``before``
    does; an ``until`` before ``since`` is refused, before any memory is read, the two called as ``named``
    (``--since``, ``--until`` on the command line)."""
    from . import when

    (start, first), (stop, last) = when.bound(since), when.bound(until)
    for low, high in ((start, stop), (first, last)):  # (numbers with numbers, moments with moments)
        when.refuse_reversed(low, high, f"{named[0]} {since}", f"{named[1]} {until}")
    if stop is not None:
        before = stop if before is None else min(before, stop)
    return {"since": first, "until": last, "start": start, "before": before}


SEARCH_MEANWHILE = "this search did not read the messages it lacks (ask again once it is done)"


def asked(mem, question: Callable, progress: Callable[[int, int], None] | None = None):
    """``question()`` of ``mem``'s index, caught up first (``progress``: see ``Index.answer``), as every reader
    asks it. A ``hurried`` memory's (``Memory.hurried``: a reader a client times out, the MCP server) is not
    caught up at length: one that lacks over ``index.LAG_BYTES`` of the log, or that another process is
    catching up, or found damaged, is asked as it is (deleted if damaged, not rebuilt here), a process of its
    own catches it up (``index.Look``), and ``mem.hurried`` is told that the messages it lacks were not read."""
    index = mem.index()
    if mem.hurried is None:
        mem.waits_for_index()
        return index.answer(question, progress)
    look = mem.index_look()
    found = index.guarded(question) if look.far or look.busy else index.answer(question, None, question)
    if look.left():
        mem.hurried(look.hand_over(SEARCH_MEANWHILE))
    elif look.busy:
        mem.hurried(f"the search index of memory '{mem.name}' is being caught up by another process, so {SEARCH_MEANWHILE}")
    return found


class _Asking:
    """How ``search`` asks a memory's index (``asked``), ``on_note`` told of a long catch-up as the memory's
    ``patient`` (``Memory.waits_for_index``) unless it has one."""

    def __init__(self, on_note: Callable[[str], None] | None):
        self.on_note = on_note

    def __call__(self, mem, question: Callable):
        if self.on_note is not None and mem.patient is None:
            mem.patient = self.on_note
        return asked(mem, question, stderr_progress(mem.name))


def _each(memories: list, unread: Callable | None, question: Callable, ask: Callable | None = None) -> list[tuple]:
    """``(mem, question(mem, its index))`` for each memory that can be read (see ``search`` on ``unread``), asked
    through ``ask`` (``_Asking``)."""
    ask = ask or _Asking(None)
    out = []
    for mem in memories:
        try:
            mem.config  # (read first, so a memory refused on its settings is left out whether or not it has hits)
            index = mem.index()
            out.append((mem, ask(mem, lambda: question(mem, index))))
        except Exception as exc:
            error = as_error(exc)
            if unread is None or error is None:
                raise
            unread(mem, error)
    return out


def _memory_hits(mem, index, terms, any_term, rank, filters, limit, pooled=None) -> Iterator[dict]:
    folded = [t.lower() for t in terms]
    if rank:
        for row, msg, score in _ranked(mem, index, " ".join(terms), filters, limit, widen=True, pooled=pooled):
            yield {**_hit(mem, row, msg, msg["text"].lower(), folded), "score": round(score, 4)}
        return
    for _, row, msg, low in _verified(index, index.candidates(folded, any_term, filters), folded, any_term):
        yield _hit(mem, row, msg, low, folded)
        limit -= 1
        if not limit:
            return


def _ranked(mem, index, query: str, filters: Filters, limit: int, widen: bool, pool: int | None = None,
            max_terms: int | None = None, semantic: bool = True, pooled: tuple | None = None) -> Iterator[tuple]:
    """``(candidate, message, score)`` of the ranker's best ``limit`` messages the filters allow (the
    semantic extra fused in when present and ``semantic``; the bounds as ``ranked`` says; ``pooled``: the
    size and term counts of the collection the memory is ranked in, ``ranker.Pooled``)."""
    from . import ranker

    source = index.ranked(filters, pool)
    if pooled is not None:
        source = ranker.Pooled(source, *pooled)
    fuse = _fuser(mem, query, source) if semantic else None
    for i, score in ranker.rank(source, query, limit, widen=widen, fuse=fuse, max_terms=max_terms):
        row = index.row(i)
        msg = index.read_row(row.file, row.offset, row.length) if row is not None else None
        if msg is not None and msg.get("i") == i:
            yield row, msg, score


def ranked(mem, query: str, kinds: Iterable[str], limit: int, widen: bool = True, *, pool: int | None = None,
           max_terms: int | None = None, semantic: bool = True, catch_up: bool = True,
           rebuild: bool = True) -> list[tuple[dict, float]]:
    """The ranker's best ``limit`` messages of ``mem`` among ``kinds``, as ``(message, score)`` best first
    (``widen``: neighbours of matches may rank without holding a term). For other ranked reads (recall, the
    Claude Code hook). A reader that must stay cheap bounds the work: ``pool`` (postings read per term),
    ``max_terms`` (the query's first terms only), ``semantic=False`` (no sentence vectors, nothing of the
    semantic extra imported), ``catch_up=False`` (the index as it is, another process catching it up),
    ``rebuild=False`` (a damaged index deleted and nothing found, not rebuilt here: ``Index.rebuilds`` counts it)."""
    index, filters = mem.index(), Filters(set(kinds), None, None, None)
    question = lambda: list(_ranked(mem, index, query, filters, limit, widen, pool, max_terms, semantic))  # noqa: E731
    again = None if rebuild else list
    if catch_up and rebuild:
        found = asked(mem, question, stderr_progress(mem.name))
    else:
        found = index.answer(question, stderr_progress(mem.name), again) if catch_up else index.guarded(question, again)
    return [(msg, score) for _, msg, score in found]


def containing(mem, text: str, kinds: Iterable[str]) -> list[dict]:
    """The messages of ``mem`` among ``kinds`` whose text holds ``text`` (case aside), newest first."""
    index, filters, folded = mem.index(), Filters(set(kinds), None, None, None), [text.lower()]
    question = lambda: [msg for _, _, msg, _ in _verified(index, index.candidates(folded, False, filters), folded, False)]  # noqa: E731
    return asked(mem, question, stderr_progress(mem.name))


def _fuser(mem, query: str, source):
    """The semantic extra's fuse hook for this search, when the extra is there (None otherwise)."""
    try:
        from . import semantic
    except ImportError:
        return None
    return semantic.fuser(mem, query, keep=source.allows)


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


def _add_held(mem, hits: list[dict]) -> list[dict]:
    """``hits`` of ``mem`` with ``held`` and ``label`` on each, once the memory has a view."""
    if not hits:
        return hits
    each = mem.held_each([hit["i"] for hit in hits], {hit["i"]: hit["size"] for hit in hits}, lines=False)
    for hit in hits:
        held = each[hit["i"]]
        if held is not None:
            hit["held"], hit["label"] = held["held"], held["label"]
    return hits


def snippet(text: str, low: str, folded: list[str], width: int = SNIPPET_CHARS) -> str:
    """About ``width`` characters of ``text`` on one line, around the earliest match."""
    positions = [p for p in (low.find(t) for t in folded) if p >= 0]
    at = min(positions) if positions else 0
    if len(low) != len(text):  # lower() made letters longer (İ is i and a dot): the match's place in the text
        at = _place_in(text, at)
    start = max(0, at - width // 3)
    end = min(len(text), start + width)
    start = max(0, min(start, end - width))
    out = " ".join(text[start:end].split())
    return ("…" if start > 0 else "") + out + ("…" if end < len(text) else "")


def _place_in(text: str, at: int) -> int:
    """The place in ``text`` of the character at ``at`` in ``text.lower()`` (each character lowercases alone to
    as many characters as in the whole: the one rule that looks around, a final sigma, keeps the length)."""
    reached = 0
    for n, ch in enumerate(text):
        reached += len(ch.lower())
        if reached > at:
            return n
    return len(text)


def highlight(snippet_text: str, terms: list[str], paint) -> str:
    """``snippet_text`` with each occurrence of a term passed through ``paint`` (for a terminal)."""
    words = sorted({t for t in terms if t.strip()}, key=len, reverse=True)
    if not words:
        return snippet_text
    pattern = re.compile("|".join(map(re.escape, words)), re.IGNORECASE)
    return pattern.sub(lambda m: paint(m.group(0)), snippet_text)

