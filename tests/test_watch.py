"""``watch`` as a real process: it notices new messages, holds the lease, shuts down on SIGTERM, and a
successor after SIGKILL neither loses nor duplicates work."""

from __future__ import annotations

import collections
import contextlib
import datetime
import os
import signal
import socket
import subprocess
import sys
import time

import orjson
import pytest

from conftest import CLI_SIGNAL_AT, pimem_cmd, snapshot, subprocess_env
from bench.llm_server import FakeLLM
from pimem import Memory, builder, context, lease
from test_scheduler import configure, failed_first_run, fill, long_text, stored_lines


def start_watch(*args, **env):
    return subprocess.Popen(pimem_cmd("watch", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=subprocess_env(TEST_LLM_KEY="k", **env))


@contextlib.contextmanager
def watching(*args, **env):
    """A watcher for the block, stopped with SIGTERM after it (whatever the block raised)."""
    watcher = start_watch(*args, **env)
    try:
        yield watcher
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.communicate(timeout=30)


def until(check, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError("timed out waiting")


def assert_built_once(mem):
    """No node stored twice."""
    keys = collections.Counter((n["l"], n["i"]) for n in stored_lines(mem))
    assert max(keys.values()) == 1


def complete(name):
    found = builder.survey(Memory.open(name))
    return found["pending"] == 0


def test_watch_builds_new_messages_holds_the_lease_and_stops_on_sigterm(home):
    configure(home)
    mem = fill("m", 5)
    watcher = start_watch("m", "--json")
    try:
        until(lambda: lease.holder(mem))
        until(lambda: complete("m"))
        mem.append([{"kind": "user", "text": long_text(k)} for k in range(5, 9)])
        until(lambda: complete("m"), timeout=10)  # noticed within the poll, not at the next start
        record = lease.holder(mem)
        assert record["pid"] == watcher.pid and set(record) == {"pid", "token", "host", "proc", "pidns", "started", "beat", "command"}
        assert record["command"] == "watch"
        second = subprocess.run(pimem_cmd("watch", "m"), capture_output=True, timeout=60, env=subprocess_env())
        assert second.returncode == 4 and b"being built by pid" in second.stderr and b"use --wait" in second.stderr
        assert subprocess.run(pimem_cmd("build-tree", "m"), capture_output=True, timeout=60, env=subprocess_env()).returncode == 4
        waited = subprocess.run(pimem_cmd("build-tree", "m", "--wait", "0.5"), capture_output=True, timeout=60, env=subprocess_env())
        assert waited.returncode == 4 and b"still after waiting 0.5 s" in waited.stderr, waited.stderr
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err  # a daemon stopped cleanly exits 0, not 143 (README: exit codes)
    events = [orjson.loads(line) for line in out.splitlines()]
    assert events[0] == {"event": "watching", "memory": "m"}
    assert not (mem.path / "lock.json").exists()


def test_a_waiting_watcher_takes_over_when_the_first_stops(home):
    configure(home)
    mem = fill("m", 3)
    first = start_watch("m")
    until(lambda: lease.holder(mem))
    second = start_watch("m", "--wait")
    time.sleep(1.0)
    assert second.poll() is None and lease.holder(mem)["pid"] == first.pid
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=30)
    assert first.returncode == 0  # a daemon stopped cleanly (README: exit codes), Ctrl-C as SIGTERM
    until(lambda: (lease.holder(mem) or {}).get("pid") == second.pid)
    mem.append([{"kind": "user", "text": long_text(9)}])
    until(lambda: complete("m"))
    second.send_signal(signal.SIGHUP)  # (its terminal closed: stopped as cleanly, the lease given up)
    second.communicate(timeout=30)
    assert second.returncode == 0 and not lease.holder(mem)


def test_a_watcher_standing_by_says_for_whom_and_that_a_stopped_one_is_not_answering(home, tmp_path, sh):
    """A second watch --wait (another terminal) stood by in silence, for ever when the first was frozen with Ctrl-Z
    (SIGSTOP, its lease live), and watch without --wait told to use --wait. Standing by, it says once whom it
    waits for and, when that one stops answering (its heartbeat three beats late), that it is stopped and how to
    go on; without --wait, exit 4 says so."""
    configure(home)
    mem = fill("m", 3)
    first = start_watch("m")
    said = tmp_path / "second.err"
    second = None
    try:
        until(lambda: watcher_holds(mem, first))
        started = lease.holder(mem)["started"]
        with open(said, "wb") as err:
            second = subprocess.Popen(pimem_cmd("watch", "m", "--wait"), stdout=subprocess.DEVNULL, stderr=err,
                                      env=subprocess_env(TEST_LLM_KEY="k"))
        held = f"m: held by a watcher (pid {first.pid}, since {started}); standing by until it lets go\n"
        until(lambda: said.read_text() == held)
        frozen_outside_the_writer_lock(mem, first)
        until(lambda: beat_age(mem) > lease.QUIET)
        quiet = (f"m: held by a watcher (pid {first.pid}, since {started}), which is not answering (stopped?: its "
                 f"last heartbeat was ")
        until(lambda: said.read_text().startswith(held + quiet))
        assert said.read_text().endswith(f" s ago); standing by until it lets go: resume it (fg, or kill -CONT {first.pid}) "
                                         "or stop it\n") and said.read_text().count("\n") == 2
        alone = sh("watch", "m", TEST_LLM_KEY="k")
        assert alone.returncode == 4 and alone.stderr.decode().startswith(
            f"pimem: error: memory 'm' is being built by pid {first.pid} on {socket.gethostname()} (a watcher, since {started}), "
            f"which is not answering (stopped?: its last heartbeat was "), alone.stderr
        assert alone.stderr.decode().endswith(f" s ago); resume it (fg, or kill -CONT {first.pid}) or stop it, or use --wait "
                                              "to stand by until it lets go\n"), alone.stderr
        _thawed_and_stopped(first)
        until(lambda: watcher_holds(mem, second))
        until(lambda: "m: watching\n" in said.read_text())
    finally:
        _thawed_and_stopped(first)
        if second is not None:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=30)
    assert second.returncode == 0


def test_a_watcher_of_the_home_standing_by_says_for_whom(home, tmp_path):
    """watch --wait over the whole home, every memory held by another watcher, stood by in silence: it says whom it
    stands by for (with --json, a held event too)."""
    configure(home)
    mem = fill("m", 3)
    out, err = tmp_path / "second.out", tmp_path / "second.err"
    with watching("m") as first:
        until(lambda: watcher_holds(mem, first))
        started = lease.holder(mem)["started"]
        with open(out, "wb") as stdout, open(err, "wb") as stderr:
            second = subprocess.Popen(pimem_cmd("watch", "--wait", "--json"), stdout=stdout, stderr=stderr,
                                      env=subprocess_env(TEST_LLM_KEY="k"))
        try:
            until(lambda: err.read_bytes().endswith(b"\n"))
            assert err.read_text() == f"m: held by a watcher (pid {first.pid}, since {started}); standing by until it lets go\n"
            assert orjson.loads(out.read_bytes()) == {"event": "held", "memory": "m", "pid": first.pid, "host": socket.gethostname(),
                                                      "command": "watch", "started": started, "answering": True, "heartbeat": None}
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(timeout=30)
    assert second.returncode == 0


def test_a_watcher_of_the_home_standing_by_says_for_whom_a_memory_found_later_is_held(home, tmp_path):
    """watch --wait over the whole home said whom it stood by for only for the memories held as it started: one
    made later and held by another builder, or a holder that then stopped answering, went unsaid. Each is said
    as for a named memory, once, and again as its holder stops answering."""
    configure(home)
    fill("m", 3)
    err = tmp_path / "second.err"
    with open(err, "wb") as stderr:
        second = subprocess.Popen(pimem_cmd("watch", "--wait"), stdout=subprocess.DEVNULL, stderr=stderr,
                                  env=subprocess_env(TEST_LLM_KEY="k"))
    holder = None
    try:
        until(lambda: "m: watching\n" in err.read_text())
        second.send_signal(signal.SIGSTOP)  # (n is made and held before the watcher's next look: no race for it)
        try:
            n = fill("n", 3)
            holder = lease.Lease(n, "watch")
            assert holder.try_acquire() is None
        finally:
            second.send_signal(signal.SIGCONT)
        started = lease.holder(n)["started"]
        held = f"n: held by a watcher (pid {os.getpid()}, since {started}); standing by until it lets go\n"
        until(lambda: held in err.read_text())
        quiet = f"n: held by a watcher (pid {os.getpid()}, since {started}), which is not answering (stopped?: "
        until(lambda: quiet in err.read_text())  # (this test beats for it no more than a frozen watcher would)
        assert err.read_text().count("n: held by") == 2
        holder.release()
        until(lambda: "n: watching\n" in err.read_text())
    finally:
        if holder is not None:
            holder.release()
        second.send_signal(signal.SIGTERM)
        second.wait(timeout=30)
    assert second.returncode == 0


def test_a_build_standing_by_says_for_whom(home):
    """build-tree --wait S stood by in silence while a watcher held the memory, up to S seconds: it says once
    whom it stands by for, in watch --wait's words (with --json, the held event too), then exits 4 as before."""
    configure(home)
    mem = fill("m", 3)
    with watching("m") as first:
        until(lambda: watcher_holds(mem, first))
        started = lease.holder(mem)["started"]
        waited = subprocess.run(pimem_cmd("build-tree", "m", "--wait", "1", "--json"), capture_output=True, timeout=60,
                                env=subprocess_env())
    assert waited.returncode == 4, waited.stderr
    said = waited.stderr.decode().splitlines()
    assert said[0] == f"m: held by a watcher (pid {first.pid}, since {started}); standing by until it lets go", said
    assert len(said) == 2 and "still after waiting 1 s" in said[1], said
    assert orjson.loads(waited.stdout.splitlines()[0]) == {
        "event": "held", "memory": "m", "pid": first.pid, "host": socket.gethostname(), "command": "watch",
        "started": started, "answering": True, "heartbeat": None}


def test_sigkill_mid_build_loses_and_duplicates_nothing(home):
    with FakeLLM("openai", latency=0.15) as server:
        configure(home, server)
        mem = fill("m", 60, short_every=1000)
        watcher = start_watch("m")
        until(lambda: len(stored_lines(mem)) >= 10)
        os.kill(watcher.pid, signal.SIGKILL)
        watcher.communicate(timeout=30)
        before = stored_lines(mem)
        assert not complete("m")
        assert orjson.loads((mem.path / "lock.json").read_bytes())["pid"] == watcher.pid  # left behind
        successor = start_watch("m")  # the holder is dead: its lease is taken over
        try:
            until(lambda: complete("m"), timeout=60)
        finally:
            successor.send_signal(signal.SIGTERM)
            successor.communicate(timeout=30)
    lines = stored_lines(mem)
    assert lines[: len(before)] == before  # nothing written before the kill was lost or rewritten
    keys = collections.Counter((n["l"], n["i"]) for n in lines)
    assert max(keys.values()) == 1
    assert builder.survey(mem)["built"] == builder.tree_size(60)


def take_over(mem, holder) -> None:
    """Write ``lock.json`` as another builder does that took the lease over (``holder``: its live process)."""
    record = {"pid": holder.pid, "token": "another", "host": socket.gethostname(), "started": "2026-12-03T00:00:00Z",
              "beat": time.time()}
    (mem.path / "lock.new").write_bytes(orjson.dumps(record) + b"\n")
    os.replace(mem.path / "lock.new", mem.path / "lock.json")


def test_build_tree_whose_lease_was_taken_over_stops_and_exits_4(home):
    with FakeLLM("openai", latency=0.3) as server:
        configure(home, server)
        mem = fill("m", 40, short_every=1000)
        build = subprocess.Popen(pimem_cmd("build-tree", "m", "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=subprocess_env(TEST_LLM_KEY="k"))
        other = subprocess.Popen(["sleep", "60"])
        try:
            until(lambda: len(stored_lines(mem)) >= 3)
            take_over(mem, other)
            out, err = build.communicate(timeout=60)
            asked = len(server.requests)
            time.sleep(0.5)
            assert len(server.requests) == asked  # nothing more was asked once it stopped
        finally:
            other.kill()
            other.wait()
    assert build.returncode == 4, err
    assert err.decode().count("\n") == 1 and "another builder took over the lease" in err.decode()
    done = [e for e in map(orjson.loads, out.splitlines()) if e["event"] == "done"]
    assert done == [{**done[0], "memory": "m", "lost": True}]
    assert orjson.loads((mem.path / "lock.json").read_bytes())["token"] == "another"  # the new holder's, kept
    assert not complete("m")
    assert_built_once(mem)


def test_a_watcher_whose_lease_was_taken_over_takes_it_back_when_the_holder_dies(home):
    with FakeLLM("openai", latency=0.3) as server:
        configure(home, server)
        mem = fill("m", 40, short_every=1000)
        watcher = start_watch("m", "--json")
        other = subprocess.Popen(["sleep", "60"])
        try:
            until(lambda: len(stored_lines(mem)) >= 3)
            take_over(mem, other)
            time.sleep(3.0)  # past a heartbeat: the watcher has seen it
            assert orjson.loads((mem.path / "lock.json").read_bytes())["token"] == "another"
            written = len(stored_lines(mem))
            time.sleep(1.0)
            assert len(stored_lines(mem)) == written  # it builds no more while the other holds the lease
            other.kill()
            other.wait()
            until(lambda: (lease.holder(mem) or {}).get("pid") == watcher.pid, timeout=15)
            until(lambda: complete("m"), timeout=60)
        finally:
            other.kill()
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    events = [orjson.loads(line)["event"] for line in out.splitlines()]
    assert events.count("lost") == 1 and events.count("watching") == 2
    assert_built_once(mem)


def test_two_watchers_started_together_never_both_build(home):
    with FakeLLM("openai", latency=0.05) as server:
        configure(home, server)
        mem = fill("m", 30, short_every=1000)
        a, b = start_watch("m"), start_watch("m")
        until(lambda: a.poll() is not None or b.poll() is not None)
        loser, winner = (a, b) if a.poll() is not None else (b, a)
        assert loser.returncode == 4
        until(lambda: complete("m"), timeout=60)
        winner.send_signal(signal.SIGTERM)
        winner.communicate(timeout=30)
        loser.communicate(timeout=30)
    keys = collections.Counter((n["l"], n["i"]) for n in stored_lines(mem))
    assert max(keys.values()) == 1
    assert len(server.requests) == len(keys)  # every call was made once, by the winner


def test_watch_without_names_covers_every_memory_including_new_ones(home):
    configure(home)
    fill("a", 3)
    with watching() as watcher:
        until(lambda: lease.holder(Memory.open("a")))
        fill("b", 4)  # created after the watcher started
        until(lambda: lease.holder(Memory.open("b")), timeout=15)
        until(lambda: complete("a") and complete("b"))
        again = subprocess.run(pimem_cmd("watch"), capture_output=True, timeout=60, env=subprocess_env())
        assert again.returncode == 4 and again.stderr.decode().count("\n") == 1, again.stderr
        assert f"every memory is already being built: a and b by a watcher (pid {watcher.pid})" in again.stderr.decode()
    assert watcher.returncode == 0
    assert not (home / "a" / "lock.json").exists() and not (home / "b" / "lock.json").exists()


def test_watch_of_a_home_whose_only_memory_a_build_tree_holds_exits_4_naming_it(home):
    with FakeLLM("openai", latency=0.5) as server:
        configure(home, server)
        mem = fill("m", 40, short_every=1000)
        build = subprocess.Popen(pimem_cmd("build-tree", "m"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=subprocess_env(TEST_LLM_KEY="k"))
        try:
            until(lambda: lease.holder(mem))
            again = subprocess.run(pimem_cmd("watch"), capture_output=True, timeout=60, env=subprocess_env())
            named = subprocess.run(pimem_cmd("watch", "m"), capture_output=True, timeout=60, env=subprocess_env())
        finally:
            build.send_signal(signal.SIGTERM)
            build.communicate(timeout=30)
    assert again.returncode == 4 and again.stderr.decode().count("\n") == 1, again.stderr
    assert f"every memory is already being built: m by a build-tree (pid {build.pid}); use --wait" in again.stderr.decode()
    assert named.returncode == 4 and f"by pid {build.pid} on {socket.gethostname()} (a build-tree, since" in named.stderr.decode()


@pytest.mark.parametrize("names", [(), ("tool",)], ids=["home", "named"])
def test_a_watcher_with_imports_keeps_following_while_another_builder_holds_every_memory(home, tmp_path, names):
    """Its imports are work of its own: it captures what the agent writes later, and builds the memory once
    the other watcher lets go (before, it imported what was there and exited 4)."""
    from test_follow import append, codex_rollout, texts

    configure(home)
    fill("tool", 3)
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    rollout = codex_rollout("cx-1")  # (into memory tool: its cwd is /repo/tool)
    append(sessions / "rollout-1.jsonl", rollout[:2])
    with watching() as first:
        until(lambda: lease.holder(Memory.open("tool")))
        second = start_watch(*names, "--import", str(sessions), "--json")
        try:
            until(lambda: "run the tests" in texts("tool"))
            time.sleep(1.0)  # (it used to exit 4 here, once its first look had found every memory held)
            assert second.poll() is None
            append(sessions / "rollout-1.jsonl", rollout[2:])  # written later: still captured
            until(lambda: "they pass" in texts("tool"))
            assert lease.holder(Memory.open("tool"))["pid"] == first.pid
            first.send_signal(signal.SIGTERM)
            first.communicate(timeout=30)
            until(lambda: (lease.holder(Memory.open("tool")) or {}).get("pid") == second.pid)
            until(lambda: complete("tool"))
        finally:
            second.send_signal(signal.SIGTERM)
            out, err = second.communicate(timeout=30)
    assert first.returncode == 0 and second.returncode == 0, err
    events = [orjson.loads(line) for line in out.splitlines()]
    assert {"event": "watching", "memory": "tool"} in events and not any(e["event"] == "refused" for e in events)


def test_sigterm_lets_calls_in_flight_finish_and_keeps_them(home):
    with FakeLLM("openai", latency=1.5) as server:
        configure(home, server)
        mem = fill("m", 8, short_every=1000)
        watcher = start_watch("m")
        until(lambda: len(server.requests) >= 7)  # leaves 1–7 in flight (0 is short), answers 1.5 s away
        watcher.send_signal(signal.SIGTERM)
        _, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert sorted((n["l"], n["i"]) for n in stored_lines(mem)) == [(0, k) for k in range(1, 8)]
    assert len(server.requests) == 7  # nothing new was started after the signal
    assert not (mem.path / "lock.json").exists()


def test_view_wait_waits_for_the_running_watcher(home):
    with FakeLLM("openai", latency=0.3) as server:
        configure(home, server)
        mem = fill("m", 2)
        with watching("m") as watcher:
            until(lambda: lease.holder(mem))
            mem.append([{"kind": "user", "text": long_text(k)} for k in range(2, 6)])
            view = subprocess.run(pimem_cmd("view", "m", "--wait", "30"), capture_output=True, timeout=60, env=subprocess_env())
    assert view.returncode == 0
    assert b"not summarized yet" not in view.stdout and b"user: summary of 5" in view.stdout


def calls_once_capped(server) -> int:
    """The calls a watcher made once it stopped making them (its daily cap reached)."""
    until(lambda: len(server.requests) >= 3)
    time.sleep(2.0)
    calls = len(server.requests)
    time.sleep(1.5)
    assert len(server.requests) == calls  # capped: no more calls today
    return calls


def restart_calls_nothing(server, calls: int) -> None:
    """A watcher of "m" started again the same day is capped at once: it makes no call."""
    again = start_watch("m", "--json")
    try:
        time.sleep(3.0)
    finally:
        again.send_signal(signal.SIGTERM)
        out, _ = again.communicate(timeout=30)
    events = [orjson.loads(line)["event"] for line in out.splitlines()]
    # (it may say first that it waits for a retry time the last one recorded: the cap holds that call back too)
    assert [e for e in events if e != "waiting"] == ["watching", "capped"]
    assert len(server.requests) == calls


def test_watch_spends_at_most_its_daily_cap_and_a_restart_remembers_the_day(home):
    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)  # the server says 1,000 tokens in, 100 out: $0.0012
        fill("m", 40, short_every=1000)
        watcher = start_watch("m", "--json", "--max-cost-per-day", "0.05")
        try:
            calls = calls_once_capped(server)
            started = time.monotonic()  # capped for the day: a turn does not wait for what it will not build
            waited = subprocess.run(pimem_cmd("context", "m", "--wait", "20"), capture_output=True, timeout=60, env=subprocess_env())
            assert waited.returncode == 0 and b"(not summarized yet" in waited.stdout
            assert time.monotonic() - started < 10
            status = subprocess.run(pimem_cmd("status", "m"), capture_output=True, timeout=60, env=subprocess_env())
            assert b"capped    the daily spend cap was reached on " in status.stdout
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=30)
        capped = [e for e in map(orjson.loads, out.splitlines()) if e["event"] == "capped"]
        assert len(capped) == 1, err
        assert "pending" not in orjson.loads((home / "m" / "compactor.json").read_bytes())  # (each call settled)
        today = capped[0]["day"]
        spent = builder.spent(Memory.open("m"), day=today)
        assert 0 < spent["cost"] <= 0.05 and not complete("m")
        assert capped[0] == {"event": "capped", "memory": "m", "day": today, "spent": round(spent["cost"], 6),
                             "max_cost_per_day": 0.05, "next_call": capped[0]["next_call"]}
        assert capped[0]["spent"] + capped[0]["next_call"] > 0.05  # (the call it held back)
        Memory.open("m").save_config({"max_cost_per_day": 0.05})  # from config.json this time
        restart_calls_nothing(server, calls)  # what was spent today counts


def test_a_daily_cap_on_a_compactor_without_prices_is_refused_not_ignored(home, run):
    with FakeLLM("openai") as server:
        configure(home, server)  # no prices: what a call costs is unknown
        fill("m", 6, short_every=1000)
        before = snapshot(home / "m")
        watcher = start_watch("m", "--max-cost-per-day", "0.01")
        out, err = watcher.communicate(timeout=30)
        assert watcher.returncode == 2 and err.decode().count("\n") == 1 and "needs prices" in err.decode(), err
        assert server.requests == [] and snapshot(home / "m").keys() == before.keys()


@pytest.mark.parametrize("events", [(), ("--json",)])
def test_a_daily_cap_below_one_calls_worst_case_says_so_and_raising_it_builds_and_lifts_the_mark(home, sh, events):
    """A cap no call fits under is not "waiting for the next day": it is said as such (on stderr with --json
    too: a person must raise it); raised in config.json while the watcher runs, the memory is built, and
    ``status`` and ``context`` no longer take it for capped."""
    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 4, short_every=1000)
        mem.save_config({"max_cost_per_day": 0.0001})
        watcher = start_watch("m", *events)
        try:
            until(lambda: b"capped" in sh("status", "m").stdout)
            assert server.requests == []
            mem.save_config({"max_cost_per_day": 1.0})
            until(lambda: complete("m"))
            assert b"capped" not in sh("status", "m").stdout
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=30)
    assert b"more than the daily cap of $0.0001: nothing is built until it is raised" in err, err
    if events:
        assert b"its compactor settings changed" not in err and b'"event":"switched"' in out, err
    else:
        assert b"its compactor settings changed; built by openai/m1 from now on" in err


def test_a_watcher_restarted_with_a_higher_cap_is_not_taken_for_capped(home, sh):
    """The mark a capped watcher left for the day (``compactor.json``) is its own: a watcher started again the
    same day with a cap it is within builds, and ``status`` and ``context`` no longer take the memory for
    capped (before, ``status`` said "nothing more is built today" while it built, and ``context`` did not wait
    for its summaries)."""
    with FakeLLM("openai", latency=1.5) as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 4, short_every=1000)
        with watching("m", "--max-cost-per-day", "0.0001") as watcher:
            until(lambda: b"capped" in sh("status", "m").stdout)
        with watching("m", "--max-cost-per-day", "1") as watcher:
            until(lambda: complete("m"))
            assert b"capped" not in sh("status", "m").stdout
            mem.append([{"kind": "user", "text": long_text(9)}])
            waited = sh("context", "m")  # waits for the watcher's call in flight
            assert waited.returncode == 0 and b"4+1|user: summary of 4" in waited.stdout, waited.stdout


def test_readers_in_other_time_zones_agree_with_a_capped_watcher_until_its_day_ends(home, sh, monkeypatch):
    """A watcher run on UTC (a service) is capped for its day, 2026-10-08 UTC, which ends at 00:00 UTC; a
    reader in Tokyo is on 2026-10-09 from 15:00 UTC, one in New York on 2026-10-08 till 04:00 UTC the next day.
    ``status`` (``--json`` too) and the wait of ``view --wait`` and ``context`` (``context.stalled``) take the
    memory for capped exactly until the watcher's day ends, wherever they run (before, each compared its own
    date with the watcher's: Tokyo's evening saw no cap and waited for nothing, New York's saw one all its
    evening while the watcher built)."""
    utc = {"TZ": "UTC", "PIMEM_NOW": "2026-10-08T20:00:00+00:00"}
    capped_at = {"Asia/Tokyo": ("2026-10-09T05:00:00+09:00", "2026-10-09T09:00:00+09:00"),  # (now there, the day's end)
                 "America/New_York": ("2026-10-08T16:00:00-04:00", "2026-10-08T20:00:00-04:00")}
    lifted_at = {"Asia/Tokyo": "2026-10-09T09:30:00+09:00", "America/New_York": "2026-10-08T20:30:00-04:00"}
    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 4, short_every=1000)
        with watching("m", "--json", "--max-cost-per-day", "0.0001", **utc) as watcher:
            until(lambda: b"capped" in watcher.stdout.readline())
            for zone, (now, ends) in capped_at.items():
                row = orjson.loads(sh("status", "m", "--json", TZ=zone, PIMEM_NOW=now).stdout)
                assert (row["capped"], row["capped_until"]) == ("2026-10-08", ends), zone
                assert (b"capped    a call may cost up to $0.0179 at its worst case, more than the daily spend cap of "
                        b"$0.0001: nothing is built until the cap is raised\n") in sh("status", "m", TZ=zone, PIMEM_NOW=now).stdout
                waited = sh("view", "m", "--wait", "5", TZ=zone, PIMEM_NOW=now)
                assert waited.returncode == 0 and (b"the watcher's daily spend cap (max_cost_per_day) of $0.0001 is below "
                                                   b"one call's worst case ($0.0179): nothing is built until it is raised; "
                                                   b"not waiting\n") in waited.stderr, waited.stderr
                monkeypatch.setenv("PIMEM_NOW", now)
                assert "daily spend cap" in context.stalled(Memory.open("m"))
            for zone, now in lifted_at.items():
                row = orjson.loads(sh("status", "m", "--json", TZ=zone, PIMEM_NOW=now).stdout)
                assert (row["capped"], row["capped_until"]) == (None, None), zone
                assert b"\ncapped  " not in sh("status", "m", TZ=zone, PIMEM_NOW=now).stdout
                waited = sh("view", "m", "--wait", "0.5", TZ=zone, PIMEM_NOW=now)
                assert waited.returncode == 0 and b"not waiting" not in waited.stderr, waited.stderr
                monkeypatch.setenv("PIMEM_NOW", now)
                assert context.stalled(Memory.open("m")) is None
    assert server.requests == []
    state = orjson.loads((home / "m" / "compactor.json").read_bytes())
    assert (state["capped"], state["capped_until"]) == ("2026-10-08", "2026-10-09T00:00:00+00:00")


def test_a_capped_mark_of_the_day_alone_holds_for_that_day_where_it_is_read(home, run, monkeypatch):
    """A ``compactor.json`` an earlier pimem wrote marks the day alone (``capped``): it is taken for a day of the
    reader's time zone, as that pimem read it; so is one whose ``capped_until`` is no date-time with its offset
    (a hand edit), and one whose day is no date is no cap at all (not a crash)."""
    configure(home)
    mem = fill("m", 2)
    for state in ({"capped": "2026-10-08"}, {"capped": "2026-10-08", "capped_until": "tomorrow"}):
        (mem.path / "compactor.json").write_bytes(orjson.dumps(state))
        monkeypatch.setenv("PIMEM_NOW", "2026-10-08T23:59:00+08:00")
        row = orjson.loads(run("status", "m", "--json").stdout)
        assert (row["capped"], row["capped_until"]) == ("2026-10-08", "2026-10-09T00:00:00+08:00"), state
        assert "daily spend cap" in context.stalled(mem)
        monkeypatch.setenv("PIMEM_NOW", "2026-10-09T00:00:00+08:00")
        row = orjson.loads(run("status", "m", "--json").stdout)
        assert (row["capped"], row["capped_until"]) == (None, None) and context.stalled(mem) is None, state
    (mem.path / "compactor.json").write_bytes(b'{"capped": "someday"}')
    status = run("status", "m")
    assert status.exit_code == 0 and "\ncapped  " not in status.stdout and context.stalled(mem) is None


@pytest.mark.parametrize("stop", ["twice", "kill"])
def test_calls_a_capped_watcher_had_in_flight_count_after_a_restart(home, stop):
    """A watcher stopped twice (no grace: it gives up on its calls in flight) or killed with SIGKILL (it runs
    nothing as it dies): the provider answers and bills those calls all the same. They count against the day's
    cap at their worst case (``compactor.json``: given up, or kept pending from before each was sent), so a
    watcher started again that day counts them too (before, nothing recorded them, and it could spend the cap
    again)."""
    with FakeLLM("openai", latency=3.0) as server:  # (billed $0.0012 a call, far less than its worst case)
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 40, short_every=1000)
        watcher = start_watch("m", "--json", "--max-cost-per-day", "0.05")
        try:
            until(lambda: server.requests)
            time.sleep(0.5)  # (each call it could afford has started)
        finally:
            if stop == "kill":
                watcher.kill()
            else:
                watcher.send_signal(signal.SIGTERM)
                time.sleep(0.2)
                watcher.send_signal(signal.SIGTERM)
            watcher.communicate(timeout=30)
        calls = len(server.requests)
        assert not stored_lines(Memory.open("m"))  # (none answered in time)
        if stop == "kill":
            assert unbuilt_cost(home / "m") == 0
            pending = orjson.loads((home / "m" / "compactor.json").read_bytes())["pending"]
            assert len(pending) == calls
            worst = sum(call["cost"] for call in pending.values())
        else:
            worst = unbuilt_cost(home / "m")
        assert 0.0012 * calls < worst <= 0.05
        with watching("m", "--json", "--max-cost-per-day", "0.05") as again:
            until(lambda: b"capped" in again.stdout.readline())
        given_up = unbuilt_cost(home / "m")  # (counted as calls that built nothing, at their worst case)
        assert given_up == pytest.approx(worst)
        assert "pending" not in orjson.loads((home / "m" / "compactor.json").read_bytes())
        spent = builder.spent(Memory.open("m"), day="2026-10-08")["cost"]
        assert spent + given_up <= 0.05  # what the restart spent, with what the calls given up may have cost


def unbuilt_cost(memory) -> float:
    try:
        return sum(orjson.loads((memory / "compactor.json").read_bytes()).get("unbuilt_cost", {}).values())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return 0.0


def test_the_daily_cap_counts_billed_calls_that_built_nothing_after_a_restart_too(home):
    with FakeLLM("openai", faults=lambda n, body: "empty") as server:  # billed: 1,000 tokens in, 100 out, no text
        configure(home, server, price_in=1.0, price_out=2.0, retry_seconds=0.05)  # $0.0012 a call
        fill("m", 40, short_every=1000)
        Memory.open("m").save_config({"max_cost_per_day": 0.05})
        with watching("m", "--json") as watcher:
            calls = calls_once_capped(server)
        assert builder.spent(Memory.open("m"))["cost"] == 0  # no node records what was paid
        assert 0.0012 * (calls - 8) <= unbuilt_cost(home / "m") <= 0.05  # (the last calls' answers may be cut off)
        restart_calls_nothing(server, calls)  # what the failed calls cost today counts


def test_context_waits_for_a_running_watcher_to_summarise_the_newest_messages(home, sh):
    with FakeLLM("openai", latency=1.0) as server:
        configure(home, server)
        mem = fill("m", 2, short_every=1000)
        with watching("m") as watcher:
            until(lambda: complete("m"))
            mem.append([{"kind": "user", "text": long_text(7)}])
            assert "(not summarized yet" in Memory.open("m").view_lines()[-1]
            waited = sh("context", "m")  # waits (up to 8 s) for the call in flight
            assert waited.returncode == 0 and b"(not summarized yet" not in waited.stdout
            assert b"2+1|user: summary of 2" in waited.stdout
            mem.append([{"kind": "user", "text": long_text(8)}])
            hurried = sh("context", "m", "--wait", "0")
            assert b"3+1|(not summarized yet" in hurried.stdout
    alone = sh("context", "m")  # no watcher: nothing to wait for, at once
    assert alone.returncode == 0


def test_context_waits_for_a_summary_the_server_asked_to_retry_soon(home, sh):
    """A 429 with ``Retry-After: 3`` for the newest message's call: its node is in ``compactor.json``'s failures,
    so ``context`` took the compactor for a failing one and did not wait, though the watcher was to retry within
    the wait. A failure retried within the wait (and failed fewer than 3 times in a row) is waited for."""
    refused = []

    def once(n, body):
        if "compress message 2 " in body["messages"][-1]["content"] and not refused:
            refused.append(n)
            return "429"
        return None

    with FakeLLM("openai", faults=once, retry_after="3") as server:
        configure(home, server)
        mem = fill("m", 2, short_every=1000)
        with watching("m") as watcher:
            until(lambda: complete("m"))
            mem.append([{"kind": "user", "text": long_text(7)}])
            until(lambda: (home / "m" / "compactor.json").exists() and "2+1" in orjson.loads(
                (home / "m" / "compactor.json").read_bytes()).get("failures", {}))
            status = sh("status", "m").stdout  # (when the watcher retries it)
            assert b"failing   2+1: " in status and b", next 20" in status
            waited = sh("context", "m")  # (waits up to 8 s)
            assert waited.returncode == 0 and b"2+1|user: summary of 2" in waited.stdout, waited.stdout[-300:]
    assert refused


def test_context_does_not_wait_for_a_summary_the_compactor_keeps_failing(home, sh):
    """A broken compactor (a bad key, a dead server) must not cost every turn the whole wait: nothing is waited
    for while it reports a node failing, neither the failing nodes nor the leaves queued behind them (only 8
    are tried at once)."""
    with FakeLLM("openai", faults=lambda n, body: "malformed") as server:
        configure(home, server, retry_seconds=30)
        mem = fill("m", 12, short_every=1000)  # long messages: placeholders until their calls succeed
        with watching("m") as watcher:
            until(lambda: "1+1" in orjson.loads((home / "m" / "compactor.json").read_bytes()).get("failures", {})
                  if (home / "m" / "compactor.json").exists() else False)
            started = time.monotonic()
            out = sh("context", "m", "--wait", "20")
            assert out.returncode == 0 and b"11+1|(not summarized yet" in out.stdout
            view = sh("view", "m", "--wait", "20")
            assert b"the compactor is failing" in view.stderr and b"not waiting" in view.stderr
            assert time.monotonic() - started < 10  # not the 20 s asked for, twice
    assert mem.count() == 12


def test_the_wait_stops_once_a_node_is_refused_past_what_is_left_of_it(home, sh):
    """The newest message's call is refused with ``Retry-After: 2`` (waited for), then with ``Retry-After: 19``:
    retried after the wait's end. ``context`` went on waiting, to the end of its 20 s, because 19 s is within
    the whole wait; what is left of it is what counts."""
    asked = []

    def refused(n, body):
        if "compress message 2 " in body["messages"][-1]["content"] and len(asked) < 2:
            asked.append(n)
            server.retry_after = "2" if len(asked) == 1 else "19"
            return "429"
        return None

    with FakeLLM("openai", faults=refused) as server:
        configure(home, server)
        mem = fill("m", 2, short_every=1000)
        with watching("m") as watcher:
            until(lambda: complete("m"))
            mem.append([{"kind": "user", "text": long_text(7)}])
            until(lambda: asked)
            started = time.monotonic()
            out = sh("context", "m", "--wait", "20")
            assert out.returncode == 0 and b"2+1|(not summarized yet" in out.stdout
            assert len(asked) == 2 and time.monotonic() - started < 12  # (not the 20 s asked for)


def test_view_wait_stops_once_the_compactor_fails_while_it_waits(home, sh):
    """``view --wait`` looked at ``compactor.json`` only before its wait: a call in flight then, refused with a
    ``Retry-After`` of 5 minutes while it waited, cost it the whole wait (``context`` stopped at once)."""

    def message_2(n, body):
        return "compress message 2 " in body["messages"][-1]["content"]

    with FakeLLM("openai", faults=lambda n, body: "429" if message_2(n, body) else None,
                 latency=lambda n, body: 3.0 if message_2(n, body) else 0.0, retry_after="300") as server:
        configure(home, server)
        mem = fill("m", 2, short_every=1000)
        with watching("m") as watcher:
            until(lambda: complete("m"))
            mem.append([{"kind": "user", "text": long_text(7)}])
            until(lambda: any(message_2(0, body) for body in server.requests))  # (in flight: nothing failed yet)
            out = sh("view", "m", "--wait", "12")
    assert out.returncode == 0 and b"2+1|(not summarized yet" in out.stdout
    assert out.stderr == b"the compactor is failing (see 'pimem status m'); not waiting any longer\n"


def test_context_does_not_wait_for_a_watcher_that_calls_its_compactor_no_more(home, sh):
    """A call billed past its worst case under a daily cap: the watcher calls that compactor no more (no cap
    holds with such bills), but nothing said so outside it, so ``context`` waited its whole 8 s every turn and
    ``view --wait`` all of its wait for summaries that were never coming, and ``status`` showed nothing wrong.
    A watcher started again calls it again, and is waited for again."""
    with FakeLLM("openai", faults=lambda n, body: "overbilled" if n == 0 else None) as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 2, short_every=1000)
        with watching("m", "--json", "--max-cost-per-day", "100") as watcher:
            until(lambda: b'"overbilled"' in watcher.stdout.readline())  # (the first call's, then built)
            mem.append([{"kind": "user", "text": long_text(7)}])
            started = time.monotonic()
            out = sh("context", "m", "--wait", "20")
            assert out.returncode == 0 and b"2+1|(not summarized yet" in out.stdout
            assert time.monotonic() - started < 10  # (not the 20 s asked for)
            view = sh("view", "m", "--wait", "20")
            assert view.stderr == b"the watcher calls the compactor no more (see 'pimem status m'); not waiting\n"
            assert b"\nstopped   openai/m1 billed $1.0002 for node 1+1, past the $" in sh("status", "m").stdout
        with watching("m", "--max-cost-per-day", "100") as watcher:
            until(lambda: complete("m"))
            assert b"stopped" not in sh("status", "m").stdout


def test_a_running_watcher_takes_a_changed_model_within_seconds(home):
    """``pimem model`` while a watcher runs: the next messages are built by the new model at its own server,
    not by the old one until the watcher is restarted (before, the old model kept every call)."""
    with FakeLLM("openai") as first, FakeLLM("openai") as second:
        configure(home, first)
        mem = fill("m", 4, short_every=1000)
        watcher = start_watch("m", "--json")
        try:
            until(lambda: complete("m"))
            done = subprocess.run(pimem_cmd("model", "m", "openai/m2", "--base-url", second.url, "--key-env", "TEST_LLM_KEY"),
                                  capture_output=True, timeout=60, env=subprocess_env())
            assert done.returncode == 0, done.stderr
            old = len(first.requests)
            time.sleep(3)  # (the watcher looks at the settings every 2 s)
            mem.append([{"kind": "user", "text": long_text(k)} for k in range(4, 8)])
            until(lambda: complete("m"))
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert len(first.requests) == old and {b["model"] for b in second.requests} == {"m2"}
    events = [orjson.loads(line) for line in out.splitlines()]
    assert {"event": "switched", "memory": "m", "model": "openai/m2"} in events
    assert {n["model"] for n in stored_lines(mem) if n["i"] >= 4 and n["l"] == 0} == {"openai/m2"}
    assert_built_once(mem)


def test_a_retry_time_one_server_asked_for_does_not_hold_back_the_compactor_switched_to(home):
    """The old server answered 429 with ``Retry-After: 300``; ``pimem model`` points the memory at another one
    while the watcher waits. The new compactor builds at once: the retry times in compactor.json were asked for
    by the old server (before, the builder that took over waited for them, up to 5 minutes)."""
    from pimem.compactor.state import BuildState

    with FakeLLM("openai", faults=lambda n, body: "429", retry_after="300") as first, FakeLLM("openai") as second:
        configure(home, first)
        mem = fill("m", 4, short_every=1000)
        with watching("m", "--json") as watcher:
            until(lambda: len(BuildState(mem.path).failures) == 3)  # (message 0 is short: free)
            done = subprocess.run(pimem_cmd("model", "m", "openai/m2", "--base-url", second.url, "--key-env", "TEST_LLM_KEY"),
                                  capture_output=True, timeout=60, env=subprocess_env())
            assert done.returncode == 0, done.stderr
            until(lambda: complete("m"))
            assert len(first.requests) == 3 and {b["model"] for b in second.requests} == {"m2"}
        assert BuildState(mem.path).failures == {}


def test_leaves_that_keep_failing_back_off_and_leave_the_window_to_the_others(home):
    """A server error without ``Retry-After`` on some messages' calls (a 500, a 400 for what they hold): each of
    those leaves was retried every ``retry_seconds`` for ever, and once eight of them had come (spread through the
    log, others built between them) they filled the window of unbuilt leaves, so no later message was ever
    summarised. Now each waits twice as long each time it fails again, up to six times ``retry_seconds``, and
    one that failed ``STUCK_TRIES`` times while other calls were answered leaves its place in the window."""
    import re

    from pimem.compactor.state import BuildState

    bad = set(range(3, 30, 3))  # nine leaves, others between them

    def faults(n, body):
        task = body["messages"][-1]["content"].rsplit("Compaction:", 1)[-1]
        found = re.search(r"message ([0-9]+)\b", task)
        return "500" if found and int(found.group(1)) in bad else None

    with FakeLLM("openai", faults=faults) as server:
        configure(home, server)  # retry_seconds: 0.05
        mem = fill("m", 40, short_every=1000)
        with watching("m"):
            until(lambda: builder.survey(Memory.open("m"))["leaves"] == len(bad))  # every other leaf built
            until(lambda: min(BuildState(mem.path).failures.get(f"{i}+1", {}).get("tries", 0) for i in bad) >= 5)
    fails = BuildState(mem.path).failures
    assert set(fails) == {f"{i}+1" for i in bad}
    waits = {(datetime.datetime.fromisoformat(f["retry"]) - datetime.datetime.fromisoformat(f["at"])).total_seconds()
             for f in fails.values()}  # (the clock is frozen: the wait each one was given after its last try)
    assert waits == {0.3}, waits


def test_a_window_of_leaves_that_always_fail_is_passed_by_a_watcher_too(home):
    """Ten leaves the server always refuses, the first ten long messages: the window's eight failed with no
    other call answered, and a watcher retried them for ever and sent nothing else. Once all eight are stuck a
    later leaf is sent as a probe (the next one after each that fails, a round apart); one answered, the rest
    is built."""
    from test_scheduler import poisoned, refuses_poison

    with FakeLLM("openai", faults=refuses_poison) as server:
        configure(home, server)  # retry_seconds: 0.05
        poisoned("m")
        with watching("m"):
            until(lambda: builder.survey(Memory.open("m"))["leaves"] == 10, timeout=60)


def test_the_backoff_follows_the_failures_in_a_row_across_runs(home, sh):
    """A plain 500 every time: build-tree recorded no retry time for the node it gave up, and each new builder
    waited ``retry_seconds`` again after its first failure, however many tries ``compactor.json`` counted. The
    wait doubles with the failures in a row as compactor.json counts them, across runs (up to six times
    ``retry_seconds``), and build-tree records it, so cron's runs and a restarted watcher back off alike."""
    from pimem.compactor.state import BuildState

    def wait(failure) -> float:  # (the clock is frozen: the wait it was given after its last try)
        return (datetime.datetime.fromisoformat(failure["retry"]) - datetime.datetime.fromisoformat(failure["at"])).total_seconds()

    with FakeLLM("openai", faults=lambda n, body: "500") as server:
        configure(home, server)  # retry_seconds: 0.05
        mem = fill("m", 2, short_every=1000)  # (message 0 is short: one leaf)
        for tries in (1, 2, 3):
            assert sh("build-tree", "m", TEST_LLM_KEY="k").returncode == 6
            failure = BuildState(mem.path).failures["1+1"]
            assert failure["tries"] == tries and wait(failure) == 0.05 * 2 ** (tries - 1), failure
        with watching("m"):
            failure = until(lambda: BuildState(mem.path).failures["1+1"]["tries"] > 3 and BuildState(mem.path).failures["1+1"])
    assert wait(failure) == 0.3, failure  # (not 0.05 again: the fourth failure in a row)


def test_a_memory_refused_on_a_half_written_config_json_is_taken_again_once_it_is_mended(home):
    """An editor's save caught half-written stops that memory (a ``refused`` event); once the file is whole
    again, the running watcher takes the memory back and builds what comes (before, it was dropped until the
    watcher was restarted)."""
    configure(home)
    mem = fill("m", 6)
    whole = (mem.path / "config.json").read_bytes() if (mem.path / "config.json").exists() else b"{}\n"
    watcher = start_watch("m", "--json")
    try:
        until(lambda: complete("m"))
        (mem.path / "config.json").write_bytes(b'{"compactor": {"prov')
        until(lambda: lease.holder(mem) is None)  # refused: its lease let go
        (mem.path / "config.json").write_bytes(whole)
        mem.append([{"kind": "user", "text": long_text(k)} for k in range(6, 10)])
        until(lambda: complete("m"), timeout=15)
        assert lease.holder(mem)["pid"] == watcher.pid
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    events = [orjson.loads(line)["event"] for line in out.splitlines()]
    assert events.count("refused") == 1 and events.count("watching") == 2, events
    assert_built_once(mem)


def test_a_compactor_switched_away_from_is_closed_at_once(home, tmp_path):
    """The old builder's compactor is closed when its successor takes over, not when the watcher exits: a
    command compactor's system prompt file goes then."""
    seen = tmp_path / "files"
    with FakeLLM("openai") as server:
        configure(home, server)
        mem = fill("m", 4, short_every=1000)
        done = subprocess.run(pimem_cmd("model", "m", "command", "--command",
                                        f'echo "$PIMEM_SYSTEM_FILE" >> {seen}; cat >/dev/null; echo a summary of the span'),
                              capture_output=True, timeout=60, env=subprocess_env())
        assert done.returncode == 0, done.stderr
        with watching("m", "--json") as watcher:
            until(lambda: complete("m"))
            files = set(seen.read_text().split())
            assert files and all(os.path.exists(f) for f in files)  # (kept for the calls to come)
            done = subprocess.run(pimem_cmd("model", "m", "openai/m2", "--base-url", server.url, "--key-env", "TEST_LLM_KEY"),
                                  capture_output=True, timeout=60, env=subprocess_env())
            assert done.returncode == 0, done.stderr
            until(lambda: not any(os.path.exists(f) for f in files))
            assert watcher.poll() is None


@pytest.mark.parametrize("changes", [{"context_wait": float("nan")}, {"max_cost_per_day": float("inf")},
                                     {"max_cost_per_day": 2e9},  # (past what --max-cost-per-day takes)
                                     {"line_bytes": 10**30}, {"view": {"hi": 10**30}}, {"compactor": {"max_tokens": 2**64}}])
def test_save_config_refuses_a_number_json_cannot_keep_and_writes_nothing(home, changes):
    """NaN and infinity were saved as null, which no command then read (every one exited 2 on that memory, a
    watcher refused it); an integer past 64 bits raised orjson's TypeError. Both are now BadInput, nothing
    written, the memory's settings as they were."""
    from pimem.errors import BadInput

    mem = fill("m", 1)
    mem.save_config({"context_wait": 2.0})
    before = (mem.path / "config.json").read_bytes()
    with pytest.raises(BadInput, match=r"config\.json: .* cannot be .*; fix it or remove it"):
        mem.save_config(changes)
    assert (mem.path / "config.json").read_bytes() == before and Memory.open("m").config["context_wait"] == 2.0


def test_a_socks_proxy_without_its_package_is_one_line_not_retried_for_ever(home, tmp_path):
    """A socks proxy needs a package no retry installs: the watcher stops building that memory with one line
    saying what to install (a ``refused`` event), where each call failed again every ``retry_seconds``."""
    fake = tmp_path / "nosocks"
    fake.mkdir()
    (fake / "socksio.py").write_text("raise ImportError('no socksio here')\n")  # (absent, installed here or not)
    with FakeLLM("openai") as server:
        server.url = "http://llm.example.invalid/v1"  # (remote: a server on this machine is never proxied)
        configure(home, server)
        mem = fill("m", 6)
        unset = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"), "")
        socks = dict.fromkeys(("ALL_PROXY", "all_proxy"), "socks5://127.0.0.1:1080")  # (a blank one unsets it)
        watcher = start_watch("m", "--json", **socks, **unset,
                              PYTHONPATH=os.pathsep.join((str(fake), subprocess_env()["PYTHONPATH"])))
        try:
            first = [watcher.stdout.readline(), watcher.stdout.readline()]  # watching, then what became of it
            time.sleep(0.5)  # (a retry would have come by now: retry_seconds is 0.05)
            assert lease.holder(mem) is None, first  # refused: its lease let go
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    events = [orjson.loads(line) for line in first + out.splitlines()]
    assert [e["event"] for e in events] == ["watching", "refused"], events
    assert events[1]["error"] == ("http://llm.example.invalid/v1/chat/completions via proxy socks5://127.0.0.1:1080: "
                                  "a socks proxy needs the socksio package: pip install 'httpx[socks]'")
    assert server.requests == [] and not complete("m")


def test_a_call_a_proxy_kept_from_going_out_is_not_left_pending_under_a_daily_cap(home):
    """Under a daily cap each call is kept pending in compactor.json until its node is written or its failure
    recorded, and the next builder counts one still there as paid at its worst case. A call no proxy could
    carry (a scheme httpx does not know) never went out: it was left pending all the same, and the next run
    of the memory counted it as spent."""
    from pimem.compactor.state import BuildState

    with FakeLLM("openai") as server:
        server.url = "http://llm.example.invalid/v1"  # (remote: a server on this machine is never proxied)
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 6)
        unset = dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy"), "")
        proxy = dict.fromkeys(("ALL_PROXY", "all_proxy"), "socks4://127.0.0.1:1080")
        with watching("m", "--json", "--max-cost-per-day", "1", **proxy, **unset) as watcher:
            events = [orjson.loads(watcher.stdout.readline()) for _ in range(2)]
            assert [e["event"] for e in events] == ["watching", "refused"], events
            until(lambda: lease.holder(mem) is None)
        assert BuildState(mem.path).pending == {}
        again = subprocess.run(pimem_cmd("build-tree", "m"), capture_output=True, timeout=60,
                               env=subprocess_env(TEST_LLM_KEY="k", **proxy, **unset))
        assert again.returncode == 6 and b"Unknown scheme for proxy URL" in again.stderr, again.stderr
    assert BuildState(mem.path).unbuilt_cost == {} and server.requests == []


def test_a_compactor_without_its_api_key_is_one_line_not_retried_for_ever(home):
    """The API key's variable is unset where the watcher runs: no call can go out until a person sets it there
    (a running process never sees it) or changes the compactor. A memory named alone is refused at once (exit 6,
    one line saying what to set), as build-tree does; beside another, it is refused with a ``refused`` event and
    taken again once ``pimem model`` gives it a key the watcher has, with those settings (before, each call
    failed again every ``retry_seconds``, for ever, as if the server were down)."""
    from pimem.compactor.state import BuildState

    with FakeLLM("openai") as server:
        configure(home, server, key_env="PIMEM_UNSET_KEY")
        mem = fill("m", 6)
        fill("a", 2).save_config({"compactor": {"key_env": "TEST_LLM_KEY"}})
        env = subprocess_env(TEST_LLM_KEY="k")
        env.pop("PIMEM_UNSET_KEY", None)
        said = ("$PIMEM_UNSET_KEY is not set (the API key of the compactor of m, openai/m1): set it where the watcher "
                "starts, or choose another with 'pimem model m'")
        alone = subprocess.run(pimem_cmd("watch", "m"), capture_output=True, timeout=30, env=env)
        assert (alone.returncode, alone.stderr.decode()) == (6, f"pimem: error: {said}\n")
        with watching("a", "m", "--json") as watcher:
            events = [orjson.loads(watcher.stdout.readline()) for _ in range(2)]
            # (refused on its settings: this watcher takes it again once they change, as it says)
            assert events == [{"event": "watching", "memory": "a"},
                              {"event": "refused", "memory": "m", "error": said, "settings": True}]
            assert lease.holder(mem) is None and BuildState(mem.path).failures == {}
            done = subprocess.run(pimem_cmd("model", "m", "openai/m1", "--base-url", server.url, "--key-env", "TEST_LLM_KEY"),
                                  capture_output=True, timeout=60, env=env)
            assert done.returncode == 0, done.stderr
            taken = next(e for e in map(orjson.loads, iter(watcher.stdout.readline, b"")) if e["memory"] == "m")
            assert taken == {"event": "watching", "memory": "m"}
            until(lambda: complete("m"))
        assert watcher.returncode == 0


@pytest.mark.parametrize("api, fault", [("openai", "401"), ("anthropic", "401"), ("anthropic", "403")])
def test_a_refused_api_key_is_refused_on_its_settings_not_retried_for_ever(home, api, fault):
    """A server refusing the API key (HTTP 401, or a 403 saying the key may not do this) refuses every call alike:
    the watcher retried each node for ever (114 requests in 4 s), as if the server were down. It stops building
    that memory with one line naming the variable (a ``refused`` event with ``"settings": true``), records
    nothing as failing or spent, builds the others on, ``status`` says why, and it takes the memory again once
    its settings change (``pimem model``)."""
    from pimem.compactor.state import BuildState

    key = "sk-test-0123456789abcdefXYZ"
    with FakeLLM(api) as good, FakeLLM(api, faults=lambda n, body: fault) as server:
        configure(home, good, api=api, key_env="LONG_LLM_KEY", price_in=1.0, price_out=2.0)
        fill("a", 6)
        mem = fill("m", 20)
        mem.save_config({"compactor": {"base_url": server.url}, "max_cost_per_day": 1.0})
        watcher = start_watch("a", "m", "--json", LONG_LLM_KEY=key)
        try:
            events = [orjson.loads(watcher.stdout.readline())]
            while events[-1]["event"] != "refused" and len(events) < 100:  # (a, built; m, refused: not failed for ever)
                events.append(orjson.loads(watcher.stdout.readline()))
            assert events[-1]["event"] == "refused", events[-3:]
            until(lambda: lease.holder(mem) is None)  # (refused: its lease let go)
            time.sleep(0.5)  # (a retry would have come by now: retry_seconds is 0.05)
            assert 1 <= len(server.requests) <= 8  # (the calls in flight when the first was refused, no more)
            refused = events[-1]
            said = ("the server refused " + ("the API key" if fault == "401" else "access with the API key")
                    + f" in $LONG_LLM_KEY (the compactor of m, {api}/m1): ")
            assert refused["memory"] == "m" and refused["error"].startswith(said) and refused["settings"] is True
            assert key not in refused["error"] and "where the watcher starts" in refused["error"], refused
            assert "; nothing more is sent with it for 4.5 s (then it is tried again): " in refused["error"]
            assert not [e for e in events if e["event"] == "failed"]
            # after 90 × retry_seconds its calls try the key again (a server's outage refuses good keys too): the
            # calls in flight at once, refused as before, and the memory left again
            sent = len(server.requests)
            until(lambda: len(server.requests) > sent)
            again = [orjson.loads(watcher.stdout.readline())]
            while again[-1]["event"] != "refused" and len(again) < 100:
                again.append(orjson.loads(watcher.stdout.readline()))
            assert {"event": "watching", "memory": "m"} in again and again[-1]["memory"] == "m", again
            assert again[-1]["error"].startswith(said) and again[-1]["settings"] is True, again
            until(lambda: lease.holder(mem) is None and BuildState(mem.path).pending == {})  # (its calls in flight in)
            assert len(server.requests) <= sent + 8
            refused = again[-1]
            state = BuildState(mem.path)
            assert state.failures == {} and state.pending == {} and state.unbuilt_cost == {}
            status = orjson.loads(subprocess.run(pimem_cmd("status", "m", "--json"), capture_output=True, timeout=60,
                                                 env=subprocess_env()).stdout)
            assert status["key_refused"]["error"] == refused["error"] and status["spent"]["cost"] == 0
            until(lambda: complete("a"))
            done = subprocess.run(pimem_cmd("model", "m", f"{api}/m1", "--base-url", good.url, "--key-env", "LONG_LLM_KEY",
                                            "--price-in", "1", "--price-out", "2"),
                                  capture_output=True, timeout=60, env=subprocess_env())
            assert done.returncode == 0, done.stderr
            taken = next(e for e in map(orjson.loads, iter(watcher.stdout.readline, b"")) if e["memory"] == "m")
            assert taken == {"event": "watching", "memory": "m"}
            until(lambda: complete("m"))
            assert "key_refused" not in orjson.loads((mem.path / "compactor.json").read_bytes())
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert f"stopped building m: {said}".encode() in err and b"(this watcher takes it again once its settings change)" in err
    assert key.encode() not in err + out


def test_status_says_a_watcher_retries_a_node_an_earlier_run_left_failing(home, sh):
    """A node build-tree failed (not retried in that run; the next builder waits for the retry time it recorded)
    showed no ``next`` while a watcher started later was retrying it: a builder tries every unbuilt node from its
    start, so ``status`` says it is being retried, then, once that call failed too, when the watcher tries it
    next (twice ``retry_seconds`` later: its second failure in a row)."""
    import threading

    slow, answer = threading.Event(), threading.Event()
    with FakeLLM("openai", faults=lambda n, body: "500",
                 latency=lambda n, body: (answer.wait(60) and 0) if slow.is_set() else 0) as server:
        configure(home, server, retry_seconds=30)
        fill("m", 2, short_every=1000)  # one long message: one call
        assert sh("build-tree", "m", TEST_LLM_KEY="k").returncode == 6
        assert b"(1 try, last 2026-10-08T09:30:00+08:00, next 2026-10-08T09:30:30+08:00)" in sh("status", "m").stdout
        slow.set()
        later = "2026-10-08T09:31:00+08:00"  # (the watcher starts a minute after the run)
        with watching("m", PIMEM_NOW=later):
            until(lambda: len(server.requests) == 2)  # (its call, held)
            status = sh("status", "m", PIMEM_NOW=later).stdout
            assert b"failing   1+1: " in status and b"(1 try, last 2026-10-08T09:30:00+08:00, being retried)" in status, status
            answer.set()  # (failed again)
            until(lambda: orjson.loads((home / "m" / "compactor.json").read_bytes())["failures"]["1+1"]["tries"] == 2)
            status = sh("status", "m", PIMEM_NOW=later).stdout
            assert b"(2 tries, last 2026-10-08T09:31:00+08:00, next 2026-10-08T09:32:00+08:00)" in status, status


def test_a_watcher_sends_a_node_an_earlier_run_was_asked_to_wait_for_only_after_that_time(home, sh):
    """build-tree refused with ``Retry-After: 300`` leaves the node to the next run with that time; a watcher
    started meanwhile called it at once, asking the server again straight away. It waits for it: it builds what
    else there is, ``status`` says when it tries the node next, and it sends the node's request once that time
    has come (a watcher started a second before it)."""
    from pimem.compactor.state import BuildState

    def message(k):
        return lambda body: f"compress message {k} " in body["messages"][-1]["content"]

    with FakeLLM("openai", faults=lambda n, body: "429" if n == 0 else None, retry_after="300") as server:
        configure(home, server)
        mem = fill("m", 2, short_every=1000)  # (message 0 is short: one call, for message 1)
        assert sh("build-tree", "m", "--retries", "1", TEST_LLM_KEY="k").returncode == 6  # (at 09:30:00)
        assert BuildState(mem.path).failures["1+1"]["retry"] == "2026-10-08T09:35:00+08:00"
        mem.append([{"kind": "user", "text": long_text(2)}])
        with watching("m", PIMEM_NOW="2026-10-08T09:34:30+08:00"):
            until(lambda: (0, 2) in Memory.open("m").tree.stored_keys(3))  # (message 2's, sent after it looked at 1's)
            assert [message(1)(body) for body in server.requests] == [True, False]
            status = sh("status", "m", PIMEM_NOW="2026-10-08T09:34:30+08:00").stdout
            assert b"(1 try, last 2026-10-08T09:30:00+08:00, next 2026-10-08T09:35:00+08:00)" in status, status
        with watching("m", PIMEM_NOW="2026-10-08T09:34:59+08:00"):
            until(lambda: complete("m"))
        assert [message(1)(body) for body in server.requests] == [True, False, True]
    assert_built_once(mem)


def test_watch_says_when_it_waits_for_a_recorded_retry_time(home, sh):
    """A watcher started before a failed node's recorded retry time waits for it (5 minutes at most), and
    waited in silence. It says so once on stderr (with --json too), in build-tree's words, and emits a
    ``waiting`` event naming the node, its error and the seconds, then builds it."""
    from pimem.tree import label

    with failed_first_run(home, sh) as (mem, node, failure):
        watcher = start_watch("m", "--json", PIMEM_NOW="2026-10-08T09:30:28+08:00")
        try:
            until(lambda: complete("m"))
        finally:
            watcher.send_signal(signal.SIGTERM)
            out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert err.decode().splitlines() == [
        f"pimem: m: waiting 2 s to retry node {node} at the time an earlier run recorded (it failed: {failure['error']})"]
    events = [orjson.loads(line) for line in out.splitlines()]
    (waiting,) = [e for e in events if e["event"] == "waiting"]
    assert waiting == {"event": "waiting", "memory": "m", "node": node, "l": waiting["l"], "i": waiting["i"], "nodes": 1,
                       "seconds": 2, "error": failure["error"]}
    assert label(waiting["l"], waiting["i"]) == node
    assert [e["event"] for e in events if e["event"] in ("waiting", "built") and e["node"] == node] == ["waiting", "built"]
    assert_built_once(mem)


@pytest.mark.parametrize("command", ["watch", "build-tree"])
def test_a_builder_killed_before_its_answers_are_written_told_none_of_them_and_counts_them_as_billed(home, command):
    """Nodes are written in batches (at least every 0.2 s), so a builder killed with SIGKILL loses the calls
    answered since the last write; the next one builds them again. Their ``built`` events go out once the nodes
    are written, so none names a lost node (before, one went out with the answer, and the node was built and
    paid for twice while the events said it was built once); under a daily cap, such a call is pending in
    compactor.json at what it was billed, not at its worst case (before, a restarted watcher counted each at
    its worst case, ~40 times its cost here, and stayed capped for the day on money never spent). The writer
    lock held by this test stands for the writes still to come."""
    with FakeLLM("openai", latency=0.3) as server:
        configure(home, server, price_in=1.0, price_out=2.0)  # the server says 1,000 tokens in, 100 out: $0.0012
        mem = fill("m", 60, short_every=1000)
        capped = ["--max-cost-per-day", "5"] if command == "watch" else []
        builder_process = subprocess.Popen(pimem_cmd(command, "m", "--json", *capped), stdout=subprocess.PIPE,
                                           stderr=subprocess.PIPE, env=subprocess_env(TEST_LLM_KEY="k"))
        try:
            until(lambda: lease.holder(mem))
            with mem.lock():  # (nothing can be written now)
                until(lambda: len(server.requests) >= 20)
                sent = len(server.requests)  # (a call beyond the 8 in flight goes once one is answered and counted)
                builder_process.kill()
                out, err = builder_process.communicate(timeout=30)
        finally:
            if builder_process.poll() is None:
                builder_process.kill()
                builder_process.communicate(timeout=30)
        told = {(e["l"], e["i"]) for e in map(orjson.loads, out.splitlines()) if e["event"] == "built"}
        assert told <= {(n["l"], n["i"]) for n in stored_lines(mem)}, err  # (nothing was written: no event)
        if command == "build-tree":
            return
        pending = orjson.loads((mem.path / "compactor.json").read_bytes())["pending"]
        billed = [call["cost"] for call in pending.values() if call["cost"] == pytest.approx(0.0012)]
        assert len(billed) >= sent - 8 and len(pending) - len(billed) <= 8  # (the rest in flight: at their worst case)
        with watching("m", "--json", "--max-cost-per-day", "5") as again:
            until(lambda: complete("m"), timeout=60)
        # the next watcher took them as paid, at what they cost (and built their nodes again)
        assert unbuilt_cost(mem.path) == pytest.approx(sum(call["cost"] for call in pending.values()))
        assert_built_once(mem)


def watcher_holds(mem, watcher) -> bool:
    found = lease.holder(mem)
    return bool(found) and found["pid"] == watcher.pid


@pytest.mark.parametrize("how", ["mv", "rm"])
def test_a_memory_moved_or_deleted_behind_a_watchers_back_is_dropped_and_taken_again_once_back(home, tmp_path, how):
    """``mv`` or ``rm -rf`` of one memory's directory under a watcher of every memory: it said so once (a
    ``refused`` event, ``"gone": true``) and built the others on, let go of its lease where the memory went,
    and took the memory again once one was back at its name. It exited 3 and stopped building them all."""
    configure(home)
    one, two = fill("one", 3), fill("two", 3)
    elsewhere = tmp_path / "elsewhere"
    watcher = start_watch("--json")
    try:
        until(lambda: watcher_holds(one, watcher) and watcher_holds(two, watcher))
        if how == "mv":
            subprocess.run(["mv", str(two.path), str(elsewhere)], check=True)
            until(lambda: not (elsewhere / "lock.json").exists())  # let go where it went
            subprocess.run(["mv", str(elsewhere), str(two.path)], check=True)
        else:  # (rm may meet a file the watcher writes meanwhile, "Directory not empty": a user runs it again)
            until(lambda: subprocess.run(["rm", "-rf", str(two.path)], stderr=subprocess.DEVNULL).returncode == 0)
            fill("two", 3)  # (a new memory of that name)
        fill("one", 6)
        fill("two", 6)
        until(lambda: complete("one") and complete("two") and watcher_holds(Memory.open("two"), watcher))
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    events = said_two_went(watcher, out, err, two.path)
    assert [e["memory"] for e in events if e["event"] == "watching"].count("two") == 2


def said_two_went(watcher, out: bytes, err: bytes, path) -> list[dict]:
    """The events of a watcher stopped cleanly that said once that memory ``two`` went from ``path`` (its
    ``refused`` event, ``"gone": true``, and its one warning)."""
    assert watcher.returncode == 0, err
    events = [orjson.loads(line) for line in out.splitlines()]
    assert [e for e in events if e["event"] == "refused"] == [
        {"event": "refused", "memory": "two", "gone": True,
         "error": f"memory 'two' was moved or deleted behind pimem's back (from {path})"}]
    assert err.decode().splitlines() == [
        f"pimem: warning: stopped building two: memory 'two' was moved or deleted behind pimem's back (from {path}) "
        "(this watcher takes it again once it is back)"]
    return events


def test_a_watcher_of_one_memory_moved_away_waits_for_it_and_lets_go_where_it_went(home, sh):
    """``watch two`` with ``two`` renamed by hand: the watcher lets go of the lease in the moved copy (``status``
    there no longer says a builder died holding it) and waits, as one with nothing to do; the memory moved
    back is built again."""
    configure(home)
    two = fill("two", 3)
    moved = home / "two-moved"
    watcher = start_watch("two")
    try:
        until(lambda: watcher_holds(two, watcher))
        subprocess.run(["mv", str(two.path), str(moved)], check=True)
        until(lambda: not (moved / "lock.json").exists())
        status = sh("status", "two-moved")
        assert status.returncode == 0 and b"gone" not in status.stdout, status.stdout
        subprocess.run(["mv", str(moved), str(two.path)], check=True)
        fill("two", 6)
        until(lambda: complete("two") and watcher_holds(Memory.open("two"), watcher))
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    assert b"stopped building two" in err


def test_a_line_bytes_lowered_under_a_watcher_is_taken_and_the_longer_lines_built_again(home, sh):
    """``config.json`` given a smaller ``line_bytes`` while a watcher ran: it kept writing lines for the old one
    (views of 455–476-byte lines, an ``fsck`` of 21 problems). It takes the new one as it takes a new model."""
    mem = Memory.at("lb")
    mem.append([{"kind": "user", "text": f"message {k} about the staging database port and pool size settings " * 12}
                for k in range(40)])
    mem.save_config({"view": {"hi": 500, "lo": 250}})
    with watching("lb", "--json"):
        until(lambda: complete("lb"))
        Memory.at("lb").save_config({"line_bytes": 256})
        until(lambda: complete("lb"))  # (the nodes over 256 bytes are built again)
        mem.append([{"kind": "user", "text": f"message {k} about the replica lag and the backup window " * 12}
                    for k in range(40, 60)])
        until(lambda: complete("lb"))
    out = sh("view", "lb", "--json")
    assert out.returncode == 0 and all(orjson.loads(line)["bytes"] <= 256 for line in out.stdout.splitlines()), out.stdout
    assert sh("fsck", "lb").returncode == 0


def beat_age(mem) -> float:
    return time.time() - orjson.loads((mem.path / lease.FILE).read_bytes())["beat"]


def test_readers_stop_waiting_for_a_watcher_that_stopped_beating(home, sh):
    """A watcher frozen with SIGSTOP: once its heartbeat is three beats late, ``context`` and ``view --wait``
    wait for it no more (before, each waited until the lease was 30 s stale, every turn); they return while it
    is still stopped and its lease not yet stale, so no builder would have taken it over yet."""
    configure(home)
    mem = fill("m", 2)
    watcher = start_watch("m")
    try:
        until(lambda: watcher_holds(mem, watcher) and complete("m"))
        frozen_outside_the_writer_lock(mem, watcher)
        mem.append([{"kind": "user", "text": long_text(k)} for k in range(2, 5)])  # (placeholders it cannot build)
        until(lambda: beat_age(mem) > lease.QUIET)
        turn = sh("context", "m", "--wait", "600")
        view = sh("view", "m", "--wait", "600")
        assert beat_age(mem) < lease.STALE  # (returned before a builder could take the memory over)
        assert turn.returncode == 0 and b"(not summarized yet" in turn.stdout
        assert view.returncode == 0 and f"the watcher building 'm' (pid {watcher.pid}) is not answering".encode() in view.stderr, view.stderr
    finally:
        _thawed_and_stopped(watcher)
    assert watcher.returncode == 0


def frozen_outside_the_writer_lock(mem, watcher) -> None:
    """``watcher`` frozen with SIGSTOP at a moment it does not hold ``mem``'s writer lock (once its nodes are
    built it may still be writing the last batch's view; frozen there, no append could go in)."""
    from pimem.errors import Busy

    while True:
        watcher.send_signal(signal.SIGSTOP)
        try:
            with mem.lock(0):
                return
        except Busy:
            watcher.send_signal(signal.SIGCONT)
            time.sleep(0.05)


def _thawed_and_stopped(watcher) -> None:
    """A watcher that may be frozen (``SIGSTOP``) woken and stopped, if it still runs."""
    if watcher.poll() is None:
        watcher.send_signal(signal.SIGCONT)
        watcher.send_signal(signal.SIGTERM)
        watcher.communicate(timeout=30)


def test_view_wait_says_the_watcher_stopped_answering_or_went_away_during_the_wait(home):
    """A watcher frozen with SIGSTOP (or killed) while ``view --wait`` waits for it: the view stopped waiting
    three beats on, but said its lines still waited "after 600 s". It says why it stopped waiting."""
    mem = fill("m", 2)
    watcher = start_watch("m")
    try:
        until(lambda: watcher_holds(mem, watcher) and complete("m"))
        for k, stop in enumerate((signal.SIGSTOP, signal.SIGKILL)):
            until(lambda: beat_age(mem) < 0.5)  # (a fresh heartbeat: the view starts waiting before it is late)
            frozen_outside_the_writer_lock(mem, watcher)  # (frozen inside it, a beat's, the append below waits: CI)
            mem.append([{"kind": "user", "text": long_text(n)} for n in range(10 * k + 2, 10 * k + 5)])
            view = subprocess.Popen(pimem_cmd("view", "m", "--wait", "600"), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=subprocess_env())
            if stop == signal.SIGKILL:
                time.sleep(1)  # (were the view not waiting yet, it would say so all the same, only sooner)
                watcher.kill()
                watcher.wait(timeout=30)
            _, err = view.communicate(timeout=120)
            assert view.returncode == 0 and b"after 600 s" not in err, err
            if stop == signal.SIGSTOP:
                assert f"the watcher building 'm' (pid {watcher.pid}) is not answering".encode() in err, err
                watcher.send_signal(signal.SIGCONT)
                until(lambda: complete("m"))
            else:
                assert b"no watcher is building 'm'" in err, err
    finally:
        _thawed_and_stopped(watcher)


def test_an_offline_watcher_writes_a_new_messages_summary_at_once_not_at_its_batch_timer(home, sh):
    """The offline compactor's nodes were written in batches every 2 s, so ``context`` waited up to 3 s on
    nearly every turn after a long message. Once nothing more is ready to build, what was built is written at
    once: here the batch timer is an hour, and the summary is there all the same."""
    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": "start"}])
    code = "import sys; from pimem import builder, cli; builder.OFFLINE_FLUSH_SECONDS = 3600; cli.main(sys.argv[1:])"
    watcher = subprocess.Popen([sys.executable, "-c", code, "watch", "m"], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env=subprocess_env())
    try:
        until(lambda: lease.holder(mem))
        mem.append([{"kind": "pi", "text": "a long reply about the staging database port " * 20}])
        out = sh("context", "m", "--wait", "20")
        assert out.returncode == 0 and b"not summarized yet" not in out.stdout, out.stdout
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(timeout=30)


def test_a_builder_admits_messages_appended_since_it_read_the_log_at_its_next_look(home):
    """A builder that had read the log to its end kept the reader that ended there: after noticing new
    messages, its next task was none, and the watcher built them a poll (0.5 s) later."""
    mem = Memory.at("m")
    mem.append([{"kind": "user", "text": "start"}])
    built = builder.Builder(Memory.at("m"))
    assert built.next_task(time.monotonic()) is None
    mem.append([{"kind": "pi", "text": "a long reply about the staging database port " * 20}])
    assert built.refresh()
    task = built.next_task(time.monotonic())
    assert task is not None and (task.l, task.i) == (0, 1)


@pytest.mark.parametrize("command", [("context", "m"), ("view", "m", "--wait", "30")])
def test_a_reader_waits_for_a_watcher_of_the_home_to_take_a_new_memory(home, sh, command):
    """A memory created while ``watch`` runs over the whole home is taken at the watcher's next look (every 2 s);
    until then no lease is held on it, and ``context`` showed its placeholders without waiting, which the next
    turns showed summarised: the prompt cache's prefix broke once on every new memory. ``view --wait`` said no
    watcher built it. The watcher's heartbeat in the home (``watch.json``) counts as building it, for both
    (``lease.wait_for_builder``)."""
    with FakeLLM("openai", latency=0.5) as server:
        configure(home, server)
        fill("a", 3)
        with watching() as watcher:
            until(lambda: lease.holder(Memory.open("a")))
            fill("b", 1)
            until(lambda: lease.holder(Memory.open("b")))  # (the watcher just looked: the next look is 2 s on)
            fill("m", 2, short_every=1000)
            assert lease.holder(Memory.open("m")) is None
            assert "(not summarized yet" in Memory.open("m").view_lines()[-1]
            waited = sh(*command)
            assert waited.returncode == 0 and b"(not summarized yet" not in waited.stdout, waited.stderr
            assert b"1+1|user: summary of 1" in waited.stdout and waited.stderr == b""
            assert lease.watcher(home) is not None
    assert watcher.returncode == 0 and not (home / "watch.json").exists()


def test_a_memory_the_watcher_of_the_home_refused_is_not_waited_for(home, sh):
    """A memory the watcher left out (its compactor's API key is not set where it runs) is named in
    ``watch.json``, so ``context`` shows its placeholders at once, as with no watcher."""
    with FakeLLM("openai") as server:
        configure(home, server)
        fill("a", 3)
        mem = fill("nokey", 2, short_every=1000)
        (home / "nokey" / "config.json").write_bytes(orjson.dumps({"compactor": {
            "provider": "openai", "model": "m1", "base_url": server.url, "key_env": "PIMEM_TEST_NO_SUCH_KEY"}}))
        with watching():
            until(lambda: "nokey" in ((lease.watcher(home) or {}).get("refused") or ()))
            assert lease.holder(mem) is None and lease.builder(mem, time.time()) is None
            shown = sh("context", "nokey")
            assert shown.returncode == 0 and b"1+1|(not summarized yet" in shown.stdout
            viewed = sh("view", "nokey", "--wait", "600")
            assert viewed.returncode == 0 and b"1+1|(not summarized yet" in viewed.stdout
            assert b"the watcher of the home (pid " in viewed.stderr and b"refused 'nokey'" in viewed.stderr, viewed.stderr
            # (status said "builder none (run 'pimem watch' …)" beside the very watcher that left it)
            pid = lease.watcher(home)["pid"]
            status = sh("status", "nokey")
            assert status.returncode == 0 and f"builder   none: the watcher of the home (pid {pid} on ".encode() in status.stdout
            assert b"refused it (its output says why, and so does 'pimem build-tree nokey')" in status.stdout, status.stdout
            assert orjson.loads(sh("status", "nokey", "--json").stdout)["watcher_refused"]["pid"] == pid
            assert orjson.loads(sh("status", "a", "--json").stdout)["watcher_refused"] is None


def test_view_wait_says_the_watcher_of_the_home_stopped_answering_or_went_away_before_taking_a_memory(home):
    """A watcher of the home frozen with SIGSTOP (or killed) before it took a new memory that ``view --wait``
    waits for: the view says so (not that the lines still wait "after 600 s") and stops waiting."""
    configure(home)
    fill("a", 3)
    watcher = start_watch()
    try:
        for k, stop in enumerate((signal.SIGSTOP, signal.SIGKILL)):
            name = f"m{k}"
            until(lambda: lease.holder(Memory.open("a")) and lease.watcher(home)  # (a fresh heartbeat: the view
                  and time.time() - lease.watcher(home)["beat"] < 0.5)  # starts waiting before it is late)
            watcher.send_signal(signal.SIGSTOP)
            fill(name, 2, short_every=1000)
            view = subprocess.Popen(pimem_cmd("view", name, "--wait", "600"), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, env=subprocess_env())
            if stop == signal.SIGKILL:
                time.sleep(1)  # (were the view not waiting yet, it would say so all the same, only sooner)
                watcher.kill()
                watcher.wait(timeout=30)
            out, err = view.communicate(timeout=120)
            assert view.returncode == 0 and b"after 600 s" not in err and b"(not summarized yet" in out, err
            if stop == signal.SIGSTOP:
                assert (f"the watcher of the home (pid {watcher.pid}), which has not taken '{name}' yet, is not "
                        f"answering").encode() in err, err
                watcher.send_signal(signal.SIGCONT)
                until(lambda: lease.holder(Memory.open(name)))
            else:
                assert f"no watcher is building '{name}'".encode() in err, err
    finally:
        _thawed_and_stopped(watcher)


def test_a_second_watcher_of_the_home_leaves_a_live_ones_watch_json_alone(home, tmp_path):
    """``watch.json`` is the file of the watcher taking the memories: a second watcher of the home standing by
    (``--wait``) overwrote it with its own pid at each look, though it held nothing (readers trusted its looks),
    and removed it on stopping while the first still ran (``context`` then waited for no new memory). It
    writes there only once the file's watcher is dead; a file a killed watcher left counts as no watcher."""
    with FakeLLM("openai") as server:
        configure(home, server)
        fill("a", 3)
        first = start_watch()
        try:
            until(lambda: lease.holder(Memory.open("a")) and (lease.watcher(home) or {}).get("pid") == first.pid)
            first.send_signal(signal.SIGSTOP)  # (its file is left as it is: no beat of its own rewrites it)
            for name in ("nokey1", "nokey2"):
                fill(name, 2, short_every=1000)
                (home / name / "config.json").write_bytes(orjson.dumps({"compactor": {
                    "provider": "openai", "model": "m1", "base_url": server.url, "key_env": "PIMEM_TEST_NO_SUCH_KEY"}}))
            log = tmp_path / "second.log"
            with watching("--wait", "--log", str(log)) as second:
                until(lambda: log.exists() and b"nokey1" in log.read_bytes())  # (refused at its start, then it beat)
                fill("nokey3", 2, short_every=1000)
                (home / "nokey3" / "config.json").write_bytes((home / "nokey1" / "config.json").read_bytes())
                until(lambda: b"nokey3" in log.read_bytes())  # (refused at a later look: it beat again since)
                assert orjson.loads((home / "watch.json").read_bytes())["pid"] == first.pid
            assert second.returncode == 0
            assert orjson.loads((home / "watch.json").read_bytes())["pid"] == first.pid
            first.send_signal(signal.SIGKILL)
            first.wait(timeout=30)
            assert (home / "watch.json").exists() and lease.watcher(home) is None  # (killed: no watcher)
        finally:
            if first.poll() is None:
                first.kill()
                first.wait(timeout=30)
            first.stdout.close()
            first.stderr.close()
        with watching() as third:
            until(lambda: (lease.watcher(home) or {}).get("pid") == third.pid)  # (the dead one's file taken over)
    assert third.returncode == 0 and not (home / "watch.json").exists()


@pytest.mark.parametrize("module, signum, args", [
    ("pimem.options", signal.SIGTERM, ()),  # cli.main took SIGTERM, watch's command is being loaded
    ("pimem.options", signal.SIGINT, ("m",)),
    ("pimem.options", signal.SIGHUP, ()),
    ("pimem.scheduler", signal.SIGTERM, ("m",)),  # the command runs, the scheduler is being loaded
    ("pimem.lease", signal.SIGTERM, ()),  # in scheduler.watch, before it takes the signals itself
    ("pimem.importers.follow", signal.SIGTERM, ("--import", "sessions")),
])
def test_a_signal_while_watch_starts_stops_it_cleanly_with_exit_0(home, tmp_path, module, signum, args):
    mem = fill("m", 3)
    (tmp_path / "sessions").mkdir()
    out = subprocess.run([sys.executable, "-c", CLI_SIGNAL_AT, module, str(int(signum)), "watch", *args], cwd=tmp_path,
                         capture_output=True, timeout=60, env=subprocess_env())
    assert out.returncode == 0 and b"interrupted" not in out.stderr and b"Traceback" not in out.stderr, out.stderr
    assert lease.holder(mem) is None


MOVED_AS_TAKEN = """
import os, sys
from pimem import scheduler

to = sys.argv[1]

class Moving(scheduler.Builder):
    done = False

    def __init__(self, mem, *args, **kwargs):
        if not Moving.done:  # the memory renamed by hand after the lease was taken, before its builder reads it
            Moving.done = True
            os.rename(mem.path, to)
        super().__init__(mem, *args, **kwargs)

scheduler.Builder = Moving
from pimem.cli import main
sys.argv[1:] = ["watch", "two", "--json"]
main()
"""


def test_a_memory_moved_just_as_the_watcher_takes_it_is_let_go_of_there_and_taken_again_once_back(home):
    """``take``: the lease held, the memory renamed before its builder read it (a real rename, between the two
    steps). The watcher says it went (``refused``, ``"gone": true``), lets go of the lease in the moved copy
    (``status`` there sees no builder that died holding it), and takes the memory again once it is back."""
    configure(home)
    two = fill("two", 3)
    moved = home / "two-moved"
    watcher = subprocess.Popen([sys.executable, "-c", MOVED_AS_TAKEN, str(moved)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=subprocess_env(TEST_LLM_KEY="k"))
    try:
        until(lambda: moved.exists() and not (moved / "lock.json").exists() and not two.path.exists())
        assert lease.holder(Memory.open("two-moved")) is None
        os.rename(moved, two.path)
        fill("two", 6)
        until(lambda: complete("two") and watcher_holds(Memory.open("two"), watcher))
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    events = said_two_went(watcher, out, err, two.path)
    assert [e["memory"] for e in events if e["event"] == "watching"] == ["two"]  # (once back, not as it went)


def test_a_memory_the_user_deleted_as_a_watcher_of_every_memory_listed_it_is_taken_again_once_back(home, tmp_path):
    """``pimem delete two`` run right after the watcher listed the memories, before it took their leases: it
    said so once (a ``refused`` event, ``"gone": true``), built ``one``, and took ``two`` again once a memory
    was back at its name. It said the memory was left until the watcher's next start, and never took it."""
    from test_cron import USER_MEANWHILE

    configure(home)
    one, two = fill("one", 3), fill("two", 3)
    once = tmp_path / "once"  # (the user's delete after the first listing alone)
    launcher = USER_MEANWHILE.replace("    mems = listed(*args, **kwargs)\n",
                                      f"    mems = listed(*args, **kwargs)\n    if os.path.exists({str(once)!r}): return mems\n"
                                      f"    open({str(once)!r}, 'w').close()\n").replace("import subprocess", "import os, subprocess")
    watcher = subprocess.Popen([sys.executable, "-c", launcher, "delete two", "watch", "--json"], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, env=subprocess_env())
    try:
        until(lambda: watcher_holds(one, watcher) and not two.path.exists())
        fill("two", 6)  # (a new memory of that name)
        until(lambda: complete("one") and complete("two") and watcher_holds(Memory.open("two"), watcher))
    finally:
        watcher.send_signal(signal.SIGTERM)
        out, err = watcher.communicate(timeout=30)
    assert watcher.returncode == 0, err
    events = [orjson.loads(line) for line in out.splitlines()]
    assert [e for e in events if e["event"] == "refused"] == [
        {"event": "refused", "memory": "two", "gone": True,
         "error": f"memory 'two' was renamed or deleted meanwhile (from {two.path})"}]
    assert err.decode().splitlines() == [
        f"pimem: warning: stopped building two: memory 'two' was renamed or deleted meanwhile (from {two.path}) "
        "(this watcher takes it again once it is back)"]
