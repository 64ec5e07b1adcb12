"""One memory's view files: ``view.json`` (both views' shapes) and ``lines.json`` (the texts last shown).

``Views`` holds both views of a memory (``pimem.view.View``: the model's and the compactor's) and what
``view.json`` records: the shape only (one character per line for its level, ``_`` for an unbuilt leaf), the
byte totals, the batch flags and which pairs wait for an unbuilt parent. Texts are not saved: they are the
tree's, and are read back when a line is rendered or merged, so a save costs a byte per line, not the view's
128 KB. The file is written atomically after every change and restored exactly as saved (a restart never
refolds, so the bytes a model saw stay a stable cache prefix).

``ViewFile`` is the object a ``Memory`` holds (``mem.views``): it restores the views from ``view.json``, catches
them up with the tree files and then with the log, pushes what a writer just logged, saves, and gives
readers the lines to show. A message goes one way: log → tree → view file → output. The ``Memory`` that holds
it hands it the log (``store.Log``), the tree (``tree.Tree``), the writer lock and the settings, and is
never called back otherwise.
"""

from __future__ import annotations

import bisect
import contextlib
import os
import re
from pathlib import Path
from typing import Callable, Sequence

import orjson

from .tree import LINE_BYTES, PLACEHOLDER, byte_size, label, shown_text
from .view import (LEVELS, MARK_EVERY, NOTHING_HELD, STUCK_TRIES, UNBUILT, UNLOADED, Cost, Fetcher, Held, Named,
                   Resolver, Trace, View, held_back, line_bytes_cost, render_line, stand_in, waits_on)
from .nofollow import open_binary, read_bytes

VERSION = 2  # 2: its bytes count what readers add for the speakers' names (``View``); a file of version 1 is
# counted again once as it is read (``ViewFile._count_names``), its lines kept
PREFETCH_MESSAGES = 1 << 15  # at most this many messages are read at once for the texts of lines
READ_THROUGH = 256  # messages between two placeholders read through rather than bisected to (``tool_placeholders``)
PUSH_CHUNK = 4096  # leaves pushed into one view before the other takes them
FAILURES_FILE = "compactor.json"  # (``compactor.state``: what is failing, kept across runs)
AMORTISE_LINES = 8192  # past this many lines (both views) and twice the budget, saves are amortised
TEXTS = "lines.json"  # derived: the texts of the lines last shown, by label (deleting it loses nothing)
TEXTS_VERSION = 9  # 2: a long tool message's own line is hidden inside a joined line too; 3: a marker says
# what the tool ran or how it ended (``privacy.marker``); 4: briefly inside a joined line, the mask spares
# other messages' words a line joins, a count is at most 13 characters; 5: the mask folds case, width and
# normal form; 6: and reads a call's JSON escapes; 7: and leaves a terminal's colour codes out; 8: a verbatim
# leaf says its speaker (``[text, without tools, with them]``); 9: the mask keeps the white space at its run's ends
_readers_save = True  # a reader saves what it caught up or counted (``current``) and the texts it showed


@contextlib.contextmanager
def readers_writing_nothing():
    """Meanwhile, in this process, a reader leaves ``view.json`` and ``lines.json`` as they are, whatever it
    catches up or counts, and takes no writer lock to save them (the MCP server, which writes nothing; it may
    serve inside another program's process, which has them saved again once it ends); a writer saves them."""
    global _readers_save
    was, _readers_save = _readers_save, False
    try:
        yield
    finally:
        _readers_save = was


class Views:
    """Both views of one memory (the model's and the compactor's) and what ``view.json`` records."""

    def __init__(self, config: dict, resolve: Resolver, fetch: Fetcher | None = None, cost: Cost = line_bytes_cost,
                 prefetch: Callable[[list[tuple[int, int]]], None] | None = None,
                 stuck: Callable[[int, int], bool] | None = None, named: Named | None = None):
        line_bytes = int(config.get("line_bytes") or LINE_BYTES)
        self.view = View(int(config["view"]["hi"]), int(config["view"]["lo"]), resolve, fetch, cost, prefetch, stuck,
                         named, line_bytes)
        self.cview = View(int(config["cview"]["hi"]), int(config["cview"]["lo"]), resolve, fetch, cost, prefetch, stuck,
                          named, line_bytes)
        self.uncounted = False  # restored from a view.json whose bytes do not count the names (version 1)
        self.tree_seen: dict[str, int] = {}  # tree file -> bytes whose nodes the views know about
        self.unmarked = False  # restored from a view.json without marks (see ``View.to_json``)
        self.tree_reads = 0  # times the views caught up with the tree files
        self.saved_changes = 0  # changes (both views) as of the last save
        self.loaded: tuple | None = None  # view.json's identity when read or last written by us
        self.leaves: dict[int, dict] = {}  # messages read for the lines' texts, by i (readers may reuse them)
        # set when ``resolve`` builds exactly the free joins of this many bytes while no node is stored
        self.free_join_bytes: int | None = None

    @property
    def T(self) -> int:
        return self.view.T

    def both(self) -> tuple[View, View]:
        return self.view, self.cview

    @property
    def changes(self) -> int:
        return self.view.changes + self.cview.changes + self.tree_reads

    def saw_tree(self, sizes: dict[str, int]) -> None:
        """The views now know every node in the tree files up to these sizes (saved with them)."""
        if sizes != self.tree_seen:
            self.tree_seen = sizes
            self.tree_reads += 1

    @property
    def dirty(self) -> bool:
        return self.changes != self.saved_changes

    def should_save(self) -> bool:
        """After every change, unless the views are past twice their budget and long (a compactor is not
        keeping up, e.g. after a big import): saving the shape after every batch would then cost O(T) each
        time, so it is saved after as many changes as it has lines (O(1) amortised) and when the
        process ends; a reader catches up the rest from the log, with the same result."""
        if not self.dirty:
            return False
        lines = len(self.view.lines) + len(self.cview.lines)
        if lines <= AMORTISE_LINES or not (self.view.over() or self.cview.over()):
            return True
        return self.changes - self.saved_changes >= lines

    def push_leaves(self, sizes: Sequence[int], leaf_text: Callable[[int], str], line_bytes: int,
                    stored_leaf: Callable[[int], str | None] | None = None, names: dict[int, int] | None = None) -> None:
        """Append the leaves of the next messages, given by their ``size``, fitting after each one (as if they
        had arrived one by one, so the result does not depend on how messages were batched): a message whose
        line fits in ``line_bytes`` is its own leaf, verbatim (``leaf_text(k)``: the line of the ``k``-th); a
        longer one is ``stored_leaf(i)`` (None: unbuilt). Free leaves are pushed ``UNLOADED`` (their text is
        the log's) and their text is asked for only when a line needs it; while no node is stored
        (``free_join_bytes`` set, no tree seen) pairs are decided by size alone. ``names``: by ``k``, what the
        speaker's name of a message naming one adds to its verbatim leaf (``message.name_bytes``), counted in
        its cost up to the room left in its line. The two views never look at each other, so each takes a
        chunk of leaves in turn."""
        T, cost = self.T, self.view.cost
        inline = cost is line_bytes_cost
        free_bytes = self.free_join_bytes if inline and not self.tree_seen else None
        for done in range(0, len(sizes), PUSH_CHUNK):
            leaves = []
            add = leaves.append
            for i, size in enumerate(sizes[done:done + PUSH_CHUNK], T + done):
                if size <= line_bytes:
                    if inline:  # (line_bytes_cost, inlined: this runs once per message)
                        add((0, i, UNLOADED, len(str(i)) + 4 + size))
                    else:
                        text = leaf_text(i - T)
                        add((0, i, text, cost(0, i, text, size)))
                else:
                    text = None if stored_leaf is None else stored_leaf(i)
                    add((0, i, text, cost(0, i, text, None)))
            extras = None
            if names:
                extras = {}
                for k, extra in names.items():
                    if done <= k < done + PUSH_CHUNK and sizes[k] < line_bytes:
                        extras[T + k] = extra = min(extra, line_bytes - sizes[k])
                        l, i, text, cost_k = leaves[k - done]
                        leaves[k - done] = (l, i, text, cost_k + extra)

            def chunk_text(k: int, done: int = done) -> str:
                return leaf_text(done + k)

            trace = None
            if free_bytes is not None:  # the views mostly take the very same steps: the second copies them
                trace = Trace(self.view)
            self.view.push_many(leaves, chunk_text, free_bytes, trace, extras)
            if trace is None or not self.cview.replay(self.view, trace):
                self.cview.push_many(leaves, chunk_text, free_bytes, extras=extras)

    def built(self, nodes: list[tuple[int, int, str]]) -> None:
        for v in self.both():
            v.built_many(nodes)

    def to_bytes(self) -> bytes:
        body = {"T": self.T, "view": self.view.to_json(), "cview": self.cview.to_json(), "tree": self.tree_seen}
        return orjson.dumps({"version": VERSION, "check": checksum(body), "line_bytes": self.free_join_bytes, **body}) + b"\n"

    def load(self, raw: bytes, count: int) -> None:
        """Restore from ``view.json`` bytes; ``ValueError`` says why they cannot be used."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(data, dict) or type(data.get("version")) is not int or data["version"] not in (1, VERSION):
            raise ValueError("unknown format")
        folded = data.get("line_bytes") or LINE_BYTES  # (files from before it was recorded: the default)
        if self.free_join_bytes is not None and folded != self.free_join_bytes:
            # which lines are free (a span that fits its line, shown as it is) depends on it
            raise ValueError(f"it was folded with {folded}-byte lines, and line_bytes is now {self.free_join_bytes}")
        body = {k: data.get(k) for k in ("T", "view", "cview", "tree")}
        if data.get("check") != checksum(body):
            raise ValueError("its checksum does not match (damaged or edited)")
        self.view.load(data.get("view"))
        self.cview.load(data.get("cview"))
        if self.view.T != self.cview.T or data.get("T") != self.view.T:
            raise ValueError("the two views cover different messages")
        if self.view.T > count:
            raise Overreaching(self.view.T, count)
        tree = data.get("tree")
        if not isinstance(tree, dict) or not all(type(v) is int for v in tree.values()):
            raise ValueError("tree positions missing")
        self.tree_seen = tree
        self.saved_changes = self.changes
        self.unmarked = "marks" not in data["view"]  # (written by a pimem before the marks: rewrite it)
        self.uncounted = data["version"] == 1

    def check_tree(self, sizes: dict[str, int]) -> None:
        """Every line the view holds as built must still be built. The tree only grows (each node is written
        once, never removed), so that holds unless a tree file shrank or vanished since the save."""
        for name, size in self.tree_seen.items():
            if sizes.get(name, -1) < size:
                raise ValueError(f"tree/{name} lost nodes since the view was saved")


class Overreaching(ValueError):
    """view.json covers more messages than the log has: messages were lost from the log's end (a view is
    saved only once the messages it covers are logged)."""

    def __init__(self, covers: int, count: int):
        super().__init__(f"it covers {covers} messages but the log has {count}")
        self.covers = covers


def checksum(body: dict) -> int:
    """The check ``view.json`` saves of its body (``fsck`` compares it too): a CRC-32 of the body's sorted JSON."""
    import zlib

    return zlib.crc32(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))



def push_messages(views: Views, batch: Sequence[dict], line_bytes: int,
                  stored_leaf: Callable[[int], str | None] | None) -> None:
    """Push the leaves of the next messages (``kind``, ``text``, ``size``; a batch may carry its sizes as
    ``.sizes`` and build its messages only when asked)."""
    sizes = getattr(batch, "sizes", None)
    if sizes is None:
        sizes = [msg["size"] for msg in batch]
    names = getattr(batch, "names", None)
    if names is None:
        from .message import name_bytes

        names = {k: n for k, msg in enumerate(batch) if "meta" in msg and (n := name_bytes(msg))}

    def leaf_text(k: int) -> str:
        msg = batch[k]
        return f"{msg['kind']}: {msg['text']}"

    views.push_leaves(sizes, leaf_text, line_bytes, stored_leaf, names)


class SavedShape:
    """The model's view as ``view.json`` saved it, read only where it is asked about. ``Views.to_bytes`` writes
    the file in a fixed order (orjson keeps the keys' order): ``version``, ``check``, ``line_bytes`` (not in
    files of an older pimem), ``T``, then the view's
    shape (a character per line) directly followed by its marks (the first message of every ``MARK_EVERY``-th
    line). So the line covering a message is found by bisecting the marks and reading at most
    ``MARK_EVERY`` characters of the shape: the file is mapped, not parsed, and no view is built (at a
    million lines, what a search's ``held`` costs is its hits'). Anything unexpected reads as None, and the
    caller loads the view instead, which checks the whole file against its checksum and says what is
    wrong."""

    _HEAD = re.compile(rb'\{"version":(\d+),"check":\d+,(?:"line_bytes":(\d+),)?"T":(\d+),"view":\{"lines":"')
    _MARKS = b'","marks":['
    _BYTES = re.compile(rb',"bytes":(\d+),')

    def __init__(self, data, start: int, end: int, T: int, marks: list[int], tree: dict, line_bytes: int,
                 total: int = 0):
        self.data, self.start, self.end = data, start, end  # the shape is data[start:end]
        self.T, self.marks, self.tree, self.line_bytes = T, marks, tree, line_bytes
        self.total = total  # the view's bytes
        self._held: dict[int, tuple] = {}  # bound -> what held_back gives

    @classmethod
    def read(cls, path: Path) -> "SavedShape | None":
        import mmap

        try:
            with open_binary(path, 0) as f:  # (a named pipe there is refused, not waited on for ever)
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        except (OSError, ValueError):  # (an empty file cannot be mapped)
            return None
        head = cls._HEAD.match(data[:256])
        if head is None or int(head[1]) != VERSION:
            return None
        start = head.end()
        end = data.find(b'"', start)
        if end < 0 or data[end:end + len(cls._MARKS)] != cls._MARKS:
            return None  # (a file of an older pimem has no marks: the caller loads it)
        close = data.find(b"]", end)
        total = cls._BYTES.match(data, close + 1) if close >= 0 else None
        tree_at = data.rfind(b',"tree":')
        try:
            marks = orjson.loads(data[end + len(cls._MARKS) - 1:close + 1])
            tree = orjson.loads(data[tree_at + 8:len(data) - 2]) if data[-2:] == b"}\n" and tree_at > close else None
        except orjson.JSONDecodeError:
            return None
        lines = end - start
        if type(marks) is not list or len(marks) != -(-lines // MARK_EVERY) or (marks and marks[0] != 0) \
                or type(tree) is not dict or total is None:
            return None
        return cls(data, start, end, int(head[3]), marks, tree, int(head[2] or LINE_BYTES), int(total[1]))

    def covering(self, m: int) -> tuple[int, int, bool] | None:
        """The line covering message ``m`` (``0 <= m < T``) as ``(l, i, built)``, or None if the shape there
        does not tile the messages."""
        k = bisect.bisect_right(self.marks, m) - 1
        at, first = self.marks[k], self.start + k * MARK_EVERY
        for ch in self.data[first:min(first + MARK_EVERY, self.end)].decode("ascii", "replace"):
            l = 0 if ch == UNBUILT else LEVELS.find(ch)
            if l < 0 or at & ((1 << l) - 1):
                return None
            if m < at + (1 << l):
                return l, at >> l, ch != UNBUILT
            at += 1 << l
        return None

    def shown_line(self, m: int, bound: int) -> tuple[int, int, bool] | None:
        """The line a reader is shown for message ``m``, as ``covering`` gives it, once the view's oldest lines
        are held back (``view.held_back``) if it is past ``bound``."""
        if bound not in self._held:
            self._held[bound] = self.held_back(bound)
        stop, stand_in = self._held[bound]
        return stand_in(m) if m < stop else self.covering(m)

    def held_back(self, bound: int) -> tuple[int, Callable[[int], tuple[int, int, bool] | None]]:
        """The first message of the lines a reader is shown as they are (past ``bound``, the oldest are held
        back: ``view.held_back``), and what it is shown for a message before it (``shown_line``): worked out
        once per bound, so each of a search's thousands of hits costs a bisection."""
        if self.total <= bound:
            return 0, self.covering
        n = self.end - self.start
        # (the lines that may fit: none counts less than a placeholder's 34 bytes)
        tail = self.data[max(self.start, self.end - bound // 30 - 2):self.end].decode("ascii", "replace")
        levels = [0 if ch == UNBUILT else LEVELS.find(ch) for ch in reversed(tail)]
        if min(levels, default=0) < 0:
            return self.T, lambda m: None

        def line_at(l: int, i: int) -> bool | None:
            found = self.covering(i << l)
            return None if found is None or found[:2] != (l, i) else not found[2]

        j, shown_bare = held_back(zip(levels, (ch == UNBUILT for ch in reversed(tail))), n, self.T, bound,
                                  self.line_bytes, line_at)
        stop = self.T - sum(1 << l for l in levels[:n - j])  # (the first message of line j)

        def at(l: int, i: int) -> tuple[int, int, bool] | None:
            found = self.covering(i << l)
            if found is None or found[:2] != (l, i) or shown_bare:  # (a span no line is, or shown bare: not built)
                return (l, i, False) if found is not None else None
            return found

        return stop, stand_in(stop, at)


class ViewFile:
    """The views of one memory and their files. ``log`` is the memory's ``store.Log``, ``tree`` its
    ``tree.Tree``, ``lock(timeout=…)`` its writer lock (a context manager raising ``Busy``), ``config()`` its
    settings (the budgets and ``line_bytes``), ``holds`` what the tool-text mask asks of a long line's span
    (``Memory.span_holds``). The views last loaded or saved are kept, with ``view.json``'s
    identity then, so a process reads the file once."""

    def __init__(self, path: Path, log, tree, lock: Callable, config: Callable[[], dict],
                 holds: Callable[[int, int], Callable[[str, bool], bool]] | None = None):
        self.path = path / "view.json"
        self.texts_path = path / TEXTS
        self.log, self.tree, self.lock, self.config, self.holds = log, tree, lock, config, holds
        self.loaded: Views | None = None  # the views as last loaded or saved (``.loaded``: the file's identity)
        self._shape: tuple | None = None  # (view.json's identity, its SavedShape) as last read by ``held``
        self._batch: dict[tuple[int, int], str] = {}  # the nodes ``built`` is handing to the views, by (l, i)
        self._markers: dict[int, str] = {}  # placeholders' markers (``tool_placeholders``; "": not a tool message)
        # (view.json's stamp, the lines of each view counted, whether lines.json keeps them) of a view.json of
        # version 1 read (``_count_names``)
        self._counting: tuple | None = None
        self._failing: tuple[tuple, set[str]] | None = None  # (compactor.json's identity, ``failing()`` then)

    def close(self) -> None:
        """Let go of ``view.json``'s mapping (read again on next use)."""
        if self._shape is not None and self._shape[1] is not None:
            self._shape[1].data.close()
        self._shape = None

    @property
    def line_bytes(self) -> int:
        return int(self.config()["line_bytes"])

    def failing(self) -> set[str]:
        """The labels of the nodes the compactor failed ``STUCK_TRIES`` times in a row, from ``compactor.json``
        (``compactor.state``'s ``failures``; read again when the file changed)."""
        path = self.path.parent / FAILURES_FILE
        try:
            st = os.stat(path)
        except OSError:
            return set()
        identity = (st.st_ino, st.st_size, st.st_mtime_ns)
        if self._failing is None or self._failing[0] != identity:
            try:
                failures = orjson.loads(read_bytes(path)).get("failures")
            except (OSError, ValueError, AttributeError):
                failures = None
            found = {key for key, entry in failures.items() if isinstance(entry, dict)
                     and type(entry.get("tries")) is int and entry["tries"] >= STUCK_TRIES} if isinstance(failures, dict) else set()
            self._failing = (identity, found)
        return self._failing[1]

    def _stuck(self, l: int, i: int) -> bool:
        """Whether the pair at ``(l, i)`` waits on a node that keeps failing (its parent, or a leaf of its own):
        the batch then folds the rest around it rather than wait, past twice the budget, for what may never
        come (a provider refusing one message)."""
        failing = self.failing()
        return bool(failing) and any(label(*node) in failing for node in waits_on(l, i))

    # ---- loading and catching up ---------------------------------------------------------------------

    def make(self) -> Views:
        """Empty views wired to the tree: parents resolve to a free join or a stored node, texts are read back
        from the tree (and the log, for leaves) through one message cache."""
        tree, line_bytes, log = self.tree, self.line_bytes, self.log
        leaves: dict[int, dict] = {}
        holder: list[Views] = []

        def resolve(l: int, i: int, left: str, right: str) -> str | None:
            if len(left) + len(right) < line_bytes:  # (characters never outnumber bytes)
                joined = f"{left}\n{right}"
                if byte_size(joined) <= line_bytes:
                    return joined
            if not holder[0].tree_seen:
                return None
            text = self._batch.get((l + 1, i // 2))
            return tree.stored(l + 1, i // 2, holder[0].T) if text is None else text

        def fetch(l: int, i: int) -> str:
            text = tree.text(l, i, holder[0].T, leaves)
            if text is None:  # view.json may come from a writer that stored nodes after this tree last looked
                tree.catch_up()
                text = tree.text(l, i, holder[0].T, leaves)
            if text is None:
                raise ValueError(f"line {label(l, i)} is not built")
            return text

        def prefetch(nodes: list[tuple[int, int]]) -> None:
            """Lines of up to 64 messages may be free joins read from their leaves: read those leaves at once
            (in a view in budget they are the recent tail)."""
            small = [i << l for l, i in nodes if l <= 6]
            if small:
                start, stop = min(small), holder[0].T
                if stop - start <= PREFETCH_MESSAGES and any(k not in leaves for k in (start, stop - 1)):
                    leaves.update((m["i"], m) for m in log.read(start, stop))

        def named(l: int, i: int, text: str) -> int:
            return tree.named(l, i, text, holder[0].T, leaves)

        views = Views(self.config(), resolve, fetch, prefetch=prefetch, stuck=self._stuck, named=named)
        views.leaves = leaves
        views.free_join_bytes = line_bytes
        holder.append(views)
        return views

    def check(self) -> None:
        """Whether ``view.json`` restores as saved (``ValueError`` or ``OSError`` says why not)."""
        self.make().load(read_bytes(self.path), self.log.count())

    def current(self, upto: int | None = None, save: bool | None = None, create: bool = True) -> Views | None:
        """The views, caught up with the tree and with the log (to message ``upto``, default all).

        Restored from ``view.json`` as saved; refolded from the log only when the file is missing or invalid
        (the latter with a warning). ``save``: True for writers (they hold the lock), False for none, None to
        save only if the writer lock is free right now (readers never wait for it). ``create=False`` returns
        None when no view exists yet.
        """
        if save is None and not _readers_save:
            save = False
        path = self.path
        stamp = _stamp(path)
        count = self.log.count() if upto is None else upto  # (a writer passes the count it appended at)
        views = self.loaded
        if views is None or stamp is None or views.loaded != stamp:
            if stamp is None and not create:
                return None
            views, self._counting = self.make(), None
            if stamp is not None:
                sizes = self.tree.file_sizes()  # (a tree file that cannot be read is said as itself, not as the view)
                try:
                    try:
                        raw = read_bytes(path)
                        views.load(raw, count)
                    except Overreaching as exc:
                        count = self._not_lost(exc.covers, upto)
                        views = self.make()
                        views.load(raw, count)
                    views.check_tree(sizes)
                    if views.uncounted:
                        self._count_names(views, stamp)
                    views.loaded = stamp
                except FileNotFoundError:  # (gone since its stat: missing, as if never there; the memory may have moved)
                    views = self.make()
                except (ValueError, OSError) as exc:
                    from .output import warn

                    warn(f"{path} is unusable ({getattr(exc, 'strerror', None) or exc}); refolding the view from the log")
                    views = self.make()
                    views.loaded = stamp  # the file this refold replaces
            self.loaded = views
        self._catch_up(views, count)
        if save is not False and (views.should_save() or views.unmarked):
            if save:
                self.write(views)
            elif not self._write_if_free(views):
                self._keep_count(views)
        return views

    def _not_lost(self, covers: int, upto: int | None) -> int:
        """view.json covers ``covers`` messages, more than the log was found to hold: the log's count, counted
        again after view.json was read (a write since only adds to it), unless messages were lost from its
        end (``IntegrityError``, exit 5: a view refolded over what is left would forget them, and a writer
        would give their numbers to other messages; a last message that only lost its newline is not lost,
        and the view is refolded without it). ``upto``: a writer's count, under the writer lock."""
        count = self.log.count() if upto is None else upto
        if covers > count and not self.log.explaining \
                and covers > self.log.past_unsealed(count, [f.name for f in self.log.files()]):  # (else refolded)
            from .errors import IntegrityError
            from .store import lost_words

            name = self.log.dir.parent.name
            raise IntegrityError(f"{name}: {lost_words(count, covers - 1, [])} (view.json covers them); see 'pimem fsck {name}'")
        return count

    def _count_names(self, views: Views, stamp: tuple | None = None) -> None:
        """Count in a view.json of version 1, whose bytes do not, what readers add to its lines for the
        speakers' names (``View``), as if the view had always counted them: its lines stay as they were (a
        model's cached prefix), only its bytes grow, by what each line that is or joins verbatim leaves of
        messages naming their speaker adds (the next change folds it by them). The log is read once, to find
        those messages; a memory with none reads nothing more. ``stamp``: the file's, as read; a reader that
        could not save the view counted (the writer lock busy) kept which lines it counted in ``lines.json``
        (``_keep_count``), so that the next reader of that very file counts them without reading the log."""
        found = self._kept_count(stamp, views)
        kept = found is not None
        if found is None:
            from .message import name_bytes

            line_bytes = self.line_bytes
            named = [msg["i"] for msg in self.log.read(0, views.T)
                     if msg["size"] < line_bytes and "meta" in msg and name_bytes(msg)]
            found = [sorted({v.covering(i) for i in named}) for v in views.both()]
        self._counting = None if stamp is None else (list(stamp), found, kept)
        for v, lines in zip(views.both(), found):
            for j in lines:
                l, i, text, cost = v.lines[j]
                if text is not None and cost is None:
                    v.counted(j)
                    v.total += v.extras.get((l, i), 0)
        views.uncounted = False
        views.unmarked = True  # (saved again, counted)

    def _kept_count(self, stamp: tuple | None, views: Views) -> list[list[int]] | None:
        """The lines of each view a reader counted the names of in view.json of ``stamp`` (``_keep_count``),
        if ``lines.json`` holds them for that file (its inode, time and size: version 1 is never written
        again), else None."""
        if stamp is None:
            return None
        try:
            kept = orjson.loads(read_bytes(self.texts_path)).get("counted")
        except (OSError, orjson.JSONDecodeError, AttributeError):
            return None
        if type(kept) is not dict or kept.get("view.json") != list(stamp):
            return None
        found = kept.get("lines")
        if type(found) is not list or len(found) != 2 or not all(
                type(lines) is list and all(type(j) is int and 0 <= j < len(v.lines) for j in lines)
                for v, lines in zip(views.both(), found)):
            return None
        return found

    def _keep_count(self, views: Views) -> None:
        """Keep in ``lines.json`` which lines of view.json (of version 1) were counted (``_count_names``), where
        the view could not be saved counted (a reader finding the writer lock busy): the next reader counts
        them so, not reading the log again. Derived, as the rest of the file: lost, the next reader counts."""
        from .home import write_atomic

        counting = self._counting
        if counting is None or counting[2] or views.loaded is None or counting[0] != list(views.loaded):
            return  # (nothing counted in this file, or kept already)
        try:
            data = orjson.loads(read_bytes(self.texts_path))
        except (OSError, orjson.JSONDecodeError):
            data = {}
        if type(data) is not dict:
            data = {}
        stamp, found, _ = counting
        data["counted"] = {"view.json": stamp, "lines": found}
        try:
            write_atomic(self.texts_path, orjson.dumps(data), durable=False)
            self._counting = (stamp, found, True)
        except OSError:
            pass  # a reader without write access: the next one counts again

    def _catch_up(self, views: Views, upto: int) -> None:
        tree, line_bytes = self.tree, self.line_bytes
        for v in views.both():
            if v.total > v.hi and not v.shrinking:  # its budget was lowered in config.json since it was saved
                v.fit()
        sizes = tree.file_sizes()
        if sizes != views.tree_seen:
            tree.catch_up()
            views.saw_tree(sizes)
            for v in views.both():
                for l, i, text, _ in [ln for ln in v.lines if ln[2] is None]:
                    found = tree.stored(l, i, views.T)
                    if found is not None:
                        v.built(l, i, found)
                v.unblock_all()
                v.fit()
        while views.T < upto:
            batch = list(self.log.read(views.T, min(upto, views.T + PREFETCH_MESSAGES)))
            if not batch:
                break
            push_messages(views, batch, line_bytes, self._stored_leaf(views))

    def _stored_leaf(self, views: Views) -> Callable[[int], str | None] | None:
        """The summary a compactor stored for message i's leaf; None when no node is stored at all."""
        if not views.tree_seen:
            return None
        tree = self.tree
        return lambda i: tree.stored(0, i, i + 1)

    # ---- changes (the writer lock held) --------------------------------------------------------------

    def push(self, start: int, batch: Sequence[dict]) -> None:
        """After messages ``start…`` were logged: push their leaves and save."""
        views = self.current(upto=start, save=False)
        push_messages(views, batch, self.line_bytes, self._stored_leaf(views))
        self.save(views)

    def built(self, views: Views, nodes: list[tuple]) -> None:
        """The tree just stored ``nodes`` ``(l, i, text, …)``: fill their lines in ``views`` (as ``current``
        returned them before the nodes were written), run the batch and save."""
        # the views resolve parents through the tree only once they know its files: tell them first, or a
        # pair whose parent is in this very batch is taken for unbuilt and the batch waits for ever
        views.saw_tree(self.tree.file_sizes())
        self._batch = {(l, i): text for l, i, text, *_ in nodes}  # (the parents it unblocks, without a lookup)
        try:
            views.built([(l, i, text) for l, i, text, *_ in nodes])
        finally:
            self._batch = {}
        self.save(views)

    def save(self, views: Views) -> None:
        """Save after a change, or leave it to the end of the process if saves are amortised right now (see
        ``Views.should_save``)."""
        if views.should_save():
            self.write(views)
        elif views.dirty:
            _save_at_exit(self)

    def write(self, views: Views) -> None:
        """Save ``view.json`` atomically: a temporary file renamed over it. It is not fsync'd: it is derived
        and checksummed, so a crash can at worst leave the previous (or a damaged) file, which is caught up or
        refolded, and an append pays one fsync (its log line), not two."""
        from .home import write_atomic

        write_atomic(self.path, views.to_bytes(), durable=False)
        views.saved_changes, views.unmarked = views.changes, False
        views.loaded = _stamp(self.path)

    def _write_if_free(self, views: Views) -> bool:
        """Save if the writer lock is free right now and nobody wrote since we read (readers never wait); a
        memory that cannot be written is read as it is, its views made in memory, as is one whose ``view.json``
        cannot be saved (a directory in its place, a full disk): a reader does without the derived file."""
        from .errors import Busy

        if not os.access(self.path.parent, os.W_OK):
            return False
        try:
            with self.lock(timeout=0):
                if _stamp(self.path) == views.loaded and self.log.count() == views.T:
                    self.write(views)
                    return True
        except (Busy, OSError):
            pass
        return False

    def flush(self) -> None:
        """Save views left unsaved by the amortised rule, if nobody wrote since (at the end of the process)."""
        views = self.loaded
        if views is not None and views.dirty and _readers_save:
            self._write_if_free(views)

    def noted(self, first: int, notes: Sequence[dict]) -> None:
        """After notes took the numbers of messages ``first…`` lost from the log's end (``fsck --repair
        --accept-lost``; the writer lock held): the views as saved drop the lines of the lost messages and take
        the notes' leaves in their place, as if the notes had come instead, so the lines before stay as they
        were (the bytes a model has cached) and the budgets count the lines there are. A view with a line
        holding lost messages and earlier ones too is kept as saved (it cannot be cut there). ``lines.json``
        forgets what it kept of the lines over the lost messages (their texts were the lost messages')."""
        self._forget_texts(first)
        count = first + len(notes)
        views = self.make()
        try:
            views.load(read_bytes(self.path), count)
            views.check_tree(self.tree.file_sizes())
        except (ValueError, OSError):
            return  # (missing or unusable: folded afresh by the next reader, or as fsck says)
        cuts = [v.find_start(first) for v in views.both()]
        if min(cuts) < 0:
            return  # (also a view that ends before the loss: the next reader pushes the notes)
        if views.uncounted:
            self._count_names(views)
        for v in views.both():
            v.rows()  # (every text read while both views still cover the notes)
        for v, j in zip(views.both(), cuts):
            v.cut(j)
            v.total = sum(line[3] for line in v.lines)  # (the lines it dropped counted as they are now)
            v.shrinking = v.shrinking and v.total > v.lo
        push_messages(views, notes, self.line_bytes, self._stored_leaf(views))
        self.write(views)
        self.loaded = views

    def _forget_texts(self, first: int) -> None:
        """Take out of ``lines.json`` the texts of lines over messages ``first…`` and their markers."""
        from .home import write_atomic

        self._markers = {i: text for i, text in self._markers.items() if i < first}
        try:
            data = orjson.loads(read_bytes(self.texts_path))
        except (OSError, orjson.JSONDecodeError):
            return
        if type(data) is not dict:
            return

        def before(key: str) -> bool:
            start, _, n = key.partition("+")
            return start.isdigit() and n.isdigit() and int(start) + int(n) <= first

        lines, markers = data.get("lines"), data.get("markers")
        data["lines"] = {key: entry for key, entry in lines.items() if before(key)} if type(lines) is dict else {}
        data["markers"] = {key: text for key, text in markers.items() if key.isdigit() and int(key) < first} \
            if type(markers) is dict else {}
        try:
            write_atomic(self.texts_path, orjson.dumps(data), durable=False)
        except OSError:
            try:
                self.texts_path.unlink()  # (derived: read again)
            except OSError:
                pass

    # ---- reading -------------------------------------------------------------------------------------

    def shown(self, views: Views, include_tools: bool = False, compactor: bool = False,
              save: bool = True) -> list[tuple[int, int, str | None, int]]:
        """The lines a reader shows, as ``(l, i, text, cost)`` (text None for a placeholder): tool traffic
        taken out of the texts unless ``include_tools`` (see ``privacy``); the compactor's view cut at its
        first unbuilt line. A built line's text never changes (a node is written once, a free join is its
        children's), so the texts shown last time come from ``lines.json`` and a turn reads only the lines
        that are new since (``save=False``: a reader that must not write leaves the file as it is)."""
        v = views.cview if compactor else views.view
        line_bytes = self.line_bytes
        cached = self._load_texts(line_bytes)
        known = len(self._markers)
        held = NOTHING_HELD if compactor else self.held_back(views)
        back = held.lines
        markers = {} if include_tools or compactor else self.tool_placeholders(views, held)
        standing = [k for *_, k in v.spans(held) if k >= 0] if back else []  # (the view's own lines among them)
        v.fill({key: entry if type(entry) is str else entry[0] for key, entry in cached.items()},
               [*standing, *range(back, len(v.lines))])
        # (the costs the view counts are not needed: a line's is worked out from what it shows)
        rows = v.stand_ins(held, False) + v.rows(back, False) if back else v.rows(counted=False)
        if compactor:
            rows = rows[: next((k for k, row in enumerate(rows) if row[2] is None), len(rows))]
        labels = [label(l, i) for l, i, _, _ in rows]
        todo = [k for k, row in enumerate(rows) if row[2] is not None and labels[k] not in cached]
        hidden, kept, guessed = {}, {}, set()
        if todo:
            from .privacy import hide_tools

            def stored(i: int, l: int = 0) -> str | None:
                return self.tree.stored(l, i, views.T)

            asked: list[tuple[int, Callable]] = []  # (a line over a long span, what its mask asked)

            def holds(start: int, stop: int) -> Callable:
                asked.append((start, self.holds(start, stop)))
                return asked[-1][1]

            hidden = dict(zip(todo, hide_tools(self.log.read, [rows[k][:3] for k in todo], known=views.leaves,
                                               holds=holds if self.holds is not None else None, stored=stored,
                                               line_bytes=line_bytes)))
            # (a line its mask hid whole, the index not asked (``Memory.span_holds``): shown so this time only)
            guessed = {start for start, answers in asked if getattr(answers, "guessed", False)}
            changed = [k for k in todo if hidden[k] != rows[k][2]]  # (else the line names no speaker either)
            kept = dict(zip(changed, hide_tools(self.log.read, [rows[k][:3] for k in changed], known=views.leaves,
                                                stored=stored, line_bytes=line_bytes, hide=False)))
        out, keep = [], {}
        for k, (l, i, text, _) in enumerate(rows):
            if text is not None:
                entry = cached.get(labels[k])
                if entry is None:  # the line as logged; without tools; with them, its speakers said
                    entry = text if hidden[k] == text else [text, hidden[k]] if kept[k] == text else \
                        [text, hidden[k], kept[k]]
                if i << l not in guessed:
                    keep[labels[k]] = entry
                if type(entry) is not str and (not include_tools or len(entry) == 3):
                    text = entry[2] if include_tools else entry[1]
            elif l == 0 and markers.get(i):
                text = markers[i]
            said = text if text is None else shown_text(text)  # (without its colour codes, its days said once)
            out.append((l, i, text, line_bytes_cost(l, i, said, None)))  # (its cost: the bytes shown)
        if (todo or len(self._markers) > known) and save and _readers_save:
            self._save_texts(line_bytes, keep)
        return out

    def held_back(self, views: Views) -> Held:
        """What a reader holds back of the view's oldest lines and shows by the spans that tile them
        (``View.held_back``): nothing unless the view is past twice its budget (a tree behind a bulk arrival of
        messages)."""
        return views.view.held_back(2 * views.view.hi, self.line_bytes)

    def waiting(self, views: Views, include_tools: bool = False) -> list[tuple[int, int]]:
        """The placeholders a reader is shown (``placeholders``, but for the lines held back: ``held_back``),
        but for tool messages' without ``include_tools`` (``tool_placeholders``)."""
        held = self.held_back(views)
        found = views.view.placeholders(held.lines)
        hidden = {} if include_tools or not found else self.tool_placeholders(views, held)
        return [(l, i) for l, i in found if not (l == 0 and i in hidden)]

    def tool_placeholders(self, views: Views, held: Held = NOTHING_HELD) -> dict[int, str]:
        """The view's placeholders that stand for tool messages, by message i, as the marker a reader without
        tools sees in their place (``privacy.marker``): the summary would be shown as that marker all the same,
        so such a reader is neither told to zoom what zoom refuses it nor kept waiting for the summary. Each
        message is read once (``lines.json`` keeps the markers, as it keeps the lines' texts). ``held``: the
        oldest lines held back (``held_back``), whose placeholders are not shown but for those standing in."""
        v = views.view
        ids = [i for l, i in v.placeholders(held.lines) if l == 0]
        if held.lines:
            ids[:0] = [i for l, i, k in v.spans(held) if l == 0 and (k < 0 or v.lines[k][2] is None)]  # (k < 0: bare)
        todo = [i for i in ids if i not in self._markers]
        if todo:
            from .message import is_tool
            from .privacy import marker

            found = {i: views.leaves[i] for i in todo if i in views.leaves}
            runs: list[list[int]] = []  # (placeholders close together are read in one pass, not one by one)
            for i in todo:
                if i in found:
                    continue
                if runs and i - runs[-1][1] < READ_THROUGH:
                    runs[-1][1] = i + 1
                else:
                    runs.append([i, i + 1])
            for start, stop in runs:
                found.update((msg["i"], msg) for msg in self.log.read(start, stop))
            for i in todo:
                msg = found.get(i)
                # (no more bytes than the view counts for a placeholder: its budget holds as shown)
                self._markers[i] = marker(msg, most=len(PLACEHOLDER)) if msg is not None and is_tool(msg) else ""
        return {i: self._markers[i] for i in ids if self._markers[i]}

    def lines(self, compactor: bool = False, end: int | None = None, include_tools: bool = False) -> list[str]:
        """The rendered view, one ``id+n|text`` line each, tool traffic taken out unless ``include_tools``
        (see ``Memory.view_lines``)."""
        views = self.current()
        if not compactor and end is None:  # (the whole view: its texts through lines.json, as `pimem view` reads them)
            return [render_line(l, i, text) for l, i, text, _ in self.shown(views, include_tools=include_tools)]
        rows = (views.cview if compactor else views.view).texts(end, cut_unbuilt=compactor)
        if not include_tools:
            from .privacy import hide_tools

            def stored(i: int, l: int = 0) -> str | None:
                return self.tree.stored(l, i, views.T)

            texts = hide_tools(self.log.read, rows, known=views.leaves, holds=self.holds, stored=stored,
                               line_bytes=self.line_bytes)
            rows = [(l, i, text) for (l, i, _), text in zip(rows, texts)]
        return [render_line(l, i, text) for l, i, text in rows]

    def held(self, ids: list[int], size_of: Callable[[int], int], lines: bool = True) -> dict[int, dict | None]:
        """How the view holds each message (see ``Memory.held``); ``size_of(i)`` gives message i's ``size``;
        ``lines=False`` leaves out the rendered ``line`` (so no text is read). When ``view.json`` holds the
        view as it is now (it covers the whole log and knows every tree node), each message's line is read
        from its saved shape around the message (``SavedShape``): the cost is the hits', not the view's. Else
        the views are caught up, on the first call only (a reader asking about many hits pays for one look
        at the log)."""
        out: dict[int, dict | None] = dict.fromkeys(ids)
        found: dict[int, tuple[int, int, bool]] = {}
        views = self.loaded
        if views is None:
            shape = self._saved_shape()
            if shape is not None:
                bound = 2 * int(self.config()["view"]["hi"])
                found = {i: shape.shown_line(i, bound) for i in ids if 0 <= i < shape.T}
            if shape is None or None in found.values():
                views = self.current()
        if views is not None:
            shown = views.view.shown_for(self.held_back(views))
            found = {i: shown(i) for i in ids if 0 <= i < views.T}
        leaves: dict[int, dict] = {}
        for i, (l, idx, built) in found.items():
            if l:
                held = "inside"
            elif not built:
                held = "pending"
            else:
                held = "verbatim" if size_of(i) <= self.line_bytes else "summarized"
            out[i] = {"held": held, "label": label(l, idx), "n": 1 << l}
            if lines:
                if views is not None:
                    k = views.view.find(l, idx) if built else -1  # (a span shown bare is no line's)
                    text = views.view.text(k) if k >= 0 else None
                else:
                    text = self.tree.text(l, idx, None, leaves) if built else None
                out[i]["line"] = render_line(l, idx, text)
        return out

    def _saved_shape(self) -> "SavedShape | None":
        """``view.json``'s shape if it holds the view as it is now: it covers the whole log and knows every
        tree node (otherwise the views must first be caught up). Read once per version of the file."""
        stamp = _stamp(self.path)
        if stamp is None:
            return None
        if self._shape is None or self._shape[0] != stamp:
            self._shape = stamp, SavedShape.read(self.path)
        shape = self._shape[1]
        if shape is None or shape.T != self.log.count() or shape.tree != self.tree.file_sizes() \
                or shape.line_bytes != self.line_bytes:
            return None
        return shape

    # ---- lines.json ----------------------------------------------------------------------------------

    def _load_texts(self, line_bytes: int) -> dict:
        if self.log.edited:  # (the log changed behind pimem's back: a text kept may be one changed since)
            return {}
        try:
            data = orjson.loads(read_bytes(self.texts_path))
        except (OSError, orjson.JSONDecodeError):
            return {}
        if type(data) is not dict or data.get("version") != TEXTS_VERSION or data.get("line_bytes") != line_bytes:
            return {}
        lines = data.get("lines")
        if type(lines) is not dict:
            return {}
        markers = data.get("markers")
        if type(markers) is dict:  # (a message never changes: its marker is kept whatever the lines)
            for key, text in markers.items():
                # (one longer than a placeholder, an older pimem's, is worked out again)
                if type(text) is str and key.isascii() and key.isdigit() and len(text.encode()) <= len(PLACEHOLDER):
                    self._markers.setdefault(int(key), text)
        return {key: entry for key, entry in lines.items() if type(entry) is str or (
            type(entry) is list and len(entry) in (2, 3) and all(type(text) is str for text in entry))}

    def _shown_markers(self) -> dict[str, str]:
        """The markers of the placeholders the view still shows (those summarised since are left out)."""
        views = self.loaded
        ids = {i for l, i in views.view.placeholders() if l == 0} if views is not None else set()
        return {str(i): text for i, text in self._markers.items() if i in ids}

    def _save_texts(self, line_bytes: int, lines: dict) -> None:
        from .home import write_atomic

        try:
            counted = self._counting  # (kept while view.json is the version 1 file it counted)
            also = {"counted": {"view.json": counted[0], "lines": counted[1]}} \
                if counted is not None and counted[2] and self.loaded is not None and self.loaded.loaded == tuple(counted[0]) else {}
            write_atomic(self.texts_path, orjson.dumps({"version": TEXTS_VERSION, "line_bytes": line_bytes,
                                                        "lines": lines, "markers": self._shown_markers(), **also}),
                         durable=False)
        except OSError:
            pass  # a reader without write access: the next one reads the lines again


def _stamp(path) -> tuple | None:
    import os

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


_AT_EXIT: dict[int, ViewFile] = {}


def _save_at_exit(views: ViewFile) -> None:
    """Views left unsaved by the amortised rule are saved when the process ends, if nobody wrote since."""
    if not _AT_EXIT:
        import atexit

        atexit.register(_flush_all)
    _AT_EXIT[id(views)] = views


def _flush_all() -> None:
    for views in list(_AT_EXIT.values()):
        try:
            views.flush()
        except Exception:  # the next reader catches up from the log anyway
            pass
    _AT_EXIT.clear()
