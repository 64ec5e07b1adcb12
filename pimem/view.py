"""The view and the compactor's view (DESIGN.md §2; reference: optchat-spec.md §2).

A view is a list of tree nodes tiling ``[0, T)``, oldest first, one rendered line ``id+n|text`` each. A new
message appends its leaf and nothing else changes, until the rendered view passes ``hi`` bytes; then one batch
merges adjacent sibling pairs until it is at or below ``lo`` (the sawtooth). The pair merged is the one with
the largest ``(T − last)/2^l`` (``last`` = the pair's final message), ties to the oldest. If that pair's parent
is not built yet the batch **waits** (the view may stay above ``hi``); only above ``2·hi`` does it fall back to
the best pair whose parent is built.

Cost per step: at one level the oldest pair is always the most due, so the best pair is found from one
candidate per level (O(levels)); pairs whose parent is known to be unbuilt are kept apart (``blocked``), so
waiting and the fall-back never rescan them. Nothing here reads the log or the tree: parent texts come from a
``resolve`` callback (a free join, else a stored node) and line texts from ``fetch``, only when needed.

``Views`` holds both views of a memory and their file, ``view.json``: the shape only (one character per line
for its level, ``_`` for an unbuilt leaf), the byte totals, the batch flags and which pairs wait for an unbuilt
parent. Texts are not saved: they are the tree's, and are read back when a line is rendered or merged, so a
save costs a byte per line, not the view's 128 KB. The file is written atomically after every change and
restored exactly as saved (a restart never refolds, so the bytes a model saw stay a stable cache prefix).
"""

from __future__ import annotations

import bisect
from typing import Callable, Sequence

import orjson

from .tree import PLACEHOLDER, byte_size, flat, label
from .nofollow import read_bytes

VERSION = 1
LEVELS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # level of each line in view.json
UNBUILT = "_"  # an unbuilt leaf (a placeholder line)
PREFETCH_MESSAGES = 1 << 15  # at most this many messages are read at once for the texts of lines
PUSH_CHUNK = 4096  # leaves pushed into one view before the other takes them
AMORTISE_LINES = 8192  # past this many lines (both views) and twice the budget, saves are amortised


# the text of a built line not read back from the tree yet (Ellipsis: a singleton the garbage collector does
# not track, so lines holding it stay untracked too)
UNLOADED = ...

# resolve(l, i, left_text, right_text) -> the parent's text if built, else None; (l, i) is the left child
Resolver = Callable[[int, int, str, str], "str | None"]
# fetch(l, i) -> the text of a built line whose text is not loaded
Fetcher = Callable[[int, int], str]
# cost(l, i, text, size) -> the line's weight against the budgets; size is the text's bytes when known
Cost = Callable[[int, int, "str | None", "int | None"], int]


def line_bytes_cost(l: int, i: int, text: str | None, size: int | None) -> int:
    """Bytes of the rendered line ``id+n|text`` plus its newline."""
    head = len(str(i << l)) + len(str(1 << l)) + 2
    if text is None:
        return head + len(PLACEHOLDER) + 1
    return head + (byte_size(text) if size is None else size) + 1


def render_line(l: int, i: int, text: str | None) -> str:
    return f"{label(l, i)}|{PLACEHOLDER if text is None else flat(text)}"


class View:
    """One view: lines ``(l, i, text, cost)`` (``text`` None for an unbuilt leaf, ``UNLOADED`` until read,
    when ``cost`` is None too) and the sawtooth state. Lines are tuples of plain values, so the garbage
    collector stops tracking them (a view without a compactor can hold a line per message)."""

    def __init__(self, hi: int, lo: int, resolve: Resolver, fetch: Fetcher | None = None,
                 cost: Cost = line_bytes_cost, prefetch: Callable[[list[tuple[int, int]]], None] | None = None):
        self.hi, self.lo = hi, lo
        self.resolve = resolve
        self.fetch = fetch
        self.prefetch = prefetch  # told which lines are about to be read, so their leaves come in one read
        self.cost = cost
        self.lines: list[list] = []
        self.starts: list[int] = []  # start message of each line, for bisect
        self.total = 0
        self.shrinking = False
        self.T = 0
        self.ready: dict[int, list[int]] = {}  # level -> sorted left-child i of pairs whose parent may be built
        self.blocked: dict[int, list[int]] = {}  # level -> pairs whose parent is known to be unbuilt
        self.n_ready = 0  # pairs in ``ready``
        self.changes = 0  # pushes, merges and filled placeholders so far

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

    def text(self, j: int) -> str | None:
        """The text of line ``j`` (None for a placeholder), read back from the tree if not loaded."""
        line = self.lines[j]
        if line[2] is UNLOADED:
            l, i = line[0], line[1]
            text = self.fetch(l, i)
            line = self.lines[j] = (l, i, text, self.cost(l, i, text, None))
        return line[2]

    def _add_pair(self, l: int, i: int) -> None:
        bisect.insort(self.ready.setdefault(l, []), i)
        self.n_ready += 1

    @staticmethod
    def _remove(table: dict[int, list[int]], l: int, i: int) -> bool:
        lst = table.get(l)
        if lst:
            k = bisect.bisect_left(lst, i)
            if k < len(lst) and lst[k] == i:
                del lst[k]
                return True
        return False

    def _block(self, l: int, i: int) -> None:
        self._remove_ready(l, i)
        bisect.insort(self.blocked.setdefault(l, []), i)

    def _remove_ready(self, l: int, i: int) -> bool:
        if self._remove(self.ready, l, i):
            self.n_ready -= 1
            return True
        return False

    def _unblock(self, l: int, i: int) -> None:
        if self._remove(self.blocked, l, i):
            self._add_pair(l, i)

    def is_blocked(self, l: int, i: int) -> bool:
        lst = self.blocked.get(l)
        if not lst:
            return False
        k = bisect.bisect_left(lst, i)
        return k < len(lst) and lst[k] == i

    def unblock_all(self) -> None:
        """Forget what we knew about unbuilt parents (the tree changed behind our back)."""
        for l, lst in self.blocked.items():
            for i in lst:
                self._add_pair(l, i)
        self.blocked = {}

    # ---- changes -----------------------------------------------------------------------------------------

    def push(self, text: str | None, size: int | None = None, cost: int | None = None) -> None:
        """Append the leaf of message T (``text`` None while it is unbuilt; ``cost`` if already known)."""
        i = self.T
        if cost is None:
            cost = self.cost(0, i, text, size)
        self.lines.append((0, i, text, cost))
        self.starts.append(i)
        self.total += cost
        self.T = i + 1
        self.changes += 1
        if i % 2 and len(self.lines) > 1:
            prev = self.lines[-2]
            if prev[0] == 0 and prev[1] == i - 1:
                self._add_pair(0, i - 1)

    def built(self, l: int, i: int, text: str) -> None:
        """Node ``(l, i)`` was just built: fill its placeholder line, and let the pairs it unblocks merge."""
        j = self.find(l, i)
        if j >= 0 and self.lines[j][2] is None:
            cost = self.cost(l, i, text, None)
            self.total += cost - self.lines[j][3]
            self.lines[j] = (l, i, text, cost)
            self.changes += 1
            self._unblock(l, i & ~1)
        if l > 0:
            self._unblock(l - 1, 2 * i)

    def _merge(self, l: int, i: int, text: str) -> None:
        j = self.find(l, i)
        self._remove_ready(l, i) or self._remove(self.blocked, l, i)
        p = i // 2
        cost = self.cost(l + 1, p, text, None)
        self.text(j), self.text(j + 1)  # their costs are known once loaded
        self.total += cost - self.lines[j][3] - self.lines[j + 1][3]
        self.lines[j:j + 2] = [(l + 1, p, text, cost)]
        del self.starts[j + 1]
        self.changes += 1
        if p % 2 == 0:
            if j + 1 < len(self.lines) and self.lines[j + 1][0] == l + 1 and self.lines[j + 1][1] == p + 1:
                self._add_pair(l + 1, p)
        elif j > 0 and self.lines[j - 1][0] == l + 1 and self.lines[j - 1][1] == p - 1:
            self._add_pair(l + 1, p - 1)

    def flood_line(self) -> int:
        """Above this total, with no pair waiting to be tried, pushes take ``_push_flooded``'s road."""
        return max(2 * self.hi, self.lo)

    def push_many(self, leaves: list[tuple], leaf_text: Callable[[int], str] | None = None,
                  free_bytes: int | None = None, trace: "_Trace | None" = None) -> None:
        """``push`` then ``fit`` for each leaf line ``(0, i, text, cost)`` in turn (from ``i == T``; both views
        may hold the same line tuples, which saves memory when they hold a line per message). A free leaf's
        text may be left ``UNLOADED`` (read back from the log when needed): ``leaf_text(k)`` gives that of
        ``leaves[k]`` when a line needs it now. ``free_bytes``: the caller vouches that ``resolve`` builds
        exactly the pairs whose two lines joined by a newline fit in that many bytes (a memory with no stored
        node), so pairs can be decided from the lines' costs, without their texts. ``trace`` records what
        the other view needs to take the same steps by ``replay``."""
        k, n = 0, len(leaves)
        while k < n:
            if self.n_ready or self.total <= self.flood_line():
                if trace is not None:
                    trace.general = True
                _, _, text, cost = leaves[k]
                if text is UNLOADED:
                    text = leaf_text(k)
                k += 1
                self.push(text, None, cost)
                if self.shrinking or self.total > self.hi:
                    self.fit()
            else:
                k = self._push_flooded(leaves, k, leaf_text, free_bytes, trace)

    def _push_flooded(self, leaves: list[tuple], k: int, leaf_text: Callable[[int], str] | None,
                      free_bytes: int | None, trace: "_Trace | None" = None) -> int:
        """``push_many`` from ``leaves[k]`` while the view is past ``flood_line`` and every adjacent pair in it
        is known to have an unbuilt parent (``n_ready == 0``: a bulk import with no compactor running).
        ``fit`` would then only try the pair a new leaf makes with its sibling, and each merge that succeeds
        can make only one new pair, again at the tail; so only the tail is looked at, with the same merges in
        the same order and the same pairs blocked. When a merge would bring the view down to ``flood_line``
        the general ``fit`` takes over from that very state, and this returns how far it got. With
        ``free_bytes`` the lines' texts are not needed: merged lines are left ``UNLOADED``."""
        lines, starts, blocked = self.lines, self.starts, self.blocked
        resolve, cost_of = self.resolve, self.cost
        floor = self.flood_line()
        total, T, changes = self.total, self.T, self.changes
        self.shrinking = True
        n = len(leaves)
        low, least = len(lines), total  # (for ``trace``) the lowest line looked at, the lowest total checked
        added = []  # pairs blocked
        try:
            while k < n:
                line = leaves[k]
                if line[2] is UNLOADED and free_bytes is None:
                    line = (0, line[1], leaf_text(k), line[3])
                k += 1
                i = line[1]
                lines.append(line)
                starts.append(i)
                total += line[3]
                T += 1
                changes += 1
                l = 0
                while i & 1:  # the tail line (l, i) is a right child: is its left sibling just before it?
                    j = len(lines) - 2
                    if j < low:
                        low = j
                    if j < 0 or lines[j][0] != l or lines[j][1] != i - 1:
                        break
                    i -= 1
                    if total < least:
                        least = total
                    if total <= floor:
                        self.total, self.T, self.changes = total, T, changes
                        self._add_pair(l, i)
                        self.fit()
                        total, T, changes = self.total, self.T, self.changes  # (what ``finally`` writes back)
                        if trace is not None:
                            trace.general = True
                        return k
                    left, right = lines[j], lines[j + 1]
                    if left[2] is None or right[2] is None:  # a placeholder: its parent cannot be built yet
                        parent = None
                    elif free_bytes is not None:
                        if left[3] is None:  # (a line restored from view.json has its cost once read)
                            self.text(j)
                            left = lines[j]
                        if right[3] is None:
                            self.text(j + 1)
                            right = lines[j + 1]
                        # each line's text bytes, from its cost (line_bytes_cost: "id+n|" + text + newline)
                        head = len(str(i << l))
                        both = left[3] + right[3] - head - len(str((i + 1) << l)) - 2 * len(str(1 << l)) - 6
                        parent = UNLOADED if both + 1 <= free_bytes else None
                        cost = head + len(str(2 << l)) + both + 4
                    else:
                        left_text = self.text(j) if left[2] is UNLOADED else left[2]
                        right_text = self.text(j + 1) if right[2] is UNLOADED else right[2]
                        parent = resolve(l, i, left_text, right_text)
                        if parent is not None:
                            cost = cost_of(l + 1, i >> 1, parent, None)
                    if parent is None:
                        bisect.insort(blocked.setdefault(l, []), i)
                        added.append((l, i))
                        break
                    l, i = l + 1, i >> 1
                    total += cost - lines[j][3] - lines[j + 1][3]
                    lines[j:] = [(l, i, parent, cost)]
                    del starts[j + 1]
                    changes += 1
        finally:
            self.total, self.T, self.changes = total, T, changes
            if trace is not None:
                trace.low, trace.least = min(trace.low, low), min(trace.least, least)
                trace.blocked.extend(added)
        return k

    def replay(self, other: "View", trace: "_Trace") -> bool:
        """Take the steps ``other`` just took in ``push_many`` (traced) if they are exactly the ones this view
        would take: both were past their flood line with nothing waiting to be tried, pairs were decided by
        size, and the lines ``other`` looked at are the very lines this view ends with. Then only the tail
        changed, in the same way, and it is copied; False (nothing done) otherwise."""
        if trace.general or self.n_ready or self.total <= self.flood_line() or trace.low < 0:
            return False
        looked = trace.lines_before - trace.low  # old lines of ``other`` that its pushes looked at
        if looked > len(trace.tail) or looked > len(self.lines):
            return False
        tail, mine = trace.tail[len(trace.tail) - looked:], self.lines[len(self.lines) - looked:]
        if any(a is not b for a, b in zip(tail, mine)):
            return False
        if trace.least - trace.total_before + self.total <= self.flood_line():
            return False  # a merge here would have brought this view down to its flood line
        cut = len(self.lines) - looked
        self.lines[cut:] = other.lines[trace.low:]
        self.starts[cut:] = other.starts[trace.low:]
        self.total += other.total - trace.total_before
        self.changes += other.changes - trace.changes_before
        self.T = other.T
        self.shrinking = True
        for l, i in trace.blocked:
            bisect.insort(self.blocked.setdefault(l, []), i)
        return True

    # ---- the batch ---------------------------------------------------------------------------------------

    def _more_due(self, a: tuple[int, int], b: tuple[int, int] | None) -> bool:
        """Whether pair ``a`` is strictly more due than pair ``b``, or as due and older. Exact: the dues
        ``(T − last)/2^l`` are compared by cross-multiplying integers."""
        if b is None:
            return True
        (la, ia), (lb, ib) = a, b
        x = (self.T - (((ia + 2) << la) - 1)) << lb
        y = (self.T - (((ib + 2) << lb) - 1)) << la
        return x > y or (x == y and ia << la < ib << lb)

    def best(self) -> tuple[int, int] | None:
        """The most due sibling pair (its left child ``(l, i)``), built parent or not. At one level the
        oldest pair is the most due, so one candidate per level is enough. (``_more_due``, inlined: this
        runs once per merge.)"""
        T = self.T
        pick = None
        pl = pi = pd = 0
        for table in (self.ready, self.blocked):
            for l, lst in table.items():
                if not lst:
                    continue
                i = lst[0]
                d = T - (((i + 2) << l) - 1)
                if pick is None:
                    pick, pl, pi, pd = True, l, i, d
                    continue
                x, y = d << pl, pd << l
                if x > y or (x == y and i << l < pi << pl):
                    pl, pi, pd = l, i, d
        return None if pick is None else (pl, pi)

    def _parent(self, l: int, i: int) -> str | None:
        """The parent's text of the pair at ``(l, i)`` if built; moves the pair to ``blocked`` if not."""
        if self.is_blocked(l, i):
            return None
        j = self.find(l, i)
        left, right = self.text(j), self.text(j + 1)
        text = None if left is None or right is None else self.resolve(l, i, left, right)
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
                    if self._more_due((l, lst[0]), pick):
                        pick, pick_text = (l, lst[0]), text
                    break
        return None if pick is None else (pick[0], pick[1], pick_text)

    def fit(self) -> int:
        """Run the sawtooth batch as far as it can go now; returns the number of merges."""
        done = 0
        if not self.shrinking and self.total > self.hi:
            self.shrinking = True
        while self.shrinking and self.total > self.lo:
            if self.total > 2 * self.hi:
                # past twice the budget: the best pair whose parent is built (the most due one, if built)
                found = self._best_built() if self.n_ready else None
                if found is None:
                    break
                l, i, text = found
            else:
                pick = self.best()
                text = None if pick is None else self._parent(*pick)
                if text is None:  # the most due pair is not built yet: the batch waits for it
                    break
                l, i = pick
            self._merge(l, i, text)
            done += 1
        if self.total <= self.lo:
            self.shrinking = False
        return done

    # ---- reading -----------------------------------------------------------------------------------------

    def render(self, end: int | None = None, cut_unbuilt: bool = False) -> list[str]:
        """Rendered lines; with ``end`` only lines ending at or before message ``end`` (exclusive bound); with
        ``cut_unbuilt`` stopping at the first unbuilt line (what a compactor may see)."""
        out = []
        self._prefetch(len(self.lines) if end is None else bisect.bisect_right(self.starts, end))
        for j, (l, i, _, _) in enumerate(self.lines):
            if end is not None and (i + 1) << l > end:
                break
            text = self.text(j)
            if text is None and cut_unbuilt:
                break
            out.append(render_line(l, i, text))
        return out

    def fill(self, texts: dict[str, str]) -> None:
        """Take the texts of lines not loaded yet from ``texts`` (by label) where it has them."""
        for j, (l, i, text, _) in enumerate(self.lines):
            if text is UNLOADED:
                known = texts.get(label(l, i))
                if known is not None:
                    self.lines[j] = (l, i, known, self.cost(l, i, known, None))

    def line(self, j: int) -> tuple[int, int, str | None, int]:
        """Line ``j`` as ``(l, i, text, cost)``: text None for a placeholder; cost is the rendered line's
        bytes plus its newline."""
        text = self.text(j)
        l, i, _, cost = self.lines[j]
        return l, i, text, cost

    def rows(self) -> list[tuple[int, int, str | None, int]]:
        """Every line as ``(l, i, text, cost)`` (see ``line``), texts read back as needed."""
        self._prefetch(len(self.lines))
        return [self.line(j) for j in range(len(self.lines))]

    def _prefetch(self, upto: int) -> None:
        if self.prefetch is not None:
            unloaded = [(ln[0], ln[1]) for ln in self.lines[:upto] if ln[2] is UNLOADED]
            if unloaded:
                self.prefetch(unloaded)

    def pending(self) -> int:
        """Placeholder lines (leaves the compactor has not summarised yet)."""
        return sum(1 for ln in self.lines if ln[2] is None)

    def waiting(self) -> bool:
        """Whether a batch is held up (by an unbuilt parent) with the view above ``lo``."""
        return self.shrinking and self.total > self.lo

    def over(self) -> bool:
        """Past twice the budget: nothing built left to merge (a compactor is not keeping up)."""
        return self.total > 2 * self.hi

    # ---- view.json ---------------------------------------------------------------------------------------

    def to_json(self) -> dict:
        shape = "".join(UNBUILT if ln[2] is None else LEVELS[ln[0]] for ln in self.lines)
        blocked = sorted(i << l for l, lst in self.blocked.items() for i in lst)
        return {"lines": shape, "bytes": self.total, "shrinking": self.shrinking, "blocked": blocked}

    def load(self, data: dict) -> None:
        """Restore from ``to_json`` output; ``ValueError`` says what is wrong with it."""
        if not isinstance(data, dict):
            raise ValueError("a view is missing")
        shape, total, shrinking, blocked = (data.get(k) for k in ("lines", "bytes", "shrinking", "blocked"))
        if not isinstance(shape, str) or type(total) is not int or type(shrinking) is not bool \
                or not isinstance(blocked, list):
            raise ValueError("lines, bytes, shrinking or blocked missing")
        lines, starts, at = [], [], 0
        for ch in shape:
            l = 0 if ch == UNBUILT else LEVELS.find(ch)
            if l < 0:
                raise ValueError(f"bad level {ch!r}")
            if at & ((1 << l) - 1):
                raise ValueError(f"a line of {1 << l} messages cannot start at message {at}")
            if ch == UNBUILT:
                lines.append((0, at, None, self.cost(0, at, None, None)))
            else:
                lines.append((l, at >> l, UNLOADED, None))
            starts.append(at)
            at += 1 << l
        self.lines, self.starts, self.T, self.total, self.shrinking = lines, starts, at, total, shrinking
        self.ready, self.blocked = {}, {}
        for a, b in zip(lines, lines[1:]):
            if a[0] == b[0] and a[1] % 2 == 0 and b[1] == a[1] + 1:
                self.ready.setdefault(a[0], []).append(a[1])
        for start in blocked:
            j = self.find_start(start) if type(start) is int else -1
            l, i = (self.lines[j][0], self.lines[j][1]) if j >= 0 else (0, -1)
            if not self._remove(self.ready, l, i):
                raise ValueError(f"blocked pair at {start} is not a pair")
            self.blocked.setdefault(l, []).append(i)
        self.n_ready = sum(len(lst) for lst in self.ready.values())

    def find_start(self, start: int) -> int:
        j = bisect.bisect_left(self.starts, start)
        return j if j < len(self.starts) and self.starts[j] == start else -1


class _Trace:
    """What ``View.push_many`` did, for ``View.replay``: the view's last lines and totals before, whether any
    push left the flooded road, the lowest line it looked at, the lowest total it checked, the pairs it
    blocked."""

    TAIL = 64  # lines of the view kept from before: pushes that look further back are not replayed

    def __init__(self, view: View):
        self.tail = view.lines[-self.TAIL:]
        self.lines_before, self.total_before, self.changes_before = len(view.lines), view.total, view.changes
        self.general = bool(view.n_ready) or view.total <= view.flood_line()
        self.low, self.least = len(view.lines), view.total
        self.blocked: list[tuple[int, int]] = []


class Views:
    """Both views of one memory (the model's and the compactor's) and what ``view.json`` records."""

    def __init__(self, config: dict, resolve: Resolver, fetch: Fetcher | None = None, cost: Cost = line_bytes_cost,
                 prefetch: Callable[[list[tuple[int, int]]], None] | None = None):
        self.view = View(int(config["view"]["hi"]), int(config["view"]["lo"]), resolve, fetch, cost, prefetch)
        self.cview = View(int(config["cview"]["hi"]), int(config["cview"]["lo"]), resolve, fetch, cost, prefetch)
        self.tree_seen: dict[str, int] = {}  # tree file -> bytes whose nodes the views know about
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
                    stored_leaf: Callable[[int], str | None] | None = None) -> None:
        """Append the leaves of the next messages, given by their ``size``, fitting after each one (as if they
        had arrived one by one, so the result does not depend on how messages were batched): a message whose
        line fits in ``line_bytes`` is its own leaf, verbatim (``leaf_text(k)``: the line of the ``k``-th); a
        longer one is ``stored_leaf(i)`` (None: unbuilt). Free leaves are pushed ``UNLOADED`` (their text is
        the log's) and their text is asked for only when a line needs it; while no node is stored
        (``free_join_bytes`` set, no tree seen) pairs are decided by size alone. The two views never look at
        each other, so each takes a chunk of leaves in turn."""
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

            def chunk_text(k: int, done: int = done) -> str:
                return leaf_text(done + k)

            trace = None
            if free_bytes is not None:  # the views mostly take the very same steps: the second copies them
                trace = _Trace(self.view)
            self.view.push_many(leaves, chunk_text, free_bytes, trace)
            if trace is None or not self.cview.replay(self.view, trace):
                self.cview.push_many(leaves, chunk_text, free_bytes)

    def built(self, l: int, i: int, text: str) -> None:
        for v in self.both():
            v.built(l, i, text)
            v.fit()

    def to_bytes(self) -> bytes:
        body = {"T": self.T, "view": self.view.to_json(), "cview": self.cview.to_json(), "tree": self.tree_seen}
        return orjson.dumps({"version": VERSION, "check": _check(body), **body}) + b"\n"

    def load(self, raw: bytes, count: int) -> None:
        """Restore from ``view.json`` bytes; ``ValueError`` says why they cannot be used."""
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise ValueError(f"not JSON ({exc})") from None
        if not isinstance(data, dict) or data.get("version") != VERSION:
            raise ValueError("unknown format")
        body = {k: data.get(k) for k in ("T", "view", "cview", "tree")}
        if data.get("check") != _check(body):
            raise ValueError("its checksum does not match (damaged or edited)")
        self.view.load(data.get("view"))
        self.cview.load(data.get("cview"))
        if self.view.T != self.cview.T or data.get("T") != self.view.T:
            raise ValueError("the two views cover different messages")
        if self.view.T > count:
            raise ValueError(f"it covers {self.view.T} messages but the log has {count}")
        tree = data.get("tree")
        if not isinstance(tree, dict) or not all(type(v) is int for v in tree.values()):
            raise ValueError("tree positions missing")
        self.tree_seen = tree
        self.saved_changes = self.changes

    def check_tree(self, sizes: dict[str, int]) -> None:
        """Every line the view holds as built must still be built. The tree only grows (each node is written
        once, never removed), so that holds unless a tree file shrank or vanished since the save."""
        for name, size in self.tree_seen.items():
            if sizes.get(name, -1) < size:
                raise ValueError(f"tree/{name} lost nodes since the view was saved")


def _check(body: dict) -> int:
    import zlib

    return zlib.crc32(orjson.dumps(body, option=orjson.OPT_SORT_KEYS))


# ---- a memory's views: load, catch up, save ----------------------------------------------------------------


def make(mem) -> Views:
    """Empty views wired to a memory's tree: parents resolve to a free join or a stored node, texts are
    read back from the tree (and the log, for leaves) through one message cache."""
    tree, line_bytes = mem.tree, int(mem.config["line_bytes"])
    leaves: dict[int, dict] = {}
    holder: list[Views] = []

    def resolve(l: int, i: int, left: str, right: str) -> str | None:
        if len(left) + len(right) < line_bytes:  # (characters never outnumber bytes)
            joined = f"{left}\n{right}"
            if byte_size(joined) <= line_bytes:
                return joined
        return tree.stored(l + 1, i // 2, holder[0].T) if holder[0].tree_seen else None

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
                leaves.update((m["i"], m) for m in mem.messages(start, stop))

    views = Views(mem.config, resolve, fetch, prefetch=prefetch)
    views.leaves = leaves
    views.free_join_bytes = line_bytes
    holder.append(views)
    return views


# ---- the lines as readers show them ------------------------------------------------------------------------

TEXTS = "lines.json"  # derived: the texts of the lines last shown, by label (deleting it loses nothing)
TEXTS_VERSION = 1


def shown(mem, views: Views, include_tools: bool = False, compactor: bool = False, save: bool = True) -> list[tuple[int, int, str | None, int]]:
    """The lines a reader shows, as ``(l, i, text, cost)`` (text None for a placeholder): tool traffic taken
    out of the texts unless ``include_tools`` (see ``privacy``); the compactor's view cut at its first unbuilt
    line. A built line's text never changes (a node is written once, a free join is its children's), so the
    texts shown last time come from ``lines.json`` and a turn reads only the lines that are new since
    (``save=False``: a reader that must not write leaves the file as it is)."""
    v = views.cview if compactor else views.view
    line_bytes = int(mem.config["line_bytes"])
    cached = _load_texts(mem, line_bytes)
    v.fill({key: entry if type(entry) is str else entry[0] for key, entry in cached.items()})
    rows = v.rows()
    if compactor:
        rows = rows[: next((k for k, row in enumerate(rows) if row[2] is None), len(rows))]
    labels = [label(l, i) for l, i, _, _ in rows]
    todo = [k for k, row in enumerate(rows) if row[2] is not None and labels[k] not in cached]
    hidden = {}
    if todo:
        from .privacy import hide_tools

        hidden = dict(zip(todo, hide_tools(mem, [rows[k][:3] for k in todo], known=views.leaves)))
    out, keep = [], {}
    for k, (l, i, text, cost) in enumerate(rows):
        if text is not None:
            entry = cached.get(labels[k])
            if entry is None:
                entry = text if hidden[k] == text else [text, hidden[k]]
            keep[labels[k]] = entry
            if not include_tools:
                text = entry if type(entry) is str else entry[1]
        out.append((l, i, text, cost))
    if todo and save:
        _save_texts(mem, line_bytes, keep)
    return out


def _load_texts(mem, line_bytes: int) -> dict:
    try:
        data = orjson.loads(read_bytes(mem.path / TEXTS))
    except (OSError, orjson.JSONDecodeError):
        return {}
    if type(data) is not dict or data.get("version") != TEXTS_VERSION or data.get("line_bytes") != line_bytes:
        return {}
    lines = data.get("lines")
    if type(lines) is not dict:
        return {}
    return {key: entry for key, entry in lines.items() if type(entry) is str or (
        type(entry) is list and len(entry) == 2 and type(entry[0]) is str and type(entry[1]) is str)}


def _save_texts(mem, line_bytes: int, lines: dict) -> None:
    from .home import write_atomic

    try:
        write_atomic(mem.path / TEXTS, orjson.dumps({"version": TEXTS_VERSION, "line_bytes": line_bytes,
                                                     "lines": lines}), durable=False)
    except OSError:
        pass  # a reader without write access: the next one reads the lines again


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
    latter with a warning). ``save``: True for writers (they hold the lock), False for none, None to save
    only if the writer lock is free right now (readers never wait for it). ``create=False`` returns None when
    no view exists yet.
    """
    path = mem.path / "view.json"
    stamp = _stamp(path)
    count = mem.count() if upto is None else upto  # (a writer passes the count it appended at)
    views = mem._views
    if views is None or stamp is None or views.loaded != stamp:
        if stamp is None and not create:
            return None
        views = make(mem)
        if stamp is not None:
            try:
                views.load(read_bytes(path), count)
                views.check_tree(mem.tree.file_sizes())
                views.loaded = stamp
            except (ValueError, OSError) as exc:
                from .output import warn

                warn(f"{path} is unusable ({exc}); refolding the view from the log")
                views = make(mem)
                views.loaded = stamp  # the file this refold replaces
        mem._views = views
    _catch_up(mem, views, count)
    if save is not False and views.should_save():
        if save:
            write(mem, views)
        else:
            _write_if_free(mem, views)
    return views


def _catch_up(mem, views: Views, upto: int) -> None:
    tree, line_bytes = mem.tree, int(mem.config["line_bytes"])
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
        batch = list(mem.messages(views.T, min(upto, views.T + PREFETCH_MESSAGES)))
        if not batch:
            break
        push_messages(views, batch, line_bytes, _stored_leaf(tree, views))


def _stored_leaf(tree, views: Views) -> Callable[[int], str | None] | None:
    """The summary a compactor stored for message i's leaf; None when no node is stored at all."""
    if not views.tree_seen:
        return None
    return lambda i: tree.stored(0, i, i + 1)


def push_messages(views: Views, batch: Sequence[dict], line_bytes: int,
                  stored_leaf: Callable[[int], str | None] | None) -> None:
    """Push the leaves of the next messages (``kind``, ``text``, ``size``; a batch may carry its sizes as
    ``.sizes`` and build its messages only when asked)."""
    sizes = getattr(batch, "sizes", None)
    if sizes is None:
        sizes = [msg["size"] for msg in batch]

    def leaf_text(k: int) -> str:
        msg = batch[k]
        return f"{msg['kind']}: {msg['text']}"

    views.push_leaves(sizes, leaf_text, line_bytes, stored_leaf)


def push_batch(mem, start: int, batch: Sequence[dict]) -> None:
    """After messages ``start…`` were logged (writer lock held): push their leaves and save."""
    views = current(mem, upto=start, save=False)
    push_messages(views, batch, int(mem.config["line_bytes"]), _stored_leaf(mem.tree, views))
    save(mem, views)


def save(mem, views: Views) -> None:
    """Save after a change (writer lock held), or leave it to the end of the process if saves are
    amortised right now (see ``Views.should_save``)."""
    if views.should_save():
        write(mem, views)
    elif views.dirty:
        _save_at_exit(mem)


def write(mem, views: Views) -> None:
    """Save ``view.json`` atomically (caller holds the writer lock): a temporary file renamed over it. It is
    not fsync'd: it is derived and checksummed, so a crash can at worst leave the previous (or a damaged)
    file, which is caught up or refolded, and an append pays one fsync (its log line), not two."""
    from .home import write_atomic

    path = mem.path / "view.json"
    write_atomic(path, views.to_bytes(), durable=False)
    views.saved_changes = views.changes
    views.loaded = _stamp(path)


def _write_if_free(mem, views: Views) -> bool:
    """Save if the writer lock is free right now and nobody wrote since we read (readers never wait)."""
    from .errors import Busy

    try:
        with mem.lock(timeout=0):
            if _stamp(mem.path / "view.json") == views.loaded and mem.count() == views.T:
                write(mem, views)
                return True
    except Busy:
        pass
    return False


_AT_EXIT: dict[int, object] = {}


def _save_at_exit(mem) -> None:
    """Views left unsaved by the amortised rule are saved when the process ends, if nobody wrote since."""
    if not _AT_EXIT:
        import atexit

        atexit.register(_flush_all)
    _AT_EXIT[id(mem)] = mem


def _flush_all() -> None:
    for mem in list(_AT_EXIT.values()):
        views = mem._views
        if views is not None and views.dirty:
            try:
                _write_if_free(mem, views)
            except Exception:  # the next reader catches up from the log anyway
                pass
    _AT_EXIT.clear()
