"""How builders run: a pool of threads for compactor calls, the loop that drives them, signals, and the two
drivers, ``build_tree`` (once) and ``watch`` (for ever). What to build is ``pimem.builder``'s.

A ``Scheduler`` drives any number of builders with ``CONCURRENCY`` (8) calls in flight in total, on daemon
threads (a call stuck past shutdown's ``GRACE`` of 15 s is abandoned, not waited for). The offline compactor
runs inline: it is faster than a thread hand-off; for a backlog of ``worker.MIN_BACKLOG`` messages or more,
on a machine with a second core, it runs in worker processes (``pimem.compactor.worker``) fed batches
ahead, so lines are composed on every core while this thread settles them (the lines are the same). Built
nodes are written in batches (at least every 0.2 s) by each builder's writer thread, under the writer lock,
after checking that this process still holds the memory's lease; their ``built`` events follow the write, so
none names a node a crash loses. SIGTERM, SIGINT and SIGHUP stop a driver
cleanly, from its first lease on (a lease waited for included); ``Scheduler.signal`` says which one did.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import queue
import sqlite3
import threading
import time
import uuid
from dataclasses import dataclass, field

from . import env, errors, semantic, stopping
from .builder import WINDOW, Builder
from .compactor import CallFailed, Compactor, Task, key_problem, worker
from .compactor.providers import KeyRefused, Unusable
from .errors import BadInput, Busy, LeaseLost, NotFound, ProviderError
from .tree import label

CONCURRENCY = 8
GRACE = 15.0
FLUSH_EVERY = 4096  # nodes written per batch at most (saving view.json costs O(view))
WRITTEN_POLL = 0.05  # seconds between looks at a batch being written, whose built events follow it
KEY_AGAIN = 90  # times ``retry_seconds`` (15 minutes by default): when ``watch`` tries a refused API key again


class NotSent(CallFailed):
    """A call its builder stopped before a thread of the pool took it (its memory left: a refused key, a lease
    lost): never sent."""


class _Pool:
    """``CONCURRENCY`` daemon threads running compactor calls; results come back on one queue. A call whose
    builder is in ``left`` when a thread takes it is not sent (``NotSent``). ``close`` ends the threads once
    their calls are done: a process that builds again and again (the library's ``build_tree``) kept eight a run,
    each holding the last memory it called for, with its files and databases open."""

    def __init__(self, size: int, results: queue.Queue, left: list):
        self.tasks: queue.Queue = queue.Queue()
        self.results = results
        self.left = left
        self.size = size
        for _ in range(size):
            threading.Thread(target=self._work, daemon=True).start()

    def _work(self) -> None:
        while (item := self.tasks.get()) is not None:
            self._run(*item)
            del item  # (not held while the next is waited for)

    def _run(self, builder, task, context) -> None:
        if builder in self.left:  # (its memory was left while the call waited for a thread: a server refusing
            # the key was sent the calls still queued all the same)
            self.results.put((builder, task, None, None, NotSent("not sent: the memory was left")))
            return
        try:
            text, meta = builder.build(task, context)
            self.results.put((builder, task, text, meta, None))
        except CallFailed as exc:
            self.results.put((builder, task, None, None, exc))
        except Exception as exc:  # a bug or an unexpected provider reply must not kill the worker
            self.results.put((builder, task, None, None, CallFailed(f"{type(exc).__name__}: {exc}")))

    def close(self) -> None:
        """Each thread ends after the calls queued (one abandoned at shutdown, once it returns)."""
        for _ in range(self.size):
            self.tasks.put(None)


@dataclass
class Scheduler:
    """Drives builders: ``run(once=True)`` builds what is buildable and returns; ``run()`` loops until
    ``stop()`` (SIGTERM/SIGINT), noticing new messages within ``poll`` seconds."""

    concurrency: int = field(default_factory=lambda: CONCURRENCY)  # (read when made: a test may lower it)
    grace: float = GRACE
    poll: float = 0.5
    on_event: object = None  # callable(dict) for every built/failed node
    on_progress: object = None  # callable(builders), about ten times a second
    # callable(dict): the ``waiting`` event of the nodes a builder started waiting for, for a retry time an
    # earlier run recorded (``Builder._deferred``), told once each; ``build_tree``'s ``held`` too, as it stands
    # by for another builder's lease (``held``)
    on_wait: object = None
    max_cost: float | None = None  # for the whole run, calls in flight counted at their worst case
    builders: list[Builder] = field(default_factory=list)
    lost: list[Builder] = field(default_factory=list)  # builders stopped because another process took their lease
    refused: dict = field(default_factory=dict)  # memory name -> the exception it stopped building that memory on
    # memory name -> its settings files when it was refused on them (``watch``: taken again once they change)
    on_settings: dict = field(default_factory=dict)
    # callable(mem) -> its settings files as they are (``watch``'s): a memory whose key the server refused is
    # refused on its settings, noted in ``on_settings``; None (``build_tree``): the next run tries again
    settings_of: object = None
    key_again: dict = field(default_factory=dict)  # memory name -> when (monotonic) ``watch`` tries its refused key again
    gone: set = field(default_factory=set)  # memories refused as moved or deleted (``watch``: taken again once back)
    retired: list[Builder] = field(default_factory=list)  # the builders of both (what they spent still counts)
    stopped_for_cost: bool = False
    next_worst: float = 0.0  # the worst case of the call ``max_cost`` last held back
    signal: int | None = None  # the signal (SIGTERM, SIGINT, SIGHUP) that stopped the run, if one did
    _stop: stopping.Flag = field(default_factory=stopping.Flag)  # (set by the signal handlers: not an Event)
    _hurry: stopping.Flag = field(default_factory=stopping.Flag)  # a second signal: no more grace
    _pool: _Pool | None = None
    _inflight: int = 0  # model calls in flight
    _results: queue.Queue = field(default_factory=queue.Queue)  # the pool's and the workers' finished tasks
    _workers: dict = field(default_factory=dict)  # builder -> its offline compactor's worker processes
    _offloaded: int = 0  # tasks the workers hold
    _inline: set = field(default_factory=set)  # builders whose worker failed: built inline from then on
    _reserved: dict = field(default_factory=dict)  # (builder, l, i) -> the worst cost of that call in flight
    _waits_told: dict = field(default_factory=dict)  # builder -> the nodes of its ``deferred`` told ``on_wait`` of
    capped: dict = field(default_factory=dict)  # builder -> the ``capped`` event its daily cap was last reached with
    overbilled: dict = field(default_factory=dict)  # builder -> why its calls were billed past their worst case
    held: set = field(default_factory=set)  # builders that start nothing new (to be replaced once their calls are in)

    def add(self, builder: Builder) -> None:
        self.builders.append(builder)

    def stop(self, signum: int | None = None) -> None:
        """Stop after the calls in flight (``signum``: the signal that asked, kept in ``signal``); a second
        signal stops without waiting for them (what they would have built is built by the next run)."""
        if signum is not None and self._stop.is_set():
            self._hurry.set()
        if signum is not None and self.signal is None:
            self.signal = signum
        self._stop.set()

    @property
    def stopped(self) -> bool:
        """Whether ``stop()`` was called (by a signal, say)."""
        return self._stop.is_set()

    def emit(self, event: dict) -> None:
        """Tell ``on_event``; a reader of the events that went away (``build-tree --json | head``) stops the
        telling, not the build: what was paid for is still built and kept."""
        if self.on_event is not None:
            try:
                self.on_event(event)
            except BrokenPipeError:
                from . import output

                self.on_event = None
                output.quiet_stdout()

    def spent(self) -> float:
        return sum(b.stats.cost for b in self.builders + self.retired)

    def pending(self) -> int:
        """Nodes of the builders' memories not built yet, counted afresh (a stopped run has not looked at
        every node it would have replayed)."""
        from .builder import survey

        return sum(survey(b.mem)["pending"] for b in self.builders)

    def _affordable(self, builder: Builder, worst: float | None) -> bool:
        """Whether a call that may cost ``worst`` can start without any cap being passed, whatever the calls
        in flight turn out to cost."""
        cap = builder.max_cost_per_day  # per memory and local day (``watch``), counted alike
        if self.max_cost is None and cap is None:
            return True
        worst = worst or 0.0
        if builder in self.overbilled or (self.max_cost is not None and self.overbilled):  # no cap can be kept
            self.stopped_for_cost = self.max_cost is not None
            return False
        if self.max_cost is not None and self.spent() + sum(self._reserved.values()) + worst > self.max_cost:
            self.stopped_for_cost = True
            self.next_worst = worst
            return False
        if cap is not None:
            day, today = builder.spent_today()
            inflight = sum(cost for (b, _, _), cost in self._reserved.items() if b is builder)
            if today + inflight + worst > cap:
                # reached: the calls wait for the next day
                if not inflight and self.capped.get(builder, {}).get("day") != day:
                    below = {"max_cost_per_day": cap, "next_call": round(worst, 6)} if worst > cap else None
                    builder.state.cap_reached(day, _day_end(day), below, cap if builder.cap_is_setting else None)
                    self.capped[builder] = {"event": "capped", "memory": builder.name, "day": day,
                                            "spent": round(today, 6), "max_cost_per_day": cap,
                                            "next_call": round(worst, 6)}
                    self.emit(self.capped[builder])
                return False
        return True

    def capped_today(self, builder: Builder) -> bool:
        """Whether ``builder``'s daily cap held back its calls for the rest of its local day (``build-tree``
        stops there; ``watch`` waits)."""
        return builder in self.capped and self.capped[builder]["day"] == builder.spent_today()[0]

    def _dispatch(self, now: float) -> bool:
        """Start what can start; True when something was built inline (so look again at once)."""
        progressed = False
        # said again by this pass if a call still cannot be afforded: one refused while others were in flight
        # may well fit once they have cost what they did, not their worst case
        self.stopped_for_cost = False
        calling = []  # the builders of a model compactor, sharing the ``concurrency`` calls
        for builder in list(self.builders):
            if builder not in self.held:
                if not builder.compactor.offline:
                    calling.append(builder)
                    continue
                with self.refusing(builder.name, builder):
                    progressed = self._build_offline(builder, now) or progressed
        # a free call goes to the memory with the fewest in flight: taken in the builders' order, a backlog in
        # the first memory (an import) had every call until it was nearly built, and a memory watched beside it
        # none (the second of two 300-message memories got its first call after 389 of the first's 396)
        while calling and self._inflight < self.concurrency:
            builder = min(calling, key=lambda b: len(b.inflight))
            started = False
            with self.refusing(builder.name, builder):
                started = self._call(builder, now)
            if not started:
                calling.remove(builder)
        return progressed

    def _build_offline(self, builder: Builder, now: float) -> bool:
        """Build what ``builder``'s offline compactor can; True when something was built."""
        if self._offload(builder, now):
            return False
        progressed = False
        for _ in range(256):  # then look at the other memories, the lease and the clock
            task = builder.next_task(now)
            if task is None:
                break
            progressed = True
            text, meta = builder.compactor.build(task)
            builder.built(task.l, task.i, text, meta)
        return progressed

    def _call(self, builder: Builder, now: float) -> bool:
        """Start ``builder``'s next model call; False when it has none that can start now."""
        task = builder.next_task(now)
        if task is None:
            return False
        context = builder.context(task)
        worst = builder.compactor.worst_cost(task, context)
        if not self._affordable(builder, worst):
            builder.put_back(task)
            return False
        if self._pool is None:
            self._pool = _Pool(self.concurrency, self._results, self.retired)  # (their calls queued: not sent)
        if worst and builder.max_cost_per_day is not None:  # a daily cap outlives this process: the call is kept
            # pending in compactor.json (a write a call, so only under a cap) till its node is written or it fails
            builder.state.sending(task.label, env.now().date().isoformat(), worst)
        self._reserved[(builder, task.l, task.i)] = worst or 0.0
        self._pool.tasks.put((builder, task, context))
        self._inflight += 1
        return True

    def refusal(self, name: str, error) -> dict:
        """The ``refused`` event of memory ``name``; ``settings``: refused on its settings, which ``watch`` looks
        at again once they change (else only its next start takes the memory again)."""
        settings = {"settings": True} if name in self.on_settings else {"gone": True} if name in self.gone else {}
        return {"event": "refused", "memory": name, "error": str(error), **settings}

    @contextlib.contextmanager
    def refusing(self, name: str, builder: Builder | None = None, passing: tuple = (LeaseLost,), tell: bool = True,
                 mem=None):
        """Work on memory ``name``; a failure the user can act on (its log damaged behind pimem's back, a file
        it may not read) stops building that memory, with a ``refused`` event (``tell=False``: the caller says
        it), and the others go on. The errors of ``passing`` are raised. ``mem``: the memory as it was listed,
        whose rename or delete since (``pimem rename``/``delete`` before its lease was taken, or whatever the
        failure then was) is said as that, and kept in ``gone``."""
        try:
            yield
        except Exception as exc:
            from .errors import as_error

            error = as_error(exc)
            if error is None or isinstance(error, passing):
                raise
            if builder is not None and builder.lease is not None and builder.lease.moved():  # (``mv``, ``rm -rf``)
                self.gone.add(name)
                exc = error = NotFound(f"memory '{name}' was moved or deleted behind pimem's back (from {builder.mem.path})")
            elif mem is not None and name not in self.gone and (went := went_away(mem)) is not None:  # (else said)
                self.gone.add(name)
                exc = error = went
            if tell:
                self.emit(self.refusal(name, error))
            self.refused[name] = exc
            if builder is not None and builder in self.builders:
                self.retire(builder)
                if builder.lease is not None:
                    builder.lease.release()

    def retire(self, builder: Builder) -> None:
        """Build no more with ``builder`` (what it spent still counts: ``retired``)."""
        self._tell_written(builder)  # (the batches written before it stopped)
        self.builders.remove(builder)
        self.retired.append(builder)
        self.held.discard(builder)
        self._end_worker(builder)

    def _offload(self, builder: Builder, now: float) -> bool:
        """Keep the builder's workers ``AHEAD`` batches ahead, starting them for a long backlog and ending them
        once the builder is idle. False: build inline."""
        work = self._workers.get(builder)
        if work is None:
            if builder in self._inline:
                return False
            # unread messages; none worth a worker when the tree already covers all but the last MIN_BACKLOG
            # (a cron run over a memory built up to its newest messages)
            backlog = builder.count - builder.next_leaf
            if backlog >= worker.MIN_BACKLOG and builder.summarised(builder.count - worker.MIN_BACKLOG):
                backlog = 0
            size = worker.crew_size(backlog, builder.workers)
            if not size:
                return False
            try:
                work = self._workers[builder] = worker.Crew(builder, self._results, size)
            except OSError:  # no interpreter to start (an embedding application's): build inline
                self._inline.add(builder)
                return False
            builder.window_size = worker.WINDOW
        if work.gone:  # failed: its tasks are coming back, and ``_collect`` ends it
            return True
        while work.pending < worker.BATCH * worker.AHEAD:
            batch = list(itertools.islice(iter(lambda: builder.next_task(now), None), worker.BATCH))
            if not batch:
                break
            self._offloaded += len(batch)
            work.send(batch)
        if not work.pending and builder.idle():
            self._end_worker(builder)
        return True

    def _end_worker(self, builder: Builder) -> None:
        work = self._workers.pop(builder, None)
        if work is not None:
            self._offloaded -= work.close()
            builder.window_size = WINDOW

    def _tell_waits(self) -> None:
        """Tell ``on_wait`` of the nodes each builder put off since the last look till the retry time an earlier
        run recorded (those waited for: one left to the next run is not), once each."""
        for builder in self.builders:
            told = self._waits_told.setdefault(builder, set())
            if len(builder.deferred) == len(told):
                continue
            new = builder.deferred - told
            told |= new
            now = time.monotonic()
            waits = {(l, i): max(0.0, due - now) for due, l, i in builder.waiting if (l, i) in new}
            if waits:
                self.on_wait(waiting(builder, waits))

    def _tell_written(self, builder: Builder) -> None:
        """The ``built`` events of the nodes ``builder`` wrote since the last look: told once written, never
        before, so that no event names a node a crash (SIGKILL) loses (and counted then: ``Builder.next_written``)."""
        while (batch := builder.next_written()) is not None:
            if self.on_event is not None:
                for l, i, text, meta in batch:
                    self.emit({"event": "built", "memory": builder.name, "node": label(l, i), "l": l, "i": i,
                               "bytes": len(text.encode("utf-8")), **meta})

    def _collect(self, timeout: float) -> None:
        """Take finished calls (waiting up to ``timeout`` for the first one)."""
        if not (self._inflight or self._offloaded):
            if timeout > 0:
                self._stop.wait(timeout)
            return
        try:
            item = self._results.get(timeout=timeout)
        except queue.Empty:
            return
        answered: dict[Builder, dict[str, float]] = {}  # builder -> what its calls answered now were billed
        while True:
            builder, task, text, meta, error = item
            if builder.compactor.offline:
                self._offloaded -= 1
            else:
                self._inflight -= 1
                self._check_bill(builder, task, meta if error is None else getattr(error, "spent", None),
                                 self._reserved.pop((builder, task.l, task.i), None))
            if isinstance(error, NotSent):
                if builder not in self.lost:  # (a lost memory's compactor.json is its new holder's)
                    builder.state.unsent(task.label)
            elif isinstance(error, worker.WorkerGone):
                self._end_worker(builder)
                self._inline.add(builder)
                builder.put_back(task)
            elif isinstance(error, Unusable):  # (no retry can succeed: said once, as a memory left on its settings)
                builder.state.unsent(task.label)  # (never went out, or was refused its key: not billed, nor counted)
                builder.billed(error.spent)  # (a request before it that was: a reasoning model's first)
                if builder in self.builders:
                    if isinstance(error, KeyRefused):
                        error = self._key_refused(builder, task, error)
                    with self.refusing(builder.name, builder):
                        raise error
            elif builder in self.builders:
                if error is None:
                    builder.built(task.l, task.i, text, meta)
                    if builder.state.pending and meta.get("cost") is not None:
                        answered.setdefault(builder, {})[task.label] = meta["cost"]
                else:
                    said = builder.failed(task.l, task.i, str(error), getattr(error, "retry_after", None),
                                          getattr(error, "spent", None), getattr(error, "refused", False))
                    self.emit({"event": "failed", "memory": builder.name, "node": task.label, "l": task.l,
                                "i": task.i, "error": said})
            try:
                item = self._results.get_nowait()
            except queue.Empty:
                break
        # a pending call answered counts at what it was billed, not its worst case, if this process dies before
        # its node is written (one write of compactor.json for the calls taken together, only under a daily cap)
        for builder, costs in answered.items():
            builder.state.answered(costs)

    def _key_refused(self, builder: Builder, task: Task, error: KeyRefused) -> ProviderError:
        """The error ``builder``'s memory is left with when the server refused its compactor's API key (or its
        access) for ``task``: which variable holds the key and what to do, recorded in compactor.json for
        ``status`` to say; under ``watch`` (``settings_of``) refused on its settings, taken again once they
        change (its environment never does: a key set anew reaches only a watcher started again), or after
        ``KEY_AGAIN`` times ``retry_seconds``, when its calls try the key again (an outage refuses good keys too)."""
        from . import when

        name, var = builder.name, builder.compactor.cfg.get("key_env")
        watching = self.settings_of is not None
        here = " where the watcher starts" if watching else ""
        whose = f"(the compactor of {name}, {builder.compactor.label})"
        if not var:
            why, mend = (f"the server asks for an API key, and the compactor of {name} ({builder.compactor.label}) "
                         "sends none (--key-env)", "give it one")
        elif error.status == 403:
            why, mend = (f"the server refused access with the API key in ${var} {whose}",
                         f"mend its access (its permissions, the model, the region) or set another key{here}")
        else:
            why, mend = f"the server refused the API key in ${var} {whose}", f"set the right key{here}"
        again = KEY_AGAIN * builder.retry_seconds
        said = (f"{why}: {builder.said(task.l, task.i, str(error))}; nothing more is sent with it"
                f"{f' for {_duration(again)} (then it is tried again)' if watching else ''}: {mend}, or choose "
                f"another compactor with 'pimem model {name}'")
        builder.state.key_refusal(said, when.rfc3339(env.now()), builder.asked_of)
        if watching:
            self.on_settings[name] = self.settings_of(builder.mem)
            self.key_again[name] = time.monotonic() + again
        return ProviderError(said)

    def _check_bill(self, builder: Builder, task: Task, paid: dict | None, worst: float | None) -> None:
        """A call billed past the worst case it was reserved at (the provider counted more tokens than bytes
        were sent, or more output than ``max_tokens``): what it cost is kept as billed, and no capped call of
        that compactor (with ``--max-cost``, none at all) starts again in this run, for no cap holds then."""
        cost = (paid or {}).get("cost")
        if not worst or not cost or cost <= worst * (1 + 1e-6) or builder in self.overbilled:
            return
        why = self.overbilled[builder] = (
            f"{builder.compactor.label} billed ${cost:.4f} for node {task.label}, past the ${worst:.4f} it can cost "
            "(more tokens than the bytes sent, or more output than max_tokens): no spending cap holds with such bills")
        self.emit({"event": "overbilled", "memory": builder.name, "node": task.label, "cost": cost,
                   "worst": round(worst, 8), "error": why})
        if builder.max_cost_per_day is not None and builder in self.builders:  # (a watcher goes on without its
            # calls: said in compactor.json, or context would wait its whole wait every turn for what never comes)
            builder.state.calls_stopped(why)

    def _flush(self, wait: bool = False, due_only: bool = False) -> None:
        """Hand built nodes to the writers (``due_only``: only where the batch is big or old enough)."""
        now = time.monotonic()
        for builder in list(self.builders):
            self._tell_written(builder)
            if due_only:
                if not builder.to_write:
                    builder.last_flush = now
                    continue
                if (now - builder.last_flush < builder.flush_seconds and len(builder.to_write) < FLUSH_EVERY
                        and not builder.drained()):
                    continue
                builder.last_flush = now
            try:
                with self.refusing(builder.name, builder):
                    builder.flush(wait)
                self._tell_written(builder)
            except LeaseLost as exc:
                self._tell_written(builder)
                self.emit({"event": "lost", "memory": builder.name, "error": str(exc)})
                self._drop(builder)

    def _drop(self, builder: Builder) -> None:
        """Stop building ``builder``'s memory: another process holds its lease now."""
        self.retire(builder)
        self.lost.append(builder)

    def _beat(self) -> None:
        for builder in list(self.builders):
            with self.refusing(builder.name, builder):  # (a memory moved behind its back among them)
                if builder.lease is not None and not builder.lease.beat():
                    self.emit({"event": "lost", "memory": builder.name, "error": "lease taken over"})
                    builder.to_write.clear()
                    self._drop(builder)

    def run(self, once: bool = False, between=None) -> None:
        """Build until idle (``once``) or until stopped. ``between()`` is called about every ``poll`` seconds
        in a loop (``watch`` uses it to add memories)."""
        last_look = last_progress = time.monotonic()
        try:
            while not self._stop.is_set():
                now = time.monotonic()
                progressed = self._dispatch(now)
                if self.on_wait is not None:
                    self._tell_waits()
                self._beat()
                if self.on_progress is not None and now - last_progress >= 0.1:
                    last_progress = now
                    self.on_progress(self.builders)
                if progressed:
                    self._flush(due_only=True)
                    continue
                if once and not self._inflight and all(b.idle() or self.capped_today(b) for b in self.builders):
                    break
                if once and self.stopped_for_cost and not self._inflight:
                    break
                dues = [d for d in (b.next_due() for b in self.builders) if d is not None]
                dues += [b.last_flush + b.flush_seconds for b in self.builders if b.to_write]
                dues += [now + WRITTEN_POLL for b in self.builders if b.writing()]  # (then its built events)
                wait = min([self.poll] + [max(0.0, d - now) for d in dues])
                self._collect(wait)
                self._flush(due_only=True)
                if time.monotonic() - last_look >= self.poll:
                    last_look = time.monotonic()
                    if not once:
                        for builder in list(self.builders):
                            with self.refusing(builder.name, builder):
                                builder.refresh()
                    if between is not None:
                        between()
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        """Give calls in flight ``grace`` seconds, keep what they built, write everything, let go."""
        deadline = time.monotonic() + self.grace
        if self.signal is not None and self._inflight and not self._hurry.is_set():
            # said at once (with --json too, on stderr): silent for up to 15 s, a person pressed Ctrl-C again,
            # which gives up on those calls
            from signal import SIGINT, Signals

            from . import output

            again = "Ctrl-C" if self.signal == SIGINT else Signals(self.signal).name
            output.info(f"pimem: stopping: waiting up to {self.grace:g} s for {output.count(self._inflight, 'call')} "
                        f"in flight ({again} again to stop now)")
        while (self._inflight or self._offloaded) and time.monotonic() < deadline and not self._hurry.is_set():
            self._collect(min(0.25, max(0.0, deadline - time.monotonic())))
        # calls given up on are answered and billed all the same: a daily cap counts them at their worst case,
        # after a restart too (``compactor.json``, where they were pending), for nothing else will record them
        given_up: dict[Builder, list[str]] = {}
        for builder, l, i in self._reserved:
            given_up.setdefault(builder, []).append(label(l, i))
        for builder, labels in given_up.items():
            builder.state.abandoned(labels)
        for builder in list(self._workers):
            self._end_worker(builder)
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        self._flush(wait=True)


# ---- the two ways to run -------------------------------------------------------------------------------------


def _day_end(day: str) -> str | None:
    """When the builder's local ``day`` ends, in UTC (RFC 3339): what the readers of its capped mark compare
    their clocks with, whatever their time zones (None at the end of the range of dates)."""
    import datetime

    from . import when

    try:
        return when.rfc3339(when.day_end(day, env.now()).astimezone(datetime.timezone.utc))
    except OverflowError:
        return None


def _install_signals(scheduler: Scheduler) -> list:
    """SIGTERM, SIGINT and SIGHUP (a closed terminal, a dropped ssh link) stop the scheduler gracefully (main
    thread only); returns what to restore."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return []
    from .boundary import stoppers

    saved = []
    for sig in stoppers(signal.SIGTERM, signal.SIGINT, signal.SIGHUP):  # (not one the caller ignored: nohup)
        saved.append((sig, signal.signal(sig, lambda signum, _: scheduler.stop(signum))))
    if stopping.deferred() is not None:  # (one that came while ``watch`` started)
        scheduler.stop(stopping.deferred())
    return saved


def _restore_signals(saved: list, scheduler: Scheduler) -> None:
    """The handlers ``_install_signals`` replaced, again; in a command a signal stopped, none: it ends, and
    another signal while it does changes nothing (it killed ``watch`` outright, no line, status -15)."""
    import signal

    from .errors import in_command

    ending = scheduler.signal is not None and in_command()
    for sig, handler in saved:
        signal.signal(sig, signal.SIG_IGN if ending else handler)


def waiting(builder: Builder, waits: dict) -> dict:
    """The ``waiting`` event ``Scheduler.on_wait`` is told for nodes ``waits`` (node -> seconds): the first in
    the log (its recorded error), how many, and the longest wait in whole seconds."""
    (l, i) = min(waits, key=lambda node: (node[1] << node[0], -node[0]))  # (the first in the log)
    node = label(l, i)
    return {"event": "waiting", "memory": builder.name, "node": node, "l": l, "i": i, "nodes": len(waits),
            "seconds": math.ceil(max(waits.values())), "error": builder.state.failures.get(node, {}).get("error", "")}


def _duration(seconds: float) -> str:
    """``15 min``, ``4.5 s``: a wait as a line says it."""
    return f"{round(seconds / 60, 1):g} min" if seconds >= 60 else f"{round(seconds, 1):g} s"


def said_waiting(event: dict) -> str:
    """The line ``build-tree`` and ``watch`` say once for a ``waiting`` event."""
    from . import output

    error = output.flatten(event["error"])[:200]
    if event["nodes"] == 1:
        said = (f"waiting {event['seconds']} s to retry node {event['node']} at the time an earlier run recorded "
                f"(it failed: {error})")
    else:
        said = (f"waiting up to {event['seconds']} s to retry {event['nodes']} nodes at the times an earlier run "
                f"recorded (the first, {event['node']}, failed: {error})")
    return f"pimem: {event['memory']}: {said}"


def held(name: str, record: dict) -> dict:
    """The ``held`` event ``watch --wait`` (and ``build-tree --wait``) emits as it stands by for the live builder of ``record``, the lease of
    memory ``name``, and again when another holds it or it stops or starts answering (``lease.quiet``: one
    frozen with SIGSTOP keeps its lease for as long as it is stopped); ``heartbeat``: how late its heartbeat is,
    in whole seconds, while it is not answering."""
    from .lease import quiet

    late = quiet(record)
    return {"event": "held", "memory": name, "pid": record.get("pid"), "host": record.get("host"),
            "command": record.get("command"), "started": record.get("started"), "answering": late is None,
            "heartbeat": None if late is None else round(late)}


def said_held(event: dict) -> str:
    """The line ``watch`` and ``build-tree`` say for a ``held`` event."""
    import socket

    from .lease import KINDS, not_answering, resume

    there = f" on {event['host']}" if event["host"] and event["host"] != socket.gethostname() else ""
    since = f", since {event['started']}" if event["started"] else ""
    who = f"{KINDS.get(event['command'], 'a builder')} (pid {event['pid']}{there}{since})"
    if event["answering"]:
        return f"{event['memory']}: held by {who}; standing by until it lets go"
    return (f"{event['memory']}: held by {who}, {not_answering(event['heartbeat'])}; standing by until it lets go: "
            f"{resume(event)} or stop it")


def said_below_cap(event: dict, setting: bool = False) -> str:
    """What ``build-tree`` and ``watch`` say for a ``capped`` event whose cap is below one call's worst case
    (``next_call`` over ``max_cost_per_day``: no day's spending lets a call through); ``setting``: the cap is
    the memory's ``max_cost_per_day``, named so."""
    from .numbers import dollars, money

    return (f"{event['memory']}: a call may cost up to {money(event['next_call'])} at its worst case, more than the "
            f"daily cap of {dollars(event['max_cost_per_day'])}{' (max_cost_per_day)' if setting else ''}: nothing "
            "is built until it is raised")


def build_tree(mems: list, on_event=None, max_cost: float | None = None, retries: int = 0, wait: float | None = 0.0,
               on_progress=None, compactor: Compactor | None = None, keep_going: bool = False,
               on_wait=None) -> Scheduler:
    """Build every buildable node of ``mems`` once (failed nodes retried up to ``retries`` times) and return
    the scheduler (its builders hold the stats). Holds each memory's lease while building; ``Busy`` when a
    live watcher or another build holds one (after ``wait`` seconds). ``compactor`` overrides the memories'
    own (``demo`` builds offline). A memory whose log or files fail (damaged behind pimem's back, a full
    disk) is left, the others built, and its exception raised at the end; ``keep_going``: only recorded in
    the scheduler's ``refused``. ``on_wait``: see ``Scheduler.on_wait``; told too of the ``held`` event (as
    ``watch --wait`` emits it) as the run stands by for another builder's lease, and again when another holds
    it or it stops or starts answering."""
    from .lease import Lease

    scheduler = Scheduler(on_event=on_event, max_cost=max_cost, on_progress=on_progress, on_wait=on_wait)
    leases = []
    embedding = semantic.background()
    saved = _install_signals(scheduler)  # (from the first lease on: a signal while one is waited for stops too)
    try:
        for mem in mems:
            with scheduler.refusing(mem.name, mem=mem):  # (held by a watcher: the others built, then exit 4)
                told = None if on_wait is None else lambda other, name=mem.name: on_wait(held(name, other))
                lease = Lease(mem, "build-tree").acquire(wait, stop=scheduler._stop, on_wait=told)
                if lease is None:  # (stopped while waiting for it)
                    break
                leases.append(lease)
                cap = mem.config.get("max_cost_per_day") if compactor is None else None
                built = Builder(mem, compactor=compactor, lease=lease, retries=retries,
                                max_cost_per_day=None if cap is None else float(cap))
                _cap_counted(built)
                built.cap_is_setting = True
                built.state.cap_lifted()  # (a mark an earlier builder left: set again if this run is capped too)
                scheduler.add(built)
                if embedding:
                    embedding.add(mem)
            if scheduler.stopped:
                break
        scheduler.run(once=True)
    finally:
        _close(scheduler, leases)
        _restore_signals(saved, scheduler)
        if embedding:  # the vectors too, unless stopped by a signal (what was embedded is kept)
            embedding.stop() if scheduler.stopped else embedding.finish()
    if not scheduler.stopped:
        for builder in scheduler.builders + scheduler.retired:
            if builder.name not in scheduler.refused and builder not in scheduler.lost:
                _prepare(builder.mem)
    if scheduler.refused and not keep_going:
        raise next(iter(scheduler.refused.values()))
    return scheduler


def went_away(mem) -> NotFound | None:
    """Why ``mem`` (as it was listed) is no longer built: renamed or deleted since (by ``pimem rename`` or
    ``delete`` before its lease was taken, say), else None."""
    if mem.moved() or mem.identity() is None:
        return NotFound(f"memory '{mem.name}' was renamed or deleted meanwhile (from {mem.path})")
    return None


def _prepare(mem) -> None:
    """Leave a built memory ready for its next turn (``context.prepare``: the search index caught up, the view's
    texts saved), as the build has the time for it and the turn has not; what fails here, the next reader
    meets and says."""
    from .context import prepare

    try:
        prepare(mem)
    except (OSError, sqlite3.Error, errors.PimemError):
        pass


def _held_by(holders: dict) -> str:
    """Who holds the memories of ``holders`` (name -> lease record): ``a and b by a watcher (pid 12), c by a
    build-tree (pid 34)``, three names at most each."""
    from .lease import described

    by: dict[str, list[str]] = {}
    for name in sorted(holders):
        by.setdefault(described(holders[name]), []).append(name)
    said = []
    for who, names in by.items():
        if len(names) > 3:
            names = names[:2] + [f"{len(names) - 2:,} more"]
        said.append((f"{', '.join(names[:-1])} and {names[-1]}" if len(names) > 1 else names[0]) + f" by {who}")
    return ", ".join(said)


def _cap_counted(built: Builder) -> None:
    """``BadInput`` when ``built`` has a daily cap (``build-tree`` and ``watch`` keep it alike, on the same day's
    ledger) for a compactor without prices, which no cap can count."""
    if built.max_cost_per_day is not None and not built.compactor.offline and built.compactor.cost(1, 1) is None:
        raise BadInput(f"a daily spending cap needs prices for the compactor of {built.name}: set them with "
                       f"'pimem model {built.name} PROVIDER/MODEL --price-in USD --price-out USD'")


def _close(scheduler: Scheduler, leases) -> None:
    """Close every builder's compactor (its HTTP client) and give up the leases."""
    for builder in scheduler.builders + scheduler.retired:
        builder.compactor.close()
    for lease in leases:
        lease.release()


def watch(names: list[str], home=None, on_event=None, wait: bool = False, poll: float = 0.5,
          max_cost_per_day: float | None = None, following: bool = False) -> Scheduler:
    """Run the scheduler until SIGTERM/SIGINT over the named memories, or over every memory of the home
    (including ones created later). Named memories held by a live builder raise ``Busy`` (or are waited
    for); with no names, held memories are skipped and taken once their holder lets go or dies, and ``Busy``
    is raised when every memory is held. ``following``: the caller has work of its own (``--import``), so a
    held memory, named or not, is never a reason to stop: it is taken once free. Each memory's compactor spends
    at most ``max_cost_per_day`` (else its config's ``max_cost_per_day``) a local day. A memory whose
    compactor's API key is not set here is refused as on its settings (taken again once they change)."""
    from . import config as configs, lease
    from .lease import Lease
    from .memory import Memory

    scheduler = Scheduler(on_event=on_event, poll=poll)
    scheduler.on_wait = scheduler.emit
    watched: dict[str, Lease] = {}
    embedding = semantic.background()
    explicit = Memory.named(names, home)
    refused_at = scheduler.on_settings  # memory refused on its settings -> those files as they were then
    holders: dict[str, dict] = {}  # memory name -> the lease record of the builder that held it at the last try
    told_held: dict[str, tuple] = {}  # memory name -> whom it was held by and whether that one answered, as said

    def tell_held() -> None:
        """Standing by (``wait``) for memories a scan found held: whom each is held by, said once, and again
        when another holds it or it stops or starts answering (as ``Lease.acquire`` tells of a named one)."""
        for name in told_held.keys() - holders.keys():
            del told_held[name]
        for name, record in holders.items():
            if told_held.get(name) != (whom := (record.get("token"), lease.quiet(record) is None)):
                told_held[name] = whom
                scheduler.emit(held(name, record))

    @contextlib.contextmanager
    def on_settings(mem):
        """Read ``mem``'s settings: refused on them, the files are noted as they were."""
        try:
            yield
        except (BadInput, ProviderError):
            refused_at[mem.name] = settings_stamp(mem)
            raise

    def settings_stamp(mem) -> tuple:
        """The home's and the memory's config.json as they are now (changed: looked at again)."""
        stamps = []
        for path in (env.home(home) / "config.json", mem.path / "config.json"):
            try:
                stat = path.stat()
                stamps.append((stat.st_mtime_ns, stat.st_size, stat.st_ino))
            except OSError:
                stamps.append(None)
        return tuple(stamps)

    scheduler.settings_of = settings_stamp  # (a memory whose key the server refused: taken again once they change)

    def cap_of(cfg: dict) -> float | None:
        cap = max_cost_per_day if max_cost_per_day is not None else cfg.get("max_cost_per_day")
        return None if cap is None else float(cap)

    def take(mem, block: bool, lease: Lease | None = None) -> None:
        """Build ``mem`` (``lease``: already held, by the builder this one replaces)."""
        if lease is None:
            lease = Lease(mem, "watch")
            if block:
                told = lambda other: scheduler.emit(held(mem.name, other))  # noqa: E731 (standing by: said)
                if lease.acquire(None if wait else 0.0, stop=scheduler._stop, on_wait=told) is None:  # (a signal: stopped)
                    return
            elif (other := lease.try_acquire()) is not None:
                holders[mem.name] = other
                return
        holders.pop(mem.name, None)
        try:
            with on_settings(mem):
                built = Builder(mem, lease=lease, max_cost_per_day=cap_of(mem.config))
                _cap_counted(built)
                wrong = None if built.compactor.offline else key_problem(built.compactor.cfg)
                if wrong:  # (no call could go out: this process's environment never changes, its settings may)
                    raise ProviderError(f"{wrong} (the API key of the compactor of {mem.name}, {built.compactor.label}):"
                                        " set it where the watcher starts, or choose another with "
                                        f"'pimem model {mem.name}'")
        except BaseException as exc:
            moved = isinstance(exc, Exception) and lease.moved()
            lease.release()
            if moved:  # (as it was taken: said as a builder's is, and taken again once back)
                scheduler.gone.add(mem.name)
                raise NotFound(f"memory '{mem.name}' was moved or deleted behind pimem's back (from {mem.path})") from None
            raise
        built.cap_is_setting = max_cost_per_day is None  # (a reader can compare the mark with the setting)
        built.state.cap_lifted()  # (a mark an earlier watcher left is not this one's: set again if it is capped too)
        watched[mem.name] = lease
        scheduler.add(built)
        scheduler.emit({"event": "watching", "memory": mem.name})

    last_scan = [0.0]
    token = uuid.uuid4().hex  # (this watcher's in the home's watch.json)

    def switch(builder: Builder) -> None:
        """A memory whose compactor settings (or daily cap, or ``line_bytes``) changed since its builder started
        (``pimem model``): its builder starts nothing new, and once its calls in flight are in and written, a new
        one takes over with the new settings, as a restarted watcher would."""
        if builder not in scheduler.held:
            with on_settings(builder.mem):
                cfg = configs.of_memory(builder.mem.path, builder.mem.home)
            if (cfg["compactor"] == builder.compactor.cfg and cap_of(cfg) == builder.max_cost_per_day
                    and int(cfg["line_bytes"]) == builder.line_bytes):
                return
            scheduler.held.add(builder)
        if builder.inflight:
            return
        try:
            builder.flush(wait=True)
        except LeaseLost as exc:
            scheduler.emit({"event": "lost", "memory": builder.name, "error": str(exc)})
            scheduler._drop(builder)
            return
        scheduler.retire(builder)
        builder.compactor.close()  # (its HTTP client, a command's system prompt file: no call of it is left)
        take(builder.mem.reopened(), block=False, lease=builder.lease)
        new = scheduler.builders[-1]
        scheduler.emit({"event": "switched", "memory": new.name, "model": new.compactor.label})

    def look_for_memories() -> None:
        if embedding:  # new messages: their vectors (in the background)
            for builder in scheduler.builders:
                embedding.add(builder.mem)
        for builder in list(scheduler.held):  # (replaced as soon as their calls are in)
            with scheduler.refusing(builder.name, builder):
                switch(builder)
        if time.monotonic() - last_scan[0] < 2.0:
            return
        last_scan[0], scanned = time.monotonic(), time.time()
        for builder in list(scheduler.builders):
            with scheduler.refusing(builder.name, builder):
                switch(builder)
        building = {b.name for b in scheduler.builders}
        # new memories, and ones whose lease another process took (taken back once it lets go); a refused
        # memory is skipped (build-tree NAME says why) until the next start, once a person mended it, but one
        # refused on its settings (a config.json saved half-written, say) is taken again once they change (one whose
        # key the server refused also after a while: ``key_again``), and
        # one moved or deleted behind the watcher's back once a memory is there again
        for mem in explicit or Memory.all(home, refused=lambda mem, exc: None):
            again = scheduler.key_again.get(mem.name)  # (a refused key: tried again after a while)
            if mem.name in refused_at and (settings_stamp(mem) != refused_at[mem.name]
                                           or again is not None and time.monotonic() >= again):
                scheduler.refused.pop(mem.name, None)
                scheduler.key_again.pop(mem.name, None)
                del refused_at[mem.name]
                mem = mem.reopened()  # (its settings read again: a named memory's object kept the refused ones)
            if mem.name in scheduler.gone and mem.identity() is not None:
                scheduler.refused.pop(mem.name, None)
                scheduler.gone.discard(mem.name)
                mem = mem.reopened()  # (a named memory's object knows the directory that went)
            if mem.name not in building and mem.name not in scheduler.refused:
                old = watched.pop(mem.name, None)
                if old is not None:
                    old.release()  # (lost or moved: let go of already; its directory closed)
                with scheduler.refusing(mem.name, mem=mem):
                    take(mem, block=False)
        if wait:
            tell_held()
        if not explicit:
            lease.beat_watcher(env.home(home), token, scanned, scheduler.refused)

    saved = _install_signals(scheduler)  # (from the first lease on: a signal while one is waited for stops too)
    try:
        for mem in explicit:
            if scheduler.stopped:
                break
            with scheduler.refusing(mem.name, passing=(Busy,), tell=False, mem=mem):
                take(mem, block=wait or not following)  # (following: a held one is taken at a look once free)
        if explicit and not scheduler.builders and not holders and not scheduler.gone and not scheduler.stopped:
            raise next(iter(scheduler.refused.values()))  # nothing named can be built, now, once let go of or back
        for name, exc in scheduler.refused.items():  # the others are built: these are said as they go
            scheduler.emit(scheduler.refusal(name, errors.as_error(exc)))
        if not explicit and not scheduler.stopped:
            scanned = time.time()
            mems = Memory.all(home)
            for mem in mems:
                with scheduler.refusing(mem.name, mem=mem):  # (renamed or deleted since listed: taken once back)
                    take(mem, block=False)
            if mems and not watched and not wait and not following and not scheduler.refused:
                raise Busy(f"every memory is already being built: {_held_by(holders)}; use --wait to stand by")
            if wait:  # (standing by for them: said, as for a named one)
                tell_held()
            last_scan[0] = time.monotonic()
            lease.beat_watcher(env.home(home), token, scanned, scheduler.refused)
        scheduler.run(between=look_for_memories)
    finally:
        if not explicit:
            lease.end_watcher(env.home(home), token)
        _close(scheduler, watched.values())
        _restore_signals(saved, scheduler)
        if embedding:
            embedding.stop()
    return scheduler
