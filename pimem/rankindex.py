"""The ranker's tables in ``index.sqlite`` (owned by ``pimem.index``, which creates, fills and reads them
through this module): each message's distinct terms (``pimem.ranker.document``) and length.

- ``words_talk`` and ``words_tools``: FTS5 tables over the terms, one space-separated string per message,
  contentless and ``detail=none`` (postings only: which messages hold a term); the ``ascii`` tokenizer with
  ``. _ / : -`` as word characters splits exactly at the spaces (pimem already cut, folded and stemmed the
  terms; non-ASCII characters are word characters to it);
- ``word_docs``: ``i → (length in words, conversation)`` for BM25's length normalisation and neighbour
  context;
- ``word_stats``: per table, how many messages and words, kept up to date in the same transactions (so
  the collection statistics cost one row, not a scan).

Like the trigram tables they are split by parity between ``index.sqlite`` (even ``i``) and
``index-1.sqlite`` (odd ``i``), built by the same two writer threads in the same transactions, and read in
both. ``Postings`` is the ranker's ``Source`` over them: a query reads the postings of its own terms and
the rows of the messages those name, nothing per message of the memory.
"""

from __future__ import annotations

import orjson

from . import ranker

TOKENIZE = "ascii tokenchars '._/:-'"
SCHEMA = """
CREATE VIRTUAL TABLE IF NOT EXISTS {schema}.words_talk USING fts5(
    terms, tokenize="{tokenize}", content='', detail=none, columnsize=0);
CREATE VIRTUAL TABLE IF NOT EXISTS {schema}.words_tools USING fts5(
    terms, tokenize="{tokenize}", content='', detail=none, columnsize=0);
CREATE TABLE IF NOT EXISTS {schema}.word_docs (i INTEGER PRIMARY KEY, length INTEGER NOT NULL, conv INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS {schema}.word_stats (tbl TEXT PRIMARY KEY, docs INTEGER NOT NULL, length INTEGER NOT NULL);
""".replace("{tokenize}", TOKENIZE)
WORD_TABLES = {"talk": "words_talk", "tools": "words_tools"}


def schema(name: str) -> str:
    return SCHEMA.replace("{schema}", name)


class Pending:
    """One file's share of a batch: each table's ``(i, terms)`` and the ``word_docs`` rows."""

    def __init__(self) -> None:
        self.terms: dict[str, list] = {table: [] for table in WORD_TABLES}
        self.length = dict.fromkeys(WORD_TABLES, 0)
        self.docs: list[tuple[int, int, int]] = []

    def add(self, i: int, table: str, msg: dict) -> None:
        found, length = ranker.document(msg)
        self.terms[table].append((i, " ".join(found)))
        self.length[table] += length
        self.docs.append((i, length, ranker.conversation(msg)))

    def write(self, db) -> None:
        """Insert the batch (inside the writer's transaction)."""
        if self.docs:  # (one statement, as the texts are: see index.py on executemany and the GIL)
            db.execute("INSERT INTO word_docs SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?)",
                       (orjson.dumps(self.docs).decode(),))
        for table, rows in self.terms.items():
            if not rows:
                continue
            db.execute(f"INSERT INTO {WORD_TABLES[table]} (rowid, terms) SELECT value ->> 0, value ->> 1 "
                       "FROM json_each(?)", (orjson.dumps(rows).decode(),))
            db.execute("INSERT INTO word_stats VALUES (?, ?, ?) ON CONFLICT (tbl) DO UPDATE SET "
                       "docs = docs + excluded.docs, length = length + excluded.length", (table, len(rows), self.length[table]))


class Postings:
    """The ranker's ``Source`` over the index: ``Postings(db, tables, schemas, where)``; ``where`` is an
    optional SQL condition on ``msgs m`` (kinds, dates, ``before``) with its parameters, applied to the
    postings so that only messages a search may show are candidates."""

    def __init__(self, db, tables: list[str], schemas: tuple[str, ...], where: tuple[str, list] | None = None):
        self.db, self.tables, self.schemas, self.where = db, tables, schemas, where

    def size(self) -> tuple[int, int]:
        names = ",".join(f"'{t}'" for t in self.tables)
        docs = length = 0
        for schema in self.schemas:
            row = self.db.execute(f"SELECT coalesce(sum(docs), 0), coalesce(sum(length), 0) FROM {schema}.word_stats "
                                  f"WHERE tbl IN ({names})").fetchone()
            docs, length = docs + row[0], length + row[1]
        return docs, length

    def postings(self, wanted: list[str]) -> dict[str, list[int]]:
        parts = []
        for schema in self.schemas:
            for table in self.tables:
                fts = WORD_TABLES[table]
                if self.where is None:
                    parts.append(f"SELECT rowid FROM {schema}.{fts} WHERE {fts} MATCH ?")
                else:
                    parts.append(f"SELECT f.rowid FROM {schema}.{fts} f JOIN main.msgs m ON m.i = f.rowid "
                                 f"WHERE f.{fts} MATCH ? AND {self.where[0]}")
        sql = " UNION ALL ".join(parts)
        extra = self.where[1] if self.where is not None else []
        out = {}
        for term in wanted:
            expr = '"' + term + '"'
            out[term] = [row[0] for row in self.db.execute(sql, [p for _ in parts for p in (expr, *extra)])]
        return out

    def _rows(self, ids: list[int], column: str) -> dict[int, int]:
        out: dict[int, int] = {}
        for start in range(0, len(ids), 30_000):
            chunk = ",".join(map(str, ids[start : start + 30_000]))
            for schema in self.schemas:
                out.update(self.db.execute(f"SELECT i, {column} FROM {schema}.word_docs WHERE i IN ({chunk})"))
        return out

    def lengths(self, ids: list[int]) -> dict[int, int]:
        return self._rows(ids, "length")

    def conversations(self, ids: list[int]) -> dict[int, int]:
        """Only messages in the searched tables count as neighbours (tool traffic lends nothing to a search
        that leaves it out)."""
        conv = self._rows(ids, "conv")
        if len(self.tables) == len(WORD_TABLES) and self.where is None:
            return conv
        shown = self._shown(list(conv))
        return {i: c for i, c in conv.items() if i in shown}

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
