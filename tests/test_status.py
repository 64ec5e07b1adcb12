"""``status`` as a person reads it: when a failing node is tried next, with a builder running or not; its times in
the reader's time zone; a daily cap no call fits; a builder killed holding the memory."""

from __future__ import annotations

import shutil
import signal
import tempfile
import threading
import time
from pathlib import Path

import orjson
import pytest

from bench.llm_server import FakeLLM
from pimem import lease
from pimem.compactor.state import BuildState
from test_scheduler import configure, fill
from test_watch import complete, start_watch, until, watching

TOKYO = "2026-10-08T09:36:00+08:00"  # (the reader's clock, and the home fixture's zone)
UTC = "2026-10-08T01:36:00+00:00"  # (the same moment on a service's clock)


def status(sh, now=TOKYO):
    shown = sh("status", "m", PIMEM_NOW=now)
    assert shown.returncode == 0, shown.stderr
    return shown.stdout.decode(), orjson.loads(sh("status", "m", "--json", PIMEM_NOW=now).stdout)


def test_a_failed_node_s_retry_time_is_shown_with_no_builder_running_and_every_time_in_the_reader_s_zone(home, sh):
    """build-tree on a service's clock (UTC) was asked to wait 300 s for a node and left it to the next run:
    the next builder waits for that time (``Builder._deferred``), so ``status`` says ``next`` it with no builder
    running too (before, it said nothing until one ran). Its times, the builder's ``since`` and the messages'
    dates are shown in the reader's zone (+08:00), as ``capped_until`` is (before, each in the zone of whoever
    wrote it); the JSON keeps them as recorded. A retry time past says nothing without a builder, and ``being
    retried`` (``being_retried`` in the JSON) while a watcher's call for it is out."""
    gate = threading.Event()
    with FakeLLM("openai", faults=lambda n, body: "429" if n == 0 else None, retry_after="300",
                 latency=lambda n, body: 0 if n == 0 else (gate.wait(60) and 0)) as server:
        configure(home, server)
        fill("m", 2, short_every=1000)  # (message 0 is short: one call, for message 1)
        built = sh("build-tree", "m", "--retries", "1", TEST_LLM_KEY="k", TZ="UTC", PIMEM_NOW="2026-10-08T01:30:00+00:00")
        assert built.returncode == 6, built.stderr
        text, row = status(sh, "2026-10-08T09:34:00+08:00")
        assert "(1 try, last 2026-10-08T09:30:00+08:00, next 2026-10-08T09:35:00+08:00)\n" in text, text
        assert "from      2026-10-08T09:30:00+08:00\n" in text and "builder   none (run " in text, text
        failed = row["failures"][0]
        assert (failed["at"], failed["retry"]) == ("2026-10-08T01:30:00+00:00", "2026-10-08T01:35:00+00:00")
        assert (failed["next"], failed["being_retried"]) == ("2026-10-08T01:35:00+00:00", False)
        assert "from      2026-10-08T01:30:00+00:00\n" in status(sh, UTC)[0]  # (a reader on UTC)
        text, row = status(sh, TOKYO)  # (its time past: the next builder sends it at once)
        assert "(1 try, last 2026-10-08T09:30:00+08:00)\n" in text, text
        assert (row["failures"][0]["next"], row["failures"][0]["being_retried"]) == (None, False)
        with watching("m", TZ="UTC", PIMEM_NOW=UTC):
            until(lambda: len(server.requests) == 2)  # (its call, held)
            text, row = status(sh, TOKYO)
            assert "(1 try, last 2026-10-08T09:30:00+08:00, being retried)\n" in text, text
            assert f" since {TOKYO} (heartbeat " in text, text
            assert (row["failures"][0]["next"], row["failures"][0]["being_retried"]) == (None, True)
            assert row["builder"]["started"] == UTC
            gate.set()
            until(lambda: complete("m"))
        assert status(sh, TOKYO)[1]["failures"] == []


def test_a_daily_cap_below_one_call_s_worst_case_is_said_so_not_reached(home, sh):
    """A cap of $0.0001 when a call may cost $0.0187 at its worst case: no call is ever sent, whatever was spent
    that day. ``status`` says the cap is below one call's worst case and nothing is built until it is raised, as
    ``watch`` does (before: "the daily spend cap was reached", as if the next day would build)."""
    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 4, short_every=1000)
        with watching("m", "--json", "--max-cost-per-day", "0.0001") as watcher:
            event = next(e for e in map(orjson.loads, iter(watcher.stdout.readline, b"")) if e["event"] == "capped")
            text, row = status(sh, "2026-10-08T09:30:00+08:00")
            said = (f"capped    a call may cost up to ${event['next_call']:.4f} at its worst case, more than the daily "
                    "spend cap of $0.0001: nothing is built until the cap is raised\n")
            assert said in text and "was reached" not in text, text
            assert row["capped_below"] == {"max_cost_per_day": 0.0001, "next_call": event["next_call"]}
            assert (row["capped"], row["capped_until"]) == ("2026-10-08", "2026-10-09T00:00:00+08:00")
        assert server.requests == []
        with watching("m", "--max-cost-per-day", "1"):  # (raised: the mark goes)
            until(lambda: complete("m"))
            text, row = status(sh, "2026-10-08T09:30:00+08:00")
            assert "\ncapped  " not in text and row["capped_below"] is None and row["capped"] is None, text


def test_status_says_a_builder_killed_with_sigkill_is_gone(home, sh):
    """A capped watcher killed with SIGKILL mid-call leaves its lease behind: ``status`` says the builder is gone,
    with its pid (before, while the program that started it had not reaped it yet, status showed it building,
    and ``lease.holder`` took it for live, so a new builder waited up to 30 s for a dead one), and counts the
    call it cut off as paid at its worst case, as the next builder does (before, only once one had started)."""
    gate = threading.Event()
    with FakeLLM("openai", latency=lambda n, body: gate.wait(60) and 0) as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 2, short_every=1000)
        watcher = start_watch("m", "--max-cost-per-day", "1")
        try:
            until(lambda: len(server.requests) == 1)  # (mid-build: its call out)
            pid = lease.holder(mem)["pid"]
            assert pid == watcher.pid
            watcher.send_signal(signal.SIGKILL)
            until(lambda: open(f"/proc/{pid}/stat", "rb").read().rsplit(b")", 1)[1][1:2] == b"Z")  # (dead, not reaped)
            worst = BuildState(mem.path).pending["1+1"]["cost"]
            text, row = status(sh)
            assert row["builder"] is None and lease.holder(mem) is None, text
            assert row["spent"]["cost_unbuilt"] == worst and f"spent     ${worst:.4f} more on calls that built nothing" in text
            assert (row["builder_gone"]["pid"], row["builder_gone"]["started"]) == (pid, "2026-10-08T09:30:00+08:00")
            assert (f"builder   none: pid {pid} on " in text and " (since 2026-10-08T09:30:00+08:00) is gone without letting "
                    "the memory go, killed or crashed (heartbeat " in text), text
            gate.set()
            rebuilt = sh("build-tree", "m", "--wait", "0", TEST_LLM_KEY="k")  # (taken over at once)
            assert rebuilt.returncode == 0, rebuilt.stderr
        finally:
            gate.set()
            watcher.kill()
            watcher.wait()
        text, row = status(sh)
        assert "builder   none (run " in text and row["builder_gone"] is None, text
        assert row["spent"]["cost_unbuilt"] == worst and BuildState(mem.path).pending == {}  # (counted once)
        assert BuildState(mem.path).failures == {}


def test_a_retry_time_another_compactor_was_asked_is_not_shown_as_next(home, run):
    """A retry time a server asked for holds back that compactor only (a memory switched to another builds at
    once): ``status`` says ``next`` it only while the memory's compactor is the one that was asked."""
    from pimem import builder

    configure(home)
    mem = fill("m", 2, short_every=1000)
    asker = builder.asked_of(mem.config["compactor"])
    for recorded, shown in ((asker, ", next 2026-10-08T09:35:00+08:00)"), ("openai/m0 at http://127.0.0.1:9/v1", ")"),
                            (None, ", next 2026-10-08T09:35:00+08:00)")):  # (None: an earlier pimem's, none recorded)
        failure = {"error": "HTTP 429", "at": "2026-10-08T09:30:00+08:00", "tries": 1, "retry": "2026-10-08T09:35:00+08:00",
                   **({"compactor": recorded} if recorded else {})}
        (mem.path / "compactor.json").write_bytes(orjson.dumps({"failures": {"1+1": failure}}))
        assert f"failing   1+1: HTTP 429 (1 try, last 2026-10-08T09:30:00+08:00{shown}\n" in run("status", "m").stdout, recorded
        row = orjson.loads(run("status", "m", "--json").stdout)["failures"][0]
        assert row["next"] == (None if shown == ")" else "2026-10-08T09:35:00+08:00") and row["being_retried"] is False


def test_from_and_to_are_the_earliest_and_latest_days_not_the_first_and_last_messages(home, sh):
    # (an older session imported after a newer one: message 0 is not the earliest, the last not the latest)
    for date, text in (("2026-10-07T10:00:00+08:00", "the newer session"), ("2026-10-01T10:00:00+08:00", "an older one"),
                       ("2026-10-02T10:00:00+08:00", "its reply")):
        assert sh("append", "m", "--date", date, text).returncode == 0
    text, row = status(sh)
    assert (row["first"], row["last"]) == ("2026-10-01T10:00:00+08:00", "2026-10-07T10:00:00+08:00")
    assert "from      2026-10-01T10:00:00+08:00\nto        2026-10-07T10:00:00+08:00\n" in text


def capped_event(watcher) -> dict:
    return next(e for e in map(orjson.loads, iter(watcher.stdout.readline, b"")) if e["event"] == "capped")


def test_a_cap_raised_in_the_settings_with_no_watcher_running_is_not_said_to_hold(home, sh):
    """A watcher capped by the memory's ``max_cost_per_day`` stopped, and the setting raised: ``status`` kept
    saying "nothing is built until the cap is raised" (or "until" the day's end), and ``context`` would not
    wait, from the last watcher's mark, though the next watcher builds (a cap changed is looked at afresh). The
    mark is compared with the setting now; a cap given with ``--max-cost-per-day`` is not in the settings, so
    its mark holds as it was. And a cap of $0.00001 is said so, not "$1e-05"."""
    from pimem import Memory, context

    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 40, short_every=1000)
        mem.save_config({"max_cost_per_day": 0.00001})
        with watching("m", "--json") as watcher:
            capped_event(watcher)
        text, row = status(sh, "2026-10-08T09:30:00+08:00")
        assert "daily spend cap of $0.00001: nothing is built until the cap is raised" in text, text
        assert "$0.00001 is below one call's worst case" in context.stalled(Memory.open("m"))
        mem.save_config({"max_cost_per_day": 0.001})  # (raised, still below one call's worst case)
        text, row = status(sh, "2026-10-08T09:30:00+08:00")
        assert "daily spend cap of $0.001: nothing is built" in text and row["capped_below"]["max_cost_per_day"] == 0.001
        mem.save_config({"max_cost_per_day": 5})
        text, row = status(sh, "2026-10-08T09:30:00+08:00")
        assert "\ncapped  " not in text and row["capped"] is row["capped_below"] is None, text
        assert context.stalled(Memory.open("m")) is None

        mem.save_config({"max_cost_per_day": 0.025})  # (a call's worst case is $0.0187: a few calls, then capped)
        with watching("m", "--json") as watcher:
            assert capped_event(watcher)["next_call"] < 0.025
        text, row = status(sh, "2026-10-08T09:30:00+08:00")
        assert "capped    the daily spend cap was reached on 2026-10-08" in text and context.stalled(Memory.open("m"))
        mem.save_config({"max_cost_per_day": None})  # (taken away)
        text, row = status(sh, "2026-10-08T09:30:00+08:00")
        assert "\ncapped  " not in text and row["capped"] is None and context.stalled(Memory.open("m")) is None

        with watching("m", "--json", "--max-cost-per-day", "0.00001") as watcher:  # (a flag: not in the settings)
            capped_event(watcher)
        text, row = status(sh, "2026-10-08T09:30:00+08:00")
        assert "daily spend cap of $0.00001: nothing is built until the cap is raised" in text, text


def test_dollars_are_written_in_plain_digits():
    from pimem.numbers import dollars

    assert [dollars(x) for x in (0.00001, 0.0001, 5, 5.0, 0.05, 1e9, 1234.5)] == [
        "$0.00001", "$0.0001", "$5", "$5", "$0.05", "$1000000000", "$1234.5"]


def test_status_shows_the_ten_failures_first_in_the_log_and_counts_the_rest(run, home):
    """A server down for a day fails a probe a round: status said every one, a line each (1,440 lines). It shows
    the ten first in the log (those hold the rest back; they were sorted by their last try, so the leaves
    failing longest went under probes tried once) and how many more; ``--json`` keeps them all."""
    from pimem import Memory

    assert run("append", "m", "a long message " * 100).exit_code == 0
    failures = {f"{n}+1": {"error": "HTTP 503", "at": f"2026-10-08T09:{59 - n:02d}:00+08:00", "tries": 3}
                for n in reversed(range(13))}
    (Memory.open("m").path / "compactor.json").write_bytes(orjson.dumps({"failures": failures}))
    text = run("status", "m").stdout
    failing = [line for line in text.splitlines() if line.startswith("failing")]
    assert len(failing) == 11 and failing[0].startswith("failing   0+1: HTTP 503 (3 tries, last 2026-10-08T09:59"), text
    assert failing[9].startswith("failing   9+1: ") and failing[10] == (
        "failing   and 3 more nodes further along the log ('pimem status m --json' lists them all)"), text
    assert len(orjson.loads(run("status", "m", "--json").stdout)["failures"]) == 13


def test_amounts_spent_under_a_hundredth_of_a_cent_keep_two_digits():
    """What a call costs or may cost is written with four decimals, and under a hundredth of a cent with two
    significant digits: a cap of $0.000001 said 'a call may cost up to $0.0000, more than the daily cap'."""
    from pimem.numbers import money

    assert [money(x) for x in (0, 0.0179123, 1.5, 0.0001, 0.000011234, 0.0000004)] == [
        "$0.0000", "$0.0179", "$1.5000", "$0.0001", "$0.000011", "$0.0000004"]


def test_a_parked_probe_is_said_to_wait_for_an_answered_call_not_to_be_retried(home, sh):
    """Nine leaves the server refuses, then one it answers: the window's eight are stuck, the ninth, sent as a
    probe, failed and is parked (no call is answered, so it is not retried), yet ``status`` said it was being
    retried. It says it waits for an answered call (``"parked": true`` in compactor.json and the JSON) while
    the next probe is out; once that one is answered the leaf is retried, and says so again."""
    from test_scheduler import poisoned, refuses_poison

    gate = threading.Event()
    with FakeLLM("openai", faults=refuses_poison, latency=lambda n, body: (
            "message 9:" in body["messages"][-1]["content"].rsplit("Compaction:", 1)[-1] and gate.wait(60) and 0)) as server:
        configure(home, server)
        mem = poisoned("m", bad=9, n=10)  # (long messages 0, 2, ... 18, the last one answered; 16 is the first probe, 18 the next)
        with watching("m"):
            until(lambda: BuildState(mem.path).failures.get("16+1", {}).get("parked"), timeout=60)
            until(lambda: any("message 9:" in body["messages"][-1]["content"].rsplit("Compaction:", 1)[-1] for body in server.requests), timeout=60)
            text, row = status(sh)
            line = next(line for line in text.splitlines() if "16+1: " in line)
            assert line.endswith("(1 try, last 2026-10-08T09:30:00+08:00, waiting for an answered call)"), text
            assert text.count("waiting for an answered call") == 1, text  # (the window's eight are retried)
            probe = next(fail for fail in row["failures"] if fail["node"] == "16+1")
            assert (probe["parked"], probe["next"], probe["being_retried"]) == (True, None, False), probe
            assert all("parked" not in fail for fail in row["failures"] if fail["node"] != "16+1"), row
            tries = probe["tries"]
            gate.set()  # (the next probe answered: the parked leaf is retried, and fails again)
            until(lambda: BuildState(mem.path).failures["16+1"]["tries"] > tries, timeout=60)
            assert "parked" not in BuildState(mem.path).failures["16+1"]
            text, row = status(sh)
            assert "waiting for an answered call" not in text and all("parked" not in fail for fail in row["failures"]), text
        state = BuildState(mem.path)  # (a mark a builder left, killed: with none running, nothing is parked)
        state.park(["16+1"])
        text, row = status(sh)
        assert "waiting for an answered call" not in text and all("parked" not in fail for fail in row["failures"]), text


def test_status_says_a_stopped_builder_is_not_answering_not_gone(home, sh):
    """A watcher frozen with SIGSTOP is alive: ``status`` says it is not answering once its heartbeat is three
    beats late, and still names it as the builder once its heartbeat is older than ``STALE`` (its pid is there on
    this host, so its lease is kept: before, it was said to be none, the next builder taking the memory over),
    never that it was killed or crashed."""
    configure(home)
    mem = fill("m", 2)
    watcher = start_watch("m")
    try:
        until(lambda: complete("m") and (lease.holder(mem) or {}).get("pid") == watcher.pid)
        watcher.send_signal(signal.SIGSTOP)
        record = orjson.loads((mem.path / lease.FILE).read_bytes())
        for late in (lease.QUIET + 2, lease.STALE + 30):  # (its beat as it stands that long after: it cannot beat)
            (mem.path / lease.FILE).write_bytes(orjson.dumps({**record, "beat": time.time() - late}))
            text, row = status(sh)
            assert f"builder   pid {watcher.pid} on " in text and "is not answering (stopped?" in text, text
            assert "killed or crashed" not in text and "none" not in text.split("builder   ")[1].split("\n")[0], text
            assert row["builder"]["pid"] == watcher.pid and row["builder_gone"] is None
        unnamed = {k: v for k, v in record.items() if k != "proc"}  # (an older pimem's record: its beat tells)
        (mem.path / lease.FILE).write_bytes(orjson.dumps({**unnamed, "beat": time.time() - lease.STALE - 30}))
        text, row = status(sh)
        assert f"builder   none: pid {watcher.pid} on " in text and "is not answering (stopped?" in text, text
        assert "killed or crashed" not in text and row["builder_gone"]["alive"] is True
    finally:
        watcher.send_signal(signal.SIGCONT)
        watcher.send_signal(signal.SIGTERM)
        watcher.communicate(timeout=30)
    assert watcher.returncode == 0


@pytest.fixture
def short_dir():
    """A directory whose path is as long every run (``/tmp/pmXXXXXXXX``): an error is said cut to its first bytes,
    a command's path among them, and ``tmp_path``'s ``pytest-N`` grows a digit now and then."""
    path = Path(tempfile.mkdtemp(prefix="pm", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_providers_error_quoting_its_input_is_recorded_and_said_without_the_tool_output_or_secrets(home, sh, short_dir):
    """A model command fails saying what it was sent: the line of a tool result it was asked to summarise,
    and a key. ``build-tree`` (stderr and its JSON ``failed`` event, as a watcher's), ``status`` and
    ``compactor.json`` say the error with the result's words masked as in a summary of its span, and the key
    redacted as in a request; the user's words, which are no tool output, stay (before, all was said verbatim)."""
    failing = short_dir / "failing.sh"
    failing.write_text("in=$(cat); echo \"model error (asked by hello there my friend): could not summarise: "
                       "$(grep -o 'deploy phrase[^\\\\]*' <<<\"$in\" | head -1) (key sk-proj-4f9Ka8Qz2LmXv7Rt1YwB3nHc)\" >&2; exit 1\n")
    assert sh("append", "m", "hello there my friend").returncode == 0
    assert sh("model", "m", "command", "--command", f"bash {failing}").returncode == 0
    output = "deploy phrase: tangerine42owl\n" + "".join(f"line {k} of the output, nothing much\n" for k in range(80))
    echo = orjson.dumps({"kind": "echo", "text": output, "meta": {"call_id": "a1"}}) + b"\n"
    assert sh("append", "m", "--ndjson", input=echo).returncode == 0
    said = []
    for args in (("build-tree", "m"), ("build-tree", "m", "--json", "--retries", "0")):
        built = sh(*args, PIMEM_NOW="2026-10-09T09:30:00+08:00")
        assert built.returncode == 6, built.stderr
        said.append(built.stderr.decode() + built.stdout.decode())
    text, row = status(sh, "2026-10-10T09:30:00+08:00")
    recorded = (home / "m" / "compactor.json").read_text()
    events = [orjson.loads(line) for line in said[1].splitlines() if line.startswith("{")]
    assert any(e.get("event") == "failed" for e in events), said[1]
    for shown in (*said, text, recorded, orjson.dumps(row).decode()):
        assert "(asked by hello there my friend): could not summarise: [tool output hidden] (key [api key" in shown, shown
        assert "tangerine42owl" not in shown and "sk-proj" not in shown
