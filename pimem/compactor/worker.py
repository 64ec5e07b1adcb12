"""The offline compactor in processes of its own, for a backlog: the builder's thread settles, schedules and
hands nodes to the writer while worker processes compose the lines, so a long ``build-tree`` uses every
core it may (up to ``MOST``).

A worker is ``python -P -m pimem.compactor.worker NAME PATH HOME N BLOCK K`` (the K-th of N): one memory's
``Digest``, fed batches of tasks on stdin and answering each batch on stdout, in order, as frames (a 4-byte
length, then JSON). It reads the log itself, as the digest in the builder's process does. The tree is dealt
out in blocks of ``2**BLOCK`` messages, block ``b`` to worker ``b % n``, and every node above the blocks to
worker 0; a block's top node built elsewhere sends its pool (the units its parent chooses from) with its
line, and it goes to worker 0 with the parent's task. So each merge draws on the same units as inline, and
the lines are the same. A worker ignores SIGINT (the terminal's ^C reaches the builder, which stops it) and
ends at the end of its input, so it never outlives its builder.

``Crew`` is the builder's side: ``send`` a batch, and a reader thread per worker puts one result per task on
the scheduler's queue. When a worker fails in any way (it died, or a task raised), every task the crew still
holds comes back with ``WorkerGone`` and the build goes on inline, where a bug in a line raises as it
always did.
"""

from __future__ import annotations

import os
import queue
import signal
import struct
import subprocess
import sys
import threading
import time
from collections import deque
from pathlib import Path

import orjson

from . import offline_meta

MIN_BACKLOG = 4096  # unread messages, not yet summarised, before a build starts workers (each one's start-up
# costs about 0.1 s)
MOST = 4  # workers at most, by default (``compactor.workers`` in config.json; 0: always inline)
BLOCK = 6  # log2 of the messages a worker takes at a time (small: the tasks in flight span several blocks)
BATCH = 256  # tasks in flight a frame, about
AHEAD = 4  # frames in flight a worker: the builder keeps every worker busy while it settles
WINDOW = 256  # unbuilt leaves the builder admits at a time (8 inline): enough to keep the workers fed, few
# enough that the merges of a span come soon after its leaves, while the workers still hold its messages
_LEN = struct.Struct(">I")


class WorkerGone(Exception):
    """A worker process did not answer a task (it died or failed); the task is to be built inline."""


def cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def crew_size(backlog: int, most: int = MOST) -> int:
    """Workers for a build with ``backlog`` messages to read, at most ``most``: none for a short one or on one
    core."""
    size = min(cores(), most)
    return size if backlog >= MIN_BACKLOG and size >= 2 else 0


class Crew:
    """``size`` worker processes for one builder's memory; results go to ``results`` as the scheduler's pool's
    do: ``(builder, task, text, meta, error)``."""

    def __init__(self, builder, results: queue.Queue, size: int):
        mem = builder.mem
        self.builder = builder
        self.label = builder.compactor.label
        self.results = results
        self.gone = False
        self.pending = 0  # tasks sent, not answered yet
        self._held: list[deque] = [deque() for _ in range(size)]  # each worker's tasks, in order
        self._pools: dict[tuple[int, int], list] = {}  # a block's top node built by worker > 0 → its pool
        self._lock = threading.Lock()
        self.block = BLOCK  # (read once: the workers are told the blocks ``send`` deals out)
        # -P and PYTHONPATH: the workers run this process's pimem, not a ``pimem/`` in the current directory
        argv = [sys.executable, "-P", "-m", __name__, mem.name, str(mem.path), str(mem.home), str(size),
                str(self.block)]
        root = str(Path(__file__).resolve().parents[2])
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
        self._procs: list[subprocess.Popen] = []
        try:
            for k in range(size):
                self._procs.append(subprocess.Popen([*argv, str(k)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                                    stderr=subprocess.DEVNULL, env=env))
        except OSError:  # (the caller builds inline)
            self._stop(kill=True)
            raise
        self._readers = [threading.Thread(target=self._read, args=(k,), daemon=True) for k in range(size)]
        for reader in self._readers:
            reader.start()

    def send(self, tasks: list) -> None:
        """Hand ``tasks`` (each after its children) to the workers."""
        frames: list[list] = [[] for _ in self._procs]
        block = self.block
        with self._lock:
            if self.gone:
                for task in tasks:
                    self.results.put((self.builder, task, None, None, WorkerGone()))
                return
            for task in tasks:
                k = (task.i << task.l >> block) % len(self._procs) if task.l <= block else 0
                ship = task.l == block and k > 0
                given = [] if task.l != block + 1 else [  # the pools of its children that worker 0 lacks
                    [c, *self._pools.pop((block, c))] for c in (2 * task.i, 2 * task.i + 1)
                    if (block, c) in self._pools]
                frames[k].append([task.l, task.i, task.kind, task.text, task.meta, task.date, ship, given])
                self._held[k].append(task)
            self.pending += len(tasks)
        for proc, frame in zip(self._procs, frames):
            if frame:
                data = orjson.dumps(frame)
                try:
                    proc.stdin.write(_LEN.pack(len(data)) + data)
                    proc.stdin.flush()
                except (OSError, ValueError):  # gone: its reader hands its tasks back
                    self._end()
                    return

    def _read(self, k: int) -> None:
        out, held = self._procs[k].stdout, self._held[k]
        try:
            while True:
                head = out.read(_LEN.size)
                if len(head) < _LEN.size:
                    break
                reply = orjson.loads(out.read(_LEN.unpack(head)[0]))
                if not isinstance(reply, list):  # a task raised: build it, and the rest, inline
                    break
                for text, seconds, pool in reply:
                    with self._lock:
                        if self.gone:
                            return
                        task = held.popleft()
                        self.pending -= 1
                        if pool is not None:
                            self._pools[(task.l, task.i)] = pool
                    self.results.put((self.builder, task, text, offline_meta(self.label, seconds), None))
        except (OSError, ValueError, IndexError):
            pass
        self._end()

    def _end(self) -> None:
        """Stop every worker and hand back what they still hold (once)."""
        with self._lock:
            if self.gone:
                return
            self.gone = True
            held = [task for tasks in self._held for task in tasks]
            for tasks in self._held:
                tasks.clear()
            self.pending = 0
        self._stop(kill=True)
        for task in held:
            self.results.put((self.builder, task, None, None, WorkerGone()))

    def close(self) -> int:
        """End the workers: their input ends, so they exit (killed if they still hold tasks: nobody waits for
        those). Returns how many tasks they held, which will not come back."""
        with self._lock:
            self.gone = True
            dropped, self.pending = self.pending, 0
        self._stop(kill=dropped > 0)
        for reader in self._readers:
            reader.join(timeout=5)
        return dropped

    def _stop(self, kill: bool) -> None:
        for proc in self._procs:
            try:
                proc.kill() if kill else proc.stdin.close()
            except OSError:
                pass
        for proc in self._procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            for pipe in (proc.stdin, proc.stdout):
                try:
                    pipe.close()
                except OSError:
                    pass


def serve(name: str, path: str, home: str, size: int, block: int, k: int, source, sink) -> None:
    """Worker ``k`` of ``size`` (blocks of ``2**block`` messages): answer the frames read from ``source`` on
    ``sink`` until ``source`` ends. A frame whose task raises is answered with the error, a string."""
    from ..memory import Memory
    from .extractive import Digest

    digest = Digest(Memory(name, Path(path), Path(home)))
    digest.mine = lambda i: (i >> block) % size == k  # its blocks' leaves (a merge above them seldom reads one)
    while True:
        head = source.read(_LEN.size)
        if len(head) < _LEN.size:
            return
        answers = []
        try:
            for l, i, kind, text, meta, date, ship, given in orjson.loads(source.read(_LEN.unpack(head)[0])):
                started = time.perf_counter()
                for c, units, days, runs in given:
                    digest.pools[(l - 1, c)] = _pool(units, days, runs)
                line = digest.leaf(i, kind, text, meta, date) if l == 0 else digest.merge(l, i)
                pool = None
                if ship:
                    units, days, runs = digest.pools.pop((l, i))
                    pool = [[[u.score, u.i, u.pos, u.text, u.who, u.rank, u.words, u.result, u.call, u.tool, u.file]
                             for u in units], days, runs]
                answers.append((line, round(time.perf_counter() - started, 4), pool))
        except Exception as exc:  # the builder builds it again inline, where it raises with its traceback
            answers = f"{type(exc).__name__}: {exc}"
        frame = orjson.dumps(answers)
        sink.write(_LEN.pack(len(frame)) + frame)
        sink.flush()


def _pool(units: list, days: list, runs: dict) -> tuple:
    """A span's pool as another worker shipped it in JSON, as it was made (``Digest.pools``)."""
    return [_unit(u) for u in units], tuple(days), {did: [n, _key(call)] for did, (n, call) in runs.items()}


def _unit(fields: list):
    """A ``Unit`` as another worker shipped it in JSON: its words and its call's key tuples again, as made."""
    from .extractive import Unit

    return Unit(*fields[:6], tuple(fields[6]), fields[7], _key(fields[8]), *fields[9:])


def _key(call):
    """A call's key as another worker shipped it in JSON: an id and a message a tuple again, as it was made (a
    list is no key, nor equal to the tuple another unit or a span's runs hold)."""
    return tuple(call) if isinstance(call, list) else call


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    name, path, home, size, block, k = sys.argv[1:7]
    try:
        serve(name, path, home, int(size), int(block), int(k), sys.stdin.buffer, sys.stdout.buffer)
    except BrokenPipeError:
        pass
