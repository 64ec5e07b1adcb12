"""What to build next, and the loop that builds it (``build-tree`` runs it once, ``watch`` for ever).

Per memory, a ``Builder`` keeps the frontier of the tree in memory and never scans the whole tree per step:

- **leaves** come from one sequential read of the log; short messages and stored leaves are built already,
  the others enter a window of at most ``WINDOW`` (8) unbuilt leaves, so a leaf starts only when fewer than 8
  unbuilt leaves precede it;
- **merges**: when a node is built and its sibling is too, the parent is settled at once (stored, free, or
  queued); queued merges are taken lowest level first, then oldest;
- a **failed** node waits ``retry_seconds`` (10 s; longer if the server asked with ``Retry-After``) and goes
  back to its queue, for ever, without backoff.

Only the texts of built nodes whose parent is not built yet are kept (the frontier), so memory stays small.

A ``Scheduler`` drives any number of builders with ``CONCURRENCY`` (8) calls in flight in total, on daemon
threads (a call stuck past shutdown's ``GRACE`` of 15 s is abandoned, not waited for). The offline compactor
runs inline: it is faster than a thread hand-off. Built nodes are written in batches (at least every 0.2 s)
by a writer thread, under the writer lock, after checking that this process still holds the memory's lease.
"""

from __future__ import annotations

import bisect
import heapq
import queue
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from . import env, semantic, when
from .compactor import CallFailed, Compactor, Task
from .compactor.state import BuildState
from .errors import Busy, PimemError
from .tree import context_end, free_leaf, free_merge, label

CONCURRENCY = 8
WINDOW = 8
GRACE = 15.0
RETRY_SECONDS = 10.0
MAX_RETRY_WAIT = 300.0  # a Retry-After beyond this is not honoured in full
FLUSH_EVERY = 4096  # nodes written per batch at most (saving view.json costs O(view))
FLUSH_SECONDS = 0.2  # and at least this often while nodes wait to be written (what a crash can cost)
OFFLINE_FLUSH_SECONDS = 2.0  # offline nodes are cheap to redo, and every write saves the whole view.json


class LeaseLost(PimemError):
    """Another process took this memory's lease: stop building it."""


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
                 retries: int | None = None, window: int = WINDOW):
        self.mem = mem
        self.window_size = window
        self.name = mem.name
        cfg = mem.config
        self.line_bytes = int(cfg.get("line_bytes") or 512)
        self.state = state or BuildState(mem.path)
        self.compactor = compactor or Compactor(cfg.get("compactor") or {}, self.state)
        self.retry_seconds = float((cfg.get("compactor") or {}).get("retry_seconds") or RETRY_SECONDS)
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
        self._writer = type(mem)(mem.name, mem.path, mem.home)  # the writer thread's own Memory (own caches)
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

    def _admit(self) -> None:
        """Read the log forward until the window holds ``WINDOW`` unbuilt leaves or the log ends."""
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
            self.messages[i] = msg if self.window_size == WINDOW else {"size": msg["size"]}  # a survey keeps sizes

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
        self._admit()
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


class _Pool:
    """``CONCURRENCY`` daemon threads running compactor calls; results come back on one queue."""

    def __init__(self, size: int):
        self.tasks: queue.Queue = queue.Queue()
        self.results: queue.Queue = queue.Queue()
        for _ in range(size):
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while True:
            builder, task, context = self.tasks.get()
            try:
                text, meta = builder.compactor.build(task, context)
                self.results.put((builder, task, text, meta, None))
            except CallFailed as exc:
                self.results.put((builder, task, None, None, exc))
            except Exception as exc:  # a bug or an unexpected provider reply must not kill the worker
                self.results.put((builder, task, None, None, CallFailed(f"{type(exc).__name__}: {exc}")))


@dataclass
class Scheduler:
    """Drives builders: ``run(once=True)`` builds what is buildable and returns; ``run()`` loops until
    ``stop()`` (SIGTERM/SIGINT), noticing new messages within ``poll`` seconds."""

    concurrency: int = CONCURRENCY
    grace: float = GRACE
    poll: float = 0.5
    on_event: object = None  # callable(dict) for every built/failed node
    on_progress: object = None  # callable(builders), about ten times a second
    max_cost: float | None = None
    first_estimate: float | None = None  # the cost of one call before any was made (from ``estimate``)
    builders: list[Builder] = field(default_factory=list)
    stopped_for_cost: bool = False
    _stop: threading.Event = field(default_factory=threading.Event)
    _pool: _Pool | None = None
    _inflight: int = 0

    def add(self, builder: Builder) -> None:
        self.builders.append(builder)

    def stop(self) -> None:
        self._stop.set()

    def _emit(self, event: dict) -> None:
        if self.on_event is not None:
            self.on_event(event)

    def spent(self) -> float:
        return sum(b.stats.cost for b in self.builders)

    def _affordable(self, builder: Builder) -> bool:
        if self.max_cost is None:
            return True
        calls = sum(b.stats.calls for b in self.builders)
        per_call = self.spent() / calls if calls else (self.first_estimate or 0.0)
        if self.spent() + (self._inflight + 1) * per_call > self.max_cost:
            self.stopped_for_cost = True
            return False
        return True

    def _dispatch(self, now: float) -> bool:
        """Start what can start; True when something was built inline (so look again at once)."""
        progressed = False
        for builder in list(self.builders):
            if builder.compactor.offline:
                for _ in range(256):  # then look at the other memories, the lease and the clock
                    task = builder.next_task(now)
                    if task is None:
                        break
                    progressed = True
                    text, meta = builder.compactor.build(task)
                    builder.built(task.l, task.i, text, meta)
                    self._emit_built(builder, task, text, meta)
                continue
            while self._inflight < self.concurrency and self._affordable(builder):
                task = builder.next_task(now)
                if task is None:
                    break
                if self._pool is None:
                    self._pool = _Pool(self.concurrency)
                self._pool.tasks.put((builder, task, builder.context(task)))
                self._inflight += 1
        return progressed

    def _emit_built(self, builder: Builder, task: Task, text: str, meta: dict) -> None:
        if self.on_event is not None:
            self._emit({"event": "built", "memory": builder.name, "node": task.label, "l": task.l, "i": task.i,
                        "bytes": len(text.encode("utf-8")), **meta})

    def _collect(self, timeout: float) -> None:
        """Take finished calls (waiting up to ``timeout`` for the first one)."""
        if self._pool is None or not self._inflight:
            if timeout > 0:
                self._stop.wait(timeout)
            return
        try:
            item = self._pool.results.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            builder, task, text, meta, error = item
            self._inflight -= 1
            if builder in self.builders:
                if error is None:
                    builder.built(task.l, task.i, text, meta)
                    self._emit_built(builder, task, text, meta)
                else:
                    builder.failed(task.l, task.i, str(error), getattr(error, "retry_after", None))
                    self._emit({"event": "failed", "memory": builder.name, "node": task.label, "l": task.l,
                                "i": task.i, "error": str(error)})
            try:
                item = self._pool.results.get_nowait()
            except queue.Empty:
                return

    def _flush(self, wait: bool = False, due_only: bool = False) -> None:
        """Hand built nodes to the writers (``due_only``: only where the batch is big or old enough)."""
        now = time.monotonic()
        for builder in list(self.builders):
            if due_only:
                if not builder.to_write:
                    builder.last_flush = now
                    continue
                if now - builder.last_flush < builder.flush_seconds and len(builder.to_write) < FLUSH_EVERY:
                    continue
                builder.last_flush = now
            try:
                builder.flush(wait)
            except LeaseLost as exc:
                self._emit({"event": "lost", "memory": builder.name, "error": str(exc)})
                self.builders.remove(builder)

    def _beat(self) -> None:
        for builder in list(self.builders):
            if builder.lease is not None and not builder.lease.beat():
                self._emit({"event": "lost", "memory": builder.name, "error": "lease taken over"})
                builder.to_write.clear()
                self.builders.remove(builder)

    def run(self, once: bool = False, between=None) -> None:
        """Build until idle (``once``) or until stopped. ``between()`` is called about every ``poll`` seconds
        in a loop (``watch`` uses it to add memories)."""
        last_look = last_progress = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                progressed = self._dispatch(now)
                self._beat()
                if self.on_progress is not None and now - last_progress >= 0.1:
                    last_progress = now
                    self.on_progress(self.builders)
                if progressed:
                    self._flush(due_only=True)
                    continue
                if once and not self._inflight and all(b.idle() for b in self.builders):
                    break
                if once and self.stopped_for_cost and not self._inflight:
                    break
                dues = [d for d in (b.next_due() for b in self.builders) if d is not None]
                dues += [b.last_flush + b.flush_seconds for b in self.builders if b.to_write]
                wait = min([self.poll] + [max(0.0, d - now) for d in dues])
                self._collect(wait)
                self._flush(due_only=True)
                if time.monotonic() - last_look >= self.poll:
                    last_look = time.monotonic()
                    if not once:
                        for builder in self.builders:
                            builder.refresh()
                    if between is not None:
                        between()
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        """Give calls in flight ``grace`` seconds, keep what they built, write everything, let go."""
        deadline = time.monotonic() + self.grace
        while self._inflight and time.monotonic() < deadline:
            self._collect(min(0.25, max(0.0, deadline - time.monotonic())))
        self._flush(wait=True)


# ---- surveys, estimates, and the two ways to run -------------------------------------------------------------


def survey(mem) -> dict:
    """How far the tree is: nodes in the full tree, built, leaves waiting for a call (and their bytes), and
    merges ready now. One read of the log; no call, no write."""
    builder = Builder(mem, window=1 << 62)
    builder._admit()
    total = tree_size(builder.count)
    return {"messages": builder.count, "nodes": total, "built": builder.settled, "pending": total - builder.settled,
            "leaves": len(builder.window), "leaf_bytes": sum(m["size"] for m in builder.messages.values()),
            "merges_ready": len(builder.ready_merges)}


def estimate(mem, compactor: Compactor | None = None) -> dict:
    """What building the rest would take: at most how many calls, and the tokens and cost they would use.

    Leaves are counted exactly; every pending merge is counted as a call (some will turn out free). Each call
    sends the system prompt, the task and the compactor's view (about its average size once the memory is big)."""
    from .compactor import prompt as prompts

    cfg = mem.config
    compactor = compactor or Compactor(cfg.get("compactor") or {}, BuildState(mem.path))
    found = survey(mem)
    merges = found["pending"] - found["leaves"]
    calls = found["leaves"] + merges
    cview = cfg.get("cview") or {}
    context = min((int(cview.get("hi", 32_000)) + int(cview.get("lo", 16_000))) // 2, 300 * found["messages"])
    overhead = len(prompts.SYSTEM) + 700 + context  # system prompt, task text with its ruler, <chat>
    tokens_in = (calls * overhead + min(found["leaf_bytes"], found["leaves"] * 48_000) + merges * 1100) // 4
    if compactor.offline:
        calls, tokens_in = 0, 0
    tokens_out = calls * compactor.max_tokens
    cost = 0.0 if compactor.offline else compactor.cost(tokens_in, tokens_out)
    return {"memory": mem.name, "model": compactor.label, "calls": calls, "leaves": found["leaves"], "merges": merges,
            "tokens_in": tokens_in, "tokens_out": tokens_out, "cost": cost,
            "built": found["built"], "nodes": found["nodes"]}


def spent(mem) -> dict:
    """Calls, tokens and money recorded on the nodes a compactor wrote (read from the tree files)."""
    import orjson

    totals = {"calls": 0, "tokens_in": 0, "tokens_out": 0, "cost": 0.0, "models": {}}
    tree_dir = mem.path / "tree"
    if not tree_dir.is_dir():
        return totals
    for path in sorted(tree_dir.glob("*.jsonl")):
        for raw in path.read_bytes().splitlines():
            try:
                node = orjson.loads(raw)
            except orjson.JSONDecodeError:
                continue
            if not isinstance(node, dict):
                continue
            totals["calls"] += 1
            totals["tokens_in"] += node.get("tokens_in") or 0
            totals["tokens_out"] += node.get("tokens_out") or 0
            totals["cost"] += node.get("cost") or 0.0
            model = node.get("model") or "?"
            totals["models"][model] = totals["models"].get(model, 0) + 1
    totals["cost"] = round(totals["cost"], 6)
    return totals


def _install_signals(scheduler: Scheduler) -> list:
    """SIGTERM and SIGINT stop the scheduler gracefully (main thread only); returns what to restore."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return []
    saved = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        saved.append((sig, signal.signal(sig, lambda *_: scheduler.stop())))
    return saved


def _restore_signals(saved: list) -> None:
    import signal

    for sig, handler in saved:
        signal.signal(sig, handler)


def build_tree(mems: list, on_event=None, max_cost: float | None = None, retries: int = 0, wait: float | None = 0.0,
               first_estimate: float | None = None, on_progress=None, compactor: Compactor | None = None) -> Scheduler:
    """Build every buildable node of ``mems`` once (failed nodes retried up to ``retries`` times) and return
    the scheduler (its builders hold the stats). Holds each memory's lease while building; ``Busy`` when a
    live watcher or another build holds one (after ``wait`` seconds). ``compactor`` overrides the memories'
    own (``demo`` builds offline)."""
    from .lease import Lease

    scheduler = Scheduler(on_event=on_event, max_cost=max_cost, first_estimate=first_estimate, on_progress=on_progress)
    leases = []
    embedding = semantic.background()
    try:
        for mem in mems:
            lease = Lease(mem).acquire(wait)
            leases.append(lease)
            scheduler.add(Builder(mem, compactor=compactor, lease=lease, retries=retries))
            if embedding:
                embedding.add(mem)
        _run_with_signals(scheduler, once=True)
    finally:
        _close(scheduler, leases)
        if embedding:  # the vectors too, unless stopped by a signal (what was embedded is kept)
            embedding.stop() if scheduler._stop.is_set() else embedding.finish()
    return scheduler


def _run_with_signals(scheduler: Scheduler, **run) -> None:
    """Run the scheduler with SIGTERM/SIGINT turned into a clean shutdown, then put the handlers back."""
    saved = _install_signals(scheduler)
    try:
        scheduler.run(**run)
    finally:
        _restore_signals(saved)


def _close(scheduler: Scheduler, leases) -> None:
    """Close every builder's compactor (its HTTP client) and give up the leases."""
    for builder in scheduler.builders:
        builder.compactor.close()
    for lease in leases:
        lease.release()


def watch(names: list[str], home=None, on_event=None, wait: bool = False, poll: float = 0.5) -> Scheduler:
    """Run the scheduler until SIGTERM/SIGINT over the named memories, or over every memory of the home
    (including ones created later). Named memories held by a live builder raise ``Busy`` (or are waited
    for); with no names, held memories are skipped and taken over when their holder dies."""
    from .lease import Lease
    from .memory import Memory

    scheduler = Scheduler(on_event=on_event, poll=poll)
    watched: dict[str, Lease] = {}
    embedding = semantic.background()
    explicit = [Memory.open(name, home) for name in names]

    def take(mem, block: bool) -> None:
        lease = Lease(mem)
        if block:
            lease.acquire(None if wait else 0.0)
        elif lease.try_acquire() is not None:
            return
        watched[mem.name] = lease
        scheduler.add(Builder(mem, lease=lease))
        scheduler._emit({"event": "watching", "memory": mem.name})

    last_scan = [0.0]

    def look_for_memories() -> None:
        if embedding:  # new messages: their vectors (in the background)
            for builder in scheduler.builders:
                embedding.add(builder.mem)
        if explicit or time.monotonic() - last_scan[0] < 2.0:
            return
        last_scan[0] = time.monotonic()
        active = {b.name for b in scheduler.builders}
        for mem in Memory.all(home):
            if mem.name not in active:
                watched.pop(mem.name, None)
                take(mem, block=False)

    try:
        for mem in explicit:
            take(mem, block=True)
        if not explicit:
            mems = Memory.all(home)
            for mem in mems:
                take(mem, block=False)
            if mems and not watched and not wait:
                raise Busy("every memory is already being built by another watcher (see lock.json); use --wait to stand by")
            last_scan[0] = time.monotonic()
        _run_with_signals(scheduler, between=look_for_memories)
    finally:
        _close(scheduler, watched.values())
        if embedding:
            embedding.stop()
    return scheduler
