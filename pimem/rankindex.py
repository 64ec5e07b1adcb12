"""The ranker's tables in ``index.sqlite`` (owned by ``pimem.index``, which creates, fills and reads them
through this module): each message's distinct terms (``pimem.ranker.document``) and length.

- ``words_talk`` and ``words_tools``: FTS5 tables over the terms, one space-separated string per message,
  contentless and ``detail=none`` (postings only: which messages hold a term); the ``ascii`` tokenizer with
  ``. _ / : -`` as word characters splits exactly at the spaces (pimem already cut, folded and stemmed the
  terms; non-ASCII characters are word characters to it);
- ``word_docs``: ``i → (length in words, conversation, whether it asks a question)`` for BM25's length
  normalisation and neighbour context;
- ``word_stats``: per table, how many messages and words, kept up to date in the same transactions (so
  the collection statistics cost one row, not a scan).

Like the trigram tables they are split by parity between ``index.sqlite`` (even ``i``) and
``index-1.sqlite`` (odd ``i``), built by the same two writer threads in the same transactions, and read in
both. ``Postings`` is the ranker's ``Source`` over them: a query reads the postings of its own terms and
the rows of the messages those name, nothing per message of the memory.
"""

from __future__ import annotations

from typing import Callable

import orjson

from . import ranker

TOKENIZE = "ascii tokenchars '._/:-'"
SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS {schema}.words_talk USING fts5(
    terms, tokenize="{tokenize}", content='', detail=none, columnsize=0);
CREATE VIRTUAL TABLE IF NOT EXISTS {schema}.words_tools USING fts5(
    terms, tokenize="{tokenize}", content='', detail=none, columnsize=0);
CREATE TABLE IF NOT EXISTS {schema}.word_docs (
    i INTEGER PRIMARY KEY, length INTEGER NOT NULL, conv INTEGER NOT NULL, tbl INTEGER NOT NULL,
    asks INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS {schema}.word_stats (tbl TEXT PRIMARY KEY, docs INTEGER NOT NULL, length INTEGER NOT NULL);
""".replace("{tokenize}", TOKENIZE)
WORD_TABLES = {"talk": "words_talk", "tools": "words_tools"}
TABLE_CODE = {"talk": 0, "tools": 1}
# a query reads its terms rarest first; once their postings name this many messages, each commoner term
# only adds to the scores of the messages already named (its postings from the oldest of them on, at most
# SCAN_POSTINGS, are intersected with them), and a term naming more than this many is read for its newest
FULL_POSTINGS = 2_000
SCAN_POSTINGS = 100_000


def schema(name: str) -> str:
    return SCHEMA.replace("{schema}", name)


class Pending:
    """One file's share of a batch: each table's ``(i, terms)`` and the ``word_docs`` rows."""

    def __init__(self) -> None:
        self.terms: dict[str, list] = {table: [] for table in WORD_TABLES}
        self.length = dict.fromkeys(WORD_TABLES, 0)
        self.docs: list[tuple[int, int, int, int, int]] = []

    def add(self, i: int, table: str, msg: dict) -> None:
        found, length = ranker.document(msg)
        self.terms[table].append((i, " ".join(found)))
        self.length[table] += length
        self.docs.append((i, length, ranker.conversation(msg), TABLE_CODE[table], int(ranker.asks(msg))))

    def write(self, db) -> None:
        """Insert the batch (inside the writer's transaction)."""
        if self.docs:  # (one statement, as the texts are: see index.py on executemany and the GIL)
            db.execute("INSERT INTO word_docs SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4 "
                       "FROM json_each(?)",
                       (orjson.dumps(self.docs).decode(),))
        for table, rows in self.terms.items():
            if not rows:
                continue
            db.execute(f"INSERT INTO {WORD_TABLES[table]} (rowid, terms) SELECT value ->> 0, value ->> 1 "
                       "FROM json_each(?)", (orjson.dumps(rows).decode(),))
            db.execute("INSERT INTO word_stats VALUES (?, ?, ?) ON CONFLICT (tbl) DO UPDATE SET "
                       "docs = docs + excluded.docs, length = length + excluded.length", (table, len(rows), self.length[table]))


class Postings:
    """The ranker's ``Source`` over the index: ``Postings(db, tables, schemas, where, pool, texts)``;
    ``where`` is an optional SQL condition on ``msgs m`` (kinds, dates, ``before``) with its parameters,
    applied to the postings so that only messages a search may show are candidates; ``texts(ids)`` reads
    messages' texts from the log (for the ranker's deeper tier)."""

    def __init__(self, db, tables: list[str], schemas: tuple[str, ...], where: tuple[str, list] | None = None,
                 pool: int | None = None, texts: Callable[[list[int]], dict[int, str]] | None = None):
        self.db, self.tables, self.schemas, self.where, self.pool = db, tables, schemas, where, pool
        self._texts = texts

    def size(self) -> tuple[int, int]:
        names = ",".join(f"'{t}'" for t in self.tables)
        docs = length = 0
        for schema in self.schemas:
            row = self.db.execute(f"SELECT coalesce(sum(docs), 0), coalesce(sum(length), 0) FROM {schema}.word_stats "
                                  f"WHERE tbl IN ({names})").fetchone()
            docs, length = docs + row[0], length + row[1]
        return docs, length

    def postings(self, wanted: list[str]) -> dict[str, tuple[int, list[int]]]:
        """Rarest term first: whole postings (the newest ``FULL_POSTINGS``) until they name that many
        messages; then, for each commoner term, only the messages already named that hold it (read from
        its postings from the oldest of those on, at most ``SCAN_POSTINGS`` of them). With a ``pool``, a
        bounded read for readers that must stay cheap: each term's newest ``pool`` at most, and whole
        postings only until they name that many."""
        full = self.pool or FULL_POSTINGS
        df = {term: self._df(term) for term in wanted}
        out: dict[str, tuple[int, list[int]]] = {}
        named: set[int] = set()
        for term in sorted((t for t in wanted if df[t]), key=df.get):
            if len(named) < full:
                ids = self._match(f'"{term}"', full)
                named.update(ids)
            else:
                low = min(named)
                ids = [i for i in self._match(f'"{term}"', SCAN_POSTINGS, low) if i in named]
            out[term] = (df[term], ids)
        return out

    def counts(self, wanted: list[str]) -> dict[str, int]:
        return {term: self._df(term) for term in wanted}

    def _df(self, term: str) -> int:
        total = 0
        for schema in self.schemas:
            for table in self.tables:
                vocab = f"{schema}_{WORD_TABLES[table]}_vocab"
                self.db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{vocab} USING fts5vocab({schema}, "
                                f"{WORD_TABLES[table]}, row)")
                row = self.db.execute(f"SELECT doc FROM temp.{vocab} WHERE term = ?", (term,)).fetchone()
                total += row[0] if row else 0
        return total

    def _match(self, expr: str, limit: int | None, low: int | None = None) -> list[int]:
        """The messages matching ``expr`` (from ``low`` on), newest first, at most ``limit``."""
        parts = []
        for schema in self.schemas:
            for table in self.tables:
                fts = WORD_TABLES[table]
                if self.where is None:
                    parts.append(f"SELECT rowid FROM {schema}.{fts} WHERE {fts} MATCH ?" + (" AND rowid >= ?" if low is not None else ""))
                else:
                    parts.append(f"SELECT f.rowid FROM {schema}.{fts} f JOIN main.msgs m ON m.i = f.rowid "
                                 f"WHERE f.{fts} MATCH ? AND {self.where[0]}" + (" AND f.rowid >= ?" if low is not None else ""))
        extra = (self.where[1] if self.where is not None else []) + ([low] if low is not None else [])
        sql = " UNION ALL ".join(parts) + (f" ORDER BY 1 DESC LIMIT {limit}" if limit else "")
        return [row[0] for row in self.db.execute(sql, [p for _ in parts for p in (expr, *extra)])]

    def _rows(self, ids: list[int], columns: str, where: str = "") -> dict:
        out: dict = {}
        for start in range(0, len(ids), 30_000):
            chunk = ",".join(map(str, ids[start : start + 30_000]))
            for schema in self.schemas:
                out.update((row[0], row[1] if len(row) == 2 else row[1:]) for row in self.db.execute(
                    f"SELECT i, {columns} FROM {schema}.word_docs WHERE i IN ({chunk}){where}"))
        return out

    def lengths(self, ids: list[int]) -> dict[int, int]:
        return self._rows(ids, "length")

    def turns(self, ids: list[int]) -> dict[int, tuple[int, bool]]:
        """Only messages a search may show count as neighbours (tool traffic lends nothing to a search that
        leaves it out)."""
        codes = ",".join(str(TABLE_CODE[t]) for t in self.tables)
        turns = self._rows(ids, "conv, asks", f" AND tbl IN ({codes})")
        if self.where is None:
            return turns
        shown = self._shown(list(turns))
        return {i: turn for i, turn in turns.items() if i in shown}

    def texts(self, ids: list[int]) -> dict[int, str]:
        """The texts of messages ``ids`` (read from the log by the index's ``texts``; none without it)."""
        return self._texts(ids) if self._texts is not None and ids else {}

    def allows(self, i: int) -> bool:
        """Whether message ``i`` may be a candidate (for a fuse hook adding candidates of its own)."""
        return i in self._shown([i])

    def _shown(self, ids: list[int]) -> set[int]:
        from .index import KIND_CODE, table_of

        codes = [code for kind, code in KIND_CODE.items() if table_of(kind) in self.tables]
        where, params = f"kind IN ({','.join(map(str, codes))})", []
        if self.where is not None:
            where, params = self.where
        out: set[int] = set()
        for start in range(0, len(ids), 30_000):
            chunk = ",".join(map(str, ids[start : start + 30_000]))
            out.update(i for (i,) in self.db.execute(f"SELECT m.i FROM main.msgs m WHERE m.i IN ({chunk}) AND {where}", params))
        return out
