"""The view and the compactor's view (DESIGN.md §2; reference: optchat-spec.md §2).

A view is a list of tree nodes tiling ``[0, T)``, oldest first, one rendered line ``id+n|text`` each. A new
message appends its leaf and nothing else changes, until the rendered view passes ``hi`` bytes; then one batch
merges adjacent sibling pairs until it is at or below ``lo`` (the sawtooth). The pair merged is the one with
the largest ``(T − last)/2^l`` (``last`` = the pair's final message), ties to the oldest. If that pair's parent
is not built yet the batch **waits** (the view may stay above ``hi``); only above ``2·hi`` does it fall back to
the best pair whose parent is built.

Cost per step: at one level the oldest pair is always the most due, so the best pair is found from one
candidate per level (O(levels)); pairs whose parent is known to be unbuilt are kept apart (``blocked``), so
waiting and the fall-back never rescan them. Nothing here reads the log or the tree: parents are resolved
through a callback (free join, else a stored-node lookup).

``Views`` holds both views of a memory and their file, ``view.json``, saved atomically after every change and
restored exactly as saved (a restart never refolds, so the bytes a model saw stay a stable cache prefix).
"""

from __future__ import annotations

import bisect
import sys
from typing import Callable, Iterable

import orjson

from .tree import PLACEHOLDER, byte_size, flat, label

VERSION = 1

# resolve(l, i, left_text, right_text) -> the parent's text if built, else None; (l, i) is the left child
Resolver = Callable[[int, int, "str | None", "str | None"], "str | None"]
# cost(l, i, text, size) -> the line's weight against the budgets; size is the text's bytes when known
Cost = Callable[[int, int, "str | None", "int | None"], int]


def line_bytes_cost(l: int, i: int, text: str | None, size: int | None) -> int:
    """Bytes of the rendered line ``id+n|text`` plus its newline."""
    head = len(label(l, i)) + 1
    if text is None:
        return head + len(PLACEHOLDER) + 1
    return head + (byte_size(text) if size is None else size) + 1


def render_line(l: int, i: int, text: str | None) -> str:
    return f"{label(l, i)}|{PLACEHOLDER if text is None else flat(text)}"


class View:
    """One view: lines ``[l, i, text, cost]`` (``text`` None for an unbuilt leaf) and the sawtooth state."""

    def __init__(self, hi: int, lo: int, resolve: Resolver, cost: Cost = line_bytes_cost):
        self.hi, self.lo = hi, lo
        self.resolve = resolve
        self.cost = cost
        self.lines: list[list] = []
        self.starts: list[int] = []  # start message of each line, for bisect
        self.total = 0
        self.shrinking = False
        self.T = 0
        self.ready: dict[int, list[int]] = {}  # level -> sorted left-child i of pairs whose parent may be built
        self.blocked: dict[int, list[int]] = {}  # level -> pairs whose parent is known to be unbuilt
        self.merges = 0  # merges done so far (for statistics and tests)

    # ---- shape -------------------------------------------------------------------------------------------

    def find(self, l: int, i: int) -> int:
        """The position of line ``(l, i)``, or -1."""
        j = bisect.bisect_left(self.starts, i << l)
        if j < len(self.lines) and self.lines[j][0] == l and self.lines[j][1] == i:
            return j
        return -1

    def covering(self, m: int) -> int:
        """The position of the line that covers message ``m`` (``0 <= m < T``)."""
        return bisect.bisect_right(self.starts, m) - 1

    def _add_pair(self, l: int, i: int) -> None:
        bisect.insort(self.ready.setdefault(l, []), i)

    def _drop_pair(self, l: int, i: int) -> None:
        for table in (self.ready, self.blocked):
            lst = table.get(l)
            if lst:
                k = bisect.bisect_left(lst, i)
                if k < len(lst) and lst[k] == i:
                    del lst[k]
                    return

    def _block(self, l: int, i: int) -> None:
        lst = self.ready[l]
        del lst[bisect.bisect_left(lst, i)]
        bisect.insort(self.blocked.setdefault(l, []), i)

    def _unblock(self, l: int, i: int) -> None:
        lst = self.blocked.get(l)
        if lst:
            k = bisect.bisect_left(lst, i)
            if k < len(lst) and lst[k] == i:
                del lst[k]
                self._add_pair(l, i)

    def unblock_all(self) -> None:
        """Forget what we knew about unbuilt parents (the tree changed behind our back)."""
        for l, lst in self.blocked.items():
            for i in lst:
                self._add_pair(l, i)
        self.blocked = {}

    def _set_lines(self, lines: list[list]) -> None:
        self.lines = lines
        self.starts = [ln[1] << ln[0] for ln in lines]
        self.total = sum(ln[3] for ln in lines)
        self.T = (lines[-1][1] + 1) << lines[-1][0] if lines else 0
        self.ready, self.blocked = {}, {}
        for a, b in zip(lines, lines[1:]):
            if a[0] == b[0] and a[1] % 2 == 0 and b[1] == a[1] + 1:
                self.ready.setdefault(a[0], []).append(a[1])

    # ---- changes -----------------------------------------------------------------------------------------

    def push(self, text: str | None, size: int | None = None) -> None:
        """Append the leaf of message T (``text`` None while it is unbuilt)."""
        i = self.T
        cost = self.cost(0, i, text, size)
        self.lines.append([0, i, text, cost])
        self.starts.append(i)
        self.total += cost
        self.T = i + 1
        if i % 2 and len(self.lines) > 1:
            prev = self.lines[-2]
            if prev[0] == 0 and prev[1] == i - 1:
                self._add_pair(0, i - 1)

    def built(self, l: int, i: int, text: str) -> bool:
        """Node ``(l, i)`` was just built: fill its placeholder line and let the pairs it unblocks merge.
        Returns whether the view changed (a placeholder was filled)."""
        changed = False
        j = self.find(l, i)
        if j >= 0 and self.lines[j][2] is None:
            line = self.lines[j]
            self.total -= line[3]
            line[2], line[3] = text, self.cost(l, i, text, None)
            self.total += line[3]
            self._unblock(l, i & ~1)
            changed = True
        if l > 0:
            self._unblock(l - 1, 2 * i)
        return changed

    def _merge(self, l: int, i: int, text: str) -> None:
        j = self.find(l, i)
        self._drop_pair(l, i)
        p = i // 2
        cost = self.cost(l + 1, p, text, None)
        self.total += cost - self.lines[j][3] - self.lines[j + 1][3]
        self.lines[j:j + 2] = [[l + 1, p, text, cost]]
        del self.starts[j + 1]
        self.merges += 1
        if p % 2 == 0:
            if j + 1 < len(self.lines) and self.lines[j + 1][0] == l + 1 and self.lines[j + 1][1] == p + 1:
                self._add_pair(l + 1, p)
        elif j > 0 and self.lines[j - 1][0] == l + 1 and self.lines[j - 1][1] == p - 1:
            self._add_pair(l + 1, p - 1)

    # ---- the batch ---------------------------------------------------------------------------------------

    def _due_better(self, a: tuple[int, int], b: tuple[int, int] | None) -> bool:
        """Whether pair ``a`` is strictly more due than pair ``b`` (exact: cross-multiplied integers),
        or as due and older."""
        if b is None:
            return True
        (la, ia), (lb, ib) = a, b
        da = self.T - (((ia + 2) << la) - 1)
        db = self.T - (((ib + 2) << lb) - 1)
        x, y = da << lb, db << la
        return x > y or (x == y and ia << la < ib << lb)

    def best(self) -> tuple[int, int] | None:
        """The most due sibling pair (left child ``(l, i)``), built parent or not."""
        pick = None
        for table in (self.ready, self.blocked):
            for l, lst in table.items():
                if lst and self._due_better((l, lst[0]), pick):
                    pick = (l, lst[0])
        return pick

    def _parent(self, l: int, i: int) -> str | None:
        """The parent's text of the pair at ``(l, i)`` if built; moves the pair to ``blocked`` if not."""
        lst = self.blocked.get(l)
        if lst:
            k = bisect.bisect_left(lst, i)
            if k < len(lst) and lst[k] == i:
                return None
        j = self.find(l, i)
        text = self.resolve(l, i, self.lines[j][2], self.lines[j + 1][2])
        if text is None:
            self._block(l, i)
        return text

    def _best_built(self) -> tuple[int, int, str] | None:
        """The most due pair whose parent is built (the fall-back above 2·hi)."""
        pick, pick_text = None, None
        for l in list(self.ready):
            lst = self.ready[l]
            while lst:
                text = self._parent(l, lst[0])
                if text is not None:
                    if self._due_better((l, lst[0]), pick):
                        pick, pick_text = (l, lst[0]), text
                    break
        return None if pick is None else (pick[0], pick[1], pick_text)

    def fit(self) -> int:
        """Run the sawtooth batch as far as it can go now; returns the number of merges."""
        done = 0
        if not self.shrinking and self.total > self.hi:
            self.shrinking = True
        while self.shrinking and self.total > self.lo:
            pick = self.best()
            if pick is None:
                break
            text = self._parent(*pick)
            if text is None:  # wait for the most due pair, unless the view is past twice its budget
                if self.total <= 2 * self.hi:
                    break
                fallback = self._best_built()
                if fallback is None:
                    break
                pick, text = fallback[:2], fallback[2]
            self._merge(pick[0], pick[1], text)
            done += 1
        if self.total <= self.lo:
            self.shrinking = False
        return done

    # ---- reading -----------------------------------------------------------------------------------------

    def render(self, end: int | None = None, cut_unbuilt: bool = False) -> list[str]:
        """Rendered lines; with ``end`` only lines ending at or before message ``end`` (exclusive bound); with
        ``cut_unbuilt`` stopping at the first unbuilt line (what a compactor may see)."""
        out = []
        for l, i, text, _ in self.lines:
            if end is not None and (i + 1) << l > end:
                break
            if text is None and cut_unbuilt:
                break
            out.append(render_line(l, i, text))
        return out

    def pending(self) -> int:
        """Placeholder lines (leaves the compactor has not summarised yet)."""
        return sum(1 for ln in self.lines if ln[2] is None)

    def waiting(self) -> bool:
        """Whether a batch is held up by an unbuilt parent (the view is above ``hi``)."""
        return self.shrinking and self.total > self.lo

    def to_json(self) -> dict:
        return {"lines": [ln[:3] for ln in self.lines], "shrinking": self.shrinking}

    def load(self, data: dict) -> None:
        """Restore from ``to_json`` output; ``ValueError`` says what is wrong with it."""
        rows = data.get("lines") if isinstance(data, dict) else None
        if not isinstance(rows, list) or not isinstance(data.get("shrinking"), bool):
            raise ValueError("lines or shrinking missing")
        lines, at = [], 0
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and type(row[0]) is int and type(row[1]) is int):
                raise ValueError(f"bad line {row!r:.60}")
            l, i, text = row
            if l < 0 or i < 0 or l > 62:
                raise ValueError(f"bad node ({l}, {i})")
            if i << l != at:
                raise ValueError(f"line {label(l, i)} does not start where the previous line ends ({at})")
            if text is None and l > 0:
                raise ValueError(f"line {label(l, i)} is not built")
            if text is not None and not isinstance(text, str):
                raise ValueError(f"line {label(l, i)} has no text")
            lines.append([l, i, text, self.cost(l, i, text, None)])
            at = (i + 1) << l
        self._set_lines(lines)
        self.shrinking = data["shrinking"]


class Views:
    """Both views of one memory (the model's and the compactor's) and their file, ``view.json``."""

    def __init__(self, config: dict, resolve: Resolver, cost: Cost = line_bytes_cost):
        self.view = View(int(config["view"]["hi"]), int(config["view"]["lo"]), resolve, cost)
        self.cview = View(int(config["cview"]["hi"]), int(config["cview"]["lo"]), resolve, cost)
        self.tree_seen: dict[str, int] = {}  # tree file -> bytes whose nodes the views know about
        self.dirty = False
        self.loaded: tuple | None = None  # view.json's identity when read or last written by us

    @property
    def T(self) -> int:
        return self.view.T

    def both(self) -> tuple[View, View]:
        return self.view, self.cview

    def push(self, texts: Iterable[tuple[str | None, int | None]]) -> None:
        """Append leaves ``(text, size)`` for the next messages, fitting after each one (as if they had
        arrived one by one, so the result does not depend on how messages were batched)."""
        view, cview = self.view, self.cview
        for text, size in texts:
            view.push(text, size)
            cview.push(text, size)
            if view.total > view.hi or view.shrinking:
                view.fit()
            if cview.total > cview.hi or cview.shrinking:
                cview.fit()
        self.dirty = True

    def built(self, l: int, i: int, text: str) -> None:
        for v in self.both():
            v.built(l, i, text)
            v.fit()
        self.dirty = True

    def to_bytes(self) -> bytes:
        return orjson.dumps(
            {"version": VERSION, "T": self.T, "view": self.view.to_json(), "cview": self.cview.to_json(),
             "tree": self.tree_seen}
        ) + b"\n"

    def load(self, raw: bytes, count: int) -> None:
        """Restore from ``view.json`` bytes; ``ValueError`` says why they cannot be used."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("unknown format")
        self.view.load(data.get("view"))
        self.cview.load(data.get("cview"))
        if self.view.T != self.cview.T or data.get("T") != self.view.T:
            raise ValueError("the two views cover different messages")
        if self.view.T > count:
            raise ValueError(f"it covers {self.view.T} messages but the log has {count}")
        tree = data.get("tree")
        if not isinstance(tree, dict) or not all(isinstance(v, int) for v in tree.values()):
            raise ValueError("tree positions missing")
        self.tree_seen = tree


def warn(text: str) -> None:
    sys.stderr.write(f"pimem: warning: {text}\n")


# ---- a memory's views: load, catch up, save ----------------------------------------------------------------


def leaf_of(msg: dict, tree, line_bytes: int, tree_empty: bool) -> tuple[str | None, int | None]:
    """The leaf line of a message for the views: its text verbatim when free, else a stored summary, else
    None (a placeholder)."""
    if msg["size"] <= line_bytes:
        return f"{msg['kind']}: {msg['text']}", msg["size"]
    if tree_empty:
        return None, None
    return tree.stored(0, msg["i"], msg["i"] + 1), None


def make(mem) -> Views:
    tree, line_bytes = mem.tree, int(mem.config["line_bytes"])
    holder: list[Views] = []

    def resolve(l: int, i: int, left: str | None, right: str | None) -> str | None:
        if left is None or right is None:
            return None
        joined = f"{left}\n{right}"
        if byte_size(joined) <= line_bytes:
            return joined
        return None if not holder[0].tree_seen else tree.stored(l + 1, i // 2, holder[0].T)

    views = Views(mem.config, resolve)
    holder.append(views)
    return views


def _stamp(path) -> tuple | None:
    import os

    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def current(mem, upto: int | None = None, save: bool | None = None, create: bool = True) -> Views | None:
    """The memory's views, caught up with the tree and with the log (to message ``upto``, default all).

    Restored from ``view.json`` as saved; refolded from the log only when the file is missing or invalid (the
    latter with a warning). ``save``: True for writers (they hold the lock), None to save only if the writer
    lock is free right now (readers never wait for it). ``create=False`` returns None when no view exists.
    """
    path = mem.path / "view.json"
    stamp = _stamp(path)
    views = mem._views if mem._views is not None and stamp is not None and mem._views_stamp == stamp else None
    if views is None:
        if stamp is None and not create:
            return None
        views = make(mem)
        views.loaded = stamp
        if stamp is not None:
            try:
                views.load(path.read_bytes(), mem.count())
            except (ValueError, OSError) as exc:
                warn(f"{path} is unusable ({exc}); refolding the view from the log")
                views = make(mem)
                views.dirty = True
        else:
            views.dirty = True
    _catch_up(mem, views, mem.count() if upto is None else upto)
    if views.dirty and save is not False:
        if save:
            _save(mem, views)
        else:
            _save_if_free(mem, views)
    mem._views, mem._views_stamp = views, (_stamp(path) if not views.dirty else None)
    return views


def _catch_up(mem, views: Views, upto: int) -> None:
    tree, line_bytes = mem.tree, int(mem.config["line_bytes"])
    sizes = tree.file_sizes()
    if sizes != views.tree_seen:
        tree.catch_up()
        views.tree_seen = sizes
        for v in views.both():
            for l, i, text, _ in [ln for ln in v.lines if ln[2] is None]:
                found = tree.stored(l, i, views.T)
                if found is not None:
                    v.built(l, i, found)
            v.unblock_all()
            v.fit()
        views.dirty = True
    if views.T < upto:
        empty = not sizes
        views.push(leaf_of(msg, tree, line_bytes, empty) for msg in mem.messages(views.T, upto))


def push_batch(mem, start: int, batch: list[dict]) -> None:
    """After messages ``start…`` were logged (writer lock held): push their leaves and save."""
    views = current(mem, upto=start, save=False)
    line_bytes = int(mem.config["line_bytes"])
    tree, empty = mem.tree, not views.tree_seen
    views.push(
        leaf_of({**msg, "i": start + n}, tree, line_bytes, empty) if msg["size"] > line_bytes
        else (f"{msg['kind']}: {msg['text']}", msg["size"])
        for n, msg in enumerate(batch)
    )
    _save(mem, views)


def _save(mem, views: Views) -> None:
    from .home import write_atomic

    write_atomic(mem.path / "view.json", views.to_bytes())
    views.dirty = False
    mem._views_stamp = views.loaded = _stamp(mem.path / "view.json")


def _save_if_free(mem, views: Views) -> None:
    from filelock import FileLock, Timeout

    lock = FileLock(str(mem.path / "write.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        return
    try:
        if _stamp(mem.path / "view.json") == views.loaded and mem.count() == views.T:  # nobody wrote since
            _save(mem, views)
    finally:
        lock.release()
