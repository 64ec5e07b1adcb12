"""What to build next in one memory, and the reports on how far its tree is (``survey``, ``estimate``, ``spent``).

A ``Builder`` keeps the frontier of the tree in memory and never scans the whole tree per step:

- **leaves** come from one sequential read of the log; short messages and stored leaves are built already,
  the others enter a window of at most ``WINDOW`` (8) unbuilt leaves, so a leaf starts only when fewer than 8
  unbuilt leaves precede it (``window_size``: 256 while the offline compactor's worker processes build); a leaf
  that failed ``STUCK_TRIES`` times in a row (or was given up) while other calls were answered (its failure its
  own, not the server's) is set aside: retried still, it holds no place in the window (``Builder.set_aside``);
  once every leaf of the window failed so with no call answered, one later leaf is sent as a probe, at most one
  a round of retries (``Builder.probe``): answered, the server works and they are set aside; failed, it is
  parked (it holds no place, and is not retried until a call is answered) and the next round probes the
  leaf after it while fewer than ``FRESH_PROBES`` (4) are parked, else the oldest parked leaf again, a new
  leaf only once the parked ones' failures add up to twice as many as for the last new one (past the log's
  end, the oldest parked leaf; ``Builder._fresh``). So a server that answers nothing is sent the window's 8
  calls and one probe a round, and ``compactor.json`` records a dozen or so failing leaves a day, not one
  more a round; eight leaves that always fail stall the log for a few rounds, twelve or more for ever more
  rounds, unless the server refuses them for what they hold (HTTP 400, 413, 422: too long, say), which
  tells nothing of the server: the probe after such a leaf is a new one, so those are passed one a round;
- **merges**: when a node is built and its sibling is too, the parent is settled at once (stored, free, or
  queued); queued merges are taken lowest level first, then oldest;
- a **failed** node waits ``retry_seconds`` (10 s), twice that if it fails again, and so on up to ``BACKOFF``
  times it (a minute), counting its failures in a row as ``compactor.json`` does, across runs, or what the server
  asked for with ``Retry-After`` (sooner or later), and goes back to its queue, for ever (``build-tree``:
  ``retries`` times, and not when the server asks for more than ``ONCE_RETRY_WAIT``, a minute: the next run
  retries it); a node an earlier run failed (or gave up) waits for the retry time it recorded, if that is still
  to come (``Builder._deferred``).

Only the texts of built nodes whose parent is not built yet are kept (the frontier), so memory stays small.
A builder runs in one of two modes: ``BUILD`` (the scheduler drives it: calls, writes) or ``SURVEY`` (one read
of the log admits every unbuilt leaf, keeping only its size; no compactor, nothing written). How builders are
run (threads, the loop, signals, ``build-tree`` and ``watch``) is ``pimem.scheduler``'s.
"""

from __future__ import annotations

import bisect
import datetime
import enum
import heapq
import itertools
import threading
import time
from array import array
from collections import deque
from dataclasses import dataclass

from . import env, when
from .compactor import CallFailed, Compactor, Task, worker
from .compactor import label as compactor_label
from .compactor.state import BuildState
from .config import compactor_knob
from .errors import Busy, LeaseLost, PimemError
from .message import is_tool, name_bytes
from .tree import PAID, context_end, free_leaf, free_merge, label, recorded
from .view import STUCK_TRIES, View, render_line, waits_on

WINDOW = 8
FRESH_PROBES = 4  # probes of leaves never tried before any parked leaf is probed again (``Builder._fresh``)
CACHE_LEAST = 1024  # tokens: a shorter prefix Anthropic does not cache
MARKER_BYTES = 48  # about what a tool message shows a compactor in its place (``privacy.marker``: its kind, what
# it ran, "(details hidden; include tools to see it)")
HELD_MOST = 1 << 20  # bytes of leaves the compactor's view holds back at most (``ContextView.push``)
LATE_CALLS = 3 * WINDOW  # calls in since one holding the compactor's view up started: it is late (``ContextView``)
MAX_RETRY_WAIT = 300.0  # a Retry-After beyond this is not honoured in full
LEAST_RETRY_WAIT = 1.0  # a Retry-After below this (0: at once) is not honoured in full, nor retry_seconds
BACKOFF = 6  # a node failing again and again (no Retry-After) waits up to this many times retry_seconds
ONCE_RETRY_WAIT = 60.0  # build-tree asked by the server to wait longer for a node leaves it to the next run
FLUSH_SECONDS = 0.2  # at least this often while nodes wait to be written (what a crash can cost)
OFFLINE_FLUSH_SECONDS = 2.0  # offline nodes are cheap to redo, and every write saves the whole view.json (over a
# backlog: once nothing more is ready to build, what was built is written at once, ``drained``)


class Mode(enum.Enum):
    BUILD = "build"  # admit WINDOW unbuilt leaves at a time, build them, write what was built
    SURVEY = "survey"  # admit every unbuilt leaf in one read, keep only sizes; build and write nothing


@dataclass
class Stats:
    calls: int = 0  # nodes a compactor built that were written (one ``built`` event each)
    free: int = 0  # nodes built without a call above those (``Builder._settle``)
    failed: int = 0  # failed attempts
    tokens_in: int = 0
    tokens_out: int = 0
    tokens_cached: int = 0  # of tokens_in, read from the provider's prompt cache
    cost: float = 0.0
    seconds: float = 0.0  # summed call time

    def as_dict(self) -> dict:
        return {k: round(v, 6) if isinstance(v, float) else v for k, v in self.__dict__.items()}


class Builder:
    """One memory's build state: the leaf window, the merge queue, the retry timers, the frontier."""

    def __init__(self, mem, compactor: Compactor | None = None, state: BuildState | None = None, lease=None,
                 retries: int | None = None, mode: Mode = Mode.BUILD, max_cost_per_day: float | None = None):
        self.mem = mem
        self.mode = mode
        self.window_size = WINDOW if mode is Mode.BUILD else float("inf")
        self.name = mem.name
        cfg = mem.config
        self.line_bytes = int(cfg["line_bytes"])
        self.state = state or BuildState(mem.path)
        if mode is Mode.BUILD and lease is not None:  # (calls a builder before this one sent and died with:
            self.state.abandoned()  # billed all the same: at what they cost if answered, else at their worst case)
            self.state.calls_stopped(None)  # (an overbilled call stopped that builder's calls, not this one's)
            self.state.key_refusal(None)  # (the key refused that builder's calls: this one tries it again)
            self.state.unpark_all()  # (that builder's parked leaves: this one has parked none yet)
        self.compactor = (compactor or Compactor(cfg["compactor"], self.state)).for_memory(mem)
        self.retry_seconds = float(compactor_knob(cfg["compactor"], "retry_seconds"))
        self.asked_of = asked_of(self.compactor.cfg)  # (whom a recorded retry time holds back: ``_deferred``)
        workers = cfg["compactor"].get("workers")  # the offline compactor's processes, at most (checked in config)
        self.workers = worker.MOST if workers is None else workers
        self.retries = retries  # None: for ever (watch); n: at most n retries per node (build-tree)
        self.lease = lease
        self.max_cost_per_day = max_cost_per_day  # dollars a local day (``watch``); None: no cap
        self.cap_is_setting = False  # whether that is the memory's max_cost_per_day (``watch``: no flag overrides it)
        self._day: tuple[str, float] | None = None  # (the day, what the compactor's nodes of that day cost)
        self.stats = Stats()
        self.answered = 0  # calls answered with a line in this run, written or not
        self.unwritten: set[tuple[int, int]] = set()  # lines built in this run not known written yet (``written``)
        self._freed: dict[tuple[int, int], int] = {}  # of those, line -> the free joins that wait for it
        self.count = mem.count()
        self.stored = mem.tree.stored_keys(self.count)
        self.frontier: dict[tuple[int, int], str | None] = {}  # built, parent not built; None = stored, text not read
        # of the frontier, the nodes this run wrote or that join one it wrote -> that line
        self.fresh: dict[tuple[int, int], tuple[int, int]] = {}
        self.window: list[int] = []  # unbuilt leaves admitted, ascending
        self.first_failed: dict[int, int] = {}  # leaf failing in this run -> ``answered`` at its first failure
        self.stuck: set[int] = set()  # leaves that failed STUCK_TRIES times in a row (or were given up) with no
        # call answered since they began failing (the server's failure, for all anyone knows)
        self.set_aside: set[int] = set()  # leaves that kept failing while other calls were answered: they hold no
        # place in the window (each its own failure: eight of them filled it, and no later leaf was built)
        self.probe: int | None = None  # the leaf sent past a window of stuck leaves, to learn if the server works
        self.parked: list[int] = []  # probes that failed (and leaves an earlier run failed, passed over for the
        # probe): no place in the window, not retried until a call is answered (``_answered``); past the log's
        # end, the probes (``_parked_probe``)
        self.probes = 0  # probes failed in a row in this run
        self.probe_due: float | None = None  # (monotonic) no probe before this: one a round of retries
        # build-tree: the server asked to wait more than ONCE_RETRY_WAIT for the last probe, so the run sends no
        # more (it sat idle until the next was due, 5 minutes, as it would not for a node)
        self.probes_over = False
        # what a survey for an estimate records (``_survey``): each message's bytes in a view, and per level a
        # byte per node, 1 once settled (two bytes a message: a million messages' tree in 2 MB)
        self.line_costs: array | None = None
        self.leaf_sizes: array | None = None
        self.settled_marks: list[bytearray] | None = None
        self.messages: dict[int, dict] = {}  # the window's messages
        self.ready_leaves: deque[int] = deque()
        self.ready_merges: list[tuple[int, int]] = []  # heap of (l, i)
        self.waiting: list[tuple[float, int, int]] = []  # heap of (due, l, i): failed, waiting to retry
        self.tries: dict[tuple[int, int], int] = {}
        self.gave_up: set[tuple[int, int]] = set()
        self.deferred: set[tuple[int, int]] = set()  # nodes that waited for a retry time an earlier run recorded
        self.inflight: set[tuple[int, int]] = set()
        self.to_write: list[tuple[int, int, str, dict]] = []
        self.written: deque[list] = deque()  # batches the writer thread wrote, until the scheduler tells of them
        self.next_leaf = 0  # the next message the leaf feed reads
        self.settled = 0  # nodes known built (replayed, free or written) in this run
        self._feed = None
        # the compactor's view as the calls see it (a model compactor's builds only: offline needs no context)
        self.cview = ContextView(mem, self._stored_text) if mode is Mode.BUILD and not self.compactor.offline else None
        self._writer = mem.reopened() if mode is Mode.BUILD else None  # the writer thread's own (own caches)
        self._writing: threading.Thread | None = None
        self.flush_seconds = OFFLINE_FLUSH_SECONDS if self.compactor.offline else FLUSH_SECONDS
        self.last_flush = time.monotonic()
        self._write_error: BaseException | None = None
        # (l, i) -> the facts a node was marked ``suspect`` for: none of them is evidence for its parent's line.
        # Read from the tree at the first merge of a model build (None until then), and kept as nodes are built
        self.suspects: dict[tuple[int, int], list] | None = None
        self._suspects_built: dict[tuple[int, int], list] = {}

    # ---- the leaf feed -----------------------------------------------------------------------------------

    def refresh(self) -> bool:
        """Notice messages appended since the last look; True when there are new ones."""
        count = self.mem.count()
        if count > self.count:
            self.count = count
            self._feed = None  # (it ends at the old count: one left would admit nothing until the next look)
            return True
        return False

    def admit(self) -> None:
        """Read the log forward until the window is full (``WINDOW`` unbuilt leaves; a survey's has no limit)
        or the log ends; a window of stuck leaves admits one more, the probe (``probing``), and past the log's
        end, or while the probes are to be parked ones (``_fresh``), the oldest parked leaf is; ``compactor.json``
        marks the leaves parked (``status`` says they wait for an answered call)."""
        while self.next_leaf < self.count:
            probing = len(self.window) - len(self.set_aside) - len(self.parked) >= self.window_size
            if probing and not self.probing(time.monotonic()):
                return
            if probing and self._parked_probe() is not None:
                break
            if self._feed is None:
                self._feed = self.mem.messages(self.next_leaf, self.count)
            msg = next(self._feed, None)
            if msg is None:
                self._feed = None
                return
            i = msg["i"]
            self.next_leaf = i + 1
            if self.line_costs is not None:  # its leaf's line (the message, its summary, or for tool traffic the
                # marker a compactor is shown in its place: ``ContextView``), with its label
                self.line_costs.append((MARKER_BYTES if is_tool(msg) else min(msg["size"], self.line_bytes)) + 8)
                self.leaf_sizes.append(msg["size"] if msg["size"] <= self.line_bytes else 0)  # (0: a summary)
            cview = self.cview if self.cview is not None and i >= self.cview.end else None
            if (0, i) in self.stored:
                if cview is not None:
                    cview.push(self._stored_text(0, i))
                self._settle(0, i, None)
                continue
            text = free_leaf(msg, self.line_bytes)
            if cview is not None:
                cview.push(text, name_bytes(msg) if text is not None and "meta" in msg else 0)
            if text is not None:
                self._settle(0, i, text)
                continue
            self.window.append(i)
            self.messages[i] = msg if self.mode is Mode.BUILD else {"size": msg["size"]}
            if probing and label(0, i) in self.state.failures:  # (an earlier run's probe that failed, or a leaf
                self.parked.append(i)  # of its window: the probe is one not known to fail)
                self.state.park([label(0, i)])  # (rare: a write each is cheap enough)
                if self.cview is not None:
                    self.cview.sending(0, i)
                    self.cview.failed(0, i)
                continue
            if probing:
                self.probe = i
            self.ready_leaves.append(i)
        i = self._parked_probe()
        if i is not None and self.probing(time.monotonic()):
            self.parked.remove(i)
            self.probe = i
            self.ready_leaves.append(i)
            self.state.park(released=[label(0, i)])

    def _parked_probe(self) -> int | None:
        """The parked leaf the next probe is, past the log's end or when it is not to be a new leaf (``_fresh``):
        the oldest (a failed probe is parked last), not one this ``build-tree`` run gave up on."""
        if self.next_leaf < self.count and self._fresh():
            return None
        return next((i for i in self.parked if (0, i) not in self.gave_up), None)

    def _fresh(self) -> bool:
        """Whether the next probe is a leaf never tried (not a parked one again): while fewer than ``FRESH_PROBES``
        leaves are parked, then once the parked leaves' failures (``compactor.json``'s, across runs) add up to
        4·2^(n−3) for n parked, twice as many as for the last new one: a server that answers nothing is sent
        a new leaf ever more rarely, and compactor.json records a few failing leaves, not one more a round. A
        leaf the server refused for what it holds (``refused``: too long, say) tells nothing of the server: it
        is not counted, and the probe after it is a new leaf (such leaves in a row are passed one a probe)."""
        entries = (self.state.failures.get(label(0, i)) for i in self.parked)
        tries = [entry["tries"] for entry in entries if entry and not entry.get("refused")]
        return len(tries) < FRESH_PROBES or sum(tries) >= FRESH_PROBES << (len(tries) - FRESH_PROBES + 1)

    def probing(self, now: float) -> bool:
        """Whether a probe may be sent now: every leaf holding a place in the window failed ``STUCK_TRIES``
        times in a row (or was given up) with no call answered since (``stuck``), no probe is out, and the one
        before it failed a retry's wait ago (``build-tree``: no more than ``retries`` + 1 probes a run)."""
        held = len(self.window) - len(self.set_aside) - len(self.parked)
        return (self.probe is None and held >= self.window_size and len(self.stuck) >= held
                and (self.probe_due is None or self.probe_due <= now)
                and (self.retries is None or (self.probes <= self.retries and not self.probes_over)))

    def summarised(self, i: int) -> bool:
        """Whether message ``i`` lies under a node a compactor wrote (one lookup a level)."""
        return any((l, i >> l) in self.stored for l in range(self.count.bit_length() + 1))

    # ---- settling built nodes ----------------------------------------------------------------------------

    def _stored_text(self, l: int, i: int) -> str | None:
        return self.mem.tree.stored(l, i, self.count) if (l, i) in self.stored else None

    def _text(self, l: int, i: int) -> str:
        text = self.frontier[(l, i)]
        if text is None:
            text = self.frontier[(l, i)] = self.mem.tree.stored(l, i, self.count)
        return text

    def _settle(self, l: int, i: int, text: str | None, written: bool = False) -> None:
        """Node ``(l, i)`` is built (``text`` None: stored, read when needed; ``written``: by this run); settle
        its ancestors. A free one is counted in ``stats.free`` only when it joins a line this run wrote, once
        that line is on disk (``written``): the others (a short message's leaf, and every join of them) were free
        before any run, and a run that built nothing said "151 free" again each time."""
        line = (l, i) if written else None  # the line this run wrote that the node is or joins
        while True:
            self.settled += 1
            if self.settled_marks is not None:
                self.settled_marks[l][i] = 1
            sibling = (l, i ^ 1)
            if sibling not in self.frontier:
                self.frontier[(l, i)] = text
                if line is not None:
                    self.fresh[(l, i)] = line
                return
            line = line or self.fresh.pop(sibling, None)  # (of two lines, the later is written last)
            parent = (l + 1, i >> 1)
            if parent in self.stored:
                parent_text, line = None, None  # (an earlier run's)
            else:
                self.frontier[(l, i)] = text
                left, right = (self._text(l, i), self._text(*sibling)) if i % 2 == 0 else (self._text(*sibling), self._text(l, i))
                parent_text = free_merge(left, right, self.line_bytes)
                if parent_text is None:
                    heapq.heappush(self.ready_merges, parent)
                    return
                if line in self.unwritten:
                    self._freed[line] = self._freed.get(line, 0) + 1
                elif line is not None:
                    self.stats.free += 1
            self.frontier.pop(sibling)
            self.frontier.pop((l, i), None)
            l, i, text = parent[0], parent[1], parent_text

    def built(self, l: int, i: int, text: str, meta: dict) -> None:
        """A compactor wrote node ``(l, i)``: queue the write, update the stats, settle its ancestors."""
        self.inflight.discard((l, i))
        self.to_write.append((l, i, text, meta))
        self.unwritten.add((l, i))
        self.stored.add((l, i))
        self.answered += 1
        self._paid(meta)
        self.stats.seconds += meta.get("seconds") or 0.0
        self.tries.pop((l, i), None)
        if meta.get("suspect"):
            self._suspects_built[(l, i)] = meta["suspect"]
        if self.state.failures:
            self.state.succeeded(label(l, i))
        if self.stuck or self.parked or self.probe is not None:
            self._answered()
        if l == 0:
            self.window.remove(i)
            self.set_aside.discard(i)
            self.first_failed.pop(i, None)
            self.messages.pop(i, None)
        if self.cview is not None:
            self.cview.built(l, i, text)
        self._settle(l, i, text, written=True)

    def _answered(self) -> None:
        """A call was answered: the server works, the stuck leaves' failures are their own. They are set aside,
        and so are the parked ones, retried now (those ``build-tree`` gave up on: by the next run)."""
        self.set_aside |= self.stuck
        self.stuck.clear()
        self.state.park(released=[label(0, i) for i in self.parked])
        for i in self.parked:
            self.set_aside.add(i)
            if (0, i) not in self.gave_up:
                self.ready_leaves.append(i)
        self.parked.clear()
        self.probe = self.probe_due = None
        self.probes = 0
        self.probes_over = False

    def _paid(self, meta: dict) -> None:
        self.stats.tokens_in += meta.get("tokens_in") or 0
        self.stats.tokens_out += meta.get("tokens_out") or 0
        self.stats.tokens_cached += meta.get("tokens_cached") or 0
        self.stats.cost += meta.get("cost") or 0.0
        if self._day is not None:
            day, spent = self.spent_today()
            self._day = (day, spent + (meta.get("cost") or 0.0))

    def said(self, l: int, i: int, error: str) -> str:
        """A call's ``error`` as pimem records and says it (``compactor.json``, ``status``, ``build-tree``, the
        watcher's events): a provider's words may quote what it was sent, so its secrets are redacted as the
        request's were, and what only the tool traffic of node ``(l, i)``'s span holds is masked as in a
        summary of it (``privacy.mask_span``)."""
        from .compactor.redact import redact
        from .privacy import mask_span

        return mask_span(redact(error), i << l, (i + 1) << l, self.mem.messages, self.mem.span_holds)

    def billed(self, spent: dict | None) -> None:
        """What the requests of a call that built nothing were billed all the same (``spent``: an empty reply is)
        counts against ``--max-cost`` and today's cap, and is kept in compactor.json (no node records it) for the
        daily cap across restarts."""
        self._paid(spent or {})
        if (spent or {}).get("cost"):
            self.state.paid_unbuilt(env.now().date().isoformat(), spent["cost"])

    def failed(self, l: int, i: int, error: str, retry_after: float | None = None, spent: dict | None = None,
               refused: bool = False) -> str:
        """A call for node ``(l, i)`` failed: retried later (or given up past ``retries``); what its answered
        requests cost (``spent``: an empty reply is billed) counts against ``--max-cost`` and today's cap;
        ``refused``: the server refused it for what it holds (``CallFailed.refused``). Returns the error as
        recorded (``said``)."""
        error = self.said(l, i, error)
        self.inflight.discard((l, i))
        self.stats.failed += 1
        self.billed(spent)
        tries = self.tries[(l, i)] = self.tries.get((l, i), 0) + 1
        gives_up = self.retries is not None and tries > self.retries
        probe = l == 0 and i == self.probe
        # twice as long each time it fails again in a row, as compactor.json counts, across runs (a server down,
        # or a request it always refuses, is not asked again every retry_seconds for ever, nor by each new
        # builder), up to BACKOFF times retry_seconds; a probe, each time a probe fails again in this run
        in_a_row = self.probes + 1 if probe else self.state.failures.get(label(l, i), {"tries": 0})["tries"] + 1
        delay = self.retry_seconds * min(2 ** min(in_a_row - 1, 8), BACKOFF)
        if retry_after is not None:  # (what the server asked for, sooner or later, within bounds)
            delay = min(max(retry_after, min(self.retry_seconds, LEAST_RETRY_WAIT)), MAX_RETRY_WAIT)
        # a one-shot build does not sleep minutes for one node (a cron run every 10 minutes would still be waiting
        # when the next one starts): the node is left for the next run, its retry time recorded all the same
        later = self.retries is not None and not gives_up and retry_after is not None and delay > ONCE_RETRY_WAIT
        now = env.now()
        try:  # (a node given up keeps its retry time: the next builder honours it, as this one would have)
            retry = when.rfc3339(now + datetime.timedelta(seconds=delay))
        except OverflowError:  # (a clock set to the year 9999)
            retry = None
        self.state.failed(label(l, i), error, when.rfc3339(now), retry, self.asked_of, parked=probe, refused=refused)
        in_a_row = self.state.failures[label(l, i)]["tries"]  # (as compactor.json counts, across runs, as readers count it)
        if probe:  # (parked until a probe is answered; the next one, a leaf after it, a round from now)
            self.probe = None
            self.probes += 1
            self.probe_due = time.monotonic() + delay
            self.parked.append(i)
            if self.cview is not None:
                self.cview.failed(l, i)
            if gives_up or later:
                self.gave_up.add((l, i))
            self.probes_over = self.probes_over or later
            return error
        if l == 0 and i not in self.set_aside:
            since = self.first_failed.setdefault(i, self.answered)
            if in_a_row >= STUCK_TRIES or gives_up or later:
                (self.set_aside if self.answered > since else self.stuck).add(i)
        if self.cview is not None:
            self.cview.failed(l, i, retried=not (gives_up or later) and in_a_row < STUCK_TRIES)
        if gives_up or later:
            self.gave_up.add((l, i))
            return error
        heapq.heappush(self.waiting, (time.monotonic() + delay, l, i))
        return error

    # ---- what to build next ------------------------------------------------------------------------------

    def next_task(self, now: float) -> Task | None:
        """The next node to build, or None: a ready merge first (lowest level, then oldest), then a leaf. A
        merge starts as soon as both halves exist, beside the leaves, so the compactor's view can fold the
        history already built while the rest is still being summarised: a backlog's context stays near the
        view's budget instead of growing with every leaf that waits for its parent."""
        while self.waiting and self.waiting[0][0] <= now:
            _, l, i = heapq.heappop(self.waiting)
            if l == 0:
                self.ready_leaves.appendleft(i)
            else:
                heapq.heappush(self.ready_merges, (l, i))
        self.admit()
        recorded = self.state.failures and not self.compactor.offline  # (an earlier run's may wait: ``_deferred``)
        while self.ready_merges:
            l, i = heapq.heappop(self.ready_merges)
            if recorded and self._deferred(l, i):
                continue
            self.inflight.add((l, i))
            if self.suspects is None and not self.compactor.offline:
                self.suspects = suspect_marks(self.mem)
            return Task(l, i, left=self._text(l - 1, 2 * i), right=self._text(l - 1, 2 * i + 1), limit=self.line_bytes)
        while self.ready_leaves:
            i = self.ready_leaves.popleft()
            if recorded and self._deferred(0, i):
                continue
            msg = self.messages[i]
            self.inflight.add((0, i))
            return Task(0, i, kind=msg["kind"], text=msg["text"], meta=msg.get("meta"), date=msg.get("date"),
                        limit=self.line_bytes)
        return None

    def _deferred(self, l: int, i: int) -> bool:
        """Whether node ``(l, i)``, not tried by this builder yet, waits for the retry time an earlier run recorded
        (``compactor.json``: what a server asked with ``Retry-After``, or ``retry_seconds``) instead of going now:
        a new builder called it at once, so a server that asked a run to wait was asked again straight away. It
        waits until then (``MAX_RETRY_WAIT`` at most, in case the clock moved), held in the compactor's view as a
        call failing now would be; ``build-tree`` leaves it to the next run, a failed node whose error and retry
        time stay as recorded, when that is more than ``ONCE_RETRY_WAIT`` away. A time past, or none, or one
        recorded for another compactor (the memory's was switched since: ``asked_of``): it goes."""
        if (l, i) in self.tries or (l, i) in self.deferred:
            return False
        entry = self.state.failures.get(label(l, i))
        if entry is None or "retry" not in entry or entry.get("compactor", self.asked_of) != self.asked_of:
            return False
        wait = (datetime.datetime.fromisoformat(entry["retry"]) - env.now()).total_seconds()
        if wait <= 0:
            return False
        self.deferred.add((l, i))
        later = self.retries is not None and wait > ONCE_RETRY_WAIT
        if self.cview is not None:
            self.cview.sending(l, i)
            self.cview.failed(l, i, retried=not later and entry["tries"] < STUCK_TRIES)
        if later:
            self.gave_up.add((l, i))
        else:
            heapq.heappush(self.waiting, (time.monotonic() + min(wait, MAX_RETRY_WAIT), l, i))
        return True

    def spent_today(self) -> tuple[str, float]:
        """Today's local date and what this memory's compactor spent today: the nodes built today (read from
        the tree once, then kept up as nodes are built) and the calls that built none (``compactor.json``)."""
        today = env.now().date().isoformat()
        if self._day is None:
            self._day = (today, spent(self.mem, day=today)["cost"] + self.state.unbuilt_cost.get(today, 0.0))
        elif self._day[0] != today:
            self._day = (today, 0.0)
        return self._day

    def put_back(self, task: Task) -> None:
        """A task ``next_task`` gave that will not start now (no budget for it): back to the front of its queue."""
        self.inflight.discard((task.l, task.i))
        if self.cview is not None:
            self.cview.unsent(task.l, task.i)
        if task.l == 0:
            self.ready_leaves.appendleft(task.i)
        else:
            heapq.heappush(self.ready_merges, (task.l, task.i))

    def build(self, task: Task, context: str = "") -> tuple[str, dict]:
        """The compactor's line for ``task`` with the faithfulness guard (``compactor.faith``): a model line
        naming a number, path or identifier its span does not hold is asked for once more, and the second
        one (the first, when the second call fails) is kept with ``suspect`` listing what it names unfounded;
        such a node's metadata says ``asked_again`` and counts both calls' tokens and cost. Runs on a pool thread."""
        text, meta = self.compactor.build(task, context)
        if self.compactor.offline:
            return text, meta
        from .compactor import faith

        inputs = [task.text] if task.l == 0 else [task.left, task.right]
        inherited = self._inherited(task)
        missing = faith.unfounded(text, inputs, lambda: self._span_texts(task), inherited)
        if missing and not faith.inherited(text, missing, inherited):  # (a line only repeating its children's
            # unfounded facts, however written, is not asked again)
            first = text
            try:
                text, again = self.compactor.build(task, context)
            except CallFailed as exc:  # asked once more, with no answer: the first line is kept, marked
                again = {"model": meta.get("model"), **{key: exc.spent[key] for key in PAID if key in exc.spent}, "seconds": 0.0}
                text = first
            for key in (*PAID, "seconds"):  # both calls are paid for
                if again.get(key) is not None or meta.get(key) is not None:
                    again[key] = round((again.get(key) or 0) + (meta.get(key) or 0), 8)
            meta = {**again, "asked_again": True}  # (what the dry run scales its next estimate by)
            missing = missing if text == first else faith.unfounded(text, inputs, lambda: self._span_texts(task), inherited)
        if missing:
            meta["suspect"] = missing[: faith.MAX_LISTED]
        return text, meta

    def _inherited(self, task: Task) -> set[str]:
        """The facts a merge's two child lines were marked ``suspect`` for (looked up in its span instead)."""
        if task.l == 0:
            return set()

        def marked(l: int, i: int):
            return self._suspects_built.get((l, i)) or (self.suspects or {}).get((l, i))

        def stored(l: int, i: int) -> bool:
            return (l, i) in self.stored

        return shown_marks(task.l - 1, 2 * task.i, marked, stored) | shown_marks(task.l - 1, 2 * task.i + 1, marked, stored)

    def _span_texts(self, task: Task) -> list[str]:
        """The texts of the messages under ``task``'s node, read with a Memory of this thread's own."""
        reader = type(self.mem)(self.mem.name, self.mem.path, self.mem.home)
        try:
            return [m["text"] for m in reader.messages(task.i << task.l, (task.i + 1) << task.l)]
        finally:
            reader.close()

    def next_due(self) -> float | None:
        due = self.waiting[0][0] if self.waiting else None
        probe = self._probe_due()
        return probe if due is None or (probe is not None and probe < due) else due

    def _probe_due(self) -> float | None:
        """When the next probe goes, if one is to go (``probing`` once that time has come)."""
        if (self.probe_due is None or (self.next_leaf >= self.count and self._parked_probe() is None)
                or not self.probing(self.probe_due)):
            return None
        return self.probe_due

    def drained(self) -> bool:
        """Nothing in flight, nothing ready and every message read: what was built is all there is to write
        for now, so it is written at once (a reader waits for it) rather than after ``flush_seconds``."""
        return not (self.inflight or self.ready_leaves or self.ready_merges) and self.next_leaf >= self.count

    def idle(self) -> bool:
        """Nothing in flight, nothing ready, nothing waiting for a retry, no probe to come."""
        return not (self.inflight or self.ready_leaves or self.ready_merges or self.waiting or self._probe_due() is not None)

    def context(self, task: Task) -> str:
        """The compactor's view up to the task's boundary (``ContextView``); empty for offline builds."""
        if self.cview is None:
            return ""
        self.cview.sending(task.l, task.i)
        return self.cview.context(task.l, task.i)

    def flush(self, wait: bool = False) -> None:
        """Write what was built, on a writer thread so calls keep flowing while the disk syncs (one batch at a
        time; what is built meanwhile waits for the next). ``wait``: write everything before returning.
        ``LeaseLost`` once another process holds this memory's lease: nothing more is written."""
        if self._writing is not None and (wait or not self._writing.is_alive()):
            self._writing.join()
            self._writing = None
            self._raise_write_error()
        if self._writing is not None or not self.to_write:
            return
        batch, self.to_write = self.to_write, []
        if wait:
            self._write(batch)
            self._raise_write_error()  # (the disk full on the last batch: said, not dropped)
            if self.to_write:  # (put back: the writer lock was busy)
                self.flush(wait=True)
            return
        self._writing = threading.Thread(target=self._write, args=(batch,), daemon=True)
        self._writing.start()

    def writing(self) -> bool:
        """Whether a batch is being written now."""
        return self._writing is not None and self._writing.is_alive()

    def next_written(self) -> list | None:
        """The oldest batch the writer thread wrote that is not told of yet (None: none), counted now in
        ``stats``: its lines in ``calls``, the free joins that waited for them in ``free``."""
        if not self.written:
            return None
        batch = self.written.popleft()
        for l, i, _, _ in batch:
            self.unwritten.discard((l, i))
            self.stats.free += self._freed.pop((l, i), 0)
        self.stats.calls += len(batch)
        return batch

    def _raise_write_error(self) -> None:
        error, self._write_error = self._write_error, None
        if error is not None:
            raise error

    def _write(self, batch: list) -> None:
        try:
            if self.lease is not None and not self.lease.owned():
                raise LeaseLost(f"memory '{self.name}' was taken over by another builder")
            self._writer.write_nodes(batch)
            self.written.append(batch)
            self.state.settled(label(l, i) for l, i, _, _ in batch)  # (their cost is on them now)
        except Busy:  # a long writer holds the lock: keep the batch for the next flush
            self.to_write[:0] = batch
        except BaseException as exc:  # handed to the scheduler's thread by the next flush
            self._write_error = exc


class ContextView:
    """The compactor's view as the calls see it: over the messages the builder has read so far, not over the
    whole log, folded as their nodes are built, as a compactor keeping up with a live conversation would have
    had it. Over the whole log, a backlog (an import, then ``build-tree``) would show each call the rest of
    the history as placeholders and verbatim short messages, leaving room for only a sliver of what came
    before; over what was read so far, each call sees its past within the view's budget (``cview`` lo–hi).

    The builder pushes every message it reads (its leaf's text, or None while unbuilt: it and the leaves after
    it are held back until it is built, and so are the leaves that come while the view's batch waits for a
    merge in flight; a node whose call failed holds nothing back) and every node a compactor writes;
    ``stored_text(l, i)`` gives nodes written before this run. A memory whose compactor kept up (``kept_up``:
    its saved compactor view within twice its budget, and little of it from its first unbuilt line on) starts
    from that view cut there, which is this very view over the log so far, so only the messages after it are
    pushed; one with a backlog, or stopped far behind its log, starts from its first message.
    Rendered lines are kept until the view changes, so a call costs a bisection, not a render."""

    PRUNE_EVERY = 4096  # built texts kept before those the view no longer needs are dropped

    def __init__(self, mem, stored_text):
        cfg = mem.config
        self.mem = mem
        self.line_bytes = int(cfg["line_bytes"])
        self.stored_text = stored_text
        self.shown: dict[tuple[int, int], str] = {}  # each line as a reader sees it (tool traffic taken out)
        self.texts: dict[tuple[int, int], str] = {}  # nodes built in this run (a parent the view may want)
        self.held: deque[str | None] = deque()  # leaves from the first unbuilt one on, not pushed yet (``push``)
        self.held_bytes = 0  # their bytes, about: past ``HELD_MOST`` (or 2·hi) they are pushed all the same
        self.failing: set[tuple[int, int]] = set()  # nodes whose call failed: they hold nothing back (a leaf's
        # line is not shown either); and those whose call is late (``_late``)
        self.sent: dict[tuple[int, int], int] = {}  # node in flight -> ``done`` when its call started
        self.done = 0  # calls in (built or failed)
        self.named: dict[int, int] = {}  # leaf i -> what its speaker's name adds to it (``View.push``), if any
        self.view = View(int(cfg["cview"]["hi"]), int(cfg["cview"]["lo"]), self._resolve,
                         fetch=lambda l, i: mem.tree.text(l, i), stuck=self._stuck,
                         named=lambda l, i, text: mem.tree.named(l, i, text), line_bytes=self.line_bytes)
        # (view.changes, lines, each one's end, the bytes of the lines before each and of all of them)
        self._rendered: tuple[int, list[str], list[int], list[int]] | None = None
        saved = kept_up(mem)
        if saved is not None:
            self.view.load(saved.to_json())

    def _resolve(self, l: int, i: int, left: str, right: str) -> str | None:
        """The parent of the pair at ``(l, i)`` if it is built: free, built in this run, or stored."""
        parent = (l + 1, i >> 1)
        return free_merge(left, right, self.line_bytes) or self.texts.get(parent) or self.stored_text(*parent)

    def _stuck(self, l: int, i: int) -> bool:
        """Whether the pair at ``(l, i)`` waits on a failed call (its parent's, or a leaf's of its own): the
        view's batch folds the rest around it rather than wait (which kept later calls' views near 2·hi)."""
        return bool(self.failing) and any(node in self.failing for node in waits_on(l, i))

    @property
    def end(self) -> int:
        """The messages pushed so far, those still held back included."""
        return self.view.T + len(self.held)

    def push(self, text: str | None, named: int = 0) -> None:
        """The next message's leaf (None: not built yet; ``named``: what its speaker's name adds to it,
        ``message.name_bytes``, counted as the model's view counts it). A leaf after an unbuilt one is held back
        until those before it are built, as a live conversation's would not have arrived yet: a call is shown
        nothing past its first unbuilt line anyway, and a placeholder in the view would hold its batch up (its most due pair
        is then a recent one waiting for a leaf in flight) while the leaves after it are sent the unfolded
        view (a median of 1.5-2x ``hi`` when ``hi`` holds a few dozen lines). So is a leaf that comes while the
        batch waits for a merge (``_waits``)."""
        if named and text is not None:
            self.named[self.end] = min(named, self.line_bytes - len(text.encode()))
        if text is None or self.held or self._waits():
            self.held.append(text)
            self.held_bytes += _held_bytes(text)
            self._late()
            if self.held_bytes > max(2 * self.view.hi, HELD_MOST):  # (what they wait for is not coming: a
                self._release(everything=True)  # watcher over its daily cap, say)
            return
        self._push(text)
        self.view.fit()

    def _push(self, text: str | None) -> None:
        extra = self.named.pop(self.view.T, 0) if self.named else 0
        self.view.push(text, extra=extra if text is not None and extra > 0 else 0)

    def _late(self) -> None:
        """The call holding the view up (the first held-back leaf's, or the merge the batch waits for) is late once
        ``LATE_CALLS`` calls are in since it started (two thirds of them started after it, 8 at once), as a
        provider's slowest are (seconds where most take tenths, or a call that hangs to its timeout): held back
        behind it, the calls after it were shown a view ever further behind their messages (a median of 74
        messages with one call in 20 taking 2 s, up to 539 with a heavy tail). A late node is taken for one whose
        call failed until it is built: the view folds around it and a call is shown the lines past it without
        its own."""
        while True:
            if self.held and self.held[0] is None:
                node = (0, self.view.T)
            elif self.held and self._waits():
                l, i = self.view.best()
                node = (l + 1, i >> 1)
            else:
                return
            if node not in self.sent or self.done - self.sent[node] < LATE_CALLS:
                return
            self.failing.add(node)
            self._rendered = None
            if node[0] == 0:
                self.held.popleft()
                self.held_bytes -= _held_bytes(None)
                self._push(None)
            self.view.fit()
            self._release()

    def sending(self, l: int, i: int) -> None:
        """A call for node ``(l, i)`` starts (``_late`` counts the calls that come in after it started)."""
        self.sent[(l, i)] = self.done

    def unsent(self, l: int, i: int) -> None:
        """The call for node ``(l, i)`` did not start after all."""
        self.sent.pop((l, i), None)

    def _waits(self) -> bool:
        """Whether the view's batch waits for a merge a call is building (or is queued for): within twice
        ``hi``, the most due pair's parent is not built and has not failed. A live build would have had it
        before the next message came, so the leaves after it are held back until it is built (as those after a
        leaf in flight are: a slow call holds up the view the calls after it are shown, up to ``HELD_MOST``)."""
        view = self.view
        if not view.waiting() or view.total > 2 * view.hi:
            return False
        pick = view.best()
        if pick is None or not view.is_blocked(*pick) or (pick[0] + 1, pick[1] >> 1) in self.failing:
            return False
        j = view.find(*pick)
        return view.text(j) is not None and view.text(j + 1) is not None  # (not a failed leaf's pair)

    def _release(self, everything: bool = False) -> None:
        """Push the held-back leaves up to the first unbuilt one, while the batch waits for no merge;
        ``everything``: all of them, unbuilt ones as placeholders (held back past ``HELD_MOST`` bytes, what they
        wait for is not coming soon: the view folds around them as it does past 2·hi)."""
        while self.held and (everything or (self.held[0] is not None and not self._waits())):
            text = self.held.popleft()
            self.held_bytes -= _held_bytes(text)
            self._push(text)
            self.view.fit()

    def failed(self, l: int, i: int, retried: bool = False) -> None:
        """Node ``(l, i)``'s call failed. ``retried``: it failed fewer than ``STUCK_TRIES`` times in a row and is
        retried soon (after a 429's short ``Retry-After``, say), so it is taken for a call still in flight,
        late by the same count (``_late``): folded around at once, each node waiting for its retry was a hole
        no merge can cross, and with one call in 15 refused a dozen of them held contexts near twice ``hi``.
        Otherwise it waits for a retry for ever (under ``watch``, if it fails every time) or not at all, so it
        holds nothing back any more. The leaves held behind it are pushed, it a placeholder among them, and
        the view folds around it (past twice ``hi`` the best pair built) rather than keep every later leaf in
        memory; a call is shown the view's lines without its own (``_shown_lines``), not cut there."""
        self.done += 1
        if retried:
            self._late()
            return
        self.failing.add((l, i))
        self.sent.pop((l, i), None)
        self._rendered = None
        self.view.fit()  # (the batch may have waited for it)
        if l > 0:  # (a merge the batch waited for: it waits no more)
            self._release()
        elif i >= self.view.T:
            self._release(everything=True)
        self._late()

    def built(self, l: int, i: int, text: str) -> None:
        self.texts[(l, i)] = text
        self.sent.pop((l, i), None)
        self.done += 1
        if self.failing and (l, i) in self.failing:
            self.failing.discard((l, i))
            self._rendered = None
        if l == 0 and i >= self.view.T:  # (held back: pushed with those after it once none before is unbuilt)
            self.held[i - self.view.T] = text
            self.held_bytes += _held_bytes(text)
        else:
            self.view.built(l, i, text)
            self.view.fit()
        self._release()
        self._late()
        if len(self.texts) >= self.PRUNE_EVERY and len(self.texts) % self.PRUNE_EVERY == 0:
            self._prune()

    def _prune(self) -> None:
        """Drop the texts of nodes inside a line of their level or coarser: no pair of the view needs them."""
        view = self.view
        for (l, i) in list(self.texts):
            start = i << l
            if start < view.T and view.lines[view.covering(start)][0] >= l:
                del self.texts[(l, i)]

    def context(self, l: int, i: int) -> str:
        """The view's built lines that end at or before node ``(l, i)``'s boundary (``tree.context_end``),
        never more than twice ``hi`` bytes of them: if the view has fallen that far behind, the call is sent
        its oldest lines within ``hi`` and its newest in the rest, not those between (their ids show the gap).
        Within that bound the view is sent whole, so the prefix a prompt cache keeps grows from call to call."""
        if self._rendered is None or self._rendered[0] != self.view.changes:
            lines = self._shown_lines()
            before = [0, *itertools.accumulate(len(line.encode()) + 1 for line in lines)]
            self._rendered = (self.view.changes, lines, [_line_end(line) for line in lines], before)
        _, lines, ends, before = self._rendered
        stop = bisect.bisect_right(ends, context_end(l, i))
        most = 2 * self.view.hi
        if before[stop] <= most:
            return "\n".join(lines[:stop])
        head = bisect.bisect_right(before, most // 2, 0, stop) - 1
        recent = bisect.bisect_left(before, before[stop] - (most - before[head]), head, stop)
        return "\n".join(lines[:head] + lines[recent:stop])

    def _shown_lines(self) -> list[str]:
        """The built lines as a reader without tools sees them (``privacy.hide_tools``), so a call is never
        shown the tool traffic of another span to quote: what a summary quotes of tool traffic is its own
        span's, which the read paths mask. Each line is worked out once (a built line never changes)."""
        from .privacy import hide_tools

        rows = self.view.texts(cut_unbuilt=not self.failing)
        if self.failing:  # (cut at the first unbuilt line but a failed leaf's, which is left out)
            unbuilt = next((k for k, (l, i, text) in enumerate(rows)
                            if text is None and (l, i) not in self.failing), len(rows))
            rows = [row for row in rows[:unbuilt] if row[2] is not None]
        todo = [row for row in rows if row[:2] not in self.shown]
        if todo:
            shown = hide_tools(self.mem.messages, todo, holds=self.mem.span_holds, stored=self.mem.leaf_line,
                               line_bytes=self.mem.tree.line_bytes)
            self.shown.update(((l, i), text) for (l, i, _), text in zip(todo, shown))
        self.shown = {(l, i): self.shown[(l, i)] for l, i, _ in rows}  # (only the lines the view still holds)
        return [render_line(l, i, self.shown[(l, i)]) for l, i, _ in rows]


def asked_of(cfg: dict) -> str:
    """The model and where it is asked (its server's URL, or its command), as a failure records it: a retry
    time one server asked for holds back the calls to that one only (``Builder._deferred``). A password in
    the URL, its query's values and a command's secrets are left out (it is recorded in ``compactor.json`` and
    shown by ``status``: ``shown_setting``)."""
    from .compactor import shown_setting

    key = "base_url" if cfg.get("base_url") else "command"
    where = shown_setting(key, cfg.get(key))
    return f"{compactor_label(cfg)} at {where}" if where else compactor_label(cfg)


def kept_up(mem) -> View | None:
    """The saved compactor's view a build starts from (``ContextView``), when the compactor kept up: within
    twice its budget, and what it holds from its first placeholder on within a batch (``hi`` - ``lo`` bytes).
    It is cut there, as a build's own view stands at its first unbuilt leaf, and the build pushes the messages
    after it. None: a build pushes the log from its first message. (A view saved after a ``--max-cost`` stop
    holds the whole log folded, the leaves left as placeholders far back: a build started from it showed
    each call the few lines before the first placeholder, 2-4 KB against ``hi`` 32,000, where an unstopped
    build shows the view over the messages before the call's node.)"""
    try:
        saved = mem.views.current(create=False)
    except (ValueError, OSError, PimemError):
        return None  # (unreadable: pushed afresh, as for a backlog)
    if saved is None or saved.cview.over():
        return None
    view = saved.cview
    first = next((k for k, line in enumerate(view.lines) if line[2] is None), None)
    if first is None:
        return view
    kept = View(view.hi, view.lo, view.resolve, view.fetch, view.cost, named=view.named, line_bytes=view.line_bytes)
    kept.load(view.to_json())
    return kept if kept.cut(first) <= view.hi - view.lo else None


def _held_bytes(text: str | None) -> int:
    return 8 + (len(text.encode()) if text is not None else 0)


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
    return _survey(mem)[0]


def _survey(mem, detail: bool = False) -> tuple[dict, "Builder"]:
    """``survey``, and the builder that surveyed (``detail``: with its ``line_costs`` and ``settled_marks``)."""
    builder = Builder(mem, mode=Mode.SURVEY)
    if detail:
        builder.line_costs, builder.leaf_sizes = array("I"), array("I")
        builder.settled_marks = [bytearray(builder.count >> l) for l in range(builder.count.bit_length())]
    builder.admit()
    total = tree_size(builder.count)
    return ({"messages": builder.count, "nodes": total, "built": builder.settled, "pending": total - builder.settled,
             "leaves": len(builder.window), "leaf_bytes": sum(m["size"] for m in builder.messages.values()),
             "merges_ready": len(builder.ready_merges)}, builder)


def _context_bytes(surveyed: "Builder", hi: int, lo: int, line_bytes: int, reply_bytes: int,
                   system: int, kept: View | None = None) -> tuple[int, int]:
    """The compactor's view the calls of the rest of a build are shown, on average: a call for node (l, i) is
    shown the compactor's view over the messages before where the view stands when it is sent (``_view_at``:
    its ``context_end``, or behind it for a merge with no unbuilt leaf under it), as ``_shown_views`` runs it
    from the first message; or, when a build starts from the saved view (``kept``: ``kept_up``, cut at its first
    unbuilt line), that view's lines up to there (``_kept_sizes``). And the bytes a cache of marked prefixes
    (Anthropic's: the ``system`` prompt's bytes and the view) would write over those calls: calls whose views
    end at the same message are shown the same view, so the first of them writes its prefix and the others
    read it (a prefix under ``CACHE_LEAST`` tokens is not cached)."""
    if all(marks.find(0) < 0 for marks in surveyed.settled_marks):
        return 0, 0  # (nothing left to build)
    shown = _shown_views(surveyed, hi, lo, line_bytes, reply_bytes)
    pending = surveyed.window  # (the leaves that take a call, ascending)
    ends, before = _kept_sizes(kept, surveyed, reply_bytes) if kept is not None else ([], [0])
    kept_end = kept.T if kept is not None else -1
    total = calls = written = 0
    seen = set()
    for l, marks in enumerate(surveyed.settled_marks):
        i = marks.find(0)
        while i >= 0:  # (the unsettled nodes only: a built tree's few are found at C speed)
            at = _view_at(l, i, pending)
            if at <= kept_end:
                size = before[bisect.bisect_right(ends, at)]
            else:
                size = shown[at]
            size = min(size, 2 * hi)
            total += size
            calls += 1
            if at not in seen and system + size >= 4 * CACHE_LEAST:
                seen.add(at)
                written += system + size
            i = marks.find(0, i + 1)
    return total // max(1, calls), written


def _view_at(l: int, i: int, pending) -> int:
    """Where the compactor's view stands (the messages it holds: it holds back every leaf after the first
    unbuilt one, ``ContextView.push``) when the call for node ``(l, i)`` is sent. The builder's leaf window holds
    ``WINDOW`` unbuilt leaves (``pending``: all of them, ascending), so a leaf, and a merge with no unbuilt leaf
    under it (over short messages, or over lines an earlier run built), goes once the feed reads that far, when
    the first unbuilt leaf is the first of the ``WINDOW`` - 1 before it: a backlog's merges over its last short
    turns, left by a ``--max-cost`` stop, are all shown the view there, not the view over the messages before
    each. A merge over an unbuilt leaf goes once that leaf is built, and one with no unbuilt leaf before it
    once the view has moved on past it: taken at its ``context_end``."""
    k = bisect.bisect_left(pending, i << l)  # (the unbuilt leaves before it: a leaf's own place)
    end = context_end(l, i)
    if k == 0 or (l and k < len(pending) and pending[k] < end):
        return end
    return pending[max(0, k - WINDOW + 1)]


def _kept_sizes(view: View, surveyed: "Builder", reply_bytes: int) -> tuple[list[int], list[int]]:
    """The saved view a build starts from as a call is shown its lines: where each ends, and the bytes of the
    lines before each. Each line on its size alone, as ``_shown_views`` takes it: a leaf's (or a placeholder's
    once built), a stored line a reply of ``reply_bytes``, a free line its two halves joined. No text is read."""
    costs, sizes = surveyed.line_costs, surveyed.leaf_sizes

    def shown(l: int, i: int) -> int:
        if l == 0:
            return min(sizes[i] or reply_bytes, costs[i] - 8)
        if (l, i) in surveyed.stored:
            return reply_bytes
        return shown(l - 1, 2 * i) + 1 + shown(l - 1, 2 * i + 1)  # (a free line: within a line's bytes)

    ends, before = [], [0]
    for l, i, _, _ in view.lines:
        ends.append((i + 1) << l)
        before.append(before[-1] + shown(l, i) + 8)
    return ends, before


def _shown_views(surveyed: "Builder", hi: int, lo: int, line_bytes: int, reply_bytes: int) -> array:
    """For each message count ``e``, the bytes of the compactor's view over the first ``e`` messages as a call
    is shown them (``ContextView``): the view run as a build runs it, on the lines' sizes alone (a line is a
    pair: its bytes in the view's count, and as a call is shown it, tool traffic as a marker), every node
    built as soon as it is asked for (a leaf as the message, or a summary of ``reply_bytes`` past
    ``line_bytes``; a merge as its two lines joined when they fit in one, else a summary)."""
    class Sizes(View):
        shown = 0

        def push(self, text, size=None, cost=None):
            self.shown += text[1] + 8
            super().push(text, size, cost)

        def _merge(self, l, i, text):
            j = self.find(l, i)
            self.shown += text[1] - self.lines[j][2][1] - self.lines[j + 1][2][1] - 8
            super()._merge(l, i, text)

    def resolve(l, i, left, right):
        joined = left[0] + 1 + right[0]
        return (joined, left[1] + 1 + right[1]) if joined <= line_bytes else (reply_bytes, reply_bytes)

    view = Sizes(hi, lo, resolve, cost=lambda l, i, text, size: text[0] + 8)
    out = array("Q", [0])
    for size, cost in zip(surveyed.leaf_sizes, surveyed.line_costs):
        stored = size or reply_bytes
        view.push((stored, min(stored, cost - 8)))
        view.fit()
        out.append(view.shown)
    return out


def _reply_bytes(mem, line_bytes: int) -> int:
    """The bytes of the lines this memory's model compactor wrote, on average (at most ``line_bytes``)."""
    sizes = [node["size"] for node in mem.tree.records(b'"tokens_in"') if type(node.get("size")) is int
             and node.get("tokens_in")]
    return min(line_bytes, round(sum(sizes) / len(sizes))) if sizes else line_bytes


def _merge_calls(surveyed: "Builder", reply_bytes: int, line_bytes: int) -> tuple[int, int]:
    """The pending merges that will take a call: those whose two child lines, built or foreseen (a
    compactor's line taken for ``reply_bytes``, a free join for its two lines), do not fit in one line
    together. A short message beside a summary, or two short summaries, join free. Returns the calls and
    the bytes of the lines they are given."""
    # (a stored line's text, None in the frontier, is read only where it decides a pending merge)
    size = {node: None if text is None else len(text.encode()) for node, text in surveyed.frontier.items()}
    for i in surveyed.window:
        size[(0, i)] = reply_bytes
    calls = given = 0
    for l, marks in enumerate(surveyed.settled_marks):
        if l == 0:
            continue
        i = marks.find(0)
        while i >= 0:
            halves = []
            for child in ((l - 1, 2 * i), (l - 1, 2 * i + 1)):
                if size.get(child, 0) is None:
                    size[child] = len(surveyed._text(*child).encode())
                halves.append(size.get(child, reply_bytes))
            joined = halves[0] + 1 + halves[1]
            if joined <= line_bytes:
                size[(l, i)] = joined
            else:
                size[(l, i)] = reply_bytes
                calls += 1
                given += joined
            i = marks.find(0, i + 1)
    return calls, given


def _asked_again(mem, model: str) -> float:
    """The share of the nodes ``model`` wrote in this memory that the faithfulness guard asked for again
    (``asked_again`` in their metadata: a second call, sent the same request); 0 before any."""
    nodes = asked = 0
    for node in mem.tree.records(b'"tokens_in"'):
        if node.get("model") == model:
            nodes += 1
            asked += node.get("asked_again") is True
    return asked / nodes if nodes else 0.0


def _task_bytes(line_bytes: int) -> tuple[int, int]:
    """What a leaf's and a merge's request carry besides the system prompt, the view and their input: the
    ``<chat>`` tags, the task's words and its ruler, ``line_bytes`` long (a node's label taken for 6 digits)."""
    from .compactor import prompt as prompts

    tags = len(prompts.chat("-").encode()) - 1
    return (tags + len(prompts.leaf_task(100_000, "user", "", line_bytes).encode()),
            tags + len(prompts.merge_task(100_000, 1024, "", "", line_bytes).encode()))


def estimate(mem, compactor: Compactor | None = None) -> dict:
    """What building the rest would take: how many calls, and the tokens and cost they would use.

    Leaves are counted exactly; a pending merge is counted as a call unless its two lines fit in one together
    (``_merge_calls``: a line not written yet taken for the size of this memory's lines so far, or before any
    for a full line, or as much as ``max_tokens`` holds at 4 bytes a token when that is less). Each call sends
    the system prompt, its task (its words, a ruler of ``line_bytes`` and its input: ``_task_bytes``) and the
    compactor's view of what came before it (``_context_bytes``: the view run over the lines' sizes, as
    ``ContextView`` runs it in a build); each reply is taken for that line, or for what this memory's replies
    used so far. Tokens are counted as 4 bytes. A call the faithfulness guard asks for again sends its request
    twice: the calls are taken to be asked again as often as this model's nodes in this memory were so far
    (``_asked_again``; none before any), which ``asked_again`` counts. ``bound``: ``calls`` is at most what the
    build takes (before any line of this memory's model a line not written yet is taken for a full one, so
    no merge of two is counted free); after, it is an estimate.
    ``cost`` takes no input from the prompt cache (what it reads is billed as input), but counts what is written
    to it where that is billed (Anthropic, 1.25×): the share of input this memory's calls wrote so far, or
    before any call what ``_context_bytes`` works out. With a ``price_cached_in`` set, ``cost_cached`` is the best
    case the cache allows, a lower bound under the prices: the system prompt and the whole view of every call read
    from it and nothing written (a provider keeps less; the share the first calls read, their views still short,
    is no bound for the rest). ``pending``: the nodes the build makes (the leaves, and every merge, written or
    joined free); ``offline``: the compactor sends no call (``calls`` 0, ``cost`` 0)."""
    from .compactor import INPUT_BYTES, prompt as prompts

    cfg = mem.config
    compactor = compactor or Compactor(cfg["compactor"], BuildState(mem.path))
    found, surveyed = _survey(mem, detail=True)
    so_far = spent(mem) if not compactor.offline else None
    line_bytes = int(cfg["line_bytes"])
    longest = min(line_bytes, 4 * compactor.max_tokens)  # (a model asked for 170 tokens writes no 2 KB line)
    reply_bytes = min(longest, _reply_bytes(mem, line_bytes)) if so_far and so_far["calls"] else longest
    merges, merged_bytes = _merge_calls(surveyed, reply_bytes, line_bytes)
    calls = found["leaves"] + merges
    again = 0.0 if compactor.offline else _asked_again(mem, compactor.label)
    system = len(prompts.SYSTEM.encode())
    context, written = (0, 0) if compactor.offline else _context_bytes(  # (offline: no call is sent)
        surveyed, int(cfg["cview"]["hi"]), int(cfg["cview"]["lo"]), line_bytes, reply_bytes, system, kept_up(mem))
    prefix = system + context  # the system prompt and <chat>: what a prompt cache can keep
    leaf_task, merge_task = _task_bytes(line_bytes)
    sent = (calls * prefix + found["leaves"] * leaf_task + min(found["leaf_bytes"], found["leaves"] * INPUT_BYTES)
            + merges * merge_task + merged_bytes)
    # (per node: one asked again counts both replies, as a node ahead asked again will)
    per_reply = (so_far["tokens_out"] / so_far["calls"] if so_far and so_far["calls"] else reply_bytes // 4)
    if compactor.offline:
        calls, sent = 0, 0
    tokens_in, tokens_out = round(sent * (1 + again)) // 4, round(calls * per_reply)
    if so_far and so_far["tokens_in"] and (so_far["tokens_cached"] or so_far["tokens_written"]):
        tokens_written = round(tokens_in * so_far["tokens_written"] / so_far["tokens_in"])
    else:  # (Anthropic caches the prefixes a request marks and bills what it writes)
        tokens_written = written // 4 if compactor.provider_name == "anthropic" else 0
    # at best every call reads its whole stable prefix from the cache and writes nothing: a lower bound, where the
    # share the first calls read (their views still short) said more than the rest then cost
    tokens_cached = round(calls * (1 + again)) * prefix // 4
    cost = 0.0 if compactor.offline else compactor.cost(tokens_in, tokens_out, 0, tokens_written)
    row = {"memory": mem.name, "model": compactor.label, "calls": calls, "leaves": found["leaves"], "merges": merges,
           "asked_again": round(calls * again), "bound": reply_bytes == line_bytes,
           "tokens_in": tokens_in, "tokens_out": tokens_out, "cost": cost, "built": found["built"], "nodes": found["nodes"],
           "pending": found["pending"], "offline": compactor.offline}
    if compactor.price_cached_in is not None and not compactor.offline:
        row["cost_cached"] = compactor.cost(tokens_in, tokens_out, min(tokens_cached, tokens_in), 0)
    return row


def shown_marks(l: int, i: int, marked, stored) -> set[str]:
    """The suspect facts node ``(l, i)``'s line shows: its own mark (``marked(l, i)``), or, for a free line (its
    two children's lines joined: not ``stored(l, i)``), theirs."""
    own = marked(l, i)
    if own or l == 0 or stored(l, i):
        return set(map(str, own or ()))
    return shown_marks(l - 1, 2 * i, marked, stored) | shown_marks(l - 1, 2 * i + 1, marked, stored)


def suspect_marks(mem) -> dict[tuple[int, int], list]:
    """``(l, i)`` -> the facts each stored node was marked ``suspect`` for: the mark of the line readers use (a
    node written twice shows its first), within the log."""
    count, marks = mem.count(), {}
    for node in mem.tree.records(b'"suspect"'):
        key = (node.get("l"), node.get("i"))
        if (type(key[0]) is int and type(key[1]) is int and isinstance(node.get("suspect"), list) and node["suspect"]
                and key not in marks and node.get("text") == mem.tree.stored(*key, count)):
            marks[key] = node["suspect"]
    return marks


def spent(mem, day: str | None = None) -> dict:
    """Calls, tokens (``tokens_cached``, ``tokens_written``: input read from and written to the provider's prompt
    cache) and money recorded on the nodes a compactor wrote (``Tree.records``); ``day`` (YYYY-MM-DD): only the
    nodes built that local day."""
    totals = {"calls": 0, **dict.fromkeys(PAID, 0), "cost": 0.0, "models": {}, "suspect": []}
    for node in mem.tree.records():
        if day is not None and not _built_on(node, day):
            continue
        totals["calls"] += 1
        for key in PAID:
            totals[key] += recorded(node, key)
        model = node.get("model") if isinstance(node.get("model"), str) else "?"
        totals["models"][model] = totals["models"].get(model, 0) + 1
    totals["cost"] = round(totals["cost"], 6)
    totals["suspect"] = ([label(l, i) for l, i in sorted(suspect_marks(mem), key=lambda node: (node[1] << node[0], node[0]))]
                         if day is None else [])  # (by the messages they cover, as ``view --stats`` lists them)
    return totals


def _built_on(node: dict, day: str) -> bool:
    """Whether a node's ``date`` (RFC 3339, with its offset) falls on local day ``day`` (in the offset of its own
    season, as ``when.day_end`` ends the day)."""
    try:
        return when.local(when.parse_stored(node["date"]), env.now()).date().isoformat() == day
    except (KeyError, TypeError, ValueError, PimemError):
        return False
