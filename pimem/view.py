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

Both views of a memory and their file, ``view.json``, are ``pimem.viewfile``'s: this module is the algebra
only, with no file, log or tree in it.
"""

from __future__ import annotations

import bisect
import re
from typing import Callable, Iterable, NamedTuple, TypeVar

from .config import LINE_BYTES
from .tree import PLACEHOLDER, byte_size, flat, label

LEVELS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"  # level of each line in view.json
UNBUILT = "_"  # an unbuilt leaf (a placeholder line)
_RUNS = re.compile(r"(.)\1*", re.S)  # runs of one character in a shape
MARK_EVERY = 256  # view.json marks the first message of every this many lines
S = TypeVar("S")


# the text of a built line not read back from the tree yet (Ellipsis: a singleton the garbage collector does
# not track, so lines holding it stay untracked too)
UNLOADED = ...

# resolve(l, i, left_text, right_text) -> the parent's text if built, else None; (l, i) is the left child
Resolver = Callable[[int, int, str, str], "str | None"]
# fetch(l, i) -> the text of a built line whose text is not loaded
Fetcher = Callable[[int, int], str]
# cost(l, i, text, size) -> the line's weight against the budgets; size is the text's bytes when known
Cost = Callable[[int, int, "str | None", "int | None"], int]
# named(l, i, text) -> the bytes the speakers' names can add to a built line read back (``tree.Tree.named``)
Named = Callable[[int, int, str], int]


STUCK_TRIES = 3  # a node that failed this many times in a row is taken for one that keeps failing (``stuck``)


def waits_on(l: int, i: int) -> tuple[tuple[int, int], ...]:
    """The nodes the pair at ``(l, i)`` waits for to merge: its parent, and at level 0 its own leaves (a
    placeholder's): one that keeps failing makes the pair ``stuck``."""
    return ((l + 1, i >> 1), (0, i), (0, i + 1)) if l == 0 else ((l + 1, i >> 1),)


def line_bytes_cost(l: int, i: int, text: str | None, size: int | None) -> int:
    """Bytes of the rendered line ``id+n|text`` plus its newline."""
    head = len(str(i << l)) + len(str(1 << l)) + 2
    if text is None:
        return head + len(PLACEHOLDER) + 1
    return head + (byte_size(text) if size is None else size) + 1


def render_line(l: int, i: int, text: str | None) -> str:
    return f"{label(l, i)}|{PLACEHOLDER if text is None else flat(text)}"


def tiling(stop: int) -> list[tuple[int, int]]:
    """The coarsest aligned spans ``(l, i)`` that tile messages ``[0, stop)``, oldest first: one per bit of
    ``stop``. Every line of a view that ends by ``stop`` lies inside one of them."""
    out, at = [], 0
    for l in range(stop.bit_length() - 1, -1, -1):
        if stop >> l & 1:
            out.append((l, at >> l))
            at += 1 << l
    return out


def stand_in(stop: int, at: Callable[[int, int], S]) -> Callable[[int], S]:
    """For a message before ``stop``, ``at(l, i)`` of the span of ``tiling(stop)`` it lies in: each span's
    worked out once, a message's span found by bisection (a search asks for thousands of messages)."""
    spans = tiling(stop)
    ends = [(i + 1) << l for l, i in spans]
    found = [at(l, i) for l, i in spans]
    return lambda m: found[bisect.bisect_right(ends, m)]


class Held(NamedTuple):
    """What a reader holds back of a view past its bound (``held_back``): its ``lines`` oldest lines, shown by
    the spans tiling their messages, and whether those spans are shown ``bare`` (placeholders all, each the
    view's line or not). ``View.spans``, ``stand_ins`` and ``shown_for`` take it as it was worked out for one
    bound, so what they show cannot come from another bound's."""

    lines: int
    bare: bool


NOTHING_HELD = Held(0, False)


def held_back(lines: Iterable[tuple[int, bool]], n: int, T: int, bound: int, line_bytes: int,
              line_at: Callable[[int, int], "bool | None"]) -> Held:
    """How many of a view's oldest lines a reader shows by the spans that tile them (``tiling``) when the view
    is past ``bound`` (a tree behind a bulk arrival of messages: no pair has a parent to merge into). ``lines``
    gives the view's ``n`` lines newest first as ``(level, placeholder)``, and ``line_at(l, i)`` whether the
    view has line ``(l, i)`` (True: a placeholder, False: another line, None: no such line). Each line counts as
    a placeholder's bytes or as the most a line can take (``line_bytes`` of text), and so does each span
    standing in for the lines held back (a placeholder's, if it is no line of the view), so what is shown
    stays within ``bound`` without a text read, from the shape alone (as ``view.json`` holds it). The lines held back are a multiple of about half the lines that fit, where one fits:
    then they stay the same while messages come, and what is shown only grows at its tail meanwhile (a cache
    prefix), for as many messages. Returns ``Held(j, bare)``: ``bare`` where even the newest line with the spans
    before it, the view's own lines among them, may pass ``bound`` (a budget of a few hundred bytes): the spans
    standing in are then shown as placeholders, each the view's line or not, before as many of the newest lines
    as fit with them (none, if even the newest does not)."""
    step = max(1, bound // 2 // (line_bytes + 16))
    tail, at, fits = 0, T, []  # fits: (j, first message of line j) while lines j… are within bound
    for j, (l, placeholder) in zip(range(n - 1, -1, -1), lines):
        at -= 1 << l
        tail += line_cost(l, at >> l, placeholder, line_bytes)
        if tail > bound:
            break
        fits.append((j, at, tail))
    chosen = None
    for j, start, tail in reversed(fits):  # (the most lines first)
        if tail + sum(line_cost(l, i, line_at(l, i) is not False, line_bytes) for l, i in tiling(start)) <= bound:
            if j % step == 0:
                return Held(j, False)
            chosen = j if chosen is None else chosen
    if chosen is not None:
        return Held(chosen, False)
    for j, start, tail in reversed(fits):
        if tail + sum(line_cost(l, i, True, line_bytes) for l, i in tiling(start)) <= bound:
            return Held(j, True)
    return Held(n, True)


def line_cost(l: int, i: int, placeholder: bool, line_bytes: int) -> int:
    """A line's bytes as ``line_bytes_cost`` counts them: a placeholder's, else the most ``line_bytes`` allows."""
    head = len(str(i << l)) + len(str(1 << l)) + 2
    return head + (len(PLACEHOLDER) if placeholder else line_bytes) + 1


class View:
    """One view: lines ``(l, i, text, cost)`` (``text`` None for an unbuilt leaf, ``UNLOADED`` until read,
    when ``cost`` is None too; a text taken from elsewhere, ``fill``, may leave ``cost`` None until counted)
    and the sawtooth state. Lines are tuples of plain values, so the garbage collector stops tracking them (a
    view without a compactor can hold a line per message).

    A line's cost is its rendered bytes plus what readers may add to it for the speakers' names
    (``message.name_bytes``: ``user Bob: …`` for ``user: …``), so that what they show keeps to the budgets:
    a verbatim leaf's names, a free join's its children's added, each at most the room left in its line
    (``line_bytes`` less its text), a line a compactor wrote none. ``extras`` holds that part of each line's
    cost where it is not 0 (it is empty for a memory whose messages name no speaker); ``named`` works it out
    for a line read back from the tree."""

    def __init__(self, hi: int, lo: int, resolve: Resolver, fetch: Fetcher | None = None,
                 cost: Cost = line_bytes_cost, prefetch: Callable[[list[tuple[int, int]]], None] | None = None,
                 stuck: Callable[[int, int], bool] | None = None, named: Named | None = None,
                 line_bytes: int = LINE_BYTES):
        self.hi, self.lo = hi, lo
        self.named, self.line_bytes = named, line_bytes
        self.extras: dict[tuple[int, int], int] = {}  # (l, i) -> the bytes names add to that line's cost, if any
        self.resolve = resolve
        # stuck(l, i): whether the parent of the pair at (l, i) is not coming (a call for it or a child failed):
        # the batch does not wait for it but merges the best pair built, as past twice the budget
        self.stuck = stuck
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
            line = self.lines[j] = self._loaded(line)
        return line[2]

    def counted(self, j: int) -> tuple:
        """Line ``j`` with its text and its cost known."""
        line = self.lines[j]
        if line[3] is None:
            line = self.lines[j] = self._loaded(line)
        return line

    def _loaded(self, line: tuple) -> tuple:
        """``line`` with its text read back and its cost counted, where they were not."""
        l, i, text, cost = line
        if text is UNLOADED:
            text = self.fetch(l, i)
        if cost is None:
            cost = self.cost(l, i, text, None)
            extra = self.named(l, i, text) if self.named is not None and text is not None else 0
            if extra:
                self.extras[(l, i)] = extra
                cost += extra
        return line if text is line[2] and cost is line[3] else (l, i, text, cost)

    def _joined(self, l: int, i: int, left: str | None, right: str | None, text: str) -> int:
        """The bytes names add to the parent ``text`` of the pair at ``(l, i)`` (its children's extras are
        taken out of ``extras``): their sum, at most its room, if it is their free join; else 0."""
        extras = self.extras
        extra = extras.pop((l, i), 0) + extras.pop((l, i + 1), 0)
        if not extra or left is None or right is None or len(text) != len(left) + len(right) + 1 \
                or text != f"{left}\n{right}":
            return 0
        extra = min(extra, self.line_bytes - byte_size(text))
        if extra > 0:
            extras[(l + 1, i >> 1)] = extra
            return extra
        return 0

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

    def push(self, text: str | None, size: int | None = None, cost: int | None = None, extra: int = 0) -> None:
        """Append the leaf of message T (``text`` None while it is unbuilt; ``cost`` if already known, its
        ``extra`` counted in it; else ``extra``: the bytes its speaker's name adds, ``message.name_bytes``, at
        most its line's room)."""
        i = self.T
        if cost is None:
            cost = self.cost(0, i, text, size) + extra
        if extra:
            self.extras[(0, i)] = extra
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

    def built_many(self, nodes: list[tuple[int, int, str]]) -> None:
        """``built`` then ``fit`` for each node ``(l, i, text)`` in turn. Past twice the budget ``fit`` merges
        every pair whose parent is built, and in which order does not change what it ends with; so when the
        view stays past twice its budget throughout (its total less every step that lowers it, taken first,
        is still above 2·hi), all the nodes are filled first and the lines they touch are merged in one sweep
        (``_sweep``), one list splice instead of one list shift per merge (a backlog's view holds a line per
        message). Otherwise that is undone and the nodes are taken one by one."""
        if not nodes:
            return
        saved = (list(self.lines), list(self.starts), {l: list(lst) for l, lst in self.ready.items()},
                 {l: list(lst) for l, lst in self.blocked.items()}, self.total, self.n_ready, self.changes,
                 self.shrinking, dict(self.extras))
        least = self.total  # the lowest total the nodes one by one could reach on the way
        for l, i, text in nodes:
            before = self.total
            self.built(l, i, text)
            least += min(0, self.total - before)
        if least > 2 * self.hi and self._sweep(least) > 2 * self.hi:
            self.shrinking = True  # (as ``fit`` sets it above ``hi``)
            return
        (self.lines, self.starts, self.ready, self.blocked, self.total, self.n_ready, self.changes,
         self.shrinking, self.extras) = saved
        for l, i, text in nodes:
            self.built(l, i, text)
            self.fit()

    def _sweep(self, least: int) -> int:
        """Merge every pair whose parent is built, on a stack, from the first pair that may be built (in
        ``ready``) until the lines left are those no merge can reach; pairs found unbuilt are blocked, as
        ``fit`` leaves them. Returns ``least`` lowered by each merge that lowers the total."""
        if not self.n_ready:
            return least
        lines, resolve = self.lines, self.resolve
        first = min(lst[0] << l for l, lst in self.ready.items() if lst)
        last = max((lst[-1] + 2) << l for l, lst in self.ready.items() if lst)  # (the end of the last ready pair)
        a = k = self.find_start(first)
        stack: list[tuple] = []
        new = 0  # whether the top of the stack was made in this sweep (only a new line makes a new pair)
        while True:
            if len(stack) < 2 and new and a and stack[0][1] & 1:
                stack.insert(0, lines[a - 1])  # a new right child: its left sibling is before the sweep
                a -= 1
            if len(stack) >= 2 and stack[-2][0] == stack[-1][0] and stack[-2][1] % 2 == 0 \
                    and stack[-1][1] == stack[-2][1] + 1 and not self.is_blocked(stack[-2][0], stack[-2][1]):
                left, right = self._loaded(stack[-2]), self._loaded(stack[-1])
                l, i = left[0], left[1]
                text = None if left[2] is None or right[2] is None else resolve(l, i, left[2], right[2])
                if text is not None:
                    self._remove_ready(l, i)
                    cost = self.cost(l + 1, i >> 1, text, None)
                    if self.extras:
                        cost += self._joined(l, i, left[2], right[2], text)
                    delta = cost - left[3] - right[3]
                    self.total += delta
                    least += min(0, delta)
                    self.changes += 1
                    stack[-2:] = [(l + 1, i >> 1, text, cost)]
                    new = 1
                    continue
                self._block(l, i)
                stack[-2:] = [left, right]
            if k >= len(lines) or (lines[k][1] << lines[k][0] >= last and not new):
                break
            stack.append(lines[k])
            k += 1
            new = 0
        lines[a:k] = stack
        self.starts[a:k] = [ln[1] << ln[0] for ln in stack]
        return least

    def _merge(self, l: int, i: int, text: str) -> None:
        j = self.find(l, i)
        self._remove_ready(l, i) or self._remove(self.blocked, l, i)
        p = i // 2
        cost = self.cost(l + 1, p, text, None)
        self.text(j), self.text(j + 1)  # (their costs are known once loaded, or counted now)
        left, right = self.counted(j), self.counted(j + 1)
        if self.extras:
            cost += self._joined(l, i, left[2], right[2], text)
        self.total += cost - left[3] - right[3]
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
                  free_bytes: int | None = None, trace: "Trace | None" = None,
                  extras: dict[int, int] | None = None) -> None:
        """``push`` then ``fit`` for each leaf line ``(0, i, text, cost)`` in turn (from ``i == T``; both views
        may hold the same line tuples, which saves memory when they hold a line per message). A free leaf's
        text may be left ``UNLOADED`` (read back from the log when needed): ``leaf_text(k)`` gives that of
        ``leaves[k]`` when a line needs it now. ``free_bytes``: the caller vouches that ``resolve`` builds
        exactly the pairs whose two lines joined by a newline fit in that many bytes (a memory with no stored
        node), so pairs can be decided from the lines' costs, without their texts. ``trace`` records what
        the other view needs to take the same steps by ``replay``. ``extras``: by message, the part of a leaf's
        cost its speaker's name adds (see ``View``), where it is not 0."""
        k, n = 0, len(leaves)
        while k < n:
            if self.n_ready or self.total <= self.flood_line():
                if trace is not None:
                    trace.general = True
                _, _, text, cost = leaves[k]
                if text is UNLOADED:
                    text = leaf_text(k)
                k += 1
                self.push(text, None, cost, extras.get(self.T, 0) if extras else 0)
                if self.shrinking or self.total > self.hi:
                    self.fit()
            else:
                k = self._push_flooded(leaves, k, leaf_text, free_bytes, trace, extras)

    def _push_flooded(self, leaves: list[tuple], k: int, leaf_text: Callable[[int], str] | None,
                      free_bytes: int | None, trace: "Trace | None" = None,
                      extras: dict[int, int] | None = None) -> int:
        """``push_many`` from ``leaves[k]`` while the view is past ``flood_line`` and every adjacent pair in it
        is known to have an unbuilt parent (``n_ready == 0``: a bulk import with no compactor running).
        ``fit`` would then only try the pair a new leaf makes with its sibling, and each merge that succeeds
        can make only one new pair, again at the tail; so only the tail is looked at, with the same merges in
        the same order and the same pairs blocked. When a merge would bring the view down to ``flood_line``
        the general ``fit`` takes over from that very state, and this returns how far it got. With
        ``free_bytes`` the lines' texts are not needed: merged lines are left ``UNLOADED``."""
        lines, starts, blocked, named = self.lines, self.starts, self.blocked, self.extras
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
                if extras and i in extras:
                    named[(0, i)] = extras[i]
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
                            left = self.counted(j)
                        if right[3] is None:
                            right = self.counted(j + 1)
                        # each line's text bytes, from its cost (line_bytes_cost: "id+n|" + text + newline, and
                        # what names add, kept apart in ``extras``)
                        head = len(str(i << l))
                        both = left[3] + right[3] - head - len(str((i + 1) << l)) - 2 * len(str(1 << l)) - 6
                        extra = 0
                        if named:
                            extra = named.get((l, i), 0) + named.get((l, i + 1), 0)
                            both -= extra
                        parent = UNLOADED if both + 1 <= free_bytes else None
                        cost = head + len(str(2 << l)) + both + 4
                        if extra and parent is not None:
                            named.pop((l, i), None), named.pop((l, i + 1), None)
                            extra = min(extra, self.line_bytes - both - 1)
                            if extra > 0:
                                named[(l + 1, i >> 1)] = extra
                                cost += extra
                    else:
                        left_text = self.text(j) if left[2] is UNLOADED else left[2]
                        right_text = self.text(j + 1) if right[2] is UNLOADED else right[2]
                        parent = resolve(l, i, left_text, right_text)
                        if parent is not None:
                            cost = cost_of(l + 1, i >> 1, parent, None)
                            if named:
                                cost += self._joined(l, i, left_text, right_text, parent)
                    if parent is None:
                        bisect.insort(blocked.setdefault(l, []), i)
                        added.append((l, i))
                        break
                    l, i = l + 1, i >> 1
                    total += cost - lines[j][3] - lines[j + 1][3]
                    lines[j:] = [(l, i, parent, cost)]
                    del starts[j + 1]
                    changes += 1
                if total <= floor:  # merges brought the view down to its flood line with no pair left to try
                    self.total, self.T, self.changes = total, T, changes
                    self.fit()  # (what ``fit`` does next: it may wait, or end the batch below ``lo``)
                    total, T, changes = self.total, self.T, self.changes
                    if trace is not None:
                        trace.general = True
                    return k
        finally:
            self.total, self.T, self.changes = total, T, changes
            if trace is not None:
                trace.low, trace.least = min(trace.low, low), min(trace.least, least)
                trace.blocked.extend(added)
        return k

    def replay(self, other: "View", trace: "Trace") -> bool:
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
        if self.extras or other.extras:  # (the lines copied are counted alike: what names add to them too)
            for l, i, _, _ in self.lines[cut:]:
                self.extras.pop((l, i), None)
            for l, i, _, _ in other.lines[trace.low:]:
                extra = other.extras.get((l, i))
                if extra:
                    self.extras[(l, i)] = extra
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
                if text is None:  # the most due pair is not built yet: the batch waits for it, if it is coming
                    stuck = pick is not None and self.stuck is not None and self.stuck(*pick)
                    found = self._best_built() if stuck else None
                    if found is None:
                        break
                    l, i, text = found
                else:
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
        return [render_line(l, i, text) for l, i, text in self.texts(end, cut_unbuilt)]

    def texts(self, end: int | None = None, cut_unbuilt: bool = False) -> list[tuple[int, int, str | None]]:
        """``(l, i, text)`` of the lines ``render`` renders."""
        out = []
        self._prefetch(len(self.lines) if end is None else bisect.bisect_right(self.starts, end))
        for j, (l, i, _, _) in enumerate(self.lines):
            if end is not None and (i + 1) << l > end:
                break
            text = self.text(j)
            if text is None and cut_unbuilt:
                break
            out.append((l, i, text))
        return out

    def fill(self, texts: dict[str, str], lines: Iterable[int]) -> None:
        """Take the texts of lines not loaded yet (at positions ``lines``) from ``texts`` (by label) where it
        has them. A line whose cost is not known yet is counted only when a change needs it (``counted``: what
        names add to it is worked out from the log)."""
        named = self.named
        for j in lines:
            l, i, text, cost = self.lines[j]
            if text is UNLOADED:
                known = texts.get(label(l, i))
                if known is not None:
                    if cost is None and named is None:
                        cost = self.cost(l, i, known, None)
                    self.lines[j] = (l, i, known, cost)

    def line(self, j: int, counted: bool = True) -> tuple[int, int, str | None, int | None]:
        """Line ``j`` as ``(l, i, text, cost)``: text None for a placeholder; cost is the rendered line's
        bytes plus its newline and what names may add (``View``); with ``counted`` False, None where it is not
        known yet (it is not counted for it)."""
        text = self.text(j)
        l, i, _, cost = self.counted(j) if counted else self.lines[j]
        return l, i, text, cost

    def rows(self, start: int = 0, counted: bool = True) -> list[tuple[int, int, str | None, int | None]]:
        """Every line from line ``start`` on as ``(l, i, text, cost)`` (see ``line``), texts read back as
        needed."""
        self._prefetch(len(self.lines), start)
        return [self.line(j, counted) for j in range(start, len(self.lines))]

    def held_back(self, bound: int, line_bytes: int) -> Held:
        """What a reader holds back of the oldest lines and shows by ``stand_ins`` (``held_back``): nothing
        while the view is within ``bound``."""
        if self.total <= bound:
            return NOTHING_HELD
        lines = ((ln[0], ln[2] is None) for ln in reversed(self.lines))

        def line_at(l: int, i: int) -> bool | None:
            k = self.find(l, i)
            return None if k < 0 else self.lines[k][2] is None

        return held_back(lines, len(self.lines), self.T, bound, line_bytes, line_at)

    def start(self, j: int) -> int:
        """The first message of line ``j`` (``T`` past the last line)."""
        return self.starts[j] if j < len(self.lines) else self.T

    def stand_ins(self, held: Held, counted: bool = True) -> list[tuple[int, int, str | None, int | None]]:
        """What a reader shows for the lines ``held`` back (``held_back``), as ``rows`` gives lines: the spans
        tiling their messages, each the view's own line where it is one, else a placeholder (a span the view
        has not merged into one line: past twice its budget it merges every pair whose parent is built, so its
        node is not built yet)."""
        return [self.line(k, counted) if k >= 0 else (l, i, None, self.cost(l, i, None, None))
                for l, i, k in self.spans(held)]

    def spans(self, held: Held) -> list[tuple[int, int, int]]:
        """The spans ``(l, i)`` tiling the messages of the lines ``held`` back, each with the position of the
        view's line that is that span, or -1 (always, when they are shown ``bare``)."""
        stop = self.start(held.lines)
        if held.lines and held.bare:
            return [(l, i, -1) for l, i in tiling(stop)]
        return [(l, i, self.find(l, i)) for l, i in tiling(stop)]

    def shown_for(self, held: Held) -> Callable[[int], tuple[int, int, bool]]:
        """The line a reader is shown for a message when the lines ``held`` are held back, as ``(l, i,
        built)``: for many messages, the spans standing in for those lines worked out once."""
        j = held.lines
        shown_bare = bool(j) and held.bare

        def at(l: int, i: int) -> tuple[int, int, bool]:
            k = -1 if shown_bare else self.find(l, i)
            return l, i, k >= 0 and self.lines[k][2] is not None

        held_at = stand_in(self.start(j), at)

        def shown(m: int) -> tuple[int, int, bool]:
            k = self.covering(m)
            if k >= j:
                line = self.lines[k]
                return line[0], line[1], line[2] is not None
            return held_at(m)

        return shown

    def _prefetch(self, upto: int, start: int = 0) -> None:
        if self.prefetch is not None:
            unloaded = [(ln[0], ln[1]) for ln in self.lines[start:upto] if ln[2] is UNLOADED]
            if unloaded:
                self.prefetch(unloaded)

    def pending(self) -> int:
        """Placeholder lines (leaves the compactor has not summarised yet)."""
        return len(self.placeholders())

    def placeholders(self, start: int = 0) -> list[tuple[int, int]]:
        """The nodes ``(l, i)`` the placeholder lines (from line ``start`` on) stand for."""
        return [(ln[0], ln[1]) for ln in self.lines[start:] if ln[2] is None]

    def waiting(self) -> bool:
        """Whether a batch is held up (by an unbuilt parent) with the view above ``lo``."""
        return self.shrinking and self.total > self.lo

    def over(self) -> bool:
        """Past twice the budget: nothing built left to merge (a compactor is not keeping up)."""
        return self.total > 2 * self.hi

    # ---- view.json ---------------------------------------------------------------------------------------

    def to_json(self) -> dict:
        """The shape (a character per line: its level, ``_`` for a placeholder), the first message of every
        ``MARK_EVERY``-th line (so a reader finds the line covering a message by reading ``MARK_EVERY``
        characters of the shape, not all of it: ``pimem.viewfile.SavedShape``), the bytes, the batch flag
        and the pairs waiting for a parent."""
        shape = "".join(UNBUILT if ln[2] is None else LEVELS[ln[0]] for ln in self.lines)
        blocked = sorted(i << l for l, lst in self.blocked.items() for i in lst)
        return {"lines": shape, "marks": self.starts[::MARK_EVERY], "bytes": self.total,
                "shrinking": self.shrinking, "blocked": blocked}

    def load(self, data: dict) -> None:
        """Restore from ``to_json`` output; ``ValueError`` says what is wrong with it."""
        if not isinstance(data, dict):
            raise ValueError("a view is missing")
        shape, total, shrinking, blocked = (data.get(k) for k in ("lines", "bytes", "shrinking", "blocked"))
        if not isinstance(shape, str) or type(total) is not int or type(shrinking) is not bool \
                or not isinstance(blocked, list):
            raise ValueError("lines, bytes, shrinking or blocked missing")
        lines, starts, at = [], [], 0
        cost = self.cost
        for run in _RUNS.finditer(shape):  # (a run of lines of one level at a time: a backlog's view is one run)
            ch, count = run[1], run.end() - run.start()
            l = 0 if ch == UNBUILT else LEVELS.find(ch)
            if l < 0:
                raise ValueError(f"bad level {ch!r}")
            if at & ((1 << l) - 1):  # (the run's first line aligned, so are the others)
                raise ValueError(f"a line of {1 << l} messages cannot start at message {at}")
            span = range(at, at + (count << l), 1 << l)
            if ch == UNBUILT:
                lines += [(0, a, None, cost(0, a, None, None)) for a in span]
            else:
                lines += [(l, a >> l, UNLOADED, None) for a in span]
            starts += span
            at += count << l
        marks = data.get("marks")
        if marks is not None and marks != starts[::MARK_EVERY]:  # (a view.json of an older pimem has none)
            raise ValueError("its marks do not match its lines")
        self.lines, self.starts, self.T, self.total, self.shrinking = lines, starts, at, total, shrinking
        self.extras = {}  # (counted as the lines are read back)
        self.ready, self.blocked = {}, {}
        pairs: dict[int, list[int]] = {}  # level -> the left line i of each sibling pair, oldest first
        firsts: dict[int, set[int]] = {}  # level -> the first message of each of those pairs
        at = 0
        for run in _RUNS.finditer(shape.replace(UNBUILT, LEVELS[0])):  # (placeholders pair as leaves)
            l, count = LEVELS.find(run[1]), run.end() - run.start()
            first = at >> l
            if count > 1:
                lefts = range(first + (first & 1), first + count - 1, 2)
                pairs.setdefault(l, []).extend(lefts)
                firsts.setdefault(l, set()).update(range(lefts.start << l, lefts.stop << l, 2 << l))
            at += count << l
        # (sets, not a bisection and a removal from a list per pair: a backlog's view waits on every pair)
        waiting: dict[int, set[int]] = {}
        for start in blocked:
            for l, found in firsts.items() if type(start) is int else ():
                if start in found:
                    break
            else:
                l = -1
            held = waiting.setdefault(l, set())
            if l < 0 or start >> l in held:
                raise ValueError(f"blocked pair at {start} is not a pair")
            held.add(start >> l)
            self.blocked.setdefault(l, []).append(start >> l)
        for l, lst in pairs.items():
            held = waiting.get(l)
            ready = [i for i in lst if i not in held] if held else lst
            if ready:
                self.ready[l] = ready
        self.n_ready = sum(len(lst) for lst in self.ready.values())

    def cut(self, j: int) -> int:
        """Drop line ``j`` and the lines after it: the view as it stood before their messages came, less the
        merges they set off. Returns the bytes dropped (their texts are read for it)."""
        dropped = sum(self.line(k)[3] for k in range(j, len(self.lines)))
        self.T = self.start(j)
        if self.extras:
            for l, i, _, _ in self.lines[j:]:
                self.extras.pop((l, i), None)
        del self.lines[j:], self.starts[j:]
        self.total -= dropped
        for table in (self.ready, self.blocked):
            for l, lst in table.items():
                lst[:] = [i for i in lst if (i + 2) << l <= self.T]
        self.n_ready = sum(len(lst) for lst in self.ready.values())
        self.shrinking = self.shrinking and self.total > self.lo
        self.changes += 1
        return dropped

    def find_start(self, start: int) -> int:
        j = bisect.bisect_left(self.starts, start)
        return j if j < len(self.starts) and self.starts[j] == start else -1


class Trace:
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
