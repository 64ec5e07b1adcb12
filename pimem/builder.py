"""What to build next in one memory, and the reports on how far its tree is (``survey``, ``estimate``, ``spent``).

A ``Builder`` keeps the frontier of the tree in memory and never scans the whole tree per step:

- **leaves** come from one sequential read of the log; short messages and stored leaves are built already,
  the others enter a window of at most ``WINDOW`` (8) unbuilt leaves, so a leaf starts only when fewer than 8
  unbuilt leaves precede it;
- **merges**: when a node is built and its sibling is too, the parent is settled at once (stored, free, or
  queued); queued merges are taken lowest level first, then oldest;
- a **failed** node waits ``retry_seconds`` (10 s; longer if the server asked with ``Retry-After``) and goes
  back to its queue, for ever, without backoff.

Only the texts of built nodes whose parent is not built yet are kept (the frontier), so memory stays small.
A builder runs in one of two modes: ``BUILD`` (the scheduler drives it: calls, writes) or ``SURVEY`` (one read
of the log admits every unbuilt leaf, keeping only its size; no compactor, nothing written). How builders are
run (threads, the loop, signals, ``build-tree`` and ``watch``) is ``pimem.scheduler``'s.
"""

from __future__ import annotations

import bisect
import enum
import heapq
import threading
import time
from collections import deque
from dataclasses import dataclass

from . import env, when
from .compactor import Compactor, Task
from .compactor.state import BuildState
from .config import compactor_knob
from .errors import Busy, LeaseLost, PimemError
from .tree import context_end, free_leaf, free_merge, label

WINDOW = 8
MAX_RETRY_WAIT = 300.0  # a Retry-After beyond this is not honoured in full
FLUSH_SECONDS = 0.2  # at least this often while nodes wait to be written (what a crash can cost)
OFFLINE_FLUSH_SECONDS = 2.0  # offline nodes are cheap to redo, and every write saves the whole view.json


class Mode(enum.Enum):
    BUILD = "build"  # admit WINDOW unbuilt leaves at a time, build them, write what was built
    SURVEY = "survey"  # admit every unbuilt leaf in one read, keep only sizes; build and write nothing


@dataclass
class Stats:
    calls: int = 0  # nodes a compactor wrote
    free: int = 0  # nodes built without a call
    failed: int = 0  # failed attempts
    tokens_in: int = 0
    tokens_out: int = 0
    cost: float = 0.0
    seconds: float = 0.0  # summed call time

    def as_dict(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in self.__dict__.items()}


class Builder:
    """One memory's build state: the leaf window, the merge queue, the retry timers, the frontier."""

    def __init__(self, mem, compactor: Compactor | None = None, state: BuildState | None = None, lease=None,
                 retries: int | None = None, mode: Mode = Mode.BUILD):
        self.mem = mem
        self.mode = mode
        self.window_size = WINDOW if mode is Mode.BUILD else float("inf")
        self.name = mem.name
        cfg = mem.config
        self.line_bytes = int(cfg["line_bytes"])
        self.state = state or BuildState(mem.path)
        self.compactor = compactor or Compactor(cfg["compactor"], self.state)
        self.retry_seconds = float(compactor_knob(cfg["compactor"], "retry_seconds"))
        self.retries = retries  # None: for ever (watch); n: at most n retries per node (build-tree)
        self.lease = lease
        self.stats = Stats()
        self.count = mem.count()
        self.stored = mem.tree.stored_keys(self.count)
        self.frontier: dict[tuple[int, int], str | None] = {}  # built, parent not built; None = stored, text not read
        self.window: list[int] = []  # unbuilt leaves admitted, ascending
        self.messages: dict[int, dict] = {}  # the window's messages
        self.ready_leaves: deque[int] = deque()
        self.ready_merges: list[tuple[int, int]] = []  # heap of (l, i)
        self.waiting: list[tuple[float, int, int]] = []  # heap of (due, l, i): failed, waiting to retry
        self.tries: dict[tuple[int, int], int] = {}
        self.gave_up: set[tuple[int, int]] = set()
        self.inflight: set[tuple[int, int]] = set()
        self.to_write: list[tuple[int, int, str, dict]] = []
        self.next_leaf = 0  # the next message the leaf feed reads
        self.settled = 0  # nodes known built (replayed, free or written) in this run
        self._feed = None
        self._cview = None  # (rendered compactor-view lines, the message each ends before)
        self._writer = mem.reopened() if mode is Mode.BUILD else None  # the writer thread's own (own caches)
        self._writing: threading.Thread | None = None
        self.flush_seconds = OFFLINE_FLUSH_SECONDS if self.compactor.offline else FLUSH_SECONDS
        self.last_flush = time.monotonic()
        self._write_error: BaseException | None = None

    # ---- the leaf feed -----------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Notice messages appended since the last look; True when there are new ones."""
        count = self.mem.count()
        if count > self.count:
            self.count = count
            return True
        return False

    def admit(self) -> None:
        """Read the log forward until the window is full (``WINDOW`` unbuilt leaves; a survey's has no limit)
        or the log ends."""
        while len(self.window) < self.window_size and self.next_leaf < self.count:
            if self._feed is None:
                self._feed = self.mem.messages(self.next_leaf, self.count)
            msg = next(self._feed, None)
            if msg is None:
                self._feed = None
                return
            i = msg["i"]
            self.next_leaf = i + 1
            if (0, i) in self.stored:
                self._settle(0, i, None)
                continue
            text = free_leaf(msg, self.line_bytes)
            if text is not None:
                self.stats.free += 1
                self._settle(0, i, text)
                continue
            self.window.append(i)
            self.ready_leaves.append(i)
            self.messages[i] = msg if self.mode is Mode.BUILD else {"size": msg["size"]}

    # ---- settling built nodes ----------------------------------------------------------------------------

    def _text(self, l: int, i: int) -> str:
        text = self.frontier[(l, i)]
        if text is None:
            text = self.frontier[(l, i)] = self.mem.tree.stored(l, i, self.count)
        return text

    def _settle(self, l: int, i: int, text: str | None) -> None:
        """Node ``(l, i)`` is built (``text`` None: stored, read when needed); settle its ancestors."""
        while True:
            self.settled += 1
            sibling = (l, i ^ 1)
            if sibling not in self.frontier:
                self.frontier[(l, i)] = text
                return
            parent = (l + 1, i >> 1)
            if parent in self.stored:
                parent_text = None
            else:
                self.frontier[(l, i)] = text
                left, right = (self._text(l, i), self._text(*sibling)) if i % 2 == 0 else (self._text(*sibling), self._text(l, i))
                parent_text = free_merge(left, right, self.line_bytes)
                if parent_text is None:
                    heapq.heappush(self.ready_merges, parent)
                    return
                self.stats.free += 1
            self.frontier.pop(sibling)
            self.frontier.pop((l, i), None)
            l, i, text = parent[0], parent[1], parent_text

    def built(self, l: int, i: int, text: str, meta: dict) -> None:
        """A compactor wrote node ``(l, i)``: queue the write, update the stats, settle its ancestors."""
        self.inflight.discard((l, i))
        self.to_write.append((l, i, text, meta))
        self.stored.add((l, i))
        self.stats.calls += 1
        self.stats.tokens_in += meta.get("tokens_in") or 0
        self.stats.tokens_out += meta.get("tokens_out") or 0
        self.stats.cost += meta.get("cost") or 0.0
        self.stats.seconds += meta.get("seconds") or 0.0
        self.tries.pop((l, i), None)
        if self.state.failures:
            self.state.succeeded(label(l, i))
        if l == 0:
            self.window.remove(i)
            self.messages.pop(i, None)
        self._settle(l, i, text)

    def failed(self, l: int, i: int, error: str, retry_after: float | None = None) -> None:
        self.inflight.discard((l, i))
        self.stats.failed += 1
        tries = self.tries[(l, i)] = self.tries.get((l, i), 0) + 1
        self.state.failed(label(l, i), error, when.rfc3339(env.now()))
        if self.retries is not None and tries > self.retries:
            self.gave_up.add((l, i))
            return
        delay = max(self.retry_seconds, min(retry_after or 0.0, MAX_RETRY_WAIT))
        heapq.heappush(self.waiting, (time.monotonic() + delay, l, i))

    # ---- what to build next ------------------------------------------------------------------------------

    def next_task(self, now: float) -> Task | None:
        """The next node to build (leaves first, then the lowest merge), or None."""
        while self.waiting and self.waiting[0][0] <= now:
            _, l, i = heapq.heappop(self.waiting)
            if l == 0:
                self.ready_leaves.appendleft(i)
            else:
                heapq.heappush(self.ready_merges, (l, i))
        self.admit()
        if self.ready_leaves:
            i = self.ready_leaves.popleft()
            msg = self.messages[i]
            self.inflight.add((0, i))
            return Task(0, i, kind=msg["kind"], text=msg["text"])
        if self.ready_merges:
            l, i = heapq.heappop(self.ready_merges)
            self.inflight.add((l, i))
            return Task(l, i, left=self._text(l - 1, 2 * i), right=self._text(l - 1, 2 * i + 1))
        return None

    def next_due(self) -> float | None:
        return self.waiting[0][0] if self.waiting else None

    def idle(self) -> bool:
        """Nothing in flight, nothing ready, nothing waiting for a retry."""
        return not (self.inflight or self.ready_leaves or self.ready_merges or self.waiting)

    def context(self, task: Task) -> str:
        """The compactor's view up to the task's boundary, from a copy the writer thread renders after each
        write (its views are in memory; rendering per call, or reloading view.json here, would cost more than
        the rest of the scheduler). Context only helps: if the view cannot be read, the call goes without."""
        if self._cview is None:
            self._cview = self._render(self.mem)
        lines, ends = self._cview
        return "\n".join(lines[: bisect.bisect_right(ends, context_end(task.l, task.i))])

    def _render(self, mem) -> tuple[list[str], list[int]]:
        """The compactor's view as lines and the message each line ends before."""
        try:
            lines = mem.view_lines(compactor=True)
        except (ValueError, OSError, PimemError) as exc:
            from .output import warn

            warn(f"{self.name}: the compactor's view is unreadable ({exc}); building without context")
            lines = []
        return lines, [_line_end(line) for line in lines]

    def flush(self, wait: bool = False) -> None:
        """Write what was built, on a writer thread so calls keep flowing while the disk syncs (one batch at a
        time; what is built meanwhile waits for the next). ``wait``: write everything before returning.
        ``LeaseLost`` once another process holds this memory's lease: nothing more is written."""
        if self._writing is not None and (wait or not self._writing.is_alive()):
            self._writing.join()
            self._writing = None
            error, self._write_error = self._write_error, None
            if error is not None:
                raise error
        if self._writing is not None or not self.to_write:
            return
        batch, self.to_write = self.to_write, []
        if wait:
            self._write(batch)
            self.flush(wait=True)  # surface an error
            return
        self._writing = threading.Thread(target=self._write, args=(batch,), daemon=True)
        self._writing.start()

    def _write(self, batch: list) -> None:
        try:
            if self.lease is not None and not self.lease.owned():
                raise LeaseLost(f"memory '{self.name}' was taken over by another builder")
            self._writer.write_nodes(batch)
            if not self.compactor.offline:  # the writer's views are in memory: render the next calls' context
                self._cview = self._render(self._writer)
        except Busy:  # a long writer holds the lock: keep the batch for the next flush
            self.to_write[:0] = batch
        except BaseException as exc:  # handed to the scheduler's thread by the next flush
            self._write_error = exc


def _line_end(line: str) -> int:
    """The message a rendered line ``id+n|text`` ends before: id + n."""
    start, _, n = line.partition("|")[0].partition("+")
    return int(start) + int(n)


def tree_size(count: int) -> int:
    """Nodes in a full tree over ``count`` messages: Σ_k ⌊count / 2^k⌋."""
    total = 0
    while count:
        total += count
        count >>= 1
    return total


# ---- reports ------------------------------------------------------------------------------------------------


def survey(mem) -> dict:
    """How far the tree is: nodes in the full tree, built, leaves waiting for a call (and their bytes), and
    merges ready now. One read of the log; no call, no write."""
    builder = Builder(mem, mode=Mode.SURVEY)
    builder.admit()
    total = tree_size(builder.count)
    return {"messages": builder.count, "nodes": total, "built": builder.settled, "pending": total - builder.settled,
            "leaves": len(builder.window), "leaf_bytes": sum(m["size"] for m in builder.messages.values()),
            "merges_ready": len(builder.ready_merges)}


def estimate(mem, compactor: Compactor | None = None) -> dict:
    """What building the rest would take: at most how many calls, and the tokens and cost they would use.

    Leaves are counted exactly; every pending merge is counted as a call (some will turn out free). Each call
    sends the system prompt, the task and the compactor's view (about its average size once the memory is big)."""
    from .compactor import INPUT_BYTES, prompt as prompts

    cfg = mem.config
    compactor = compactor or Compactor(cfg["compactor"], BuildState(mem.path))
    found = survey(mem)
    merges = found["pending"] - found["leaves"]
    calls = found["leaves"] + merges
    context = min((int(cfg["cview"]["hi"]) + int(cfg["cview"]["lo"])) // 2, 300 * found["messages"])
    overhead = len(prompts.SYSTEM) + 700 + context  # system prompt, task text with its ruler, <chat>
    tokens_in = (calls * overhead + min(found["leaf_bytes"], found["leaves"] * INPUT_BYTES) + merges * 1100) // 4
    if compactor.offline:
        calls, tokens_in = 0, 0
    tokens_out = calls * compactor.max_tokens
    cost = 0.0 if compactor.offline else compactor.cost(tokens_in, tokens_out)
    return {"memory": mem.name, "model": compactor.label, "calls": calls, "leaves": found["leaves"], "merges": merges,
            "tokens_in": tokens_in, "tokens_out": tokens_out, "cost": cost,
            "built": found["built"], "nodes": found["nodes"]}


def spent(mem) -> dict:
    """Calls, tokens and money recorded on the nodes a compactor wrote (``Tree.records``)."""
    totals = {"calls": 0, "tokens_in": 0, "tokens_out": 0, "cost": 0.0, "models": {}}
    for node in mem.tree.records():
        totals["calls"] += 1
        totals["tokens_in"] += node.get("tokens_in") or 0
        totals["tokens_out"] += node.get("tokens_out") or 0
        totals["cost"] += node.get("cost") or 0.0
        model = node.get("model") or "?"
        totals["models"][model] = totals["models"].get(model, 0) + 1
    totals["cost"] = round(totals["cost"], 6)
    return totals
