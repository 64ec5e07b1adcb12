"""The summary tree (DESIGN.md §2): node arithmetic, labels ``id+n``, free nodes and the tree files.

Node ``(l, i)`` covers messages ``[i·2^l, (i+1)·2^l)`` in one line of at most ``line_bytes`` (512) UTF-8 bytes.
Two kinds of node need no model call and are never written anywhere, because they can always be derived:

- a **free leaf**: a message whose ``"kind: text"`` fits in a line is its own leaf, verbatim (its ``size`` is
  already in the log, so telling free from not-free costs nothing);
- a **free merge**: two built children whose texts joined by a newline fit in a line.

Writing them out would copy most of the log a second time (most messages are short), so only the nodes a
compactor writes are stored, in ``tree/YYYY-MM-DD.jsonl`` (by build day), one JSON object a line, each node
written once. Lookups go through derived tables the index keeps (``pimem.index.TreeNodes``), caught up from the
tree files by byte offset, so no step reads the whole tree. Nodes that end past the end of the log are ignored.
"""

from __future__ import annotations

import functools
import os
import re
import stat
from pathlib import Path
from typing import Callable, Iterator

import orjson

from . import env
from .config import LINE_BYTES
from .errors import BadInput, NotFound
from .numbers import MAX_I
from .home import append_durably, ensure_dir
from .nofollow import check_dir, kind, not_a_dir, not_a_file, open_binary, planted, read_bytes

LEAF_CHUNK = 256  # messages read at once when a node's text needs its leaves
FREE_SPAN = 64  # a node over this many messages is looked up before its leaves are joined (it is seldom free)
PLACEHOLDER = "(not summarized yet: zoom it)"
UNBUILT_MERGE = "(not summarized yet: zoom it for its two halves)"
NODE_KEYS = ("l", "i", "text", "size")
_LABEL = re.compile(r"([0-9]{1,19})\+([0-9]{1,19})")  # ASCII digits, no spaces: ids are typed and compared
# a view line is one physical line that cannot steer the terminal or the reader: every control character (an
# ESC from a transcript would recolour or clear the screen) and every line or paragraph separator (U+0085,
# U+2028, U+2029 end a line for many readers) is white space, one space a byte, so a line shows what its size
# counted
_FLAT = {c: " " * len(chr(c).encode()) for c in (*range(32), 127, *range(0x80, 0xA0), 0x2028, 0x2029)}
# a terminal's escape sequence (colours, a title, a cursor move; an 8-bit CSI too)
ANSI = re.compile(r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|[@-Z\\-_])|\x9b[0-?]*[ -/]*[@-~]")
# what a view line leaves out: escape sequences (``flat`` makes their ESC a space, and ``[31m`` stayed in the
# text), the bidirectional embeddings, overrides and isolates, which reorder what follows them (U+202E shows
# ``invoice\u202eexe.pdf`` as ``invoicefdp.exe``), and the invisible format characters that are no part of a word:
# the soft hyphen, the zero-width space, the word joiner and invisible operators, the byte order mark and tags, but
# a flag's. The direction marks (U+200E, U+200F, U+061C) stay: right-to-left writers put them in to place a number
# or a mark, and none reorders what follows it as an override does
_INVISIBLE = "\u00ad\u180e\u200b\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff"
_UNSEEN = f"[{_INVISIBLE}]|(\U0001f3f4[\U000e0020-\U000e007e]{{1,8}}\U000e007f)|[\U000e0000-\U000e007f]"


@functools.cache
def _hidden() -> tuple[re.Pattern, re.Pattern, re.Pattern]:
    """What ``plain`` looks for: what a view line leaves out, a quick look for any of it (``hiding``), and the
    invisible format characters alone (a line for a person shows an escape sequence, as ``cat -v`` does).
    Compiled when a text first holds an ESC or a non-ASCII character (~1 ms a start-up otherwise)."""
    hidden = re.compile(f"{ANSI.pattern}|{_UNSEEN}")
    hiding = re.compile(f"[\x1b\x9b{_INVISIBLE}\U000e0000-\U000e007f]")
    return hidden, hiding, re.compile(_UNSEEN)


# ---- arithmetic and labels ---------------------------------------------------------------------------------


def label(l: int, i: int) -> str:
    """``id+n`` for node ``(l, i)``: ``id = i·2^l``, ``n = 2^l``; e.g. (3, 5) is ``40+8``."""
    return f"{i << l}+{1 << l}"


# what a call was billed, kept on its node (``tokens_cached``, ``tokens_written``: of ``tokens_in``, read from and
# written to the provider's prompt cache; the last only where it bills writes, and only when there were some)
PAID = ("tokens_in", "tokens_out", "tokens_cached", "tokens_written", "cost")


def recorded(node: dict, key: str):
    """What a stored node's build metadata says of ``key`` (one of ``PAID``) as it counts: a whole number of
    tokens, a finite cost, from 0; anything else (metadata a caller of ``write_nodes`` made up, a hand edit)
    counts as none, 0, and ``fsck`` says so."""
    value = node.get(key)
    return value if type(value) in ((int, float) if key == "cost" else (int,)) and 0 <= value < float("inf") else 0


def unrecorded(node: dict) -> list[str]:
    """What of ``node``'s build metadata does not count (``recorded``; a ``suspect`` that is no list), said as
    ``cost "0.5" is no number from 0``."""
    def said(key: str) -> str:
        return f"{key} {orjson.dumps(node[key]).decode()[:40]}"

    wrong = [f"{said(key)} is no {'number' if key == 'cost' else 'whole number'} from 0"
             for key in PAID
             if node.get(key) is not None and recorded(node, key) is not node.get(key)]
    if node.get("suspect") is not None and not isinstance(node["suspect"], list):
        wrong.append(f"{said('suspect')} is no list")
    return wrong


def span(l: int, i: int) -> tuple[int, int]:
    """The messages ``[start, end)`` node ``(l, i)`` covers."""
    return i << l, (i + 1) << l


def parse_label(text: str, count: int | None = None) -> tuple[int, int]:
    """``(l, i)`` for a label ``id+n``. Malformed, not a power of two or misaligned → ``BadInput`` (exit 2);
    past the end of a log of ``count`` messages → ``NotFound`` (exit 3)."""
    match = _LABEL.fullmatch(text) if isinstance(text, str) else None
    if not match:
        raise BadInput(f"malformed node id {text!r}: expected ID+N such as 0+1 or 40+8")
    start, n = int(match[1]), int(match[2])
    if start + n - 1 > MAX_I:  # (no message can have such a number: a usage error, as a message number is)
        raise BadInput(f"bad node id {text}: it covers messages past {MAX_I}, the last number a message can have")
    if n == 0 or n & (n - 1):
        raise BadInput(f"bad node id {text}: N must be a power of two (1, 2, 4, 8, …), not {n}")
    if start % n:
        raise BadInput(
            f"misaligned node id {text}: ID must be a multiple of N ({n}); the {n}-message spans around it are "
            f"{start // n * n}+{n} and {start // n * n + n}+{n}"
        )
    if count is not None and start + n > count:
        have = f"messages 0…{count - 1}" if count else "no messages"
        raise NotFound(f"node {text} is out of range: it covers messages {start}…{start + n - 1}, the memory has {have}")
    return n.bit_length() - 1, start // n


def plain(text: str, escapes: bool = False) -> str:
    """``text`` without what a view line leaves out (``_hidden``); with ``escapes``, without only the invisible
    format characters (``output.flatten`` shows the escape sequences). ``text`` itself when it holds none."""
    if not ("\x1b" in text and not escapes if text.isascii() else _hidden()[1].search(text)):
        return text
    hidden, _, unseen = _hidden()
    out = (unseen if escapes else hidden).sub(lambda m: m.group(1) or "", text)
    return text if out == text else out


# the days a summary line of the offline compactor opens with, then ": " (``8 May 2023``, ``8, 25 May 2023``,
# ``30 December 2026, 2 January 2027``, ``8 May..2 July 2023``; in a memory in Chinese ``2023-05-08`` or
# ``2023-05-08..2023-05-25``); patterns compiled on first use (``re``'s cache), kept off a turn's start-up
_MONTH = "(?:January|February|March|April|May|June|July|August|September|October|November|December)"
_DAY = rf"[0-9]{{1,2}}(?: {_MONTH}(?: [0-9]{{1,4}})?)?"
_LAST_DAY = rf"[0-9]{{1,2}} {_MONTH} [0-9]{{1,4}}"
_ISO_DAY = "[0-9]{4}-[0-9]{2}-[0-9]{2}"
_HEADING = rf"(?:(?:{_DAY}, )*{_LAST_DAY}|{_DAY}\.\.{_LAST_DAY}|{_ISO_DAY}(?:\.\.{_ISO_DAY})?): "
_CHINESE = "[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]"
_KANA_HANGUL = "[\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\uac00-\ud7af]"


def days_once(text: str) -> str:
    """``text`` with each date heading said once: a free merge joins its children's lines by a newline, and each
    summary line opens with its span's days (``21 November 2025: ``), so a line joining four spans of one day
    said the day four times. A part (a line of ``text``) opening with the heading in force (the last one a part
    opened with) is joined to what precedes it without it, when that opened with it too or was joined so (after a
    part without a heading, a hidden part's, it is said again: joined, it would read as that part's), as the
    compactor joins a line's parts: by ``; `` (after Chinese ``；``, in the place of a ``。`` before a Chinese
    part), nothing after ``！？；``, a space after ``.!?``. A part opening with other days keeps them: they say where
    the day changes. ``text`` itself when no heading repeats
    (the stored text stays as written: the tool-text mask lays its parts out from it)."""
    if "\n" not in text or ": " not in text:
        return text
    parts = text.split("\n")
    found = re.match(_HEADING, parts[0])
    day = found and found[0]
    out, dropped, under = [parts[0]], False, bool(found)
    for part in parts[1:]:
        found = re.match(_HEADING, part)
        if found is None or found[0] != day or not under:  # (after a part without a heading, it is said again)
            day = found[0] if found else day
            out.append("\n" + part)
            under = bool(found)
            continue
        before = out[-1].rstrip()
        last = before[-1:] or " "
        chinese = re.search(_CHINESE, before) and not re.search(_KANA_HANGUL, before)
        rest = part[found.end():]
        if last == "。" and chinese and re.search(_CHINESE, rest):  # (a speaker's part ending in 。 ends with the
            # ； before the next Chinese one)
            before, joint = before[:-1], "；"
        elif last in "。！？；":
            joint = ""
        elif last in ".!?":
            joint = " "
        else:
            joint = "；" if chinese else "; "
        out[-1] = before + joint
        out.append(rest)
        dropped = True
    return "".join(out) if dropped else text


def shown_text(text: str) -> str:
    """What a view line shows of ``text``: ``plain(text)``, each date heading said once (``days_once``);
    ``text`` itself when that is all of it, so a caller can tell a line whose size changed."""
    return days_once(plain(text))


def flat(text: str) -> str:
    """One physical line, inert on a terminal (``_FLAT``), of as many bytes as ``shown_text(text)``."""
    return shown_text(text).translate(_FLAT)


_INERT = {c: r for c, r in _FLAT.items() if c not in (9, 10)}


def inert(text: str) -> str:
    """``text`` under ``flat``'s rule but for its newlines and tabs (a CR LF is one newline), its date headings
    as written (a message's text, not a joined line): lines that cannot steer a terminal."""
    return plain(text.replace("\r\n", "\n")).translate(_INERT)


def leaf_text(msg: dict) -> str:
    return f"{msg['kind']}: {msg['text']}"


def byte_size(text: str) -> int:
    return len(text.encode("utf-8"))


def free_leaf(msg: dict, line_bytes: int = LINE_BYTES) -> str | None:
    """A message's leaf when it is free (``"kind: text"`` fits in a line), else None."""
    return leaf_text(msg) if msg["size"] <= line_bytes else None


def free_merge(left: str, right: str, line_bytes: int = LINE_BYTES) -> str | None:
    """Two child lines joined by a newline when that fits in a line, else None."""
    joined = f"{left}\n{right}"
    return joined if byte_size(joined) <= line_bytes else None


def context_end(l: int, i: int) -> int:
    """The compactor's ``<chat>`` boundary for building node ``(l, i)``: lines must end at or before it
    (exclusive message bound): a leaf sees only what precedes its message, a merge everything up to its
    last message."""
    return i if l == 0 else (i + 1) << l


# ---- the stored tree ---------------------------------------------------------------------------------------


class Tree:
    """The built nodes of one memory: stored ones (tree files, indexed in ``index.sqlite``) and free ones.

    ``count`` returns T (the log's length) and ``messages(start, stop)`` reads the log; both come from the
    owning ``Memory``. Writers hold the memory's writer lock; readers only read.
    """

    def __init__(self, path: Path, count: Callable[[], int], messages: Callable[[int, int], Iterator[dict]],
                 line_bytes: int = LINE_BYTES):
        self.dir = path / "tree"
        self.root = path  # (the memory's directory, where the index keeps the lookup tables)
        self.count = count
        self.messages = messages
        self.line_bytes = line_bytes
        self._nodes = None
        self._seen: dict[str, int] | None = None  # tree file -> bytes indexed, as of the last catch-up

    # ---- the derived table ---------------------------------------------------------------------------

    @property
    def nodes(self):
        """The lookup tables of stored nodes in ``index.sqlite`` (``pimem.index.TreeNodes``)."""
        if self._nodes is None:
            from .index import TreeNodes

            self._nodes = TreeNodes(self.root)
        return self._nodes

    def close(self) -> None:
        if self._nodes is not None:
            self._nodes.close()
            self._nodes = None

    def file_sizes(self) -> dict[str, int]:
        """Bytes in each tree file now (a directory listing and a stat per build day; no reading)."""
        if (there := kind(self.dir)) != "dir":
            if there == "file":  # (a pipe or a file where the directory goes: not taken for no tree)
                raise not_a_dir(self.dir)
            return {}
        out = {}
        for entry in os.scandir(self.dir):
            if entry.name.endswith(".jsonl") and not entry.name.startswith("."):
                if entry.is_symlink():  # (known from the listing: no extra system call)
                    raise planted(entry.path)
                st = entry.stat(follow_symlinks=False)
                if not stat.S_ISREG(st.st_mode):  # (a pipe's size, 0, would say its nodes were lost)
                    raise not_a_file(entry.path, st.st_mode)
                out[entry.name] = st.st_size
        return out

    def catch_up(self) -> list[tuple[int, int, str]]:
        """Index tree lines written since the last catch-up (by any process); returns the new nodes."""
        sizes = self.file_sizes()
        if (self._seen is not None and sizes == self._seen) or not sizes:
            self._seen = sizes
            return []  # nothing new (and a memory without a tree never needs the table)
        nodes = self.nodes
        seen = nodes.files()
        if any(sizes.get(name, -1) < done for name, done in seen.items()):
            sizes = self.file_sizes()  # another process or thread may have caught up since we looked
        if any(sizes.get(name, -1) < done for name, done in seen.items()):  # files replaced: start over
            nodes.clear()
            seen = {}
        new: list[tuple[int, int, str]] = []
        for name in sorted(sizes):
            start = seen.get(name, 0)
            if sizes[name] <= start:
                continue
            with open_binary(self.dir / name) as f:
                f.seek(start)
                data = f.read(sizes[name] - start)
            end = data.rfind(b"\n") + 1  # a torn last line waits for its newline
            for raw in data[:end].splitlines():
                node = _parse_node(raw)
                if node is not None:
                    new.append(node)
            seen[name] = start + end
        if new or seen != nodes.files():
            nodes.add([(l, i, text, byte_size(text)) for l, i, text in new], seen, self.line_bytes)
        self._seen = sizes
        return new

    def stored(self, l: int, i: int, count: int | None = None) -> str | None:
        """The text of a node a compactor wrote, or None (also for nodes past the end of the log, and for one
        over ``line_bytes``: built before it was lowered, it is built again). The table is caught up on first
        use; long-lived callers call ``catch_up()`` to see other writers."""
        if (i + 1) << l > (self.count() if count is None else count):
            return None
        if self._seen is None:
            self.catch_up()
        if not self._seen:
            return None  # no tree files at all: nothing was ever stored
        return self.nodes.text(l, i, self.line_bytes)

    def stored_among(self, keys: list[tuple[int, int]], count: int) -> set[tuple[int, int]]:
        """Which of the nodes ``keys`` ``(l, i)`` a compactor wrote, of those within a log of ``count``
        messages: ``stored`` for a whole batch, in one query."""
        within = [(l, i) for l, i in keys if l < 64 and (i + 1) << l <= count]  # (no node of 2^64 messages fits)
        if self._seen is None:
            self.catch_up()
        if not self._seen or not within:
            return set()
        return self.nodes.among(within, self.line_bytes)

    # ---- any node ------------------------------------------------------------------------------------

    def text(self, l: int, i: int, count: int | None = None, leaves: dict[int, dict] | None = None) -> str | None:
        """The text of node ``(l, i)`` if it is built (free or stored), else None. ``leaves`` is a cache of
        messages by ``i`` that the caller may keep between calls (the log is read in aligned chunks)."""
        count = self.count() if count is None else count
        if (i + 1) << l > count:
            return None
        return self._text(l, i, count, {} if leaves is None else leaves)

    def _text(self, l: int, i: int, count: int, leaves: dict[int, dict]) -> str | None:
        if l == 0:
            msg = self._leaf(i, count, leaves)
            if msg["size"] <= self.line_bytes:
                return leaf_text(msg)
            return self.stored(0, i, count)
        first, end = span(l, i)
        if 1 << l <= FREE_SPAN and first in leaves:  # leaves at hand that fit in a line: free (never stored)
            size, msgs = -1, []
            for k in range(first, end):
                msgs.append(self._leaf(k, count, leaves))
                size += msgs[-1]["size"] + 1
                if size > self.line_bytes:
                    break
            else:
                return "\n".join(map(leaf_text, msgs))
        stored = self.stored(l, i, count)
        if stored is not None:
            return stored
        left = self._text(l - 1, 2 * i, count, leaves)
        right = self._text(l - 1, 2 * i + 1, count, leaves) if left is not None else None
        if left is None or right is None:
            return None
        return free_merge(left, right, self.line_bytes)

    def named(self, l: int, i: int, text: str, count: int | None = None, leaves: dict[int, dict] | None = None) -> int:
        """The bytes readers may add to node ``(l, i)``'s line ``text`` for the speakers' names
        (``message.name_bytes``) of the verbatim leaves it is or joins, at most the room left in the line; 0 for
        a line a compactor wrote. The view counts them in its budgets (``View``), as it counts them one join at
        a time: a free join's are its children's added, at most its room (and a child's room is never less
        than its parent's, so that is the sum over its verbatim leaves, at most its room)."""
        room = self.line_bytes - byte_size(text)
        if room <= 0:
            return 0
        count = self.count() if count is None else count
        return min(room, self._names(l, i, text, count, {} if leaves is None else leaves))

    def _names(self, l: int, i: int, text: str, count: int, leaves: dict[int, dict]) -> int:
        """What names add to the verbatim leaves node ``(l, i)``'s line ``text`` joins (``named``), uncapped:
        only the joins are followed down (a line a compactor wrote is no join: it has no newline, or is not
        its halves' lines joined), so a summary over many messages reads none of them."""
        from .message import name_bytes

        if l == 0:
            msg = self._leaf(i, count, leaves)
            return name_bytes(msg) if msg["size"] <= self.line_bytes else 0
        if "\n" not in text:
            return 0
        if 1 << l <= FREE_SPAN:
            first, end = span(l, i)
            msgs = [self._leaf(k, count, leaves) for k in range(first, end)]
            names = [name_bytes(m) if m["size"] <= self.line_bytes else 0 for m in msgs]
            if not any(names):
                return 0
            if sum(m["size"] for m in msgs) + len(msgs) - 1 <= self.line_bytes:  # (its leaves all fit: their join)
                return sum(names)
        left = self._text(l - 1, 2 * i, count, leaves)
        right = self._text(l - 1, 2 * i + 1, count, leaves) if left is not None else None
        if right is None or len(text) != len(left) + len(right) + 1 or text != f"{left}\n{right}":
            return 0  # (a line a compactor wrote)
        return self._names(l - 1, 2 * i, left, count, leaves) + self._names(l - 1, 2 * i + 1, right, count, leaves)

    def _leaf(self, i: int, count: int, leaves: dict[int, dict]) -> dict:
        """Message ``i`` from ``leaves``, which is filled from the log a chunk at a time."""
        msg = leaves.get(i)
        if msg is None:
            start = i & ~(LEAF_CHUNK - 1)
            if len(leaves) > 16 * LEAF_CHUNK:
                leaves.clear()
            leaves.update((m["i"], m) for m in self.messages(start, min(count, start + LEAF_CHUNK)))
            msg = leaves[i]
        return msg

    # ---- writing (caller holds the writer lock and has validated) -----------------------------------

    def append(self, l: int, i: int, text: str, meta: dict | None = None) -> None:
        """Write one node line (fsync'd) to today's tree file and index it."""
        self.append_many([(l, i, text, meta)])

    def append_many(self, nodes: list[tuple[int, int, str, dict | None]]) -> None:
        """Write node lines ``(l, i, text, meta)`` to today's tree file with one fsync, and index them. When
        the table held every line of the files before and the file grew by exactly these lines (nobody else
        wrote, no torn line was ended), they are indexed as given, else read back (``catch_up``)."""
        data = b"".join(orjson.dumps({"l": l, "i": i, "text": text, "size": byte_size(text), **(meta or {})}) + b"\n"
                        for l, i, text, meta in nodes)
        ensure_dir(self.dir)
        name = f"{env.now().strftime('%Y-%m-%d')}.jsonl"
        before = self.file_sizes()
        in_step = self.nodes.files() == before
        append_durably(self.dir / name, data)
        after = self.file_sizes()
        if in_step and after == {**before, name: before.get(name, 0) + len(data)}:
            self.nodes.add([(l, i, text, byte_size(text)) for l, i, text, _ in nodes], after, self.line_bytes)
            self._seen = after
        else:
            self.catch_up()

    def records(self, having: bytes = b"") -> Iterator[dict]:
        """Every node line of the tree files as written, with its build metadata (model, tokens, cost),
        oldest build day first; damaged lines are skipped, and so are those without the bytes ``having``."""
        if not check_dir(self.dir):
            return
        for name in sorted(self.file_sizes()):
            for raw in read_bytes(self.dir / name).splitlines():
                if having not in raw:
                    continue
                try:
                    node = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    continue
                if isinstance(node, dict):
                    yield node

    def stored_keys(self, count: int | None = None) -> set[tuple[int, int]]:
        """``(l, i)`` of every node a compactor wrote that lies within the log (one query, for a scheduler
        starting up)."""
        count = self.count() if count is None else count
        self.catch_up()
        if not self._seen:
            return set()
        return {(l, i) for l, i in self.nodes.keys(self.line_bytes) if (i + 1) << l <= count}


def _parse_node(raw: bytes) -> tuple[int, int, str] | None:
    try:
        node = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if type(node) is not dict:
        return None
    l, i, text = node.get("l"), node.get("i"), node.get("text")
    if type(l) is not int or type(i) is not int or type(text) is not str or l < 0 or i < 0:
        return None
    return l, i, text

