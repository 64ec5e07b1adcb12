"""Search the original messages of one or more memories (never the summaries), CJK included.

Semantics: case-insensitive substring matching on each message's text. A query is words and ``"quoted
phrases"``; every term must occur (``any_term`` for at least one). Hits come newest first. With ``rank``
the search is ranked retrieval instead: the ranker (``pimem.ranker``) over the index's term tables, any of
the query's terms, best first. Tool calls and results (``tool``, ``echo``) are searched only when asked for.

How: ``index.sqlite`` (see ``pimem.index``) narrows the messages down to candidates that contain the terms'
trigrams (or, for one- and two-character terms, any trigram starting with them); each candidate's line is
then read from the log and checked, so the index can only make search fast, never change its answer.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Iterable, Iterator

from .errors import BadInput
from .index import KIND_CODE, SCHEMAS, stderr_progress, table_of
from .message import KINDS, TOOL_KINDS

DEFAULT_LIMIT = 20
PREFIX_TERMS = 500  # a short term expanding to more trigrams than this is found by scanning instead
SNIPPET_CHARS = 160
_NOTHING = object()  # a term that cannot occur in a table at all
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
    filters = _Filters(wanted, since, until, before)
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


class _Filters:
    def __init__(self, kinds: set[str], since: datetime | None, until: datetime | None, before: int | None):
        self.kinds = kinds
        tables = {table_of(k) for k in kinds}
        self.all_kinds = all(k in kinds for k in KINDS if table_of(k) in tables)
        self.since = since.timestamp() if since else None
        self.until = until.timestamp() if until else None
        self.before = before

    def narrows(self) -> bool:
        """Whether the filters leave out messages of the tables their kinds are in."""
        return not self.all_kinds or self.before is not None or self.since is not None or self.until is not None

    def sql(self, table: str | None, column: str) -> tuple[str, list]:
        """``WHERE`` conditions on ``msgs m`` (and the FTS ``rowid`` column) and their parameters."""
        codes = sorted(KIND_CODE[k] for k in self.kinds if table is None or table_of(k) == table)
        where = [f"m.kind IN ({','.join(map(str, codes))})"]
        params: list = []
        if self.before is not None:
            where.append(f"{column} < ?")
            params.append(self.before)
        if self.since is not None:
            where.append("m.epoch >= ?")
            params.append(self.since)
        if self.until is not None:
            where.append("m.epoch < ?")
            params.append(self.until)
        return " AND ".join(where), params


def _memory_hits(mem, index, terms, any_term, rank, filters, limit) -> Iterator[dict]:
    folded = [t.lower() for t in terms]
    if rank:
        yield from _ranked_hits(mem, index, " ".join(terms), folded, filters, limit)
        return
    for _, row, msg, low in _verified(index, _candidates(index, folded, any_term, filters), folded, any_term):
        yield _hit(mem, row, msg, low, folded)
        limit -= 1
        if not limit:
            return


def _ranked_hits(mem, index, query: str, folded: list[str], filters: "_Filters", limit: int) -> Iterator[dict]:
    for row, msg, score in _ranked(mem, index, query, filters, limit, widen=True):
        yield {**_hit(mem, row, msg, msg["text"].lower(), folded), "score": round(score, 4)}


def _ranked(mem, index, query: str, filters: "_Filters", limit: int, widen: bool) -> Iterator[tuple]:
    """``(row, message, score)`` of the ranker's best ``limit`` messages the filters allow (the semantic
    extra fused in when present)."""
    from . import ranker

    tables = sorted({table_of(k) for k in filters.kinds})
    source = index.ranked(tables, filters.sql(None, "m.i") if filters.narrows() else None)
    for i, score in ranker.rank(source, query, limit, widen=widen, fuse=_fuser(mem, query, source)):
        row = index.db.execute("SELECT i, file, offset, length, kind, epoch FROM msgs WHERE i = ?", (i,)).fetchone()
        msg = index.read_row(*row[1:4]) if row is not None else None
        if msg is not None and msg.get("i") == i:
            yield row, msg, score


def ranked(mem, query: str, kinds: Iterable[str], limit: int, widen: bool = True) -> list[tuple[dict, float]]:
    """The ranker's best ``limit`` messages of ``mem`` among ``kinds``, as ``(message, score)`` best first
    (``widen``: neighbours of matches may rank without holding a term). For other ranked reads (recall)."""
    index, filters = mem.index(), _Filters(set(kinds), None, None, None)
    found = index.answer(lambda: list(_ranked(mem, index, query, filters, limit, widen)), stderr_progress(mem.name))
    return [(msg, score) for _, msg, score in found]


def containing(mem, text: str, kinds: Iterable[str]) -> list[dict]:
    """The messages of ``mem`` among ``kinds`` whose text holds ``text`` (case aside), newest first."""
    index, filters, folded = mem.index(), _Filters(set(kinds), None, None, None), [text.lower()]
    question = lambda: [msg for _, _, msg, _ in _verified(index, _candidates(index, folded, False, filters), folded, False)]  # noqa: E731
    return index.answer(question, stderr_progress(mem.name))


def _fuser(mem, query: str, source):
    """The semantic extra's fuse hook for this search, when the extra is there (None otherwise)."""
    try:
        from . import semantic
    except ImportError:
        return None
    return semantic.fuser(mem, query, keep=source.allows)


def _candidates(index, folded: list[str], any_term: bool, filters: _Filters) -> Iterator[tuple]:
    """Rows ``(i, file, offset, length, kind, epoch)`` that may match, highest ``i`` first."""
    tables = sorted({table_of(k) for k in filters.kinds})
    parts, params = [], []
    for table in tables:
        expr = _table_expr(index, table, folded, any_term)
        if expr is _NOTHING:
            continue
        if expr is None:  # no usable index filter: walk the messages, newest first
            where, params = filters.sql(None, "m.i")
            sql = f"SELECT m.i, m.file, m.offset, m.length, m.kind, m.epoch FROM msgs m WHERE {where} ORDER BY m.i DESC"
            return iter(index.db.execute(sql, params))
        where, where_params = filters.sql(table, "f.rowid")
        for schema in SCHEMAS:  # each message's text is in one of the index's two files
            parts.append(f"SELECT f.rowid, m.file, m.offset, m.length, m.kind, m.epoch FROM {schema}.{table} AS f "
                         f"JOIN main.msgs m ON m.i = f.rowid WHERE f.{table} MATCH ? AND {where}")
            params += [expr, *where_params]
    if not parts:
        return iter(())
    # one statement: each part comes from FTS5 in rowid order, so SQLite merges them instead of sorting
    return iter(index.db.execute(" UNION ALL ".join(parts) + " ORDER BY 1 DESC", params))


def _table_expr(index, table: str, folded: list[str], any_term: bool):
    """An FTS5 MATCH expression every matching message in ``table`` satisfies; None when the index cannot
    narrow the search down, ``_NOTHING`` when nothing in the table can match."""
    exprs = [_term_expr(index, table, term) for term in folded]
    if any_term:
        if any(e is None for e in exprs):
            return None
        parts = [e for e in exprs if e is not _NOTHING]
        return " OR ".join(f"({e})" for e in parts) if parts else _NOTHING
    if any(e is _NOTHING for e in exprs):
        return _NOTHING
    parts = [e for e in exprs if e is not None]
    return " AND ".join(f"({e})" for e in parts) if parts else None


def _term_expr(index, table: str, term: str):
    """What the index knows about one folded term: a term of three or more characters needs all its
    trigrams (those spanning spaces make phrases selective); a shorter one needs a trigram starting with it."""
    if len(term) >= 3:
        return " AND ".join(map(_quote, dict.fromkeys(term[k : k + 3] for k in range(len(term) - 2))))
    trigrams = index.terms_with_prefix(table, term, PREFIX_TERMS)
    if trigrams is None:
        return None
    if not trigrams:
        return _NOTHING
    return " OR ".join(map(_quote, trigrams))


def _quote(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def _verified(index, rows, folded: list[str], any_term: bool) -> Iterator[tuple]:
    """``(i, row, message, folded text)`` for the candidates whose text really holds the terms."""
    test = any if any_term else all
    read, single = index.read_row, folded[0] if len(folded) == 1 else None
    for row in rows:
        msg = read(row[1], row[2], row[3])
        if msg is None or msg.get("i") != row[0]:
            continue
        low = msg["text"].lower()
        if single in low if single is not None else test(term in low for term in folded):
            yield row[0], row, msg, low


def _hit(mem, row, msg: dict, low: str, folded: list[str]) -> dict:
    return {
        "memory": mem.name,
        "i": msg["i"],
        "date": msg["date"],
        "kind": msg["kind"],
        "size": msg.get("size"),
        "snippet": snippet(msg["text"], low, folded),
        "_epoch": row[5],
    }


def _add_held(mem, hits: list[dict]) -> None:
    """``held`` and ``label`` on each hit of ``mem``, once the memory has a view."""
    if not hits:
        return
    each = mem.held_each([hit["i"] for hit in hits])
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


def highlight(snippet_text: str, terms: list[str], paint) -> str:
    """``snippet_text`` with each occurrence of a term passed through ``paint`` (for a terminal)."""
    words = sorted({t for t in terms if t.strip()}, key=len, reverse=True)
    if not words:
        return snippet_text
    pattern = re.compile("|".join(map(re.escape, words)), re.IGNORECASE)
    return pattern.sub(lambda m: paint(m.group(0)), snippet_text)

