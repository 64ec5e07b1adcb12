"""The one ranker behind every ranked read (``search --rank``, ``recall`` with words, ``memories QUERY``,
the MCP tools): any of the query's terms matches, best first.

What a message is indexed as (``document``): the terms (``pimem.terms``) of its text, of its speaker or
author (``meta.speaker``, ``meta.author``, ``meta.name``) and of its date in words (``8 may 2023 monday``),
so "what did Alice say" and "what did we do in May" find their turns; its length is its text's words.

How it scores (``rank``): BM25 over those terms (``K1``, ``B``; a term counts once per message), then
**neighbour context**: each message also gets the larger of ``BEFORE`` times the BM25 score of the message
just before it (``REPLY`` times it when that message asks a question: its reply is likely the answer)
and ``AFTER`` times the one just after it, in the same conversation (the answer often follows the turn
holding the question's words). A question's first-person words (``terms.first_person``:
"what did *I* cook for *my* friend?") add their BM25 to the messages holding them, lent to no neighbour,
when the question has other terms: its asker's own turns (and then a question turn lends its reply
only ``BEFORE``). Past the first ``TAIL`` places, where the matches left hold a common word or two, a
deeper tier (``tail``) orders the rest: the turns around the best hits first, then the weaker matches by
their score and their overlap with the question's words as typed, stop words included. Each constant
was chosen on the tuning split of ``bench/rank.py`` (bench/README.md has the ablation). The work is what
the query's terms' postings hold (a ``Source`` may bound it), nothing per message of the memory; the tier
adds a few turns' rows and ``TAIL_POOL`` texts.

Where the postings come from is a ``Source``: ``Corpus`` over documents in memory (memory records, tests,
the benchmark) or the index's tables (``pimem.rankindex.Postings``); both give the same scores. Ranked
together, several memories are one collection: ``Pooled`` gives each memory's source the collection's size
and term counts (``collection``), so that a rare word scores alike in a big memory and a small one and
their scores compare.

A semantic extra may fuse its own scores in: ``rank(..., fuse=f)`` calls ``f(candidates)`` with the
lexical ``[(i, score)]`` best first (the best ``POOL``) and ranks what it returns (the deeper tier then
applies to the fused ranking).
"""

from __future__ import annotations

import heapq
import math
from typing import Callable, Iterable, Protocol

from . import terms
from .message import TOOL_KINDS

K1 = 1.2
B = 0.75  # measured: a lower b gains a point on short chat turns and loses 9 on long ones
BEFORE, AFTER = 0.5, 0.2  # the share a message takes of the message before it, and of the one after it
REPLY = 1.0  # the share it takes of the message before it when that one asks (ends in a question mark)
POOL = 1000  # candidates handed to a fuse hook
# past the first TAIL places (where a question's words run out of good matches) a deeper tier orders the
# rest (``tail``): first the turns up to REACH places around the ANCHORS best, then the next TAIL_POOL matches
# by their score and, TAIL_WORDS of it, their overlap with the question's words as typed (stop words too)
TAIL, ANCHORS, REACH, TAIL_POOL, TAIL_WORDS = 25, 5, 2, 100, 0.3
NEIGHBOUR_POOL = 2000  # the best matches whose neighbours are looked at (lending lifts no weak match to the top)
TOOL_HEAD, TOOL_TAIL = 2000, 1000
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")
_extras: dict[tuple, set[str]] = {}  # the terms of a speaker and a day (``document``), cached


def speaker(msg: dict) -> str | None:
    """Who a message says wrote it: ``meta.speaker``, ``meta.author`` or ``meta.name`` (the first string)."""
    meta = msg.get("meta")
    if isinstance(meta, dict):
        for key in ("speaker", "author", "name"):
            value = meta.get(key)
            if isinstance(value, str) and value.strip():
                return value
    return None


def date_words(date: str) -> str:
    """``2023-05-08T13:56:00+00:00`` → ``8 may 2023 monday`` (the date as written, in its own offset)."""
    try:
        year, month, day = int(date[0:4]), int(date[5:7]), int(date[8:10])
        import datetime

        weekday = datetime.date(year, month, day).weekday()
    except (ValueError, IndexError):
        return ""
    return f"{day} {_MONTHS[month - 1]} {year} {_WEEKDAYS[weekday]}"


def document(msg: dict) -> tuple[set[str], int]:
    """The distinct terms a message is indexed as, and its length in words. Tool traffic is ranked by the
    head and tail of its text (``TOOL_HEAD``, ``TOOL_TAIL`` characters: most of what tokenizing a log costs is
    long tool output; plain search still reads it whole)."""
    found, length = terms.bag(ranked_text(msg))
    date = msg.get("date")
    key = (speaker(msg), date[:10] if isinstance(date, str) else None)  # (all date_words reads)
    more = _extras.get(key)
    if more is None:
        if len(_extras) > 10_000:
            _extras.clear()
        extra = key[0] or ""
        if key[1] is not None:
            extra += " " + date_words(key[1])
        more = _extras[key] = terms.bag(extra)[0]
    found |= more  # (a set of its own: bag makes a new one)
    return found, length


def ranked_text(msg: dict) -> str:
    """The text a message is ranked by: all of it, but for long tool traffic its head and tail."""
    text = msg.get("text") or ""
    if msg.get("kind") in TOOL_KINDS and len(text) > TOOL_HEAD + TOOL_TAIL:
        text = text[:TOOL_HEAD] + "\n" + text[-TOOL_TAIL:]
    return text


def asks(msg: dict) -> bool:
    """Whether a message asks a question (its text ends with a question mark): the turn after it is likely
    its answer, so it lends that turn its whole score (``REPLY``)."""
    return (msg.get("text") or "").rstrip().endswith(("?", "\uff1f"))


def conversation(msg: dict) -> int:
    """A number naming the conversation a message belongs to (its ``meta.session``), for neighbour
    context: neighbours in different conversations do not lend each other scores."""
    meta = msg.get("meta")
    session = meta.get("session") if isinstance(meta, dict) else None
    if session is None:
        return 0
    import zlib

    return zlib.crc32(str(session).encode()) or 1


class Source(Protocol):
    """Where the ranker reads: ``size()`` (documents, their total length in words), ``postings(terms)``
    (``{term: (how many documents hold it, ids of those to score)}``: a source may leave out documents a
    term adds little to), ``lengths(ids)`` (``{i: length}``), ``turns(ids)`` (``{i: (conversation,
    whether it asks)}``, for the ids that exist and may be shown), ``texts(ids)`` (``{i: text}``, the text a
    message is ranked by; a source without texts may give none), ``counts(terms)`` (``{term: how many
    documents hold it}``, for ``collection``)."""

    def size(self) -> tuple[int, int]: ...
    def counts(self, wanted: list[str]) -> dict[str, int]: ...
    def postings(self, wanted: list[str]) -> dict[str, tuple[int, list[int]]]: ...
    def lengths(self, ids: list[int]) -> dict[int, int]: ...
    def turns(self, ids: list[int]) -> dict[int, tuple[int, bool]]: ...
    def texts(self, ids: list[int]) -> dict[int, str]: ...


def query_words(query: str) -> list[str]:
    """Every term ``rank`` may read the postings of for ``query`` (its terms and its first-person words)."""
    return list(dict.fromkeys(terms.query_terms(query) + terms.first_person(query)))


def collection(sources: Iterable[Source], query: str) -> tuple[tuple[int, int], dict[str, int]]:
    """The size of the collection that ``sources`` make together and how many of its documents hold each
    of ``query``'s terms (for ``Pooled``)."""
    wanted = query_words(query)
    docs = length = 0
    counts = dict.fromkeys(wanted, 0)
    for source in sources:
        size = source.size()
        docs, length = docs + size[0], length + size[1]
        for term, n in source.counts(wanted).items():
            counts[term] += n
    return (docs, length), counts


class Pooled:
    """A ``Source`` ranked as part of a larger collection: ``Pooled(source, size, counts)`` reads its
    documents from ``source`` and gives BM25 the collection's size and term counts (``collection``)."""

    def __init__(self, source: Source, size: tuple[int, int], counts: dict[str, int]):
        self.source, self._size, self._counts = source, size, counts

    def size(self) -> tuple[int, int]:
        return self._size

    def counts(self, wanted: list[str]) -> dict[str, int]:
        return {term: self._counts.get(term, 0) for term in wanted}

    def postings(self, wanted: list[str]) -> dict[str, tuple[int, list[int]]]:
        return {term: (self._counts.get(term, df), ids) for term, (df, ids) in self.source.postings(wanted).items()}

    def __getattr__(self, name: str):  # lengths, turns, texts, allows: the memory's own
        return getattr(self.source, name)


def bm25(source: Source, wanted: list[str], k1: float = K1, b: float = B) -> dict[int, float]:
    """BM25 of every document holding one of the ``wanted`` terms, a term counted once per document (as
    the index keeps it: measured as good as counting repeats)."""
    return bm25_apart(source, wanted, [], k1, b)[0]


def bm25_apart(source: Source, wanted: list[str], apart: list[str], k1: float = K1,
               b: float = B) -> tuple[dict[int, float], dict[int, float]]:
    """``bm25`` of the ``wanted`` terms, and apart from it that of the ``apart`` terms (one read of the
    postings of both)."""
    count, total = source.size()
    if not count or not wanted:
        return {}, {}
    average = total / count or 1.0
    postings = source.postings(wanted + [t for t in apart if t not in wanted])
    lists = [[postings[t] for t in group if postings.get(t, (0, []))[1]] for group in (wanted, apart)]
    lengths = source.lengths(sorted({i for group in lists for _, ids in group for i in ids}))
    factor = {i: (k1 + 1) / (1 + k1 * (1 - b + b * length / average)) for i, length in lengths.items()}
    out: tuple[dict[int, float], dict[int, float]] = ({}, {})
    for group, scores in zip(lists, out):
        for df, ids in group:
            idf = math.log(1 + (count - df + 0.5) / (df + 0.5))
            for i in ids:
                scores[i] = scores.get(i, 0.0) + idf * factor[i]
    return out


def with_neighbours(source: Source, scores: dict[int, float], before: float = BEFORE, after: float = AFTER,
                    among: Iterable[int] | None = None, reply: float | None = None) -> dict[int, float]:
    """Each document's score plus the larger of ``before`` times the score of the document just before it
    (``reply`` times it when that one asks a question; default ``before``) and ``after`` times the one just
    after it, in the same conversation (a question's words are often in the turn before its answer); for
    the documents ``among`` and their neighbours (default: all)."""
    if not (before or after or reply) or not scores:
        return dict(scores)
    reply = before if reply is None else reply
    around = sorted({j for i in (scores if among is None else among) for j in (i - 1, i, i + 1)})
    turns = source.turns(around)
    out: dict[int, float] = {}
    for i in around:
        if i not in turns:
            continue
        conv, previous, following = turns[i][0], turns.get(i - 1), turns.get(i + 1)
        lent = 0.0
        if previous and previous[0] == conv:
            lent = (reply if previous[1] else before) * scores.get(i - 1, 0.0)
        if following and following[0] == conv:
            lent = max(lent, after * scores.get(i + 1, 0.0))
        own = scores.get(i, 0.0)
        if own or lent:
            out[i] = own + lent
    return out


Fuse = Callable[[list[tuple[int, float]]], list[tuple[int, float]]]


def rank(source: Source, query: str, limit: int, *, widen: bool = True, keep: Callable[[int], bool] | None = None,
         fuse: Fuse | None = None, max_terms: int | None = None, k1: float = K1, b: float = B,
         before: float = BEFORE, after: float = AFTER, reply: float = REPLY) -> list[tuple[int, float]]:
    """The best ``limit`` documents for ``query`` as ``(i, score)``, best first (ties: the one holding the
    terms, then the newest).
    ``widen``: a neighbour of a match may rank on its neighbour's credit alone (otherwise only documents
    holding a term are candidates); ``keep(i)`` filters candidates before the cut; ``fuse`` (the semantic
    extra's hook) reorders the best ``POOL`` and may add its own; ``max_terms``: only the query's first terms.
    A question in the first person is about its asker's own turns: they score by its first-person words,
    and a question turn lends its reply no more than any turn does (``before``, not ``reply``)."""
    first_person = terms.first_person(query)
    own, personal = bm25_apart(source, terms.query_terms(query)[:max_terms], first_person, k1, b)
    best = own if len(own) <= NEIGHBOUR_POOL else heapq.nlargest(NEIGHBOUR_POOL, own, key=own.__getitem__)
    scores = {**own, **with_neighbours(source, own, before, after, among=best,
                                       reply=before if first_person else reply)}
    for i, score in personal.items():  # (not lent: they say who wrote a message, not what it is about)
        scores[i] = scores.get(i, 0.0) + score
    if not widen:
        scores = {i: score for i, score in scores.items() if i in own}
    ranked = sorted(scores.items(), key=lambda item: (-item[1], -own.get(item[0], 0.0), -item[0]))
    if keep is not None:
        ranked = [item for item in ranked if keep(item[0])]
    if fuse is not None:
        ranked = fuse(ranked[:max(POOL, limit)])
    if widen and limit > TAIL:
        ranked = tail(source, ranked, query, keep)
    return ranked[:limit]


def tail(source: Source, ranked: list[tuple[int, float]], query: str,
         keep: Callable[[int], bool] | None = None) -> list[tuple[int, float]]:
    """``ranked`` with a deeper tier past its first ``TAIL``, where the matches left hold a common word or
    two of the question: first the turns up to ``REACH`` places around the ``ANCHORS`` best, in the same
    conversation (the same speaker's turn before and after: a topic runs over several turns), then the next
    ``TAIL_POOL`` matches by their score relative to the last one kept, and ``TAIL_WORDS`` of it by their
    BM25 over the question's words as typed, stop words included, among themselves ("can you … some … for
    my" finds the request a question repeats), then every match after those, as ranked. Scores stay in
    order: the turns around the best take the last kept score, a match that score times its blend. What it
    reads is bounded: a few turns' rows and ``TAIL_POOL`` texts."""
    head, rest = ranked[:TAIL], ranked[TAIL:TAIL + TAIL_POOL]
    if len(head) < TAIL:
        return ranked
    last = head[-1][1]
    placed = {i for i, _ in head}
    anchors = [i for i, _ in head[:ANCHORS]]
    near = [(a, j) for a in anchors for d in range(1, REACH + 1) for j in (a - d, a + d) if j >= 0 and j not in placed]
    turns = source.turns(sorted({j for _, j in near} | set(anchors)))
    around = dict.fromkeys(j for a, j in near if a in turns and j in turns and turns[j][0] == turns[a][0]
                           and (keep is None or keep(j)))
    pool = [(i, score) for i, score in rest if i not in around]
    ids = [i for i, _ in pool]
    overlap = _word_bm25(source.texts(ids), source.lengths(ids), query)
    top = max(overlap.values(), default=0.0) or 1.0
    blend = {i: (1 - TAIL_WORDS) * min(score / last, 1.0) + TAIL_WORDS * overlap.get(i, 0.0) / top
             for i, score in pool} if last > 0 else {i: 0.0 for i, _ in pool}
    matched = sorted(pool, key=lambda item: -blend[item[0]])
    out = head + [(j, last) for j in around] + [(i, last * blend[i]) for i, _ in matched]
    floor = out[-1][1]  # the matches past the pool follow in their own order, their scores kept in order
    return out + [(i, min(score, floor)) for i, score in ranked[TAIL + TAIL_POOL:] if i not in around]


def _word_bm25(texts: dict[int, str], lengths: dict[int, int], query: str) -> dict[int, float]:
    """BM25 of each text (of ``lengths`` words) over the query's words (lowercase ``\\w+``, repeats
    counted), the collection being these texts."""
    import re
    from collections import Counter

    wanted = set(re.findall(r"\w+", terms.fold(query)))
    if not texts or not wanted:
        return {}
    words = re.compile(r"\b(?:" + "|".join(sorted(map(re.escape, wanted), key=len, reverse=True)) + r")\b")
    counts = {i: Counter(words.findall(terms.fold(text))) for i, text in texts.items()}
    average = sum(lengths.get(i, 0) for i in counts) / len(counts) or 1.0
    df = Counter(w for c in counts.values() for w in c if w in wanted)
    n = len(counts)
    out = {}
    for i, c in counts.items():
        norm = K1 * (1 - B + B * lengths.get(i, 0) / average)
        out[i] = sum(math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5)) * c[w] * (K1 + 1) / (c[w] + norm)
                     for w in wanted if w in c)
    return out


class Corpus:
    """A ``Source`` over documents held in memory: ``Corpus(documents, conversation numbers, whether each
    asks)`` where each document is ``(its distinct terms, its length)`` (``document``); document ``i`` is
    the ``i``-th. ``Corpus.of(messages)`` ranks messages as the index does."""

    @classmethod
    def of(cls, messages: list[dict], documents: Callable[[dict], tuple[set[str], int]] = document) -> "Corpus":
        return cls(map(documents, messages), map(conversation, messages), map(asks, messages),
                   map(ranked_text, messages))

    def __init__(self, documents: Iterable[tuple[Iterable[str], int]], conversations: Iterable[int] | None = None,
                 asking: Iterable[bool] | None = None, texts: Iterable[str] | None = None):
        self.index: dict[str, list[int]] = {}
        self.length: list[int] = []
        for i, (found, length) in enumerate(documents):
            self.length.append(length)
            for term in found:
                self.index.setdefault(term, []).append(i)
        self.conv = list(conversations) if conversations is not None else [0] * len(self.length)
        self.asks = list(asking) if asking is not None else [False] * len(self.length)
        self.text = list(texts) if texts is not None else []

    def size(self) -> tuple[int, int]:
        return len(self.length), sum(self.length)

    def postings(self, wanted: list[str]) -> dict[str, tuple[int, list[int]]]:
        return {term: (len(self.index.get(term, ())), self.index.get(term, [])) for term in wanted}

    def counts(self, wanted: list[str]) -> dict[str, int]:
        return {term: len(self.index.get(term, ())) for term in wanted}

    def lengths(self, ids: list[int]) -> dict[int, int]:
        return {i: self.length[i] for i in ids}

    def turns(self, ids: list[int]) -> dict[int, tuple[int, bool]]:
        return {i: (self.conv[i], self.asks[i]) for i in ids if 0 <= i < len(self.conv)}

    def texts(self, ids: list[int]) -> dict[int, str]:
        return {i: self.text[i] for i in ids if 0 <= i < len(self.text)}
