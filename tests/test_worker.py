"""The offline compactor's worker processes: the same tree as inline, and nothing left running off the happy
path (a worker killed, a task that raises, the builder stopped by a signal or killed)."""

from __future__ import annotations

import io
import os
import queue
import re
import signal
import subprocess
import time
from pathlib import Path

import orjson
import pytest

from bench.synth import messages
from pimem import Memory, builder, scheduler
from pimem.compactor import Task, worker
from pimem.errors import BadInput

from conftest import pimem_cmd, subprocess_env

pytestmark = pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="finds processes in /proc")


@pytest.fixture(autouse=True)
def no_embedder(monkeypatch):
    monkeypatch.setenv("PIMEM_EMBEDDER", "off")  # (with the semantic extra, build-tree embeds every message too)


def synthetic(home, name: str, n: int, workers: int | None = None) -> Memory:
    home.mkdir(parents=True, exist_ok=True)
    compactor = {"provider": "extractive"} if workers is None else {"provider": "extractive", "workers": workers}
    (home / "config.json").write_bytes(orjson.dumps({"compactor": compactor}))
    mem = Memory.at(name)
    batch = list(messages(n, seed=3))
    for k in range(0, n, 5):  # long replies: more units than a message offers a span (``LEAF_UNITS``)
        steps = (f"Step {k}.{j} moved the {WORDS[(k + j) % 12]} cache to port {5000 + j}." for j in range(30))
        batch[k] = {"kind": "pi", "text": " ".join(steps)}
    mem.append(batch)
    return mem


WORDS = "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima".split()


def nodes(mem) -> list[tuple]:
    return sorted(Memory.open(mem.name).tree.nodes.db.execute("SELECT l, i, text FROM tree_nodes"))


def workers_of(mem) -> list[int]:
    """Pids of live worker processes building ``mem``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            except OSError:
                continue
            if b"pimem.compactor.worker" in cmdline and str(mem.path).encode() in cmdline and state != "Z":
                found.append(int(entry))
    return found


def gone(mem, within: float = 10.0) -> bool:
    deadline = time.monotonic() + within
    while workers_of(mem):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


@pytest.fixture
def eager(monkeypatch):
    """Workers for any backlog, two of them however many cores, and small blocks: every path of the crew
    (blocks dealt to both workers, pools shipped to worker 0) runs on a few hundred messages."""
    monkeypatch.setattr(worker, "MIN_BACKLOG", 1)
    monkeypatch.setattr(worker, "BLOCK", 3)
    monkeypatch.setattr(worker, "cores", lambda: 2)


@pytest.fixture
def started(monkeypatch) -> list[int]:
    """The size of every crew started, in order."""
    sizes, original = [], worker.Crew.__init__

    def spy(self, *args, **kwargs):
        sizes.append(args[-1])
        original(self, *args, **kwargs)

    monkeypatch.setattr(worker.Crew, "__init__", spy)
    return sizes


def test_workers_build_the_same_tree_as_inline(tmp_path, monkeypatch, eager, started):
    trees = []
    for workers in (0, 2):
        home = tmp_path / f"home{workers}"
        monkeypatch.setenv("PIMEM_HOME", str(home))
        mem = synthetic(home, "m", 700, workers)
        started.clear()
        built = scheduler.build_tree([mem])
        assert started == ([2] if workers else [])
        assert built.builders[0].stats.calls > 200
        assert builder.survey(Memory.open("m"))["pending"] == 0
        assert workers_of(mem) == []
        trees.append(nodes(mem))
    assert trees[0] == trees[1]
    assert len(trees[0]) > 300


def test_a_memory_built_but_for_its_newest_messages_starts_no_worker(home, eager, started, monkeypatch):
    monkeypatch.setattr(worker, "MIN_BACKLOG", 64)
    mem = synthetic(home, "m", 300)
    scheduler.build_tree([mem])
    assert started == [2]  # the backlog: every message unread and unsummarised
    mem.append(list(messages(10, seed=4)))
    scheduler.build_tree([Memory.open("m")])
    assert started == [2]  # its 300 messages are read again, but the tree covers all but the newest 10
    assert builder.survey(Memory.open("m"))["pending"] == 0


def test_a_killed_worker_leaves_the_rest_to_the_builder(tmp_path, monkeypatch, eager):
    monkeypatch.setenv("PIMEM_HOME", str(tmp_path / "home"))
    mem = synthetic(tmp_path / "home", "m", 700)
    events = []
    run = scheduler.Scheduler(on_event=events.append)
    building = builder.Builder(mem)
    run.add(building)
    settle, settled = building.built, []

    def kill_after_some(l, i, text, meta):  # (the built events come once the nodes are written: too late here)
        settle(l, i, text, meta)
        settled.append((l, i))
        if len(settled) == 40:
            crew = run._workers[building]
            crew._procs[1].kill()

    building.built = kill_after_some
    run.run(once=True)
    built = [e for e in events if e["event"] == "built"]
    assert len(built) == len({(e["l"], e["i"]) for e in built})  # no node built twice
    assert builder.survey(Memory.open("m"))["pending"] == 0
    assert run.builders[0] in run._inline and run._workers == {}
    assert workers_of(mem) == []
    assert all(0 < len(text.encode()) <= 512 for _, _, text in nodes(mem))


def test_no_interpreter_to_start_builds_inline(home, eager, monkeypatch):
    mem = synthetic(home, "m", 200)
    monkeypatch.setattr(worker.sys, "executable", str(home / "no-such-python"))
    built = scheduler.build_tree([mem])
    assert built._inline == {built.builders[0]} and built._workers == {}
    assert builder.survey(Memory.open("m"))["pending"] == 0


def test_a_task_that_raises_comes_back_to_be_built_inline(home, eager):
    mem = synthetic(home, "m", 40)
    results: queue.Queue = queue.Queue()
    b = builder.Builder(mem)
    crew = worker.Crew(b, results, 2)
    try:
        # worker 1 gets the leaf (block 1 of 8 messages), worker 0 a merge of a span past the end of the log
        leaf, bogus = Task(0, 9, kind="user", text="the port is 5433"), Task(5, 9999)
        crew.send([leaf, bogus])
        got = {task: (text, error) for _, task, text, _, error in (results.get(timeout=30) for _ in range(2))}
    finally:
        crew.close()
    assert set(got) == {leaf, bogus}
    assert got[bogus][0] is None and isinstance(got[bogus][1], worker.WorkerGone)
    text, error = got[leaf]  # answered, or handed back too if the error came first
    assert ("5433" in text and error is None) if text is not None else isinstance(error, worker.WorkerGone)
    assert crew.gone and crew.pending == 0
    assert workers_of(mem) == []


def test_a_worker_answers_each_frame_in_order_and_a_raising_one_with_its_error(home):
    mem = synthetic(home, "m", 20)
    frames = [[[0, 3, "user", "deploy to staging on port 5433", None, None, False, []],
               [1, 0, "", "", None, None, True, []]],
              [[4, 7777, "", "", None, None, False, []]]]
    source = io.BytesIO(b"".join(worker._LEN.pack(len(data)) + data for data in map(orjson.dumps, frames)))
    sink = io.BytesIO()
    worker.serve("m", str(mem.path), str(mem.home), 1, 6, 0, source, sink)
    out, replies = sink.getvalue(), []
    while out:
        size = worker._LEN.unpack(out[:4])[0]
        replies.append(orjson.loads(out[4:4 + size]))
        out = out[4 + size:]
    (leaf, _, no_pool), (merge, _, pool) = replies[0]
    assert "5433" in leaf and no_pool is None
    assert merge and pool[0] and all(len(unit) == 11 for unit in pool[0])  # the units the parent chooses from
    assert isinstance(replies[1], str) and replies[1]


def test_workers_are_off_for_a_short_backlog_one_core_or_workers_0(monkeypatch):
    monkeypatch.setattr(worker, "cores", lambda: 8)
    assert worker.crew_size(worker.MIN_BACKLOG) == worker.MOST
    assert worker.crew_size(worker.MIN_BACKLOG - 1) == 0
    assert worker.crew_size(10**6, most=0) == 0 and worker.crew_size(10**6, most=1) == 0
    monkeypatch.setattr(worker, "cores", lambda: 1)
    assert worker.crew_size(10**6) == 0


@pytest.mark.parametrize("bad", [-1, "2", 1.5, True])
def test_a_bad_workers_setting_is_one_clear_error(home, bad):
    with pytest.raises(BadInput, match=re.escape(f"{home / 'config.json'}: compactor.workers cannot be")):
        builder.Builder(synthetic(home, "m", 3, bad))


def start_build(home, mem) -> subprocess.Popen:
    proc = subprocess.Popen(pimem_cmd("build-tree", mem.name, "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(PIMEM_HOME=home), start_new_session=True)
    deadline = time.monotonic() + 60
    while not workers_of(mem):
        if proc.poll() is not None:
            pytest.fail(f"build-tree ended before its workers were seen: {proc.stderr.read()!r}")
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("no worker started within 60 s")
        time.sleep(0.02)
    return proc


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT to the group"])
def test_a_stopped_build_takes_its_workers_with_it_and_keeps_what_it_built(home, how):
    mem = synthetic(home, "m", worker.MIN_BACKLOG + 2000, 2)
    proc = start_build(home, mem)
    time.sleep(0.5)
    if how == "SIGTERM":
        proc.send_signal(signal.SIGTERM)
    else:
        os.killpg(proc.pid, signal.SIGINT)  # what ^C does: every process of the terminal's group gets it
    out, err = proc.communicate(timeout=60)
    assert proc.returncode in (0, 130, 143), err
    assert gone(mem)
    kept = nodes(mem)
    assert kept and builder.survey(Memory.open("m"))["pending"] > 0  # stopped part way, what it built kept
    done = subprocess.run(pimem_cmd("build-tree", "m"), capture_output=True, env=subprocess_env(PIMEM_HOME=home),
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert builder.survey(Memory.open("m"))["pending"] == 0
    assert set(kept) <= set(nodes(mem))
    assert gone(mem)


def test_a_killed_build_leaves_no_worker_running(home):
    mem = synthetic(home, "m", worker.MIN_BACKLOG + 2000, 2)
    proc = start_build(home, mem)
    proc.kill()
    proc.wait()
    assert gone(mem)  # their input ends with the builder


def test_a_pool_shipped_between_workers_is_the_pool_made():
    """A call's key is its id and its message: JSON made the one a span's runs hold a list, unequal to the
    tuple of its units, so a worker folding another's block dropped the last call's outcome (``ran pytest ×4``
    where inline said ``ran pytest ×4 → exit 1, 3 failed``)."""
    import orjson

    from pimem.compactor import extractive
    from pimem.compactor.worker import _pool

    found = [u for n in range(4) for u in extractive.units({"i": 2 * n, "kind": "tool", "text": 'bash({"command": "pytest"})',
                                                             "meta": {"tool": "bash", "command": "pytest", "call_id": f"c{n}"}})
             + extractive.units({"i": 2 * n + 1, "kind": "echo", "text": "3 failed, 2 passed\nexit code 1",
                                 "meta": {"call_id": f"c{n}", "exit_code": 1}})]
    runs = extractive._runs([u for u in found if not u.result])
    shipped = orjson.loads(orjson.dumps([[[u.score, u.i, u.pos, u.text, u.who, u.rank, u.words, u.result, u.call, u.tool,
                                           u.file] for u in found], [], runs]))
    units, _, back = _pool(*shipped)
    assert back == runs and [u.call for u in units] == [u.call for u in found]  # (the keys ``_folded`` compares)
    said = [u.text for u in extractive._paired(extractive._folded(extractive._answered(found), runs))]
    assert said == [u.text for u in extractive._paired(extractive._folded(extractive._answered(units), back))], said
