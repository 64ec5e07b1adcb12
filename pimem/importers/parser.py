"""What every transcript format shares: the ``Parser`` interface the import driver feeds line by line, and
the few conversions all of them need (content blocks to text, tool calls to one line, epoch dates, shell
commands, keys for lines without ids that stay put when other lines are added or removed).

A parser turns one decoded JSON line into zero or more input records ``{kind, text, date, meta}``; it
raises ``Malformed`` for a line it cannot read. Its ``state`` is a small JSON-able dict (session id, cwd,
tool names of calls still waiting for their result, …) that the driver saves with the file offset, so a
grown file is read on from where the last import stopped.
"""

from __future__ import annotations

import os
import shlex
from datetime import datetime, timezone
from typing import BinaryIO, Callable, Iterator

import orjson

from .. import hashes, when
from ..errors import BadInput

PENDING_CAP = 10_000  # tool names of unanswered calls / links of skipped entries kept in the saved state
NO_OUTPUT = "(no output)"  # an empty tool result still pairs with its call, and the log refuses empty text


class Malformed(Exception):
    """A line that cannot be read as this format; the driver reports it with file and line and skips it."""


class Parser:
    """One source file's reader. Subclasses set ``source`` and implement ``sniff`` and ``parse``."""

    source = ""

    def __init__(self, file: str, state: dict | None = None, earlier: Callable[[], dict] | None = None,
                 before: Callable[[], Iterator[bytes]] | None = None, held: Callable[[dict], bool] | None = None):
        self.file = file
        self.state: dict = state if state is not None else {}
        self.earlier = earlier  # the line counts of the part of the file read before (``line_counts``)
        self.before = before  # the lines of that part (``read_lines``), for a parser that must look back
        self.held = held  # does the memory hold a message with this record's key? (a hint, read without the lock)
        self.counted: dict | None = None  # line digest -> how often it occurred so far (once asked for)
        self.notes: list[str] = []  # what the driver should say about the line just parsed (and then clears)

    @staticmethod
    def sniff(obj: dict) -> bool:
        """Does this decoded line look like this format?"""
        raise NotImplementedError

    @staticmethod
    def describe(obj: dict) -> dict:
        """``{"date": …, "cwd": …}`` as far as this line tells them (for ordering files and naming memories)."""
        raise NotImplementedError

    def parse(self, line_no: int, raw: bytes, obj) -> list[dict]:
        """The input records of one decoded line; ``Malformed`` when the line cannot be read."""
        raise NotImplementedError

    # ---- shared pieces -----------------------------------------------------------------------------------

    def date(self, *candidates) -> str | None:
        """The first usable date among ``candidates`` (``own_date``), else the last date seen in this file,
        so an undated line sorts with its neighbours."""
        own = self.own_date(*candidates)
        if own is not None:
            self.state["date"] = own
        return own or self.state.get("date")

    def own_date(self, *candidates) -> str | None:
        """The first usable date among ``candidates`` (strings as written, epoch milliseconds converted). A string
        the log cannot store (a leap second, ``23:59:60``; an offset with seconds; no date at all) is none, said in
        a note when no other candidate is usable: the line's message is logged with the date of the line before,
        as an undated line's is, rather than skipped and lost."""
        refused = None
        for value in candidates:
            if isinstance(value, str) and value:
                try:
                    when.normalise(value)
                except BadInput as exc:
                    refused = refused or str(exc)
                    continue
                return value
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                try:
                    return ms_date(value)
                except (OverflowError, OSError, ValueError):  # (past the year 9999)
                    refused = refused or f"bad date {value!r}: epoch milliseconds past the range of dates (years 1 to 9999)"
        if refused is not None:
            self.notes.append(f"{refused}; taken as no date: the line before's date stands")
        return None

    def meta(self, **fields) -> dict:
        """The meta every message of this file carries (source, session, cwd, file) plus ``fields``;
        absent values (None, False) are dropped, except ``parent`` (None marks a root) and ``is_error`` (a
        harness's flag that a tool ended well, False, is worth keeping)."""
        out = {"source": self.source}
        for key in ("session", "cwd"):
            if self.state.get(key):
                out[key] = self.state[key]
        for key, value in fields.items():
            if value is not None and (value is not False or key == "is_error") or key == "parent":
                out[key] = value
        out["file"] = self.file
        return out

    def line_entry(self, raw: bytes) -> str:
        """A line's ``entry`` in a format without ids: a hash of its bytes, and for the n-th repeat of the
        very same line in this file, ``.n`` after it. So the entry does not move when other lines are added
        or removed, and a message written twice stays two messages."""
        digest = line_digest(raw)
        if self.counted is None:  # (a file read on from an earlier import: count the lines read then)
            self.counted = self.earlier() if self.earlier is not None else {}
        n = self.counted.get(digest, 0)
        self.counted[digest] = n + 1
        return digest if n == 0 else f"{digest}.{n}"

    def remember_call(self, call_id, name) -> None:
        """Note a tool call's name so its result (which often lacks it) can be labelled."""
        if ident(call_id) and name:
            bounded_put(self.state.setdefault("calls", {}), call_id, name)

    def called(self, call_id) -> str | None:
        return self.state.get("calls", {}).pop(call_id, None) if ident(call_id) else None


def ident(value) -> str | None:
    """A tool call's id as a line gives it: a string, or none (a list, an object or a number is no id: it could
    key no table, nor the import state saved as JSON)."""
    return value if isinstance(value, str) and value else None


def bounded_put(table: dict, key, value, cap: int = PENDING_CAP) -> None:
    table[key] = value
    while len(table) > cap:
        del table[next(iter(table))]


def line_digest(raw: bytes) -> str:
    return hashes.blake2b(raw.strip(), digest_size=6).hexdigest()


def line_counts(f: BinaryIO, stop: int) -> dict:
    """How often each line (by ``line_digest``) occurs in the first ``stop`` bytes of open file ``f``
    (which ends a line there): what ``Parser.line_entry`` counted when that part was read."""
    counts: dict = {}
    for line in read_lines(f, stop):
        if line.strip():
            digest = line_digest(line)
            counts[digest] = counts.get(digest, 0) + 1
    return counts


def read_lines(f: BinaryIO, stop: int, chunk: int = 1024 * 1024) -> Iterator[bytes]:
    """The lines (without their newlines, blank ones too) of the first ``stop`` bytes of open file ``f``,
    read without moving its position."""
    at, pending = 0, b""
    while at < stop:
        data = os.pread(f.fileno(), min(chunk, stop - at), at)
        if not data:
            break
        at += len(data)
        *whole, pending = (pending + data).split(b"\n")
        yield from whole
    if pending:
        yield pending


def ms_date(ms: float) -> str:
    moment = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def blocks_text(content, text_types=("text",)) -> str:
    """Text of a content field: a string as is, or a list of blocks where text blocks give their text,
    images give ``[image]``, and thinking (and anything else unreadable) is dropped."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return ""
    parts = []
    for block in content:
        if isinstance(block, str):
            parts.append(block)
        elif isinstance(block, dict):
            kind = block.get("type")
            if kind in text_types and isinstance(block.get("text"), str):
                parts.append(block["text"])
            elif isinstance(kind, str) and "image" in kind:
                parts.append("[image]")
    return "\n".join(p for p in parts if p)


def call_text(name, arguments) -> str:
    """A tool call as one readable line: ``name(arguments)``, arguments as compact JSON (or as given when
    they already are a string)."""
    if not isinstance(arguments, str):
        arguments = orjson.dumps(arguments).decode() if arguments is not None else ""
    return f"{name or 'tool'}({arguments})"


def shell_command(arguments) -> str | None:
    """The shell command in a tool call's arguments (``command`` or ``cmd``, a string or an argv list)."""
    if isinstance(arguments, str):
        try:
            arguments = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    command = arguments.get("command", arguments.get("cmd"))
    if isinstance(command, list) and all(isinstance(c, str) for c in command):
        return shlex.join(command)
    return command if isinstance(command, str) and command else None


def record(kind: str, text: str, date, meta: dict) -> dict:
    out = {"kind": kind, "text": text, "meta": meta}
    if date:
        out["date"] = date
    return out
