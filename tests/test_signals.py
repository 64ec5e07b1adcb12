"""Stopped means stopped: SIGINT, SIGTERM and SIGHUP to real processes keep what is durable, say so in one line
and exit 130, 143 or 129 (never 0)."""

import re
import signal
import subprocess
import sys
import threading
import time

import orjson
import pytest

from conftest import CLI_SIGNAL_AT, SIGNAL_AT, pimem_cmd, subprocess_env
from pimem import Memory

SIGNALS = [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)]  # (SIGHUP: its terminal closed)


def line(k: int) -> bytes:
    return orjson.dumps({"kind": "user", "text": f"message {k} about the staging database", "date": "2026-10-08T09:00:00+08:00"}) + b"\n"


def start(*args, stdin=None):
    return subprocess.Popen(pimem_cmd(*args), stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=subprocess_env())


def wait_for(predicate, seconds=60.0):
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.parametrize("sig,code", SIGNALS)
def test_append_ndjson_waiting_on_a_live_stream(home, sig, code):
    proc = start("append", "--ndjson", stdin=subprocess.PIPE)
    proc.stdin.write(line(0) + line(1))
    proc.stdin.flush()  # the stream goes quiet after whole lines: that batch is logged and printed
    assert [proc.stdout.readline(), proc.stdout.readline()] == [b"0\n", b"1\n"]
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == code and out == b""
    assert err.decode() == "pimem: interrupted: 2 messages logged and printed; the rest of stdin was not logged\n"
    assert Memory.open("main").count() == 2
    assert subprocess.run(pimem_cmd("fsck"), env=subprocess_env()).returncode == 0


@pytest.mark.parametrize("sig,code", SIGNALS)
def test_append_ndjson_stopped_mid_stream_logs_exactly_what_it_printed(home, sig, code):
    proc = start("append", "fast", "--ndjson", stdin=subprocess.PIPE)
    stop = threading.Event()

    def feed():  # a stream that never ends by itself
        k = 0
        try:
            while not stop.is_set():
                proc.stdin.write(b"".join(line(k + n) for n in range(1000)))
                k += 1000
        except (BrokenPipeError, ValueError):
            pass

    feeder = threading.Thread(target=feed, daemon=True)
    feeder.start()
    first = proc.stdout.readline()
    assert first == b"0\n"
    proc.send_signal(sig)  # most likely while a batch is being written: it is finished and printed first
    out, err = proc.stdout.read(), proc.stderr.read()  # (not communicate: it would skip what readline buffered)
    proc.wait(timeout=60)
    stop.set()
    printed = [first] + out.splitlines(keepends=True)
    assert proc.returncode == code
    assert err.decode().startswith(f"pimem: interrupted: {len(printed):,} message") and err.count(b"\n") == 1
    assert printed == [b"%d\n" % i for i in range(len(printed))]
    assert Memory.open("fast").count() == len(printed)  # every printed i is durable, nothing unprinted was logged


@pytest.mark.parametrize("sig,code", SIGNALS)
def test_import_stopped_keeps_whole_batches_and_the_next_import_reads_on(home, tmp_path, sig, code):
    source = tmp_path / "big.ndjson"
    total = 60_000  # six batches of 10,000
    source.write_bytes(b"".join(line(k) for k in range(total)))
    proc = start("import", source, "--name", "big")
    wait_for(lambda: Memory.at("big").exists() and Memory.at("big").count() > 0)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == code, err
    kept = Memory.open("big").count()
    assert 0 < kept < total and kept % 10_000 == 0
    assert err.decode() == (f"pimem: interrupted: {kept:,} messages imported; "
                            "the same import again reads on from where this one stopped\n")
    again = subprocess.run(pimem_cmd("import", source, "--name", "big", "--json"), capture_output=True, env=subprocess_env())
    assert again.returncode == 0
    summary = orjson.loads(again.stdout.splitlines()[-1])
    assert summary["imported"] == total - kept and summary["present"] == 0 and summary["messages"] == total
    assert [m["text"] for m in Memory.open("big").messages(0)] == [f"message {k} about the staging database" for k in range(total)]


@pytest.mark.parametrize("sig,code", SIGNALS)
def test_build_tree_stopped_keeps_what_it_built_and_counts_what_is_left(home, sig, code):
    from bench.llm_server import FakeLLM
    from pimem import builder
    from test_scheduler import configure, fill

    with FakeLLM("openai", latency=0.3) as server:
        configure(home, server)
        fill("m", 40, short_every=1000)  # forty leaves to summarise, eight calls at a time
        proc = subprocess.Popen(pimem_cmd("build-tree"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=subprocess_env(TEST_LLM_KEY="k"))
        wait_for(lambda: len(server.requests) >= 8)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        asked = len(server.requests)
    assert proc.returncode == code and out == b""
    left = builder.survey(Memory.open("m"))
    assert 0 < left["built"] and left["pending"] > 0 and asked < 40  # the calls in flight were kept, no new one started
    stopping, interrupted = err.decode().splitlines()  # (the calls in flight said at once, then what is left)
    assert stopping.startswith("pimem: stopping: waiting up to 15 s for ") and stopping.endswith(" again to stop now)")
    assert interrupted.startswith(f"pimem: interrupted: {left['pending']:,} nodes still pending (")
    assert not (home / "m" / "lock.json").exists()


def test_a_second_ctrl_c_stops_build_tree_without_waiting_for_the_calls_in_flight(home):
    """The first Ctrl-C gives the calls in flight their grace (15 s); a second one ends the run now, keeping
    what was built and the lease given up."""
    from bench.llm_server import FakeLLM
    from pimem import builder
    from test_scheduler import configure, fill

    with FakeLLM("openai", latency=12.0) as server:  # (answers after the run has ended)
        configure(home, server)
        fill("m", 20, short_every=1000)
        proc = subprocess.Popen(pimem_cmd("build-tree"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=subprocess_env(TEST_LLM_KEY="k"))
        wait_for(lambda: len(server.requests) >= 8)
        proc.send_signal(signal.SIGINT)
        time.sleep(0.5)
        assert proc.poll() is None  # (waiting for the calls in flight)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=8)  # (before any call is answered, let alone the grace runs out)
    assert proc.returncode == 130 and err.startswith(b"pimem: stopping: waiting up to 15 s for 8 calls in flight ("), err
    assert err.splitlines()[1].startswith(b"pimem: interrupted: ") and err.count(b"\n") == 2, err
    assert builder.survey(Memory.open("m"))["pending"] > 0 and not (home / "m" / "lock.json").exists()


@pytest.mark.parametrize("sig,code", SIGNALS)
def test_a_signal_while_a_command_waits_says_so_in_one_line(home, sig, code):
    assert subprocess.run(pimem_cmd("append", "m", "first"), env=subprocess_env(), capture_output=True).returncode == 0
    for args in (["append", "m", "-"], ["since", "m", "#0", "--follow"]):  # (SIGTERM too: not a silent death)
        proc = start(*args, stdin=subprocess.PIPE)
        time.sleep(1.0)  # (waiting on stdin, or for new messages)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == code and err == b"pimem: interrupted\n", (args, err)
    assert Memory.open("m").count() == 1


def test_a_command_whose_standard_streams_were_closed_does_its_work_without_a_traceback(home):
    import os

    def closed(*fds):
        return lambda: [os.close(fd) for fd in fds]

    for fds in ((1,), (0, 1), (1, 2)):
        proc = subprocess.run(pimem_cmd("append", "m", f"logged with {fds} closed"), env=subprocess_env(),
                              stderr=subprocess.PIPE, preexec_fn=closed(*fds))
        assert proc.returncode == 0 and (2 in fds or proc.stderr == b""), (fds, proc.stderr)
    proc = subprocess.run(pimem_cmd("view", "m"), env=subprocess_env(), stderr=subprocess.PIPE, preexec_fn=closed(1))
    assert proc.returncode == 0 and proc.stderr == b""
    assert [m["text"] for m in Memory.open("m").messages()] == [f"logged with {fds} closed" for fds in ((1,), (0, 1), (1, 2))]


def test_a_stderr_that_cannot_be_written_changes_no_outcome(home, tmp_path):
    """A notice, a warning or an error that stderr refuses (``2>/dev/full``, a reader gone: ``2>&1 | head -1``)
    goes nowhere: a writer finishes its work and every command ends with the status it would have had (an
    import stopped at its second notice with exit 1; ``remember`` stored its memory and exited 1)."""
    import os

    (tmp_path / "a.ndjson").write_bytes(line(0) + line(1))
    (tmp_path / "b.ndjson").write_bytes(line(0) + b"not json\n" + line(1))  # (a warning: that line skipped)
    read_end, gone = os.pipe()
    os.close(read_end)

    def run(*args, stderr):
        return subprocess.run(pimem_cmd(*args), env=subprocess_env(), stdout=subprocess.PIPE, stderr=stderr).returncode

    with open("/dev/full", "w") as full:
        for stderr in (full, gone):
            assert run("import", tmp_path / "a.ndjson", tmp_path / "b.ndjson", stderr=stderr) == 0
        assert run("remember", "m", "the db is on 5433", stderr=full) == 0
        assert run("rename", "m", "m2", stderr=gone) == 0
        assert run("since", "nonexistent", stderr=full) == 3
        assert run("since", "nonexistent", stderr=gone) == 3
        assert run("append", "--ndjson", stderr=full) == 2  # (usage: no input)
    os.close(gone)
    assert Memory.open("a").count() == 2 and Memory.open("b").count() == 2
    assert (home / "m2" / "memory.jsonl").read_text().count("the db is on 5433") == 1


@pytest.mark.parametrize("buffered", [True, False])
def test_a_stdout_that_refuses_the_output_is_said_in_one_line_naming_it(home, tmp_path, buffered):
    """A full stdout (``>/dev/full``) is not a reader that went away: a writer does its work, says in one line
    that its output was not written and exits 0 (it exited 7 with the work done, so a wrapper retrying it logged
    twice; with Python's buffered stdout, 120 and a traceback); a reader, the help and the version exit 7 in
    one line naming stdout (the help and the version printed a traceback and exited 1)."""
    env = subprocess_env()
    env.pop("PYTHONUNBUFFERED", None) if buffered else env.update(PYTHONUNBUFFERED="1")
    (tmp_path / "in.ndjson").write_bytes(line(0) + line(1))
    lost = b"pimem: warning: output not written (stdout: No space left on device); the work was done\n"
    refused = b"pimem: error: output not written (stdout: No space left on device)\n"

    def run(*args, stdin=None):
        with open("/dev/full", "w") as full:
            proc = subprocess.run(pimem_cmd(*args), env=env, stdin=stdin, stdout=full, stderr=subprocess.PIPE)
        return proc.returncode, proc.stderr

    assert run("append", "m", "first") == (0, lost)
    with open(tmp_path / "in.ndjson", "rb") as stdin:
        assert run("append", "m", "--ndjson", stdin=stdin) == (0, lost)
    code, said = run("remember", "m", "the db is on 5433")
    assert code == 0 and said.endswith(lost) and said.count(b"\n") == 2  # (after "remembered mem_…")
    code, said = run("compact", "m", "--keep", "0")
    assert code == 0 and said.endswith(lost) and said.count(b"\n") == 2  # (after "compacted #0…")
    assert [m["text"] for m in Memory.open("m").messages()] == ["first", "message 0 about the staging database",
                                                                "message 1 about the staging database"]
    assert (home / "m" / "memory.jsonl").read_text().count("the db is on 5433") == 1
    for args in (["since", "m", "#0"], ["since", "m", "#0", "--text"], ["list"], ["recall", "m"], ["view", "m"],
                 ["--version"], ["--help"], ["view", "--help"],
                 # (commands that write only with an option are readers without it: a cron's `fsck > report` on a
                 # full disk exited 0, `the work was done`, its report empty)
                 ["fsck"], ["fsck", "m", "--json"], ["model", "m"], ["build-tree", "m", "--dry-run"]):
        assert run(*args) == (7, refused), args
    assert run("fsck", "--repair") == (0, lost)
    assert Memory.open("m").count() == 3


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_signals_while_watch_ends_change_nothing(home, sig):
    """A second signal while `watch` ended after the first (its handlers put back as they were before it ran: the
    system's) killed it outright: no line, status -15. Signals sent until it is gone change nothing: exit 0."""
    assert subprocess.run(pimem_cmd("append", "m", "first"), env=subprocess_env(), capture_output=True).returncode == 0
    proc = subprocess.Popen(pimem_cmd("watch"), env=subprocess_env(), stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    try:
        assert proc.stderr.readline() == b"m: watching\n"
        while proc.poll() is None:
            proc.send_signal(sig)
            time.sleep(0.003)
    finally:
        proc.kill()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()


@pytest.mark.parametrize("sig,code", [*SIGNALS, (signal.SIGHUP, 129)])
def test_a_signal_while_build_tree_and_watch_wait_for_a_lease_stops_them_as_while_they_build(home, sig, code):
    """``--wait`` stands by while a watcher holds the memory: a signal then stops the wait as it stops a build
    (SIGHUP killed them silently; SIGTERM and Ctrl-C stopped a standing-by ``watch`` with 143 and 130), and
    the watcher's lease is untouched."""
    from pimem import lease

    assert subprocess.run(pimem_cmd("append", "m", "first"), env=subprocess_env(), capture_output=True).returncode == 0
    holder = start("watch", "m")
    try:
        wait_for(lambda: lease.holder(Memory.open("m")) is not None)
        said = b"pimem: interrupted: no node pending (0 written in this run)\n"  # (not "0 nodes …; the next run builds the rest")
        held = re.compile(rb"m: held by a watcher \(pid %d, since [^)]+\); standing by until it lets go\n" % holder.pid)
        for args, status, said in ((["build-tree", "m", "--wait", "60"], code, held.pattern + re.escape(said)),
                                   (["watch", "m", "--wait"], 0, held.pattern)):
            proc = start(*args)
            time.sleep(1.5)  # (waiting for the watcher to let go)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=30)
            assert proc.returncode == status and re.fullmatch(said, err), (args, proc.returncode, err)
            assert lease.holder(Memory.open("m"))["pid"] == holder.pid
    finally:
        holder.send_signal(signal.SIGTERM)
        holder.communicate(timeout=60)
    assert holder.returncode == 0 and not (home / "m" / "lock.json").exists()


def test_sighup_during_a_dry_run_says_so_in_one_line(home, tmp_path):
    source = tmp_path / "big.ndjson"
    source.write_bytes(b"".join(line(k) for k in range(60_000)))
    assert subprocess.run(pimem_cmd("import", source, "--name", "big"), env=subprocess_env(), capture_output=True).returncode == 0
    # (a model compactor: its dry run also runs the compactor's view over every message)
    assert subprocess.run(pimem_cmd("model", "big", "openai/m", "--base-url", "http://127.0.0.1:9"),
                          env=subprocess_env(), capture_output=True).returncode == 0
    proc = start("build-tree", "--dry-run")
    time.sleep(0.5)  # (surveying the tree: seconds for 60,000 messages)
    proc.send_signal(signal.SIGHUP)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 129 and err == b"pimem: interrupted\n" and out == b"", err


@pytest.mark.parametrize("args", [["build-tree"], ["watch", "m", "--json"]])
def test_the_first_ctrl_c_says_at_once_that_it_waits_for_the_calls_in_flight(home, args):
    """The first Ctrl-C lets the calls in flight finish (up to 15 s) and said nothing meanwhile, so a person
    pressed it again and lost those calls: it says so at once, on stderr (with --json too), while they are
    still held; the calls then answered are kept."""
    from bench.llm_server import FakeLLM
    from pimem import builder
    from test_scheduler import configure, fill

    held = threading.Event()
    with FakeLLM("openai", latency=lambda n, body: held.wait(60) and 0) as server:  # (each reply held till released)
        configure(home, server)
        fill("m", 4, short_every=1000)  # three long messages to summarise (and a short one): three calls at once
        proc = subprocess.Popen(pimem_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=subprocess_env(TEST_LLM_KEY="k"))
        said = []
        reader = threading.Thread(target=lambda: said.extend(proc.stderr), daemon=True)
        reader.start()
        try:
            wait_for(lambda: len(server.requests) >= 3)
            proc.send_signal(signal.SIGINT)
            wait_for(lambda: said, seconds=30)
            assert proc.poll() is None  # (said while the calls are still held)
        finally:
            held.set()
        proc.wait(timeout=60)
        reader.join(timeout=30)
        out = proc.stdout.read()
    assert said[0] == b"pimem: stopping: waiting up to 15 s for 3 calls in flight (Ctrl-C again to stop now)\n", said
    assert b"stopping" not in out and (args[0] == "watch" or out == b"")
    assert builder.survey(Memory.open("m"))["pending"] == 0  # (the answers held were kept, the merges free)


def caught(pid: int, *signals) -> bool:
    """Whether process ``pid`` has handlers of its own for ``signals`` (its SigCgt mask)."""
    with open(f"/proc/{pid}/status") as f:
        mask = int(next(l for l in f if l.startswith("SigCgt:")).split()[1], 16)
    return all(mask >> (s - 1) & 1 for s in signals)


@pytest.mark.parametrize("sig,code", SIGNALS)
def test_claude_codes_hook_stopped_while_it_waits_for_its_event_says_so_as_every_command(home, sig, code):
    """Claude Code's hook runs without typer (``python -m pimem hook claude-code``: ``pimem.__main__``), in the
    boundary every command runs in: a signal while it waits for the event on stdin says ``pimem: interrupted``
    and exits 130, 143 or 129, SIGTERM and SIGHUP too (that path without ``boundary.take_signals`` died silently
    on them, -15 and -1, and no test said so); nothing is written."""
    proc = start("hook", "claude-code", "--timeout", "60", stdin=subprocess.PIPE)
    wait_for(lambda: caught(proc.pid, signal.SIGTERM, signal.SIGHUP))  # (the boundary's handlers: it is in the hook)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=60)
    assert (proc.returncode, out, err) == (code, b"", b"pimem: interrupted\n")
    assert not home.exists() or not any(home.iterdir())


def test_claude_codes_hook_with_its_standard_streams_closed_or_full_answers_without_a_traceback(home):
    """The hook's path without typer starts its streams as every command does (``boundary.begin``): a stdout the
    caller closed is /dev/null (without it: AttributeError on printing the context, exit 1, a traceback), a full
    one a warning with the work done, a closed stderr nothing lost."""
    import os

    assert subprocess.run(pimem_cmd("remember", "api", "the staging db listens on 5433"), env=subprocess_env(),
                          capture_output=True).returncode == 0
    event = orjson.dumps({"hook_event_name": "SessionStart", "session_id": "s1", "cwd": "/home/dev/api"})

    def run(stdout=subprocess.PIPE, closed=()):
        return subprocess.run(pimem_cmd("hook", "claude-code", "--name", "api"), input=event, stdout=stdout,
                              stderr=subprocess.PIPE, env=subprocess_env(),
                              preexec_fn=(lambda: [os.close(fd) for fd in closed]) if closed else None, timeout=60)

    proc = run()
    assert proc.returncode == 0 and b"5433" in proc.stdout and proc.stderr == b""  # (the context it prints)
    for closed in ((1,), (1, 2), (2,)):
        proc = run(closed=closed)
        assert proc.returncode == 0 and proc.stderr == b"", (closed, proc.stderr)
    with open("/dev/full", "wb") as full:
        proc = run(stdout=full)
    assert proc.returncode == 0
    assert proc.stderr == b"pimem: warning: output not written (stdout: No space left on device); the work was done\n"


def test_a_signal_its_caller_ignored_stays_ignored_as_nohup_means(home, tmp_path):
    """``nohup pimem import --follow … &`` (the README's recipe) and ``nohup pimem watch &`` start with SIGHUP
    ignored, so that closing the terminal leaves them running; pimem took SIGHUP anyway and stopped them (exit
    129: ``pimem: interrupted``; watch exit 0), and every other command with it. A stopping signal its caller
    ignored (SIGHUP under nohup, SIGINT in a script's background job) stays ignored; the others stop it as before."""

    def nohup():
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def ignoring(pid: int) -> bool:
        with open(f"/proc/{pid}/status") as f:
            mask = int(next(l for l in f if l.startswith("SigIgn:")).split()[1], 16)
        return bool(mask >> (signal.SIGHUP - 1) & 1)

    session = tmp_path / "notes.ndjson"
    session.write_bytes(line(0))
    proc = subprocess.Popen(pimem_cmd("import", "--follow", session, "--name", "f"), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=subprocess_env(), preexec_fn=nohup)
    assert proc.stdout.readline().startswith(b"f: 1 imported")  # (following: its handlers are in place)
    proc.send_signal(signal.SIGHUP)  # the terminal closed
    with open(session, "ab") as f:
        f.write(line(1))
    assert proc.stdout.readline().startswith(b"f: 1 imported"), proc.stderr.read()  # (still following)
    assert ignoring(proc.pid)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143 and err.startswith(b"pimem: interrupted: 2 messages imported while following"), err
    for args in (["append", "m", "-"], ["hook", "claude-code", "--timeout", "60"]):  # (the boundary's own handlers)
        proc = subprocess.Popen(pimem_cmd(*args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=subprocess_env(), preexec_fn=nohup)
        wait_for(lambda: caught(proc.pid, signal.SIGTERM))  # (SIGTERM taken: it is in the command)
        proc.send_signal(signal.SIGHUP)
        data = b"logged after the terminal closed" if args[0] == "append" else b"{"
        out, err = proc.communicate(data, timeout=60)
        assert proc.returncode == (0 if args[0] == "append" else 1) and b"interrupted" not in err, (args, err)
    assert [m["text"] for m in Memory.open("m").messages()] == ["logged after the terminal closed"]




@pytest.mark.parametrize("module, sig, code", [
    ("pimem.stopping", signal.SIGINT, 130),  # main's first import, before it notes the signals
    ("pimem.cli", signal.SIGINT, 130),  # noted from here on
    ("pimem.cli", signal.SIGTERM, 143),
    ("pimem.cli", signal.SIGHUP, 129),
    ("typer.main", signal.SIGINT, 130),
    ("pimem.boundary", signal.SIGTERM, 143),
    ("pimem.options", signal.SIGINT, 130),  # the command's module is being loaded
    ("json", signal.SIGINT, 130),  # orjson is loading (it imports json): stopped there, it crashed Python (-11)
    ("json", signal.SIGTERM, 143),
    ("typer._click.decorators", signal.SIGTERM, 143),  # typer parses the arguments (it made it a silent 130)
])
@pytest.mark.parametrize("args", [["append", "m", "-"], ["--version"], ["--help"]])
def test_a_signal_while_pimem_starts_stops_it_as_later_in_one_line(home, module, sig, code, args):
    """Ctrl-C while pimem imported its modules (the first ~30 ms of a command) printed Python's traceback and
    SIGTERM or SIGHUP ended it silently, until the boundary took them as the command began. From the first line
    of ``pimem.__main__`` they are noted, and the first is taken as the command's boundary begins: one line, exit
    130, 143 or 129, nothing written, nothing printed."""
    if module in ("pimem.options", "typer._click.decorators") and args == ["--version"]:
        pytest.skip("--version loads no command")
    out = subprocess.run([sys.executable, "-c", SIGNAL_AT, module, str(int(sig)), *args], stdin=subprocess.DEVNULL,
                         capture_output=True, timeout=60, env=subprocess_env())
    assert (out.returncode, out.stdout, out.stderr) == (code, b"", b"pimem: interrupted\n")
    assert not home.exists() or not any(home.iterdir())


@pytest.mark.parametrize("module, sig", [("pimem.cli", signal.SIGTERM), ("typer.main", signal.SIGINT),
                                         ("pimem.numbers", signal.SIGHUP)])
def test_a_signal_while_claude_codes_hook_or_watch_starts_ends_them_as_later(home, module, sig):
    """The hook's path without typer, noting the signal as its options are read, exits as every command
    (``pimem: interrupted``, 128 + the signal); ``watch`` stopped as it starts exits 0 and says nothing, as later."""
    args = ["hook", "claude-code", "--timeout", "60"] if module == "pimem.numbers" else ["watch"]
    out = subprocess.run([sys.executable, "-c", SIGNAL_AT, module, str(int(sig)), *args], stdin=subprocess.DEVNULL,
                         capture_output=True, timeout=60, env=subprocess_env())
    if args[0] == "hook":
        assert (out.returncode, out.stdout, out.stderr) == (128 + sig, b"", b"pimem: interrupted\n")
    else:
        assert out.returncode == 0 and b"interrupted" not in out.stderr and b"Traceback" not in out.stderr, out.stderr


def test_a_signal_while_the_cli_loads_a_command_is_noted_without_pimem_main_too(home):
    """``pimem.cli.main`` called itself (a wrapper's ``from pimem.cli import main``) notes the signals while the
    command's modules load, as ``pimem.__main__`` does: SIGTERM there says so in one line, not a silent death."""
    launcher = CLI_SIGNAL_AT
    out = subprocess.run([sys.executable, "-c", launcher, "pimem.options", str(int(signal.SIGTERM)), "append", "m", "-"],
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=60, env=subprocess_env())
    assert (out.returncode, out.stdout, out.stderr) == (143, b"", b"pimem: interrupted\n")


# SIGNAL_AT, saying on stderr as pimem exits which of the MCP SDK's modules pimem mcp loads were loaded whole
SIGNAL_AT_SAYING_LOADED = SIGNAL_AT.replace("sys.exit(main())", """import atexit
atexit.register(lambda: sys.stderr.write(" ".join(m for m in ("pimem.mcp_server", "mcp.server.mcpserver") if m in sys.modules) + "\\n"))
sys.exit(main())""")


@pytest.mark.parametrize("module, sig, loaded", [
    ("pydantic_core", signal.SIGINT, b"pimem.mcp_server"),  # pimem.mcp_server imports pydantic
    ("pydantic_core", signal.SIGTERM, b"pimem.mcp_server"),
    ("mcp.types", signal.SIGINT, b"pimem.mcp_server mcp.server.mcpserver"),  # the server is being built
    ("mcp.types", signal.SIGTERM, b"pimem.mcp_server mcp.server.mcpserver"),
])
def test_a_signal_while_pimem_mcp_loads_the_sdk_is_taken_once_it_is_loaded(home, module, sig, loaded):
    """pimem mcp loads the MCP SDK (and pydantic, whose core is Rust) once the boundary took the signals: one there
    stopped it midway, and a signal while pydantic's Rust core built a model became its own error (a SchemaError
    traceback, exit 1), or exit -2 after the line. It is noted while the SDK loads and the server is built, and
    taken once what it loads is loaded: one line, 130 or 143."""
    out = subprocess.run([sys.executable, "-c", SIGNAL_AT_SAYING_LOADED, module, str(int(sig)), "mcp"],
                         stdin=subprocess.DEVNULL, capture_output=True, timeout=60, env=subprocess_env())
    assert (out.returncode, out.stdout, out.stderr) == (
        128 + sig, b"", b"pimem: interrupted\n" + loaded + b"\n")


# the installed script's two lines, with a byte written to ``fd`` between them: pimem's package is imported, main runs
# ready as ``main``'s first step, inside its ``try``: said before it, a signal could land between this script's last
# lines and that ``try`` (the bytecodes of a call), where no Python code can catch it, and print a traceback (1 run
# in 8; the same few bytecodes precede any program's first ``try``)
READY_THEN_MAIN = """import os, sys
from pimem import stopping
from pimem.__main__ import main
fd, defer = int(sys.argv.pop(1)), stopping.defer
def ready():
    stopping.defer = defer  # (once: cli.main defers again)
    os.write(fd, b"."); os.close(fd)
    defer()
stopping.defer = ready
sys.exit(main())
"""


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_signals_again_and_again_from_pimems_first_line_on_never_show_a_traceback(home, sig, code):
    """Real signals from outside, as an impatient user or a supervisor sends them: each run of ``append m -``
    (waiting on stdin) gets the signal every 3 ms, starting a little later in each run, from the moment
    ``pimem.__main__`` runs (the interpreter's own start, out of pimem's reach, is left out) until it ends. Every
    run says ``pimem: interrupted`` once and exits 128 + the signal: none prints a traceback or a second line,
    none logs anything. (SIGTERM while ``main`` imports ``signal`` to note it, its first ~0.6 ms, still ends
    it by the default action, silently, before anything began: -15 and no line.)"""
    import os

    for run in range(24):
        ready, told = os.pipe()
        proc = subprocess.Popen([sys.executable, "-c", READY_THEN_MAIN, str(told), "append", "m", "-"],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=subprocess_env(), pass_fds=(told,))
        os.close(told)
        assert os.read(ready, 1) == b"."
        os.close(ready)
        time.sleep(run * 0.004)  # (0 to ~90 ms into pimem: its imports, the boundary, the command waiting)
        while proc.poll() is None:
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                break
            time.sleep(0.003)
        out, err = proc.communicate(timeout=60)
        said = (proc.returncode, out, err) == (code, b"", b"pimem: interrupted\n")
        assert said or (sig == signal.SIGTERM and (proc.returncode, out, err) == (-sig, b"", b"")), (run, proc.returncode, err)
    assert not home.exists() or not any(home.iterdir())


STOPPING_AS_IT_WAITS = """
import signal
from pimem.scheduler import Scheduler, _install_signals

scheduler = Scheduler()
_install_signals(scheduler)
with scheduler._stop._cond:  # (where the main thread is inside the flag's own wait, before and after the timed wait)
    signal.raise_signal(signal.SIGTERM)
print(scheduler.stopped, scheduler.signal)
"""


def test_a_signal_taken_while_the_scheduler_is_inside_its_own_wait_stops_it():
    """A watcher that went idle waits on its stop flag; SIGTERM as it wakes from that wait (at once after SIGCONT,
    in CI) ran the handler while the main thread held the flag's lock, and the handler's ``set`` waited on it for
    ever: the watcher hung. The handler's ``set`` goes through, and so does one during the timed wait."""
    out = subprocess.run([sys.executable, "-c", STOPPING_AS_IT_WAITS], capture_output=True, timeout=60,
                         env=subprocess_env())
    assert out.returncode == 0 and out.stdout == f"True {int(signal.SIGTERM)}\n".encode(), out
    during = STOPPING_AS_IT_WAITS.split("with ")[0] + (
        "import os, threading\n"
        "threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGINT)).start()\n"
        "print(scheduler._stop.wait(120), scheduler.signal)\n")
    out = subprocess.run([sys.executable, "-c", during], capture_output=True, timeout=60, env=subprocess_env())
    assert out.returncode == 0 and out.stdout == f"True {int(signal.SIGINT)}\n".encode(), out
