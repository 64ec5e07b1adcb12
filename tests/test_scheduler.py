"""The scheduler, build-tree and status against real local HTTP servers with injected faults."""

from __future__ import annotations

import collections
import contextlib
import heapq
import re
import sys
import threading

import orjson
import pytest

from bench.llm_server import FakeLLM, filler
from pimem import Memory, builder, scheduler
from pimem.compactor.state import BuildState

SECRETS = ["sk-proj-Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2", "AKIAIOSFODNN7EXAMPLE", "ghp_0123456789abcdefghijklmnopqrstuvwxyz"]


def long_text(n: int, words: int = 120) -> str:
    return f"message {n}: " + " ".join(f"w{n}x{k}" for k in range(words)) + f". The port was {5000 + n}."


def configure(home, server=None, api="openai", **compactor):
    home.mkdir(parents=True, exist_ok=True)
    cfg = {"view": {"hi": 3000, "lo": 1500}, "cview": {"hi": 2000, "lo": 1000}}
    if server is not None:
        cfg["compactor"] = {"provider": api, "model": "m1", "base_url": server.url, "key_env": "TEST_LLM_KEY",
                            "timeout": 20, "retry_seconds": 0.05, **compactor}
    (home / "config.json").write_bytes(orjson.dumps(cfg))


def fill(name: str, n: int, short_every: int = 3) -> Memory:
    mem = Memory.at(name)
    mem.append([{"kind": "user" if k % 2 else "pi", "text": f"short {k}" if k % short_every == 0 else long_text(k)}
                for k in range(n)])
    return mem


@contextlib.contextmanager
def failed_first_run(home, sh):
    """Memory "m", whose first ``build-tree`` run (at 09:30:00) failed one node (the server's first answer, a
    500; it answers every later call) and recorded its retry 30 s on: ``(mem, node, failure)`` while the
    server runs."""
    with FakeLLM("openai", faults=lambda n, body: "500" if n == 0 else None) as server:
        configure(home, server, retry_seconds=30)
        mem = fill("m", 6)
        assert sh("build-tree", "m", timeout=60, TEST_LLM_KEY="k").returncode == 6
        ((node, failure),) = BuildState(mem.path).failures.items()
        assert failure["retry"] == "2026-10-08T09:30:30+08:00"
        yield mem, node, failure


def stored_lines(mem) -> list[dict]:
    return [orjson.loads(raw) for path in sorted((mem.path / "tree").glob("*.jsonl")) for raw in path.read_bytes().splitlines()]


def assert_complete(mem):
    found = builder.survey(Memory.open(mem.name))
    assert found["pending"] == 0 and found["built"] == found["nodes"]
    lines = stored_lines(mem)
    keys = collections.Counter((n["l"], n["i"]) for n in lines)
    assert [k for k, c in keys.items() if c > 1] == []  # no node written twice
    assert all(0 < len(n["text"].encode()) <= 512 for n in lines)
    return lines


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_build_tree_survives_every_fault_and_builds_every_node_once(api, run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    faults = ["500", "429", "hang", "malformed", "empty", "long", "length", "500", "long"]
    with FakeLLM(api, faults=faults, hang=1.5) as server:
        configure(home, server, api, timeout=1)
        mem = fill("m", 24)
        out = run("build-tree", "m", "--retries", "50", "--json")
    assert out.exit_code == 0, out.stderr
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    failed = [e for e in events if e["event"] == "failed"]
    assert any("HTTP 500" in e["error"] for e in failed) and any("HTTP 429" in e["error"] for e in failed)
    assert any("no answer within 1 s" in e["error"] for e in failed) and any("not JSON" in e["error"] for e in failed)
    lines = assert_complete(mem)
    built = [e for e in events if e["event"] == "built"]
    assert sorted((e["l"], e["i"]) for e in built) == sorted((n["l"], n["i"]) for n in lines)
    # one call per node, or two for the node whose first answer was "length" with no text
    assert all(n["model"] == f"{api}/m1" and n["tokens_in"] in (1000, 2000) for n in lines)
    assert max(len(n["text"].encode()) for n in lines) > 400  # the 4 KB reply was cut, not dropped
    done = events[-1]
    assert done["event"] == "done" and done["calls"] == len(lines) and done["gave_up"] == 0
    assert BuildState(mem.path).failures == {}
    assert not (mem.path / "lock.json").exists()


def test_failures_exit_6_show_in_status_and_the_next_run_retries(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "500") as server:
        configure(home, server)
        fill("m", 6)
        out = run("build-tree", "m")
        assert out.exit_code == 6
        assert "could not be built" in out.stderr
        status = run("status", "m")
        assert "failing   1+1: " in status.stdout and "HTTP 500" in status.stdout
        row = orjson.loads(run("status", "m", "--json").stdout)
        assert row["tree"]["pending"] > 0 and row["failures"][0]["tries"] == 1
        server.faults = []
        assert run("build-tree", "m").exit_code == 0
    row = orjson.loads(run("status", "m", "--json").stdout)
    assert row["tree"]["pending"] == 0 and row["failures"] == [] and row["spent"]["calls"] > 0
    assert row["compactor"]["model"] == "openai/m1" and row["builder"] is None


def test_secrets_never_reach_the_server_but_stay_in_the_log(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server)
        mem = Memory.at("m")
        mem.append([{"kind": "user", "text": f"deploy with {SECRETS[0]} please"},  # short: in <chat> verbatim
                    {"kind": "echo", "text": long_text(1) + f" AWS {SECRETS[1]} token {SECRETS[2]}"},
                    {"kind": "user", "text": long_text(2) + " postgres://admin:hunter2hunter2@db/app"},
                    {"kind": "pi", "text": long_text(3)}])
        assert run("build-tree", "m").exit_code == 0
    assert server.raw
    everything = b"".join(server.raw).decode()
    for secret in SECRETS + ["hunter2hunter2"]:
        assert secret not in everything
    assert "[api key redacted]" in everything and "[aws key redacted]" in everything
    assert SECRETS[1] in Memory.open("m").message(1)["text"]


def test_merges_go_beside_leaves_in_a_window_of_eight(home, monkeypatch):
    """optchat-spec §3's vector with merges beside leaves: T=20, leaves 0–9 built, 10–19 unbuilt: the five ready
    merges (1,0)…(1,4) and leaves 10–12 take the 8 slots; leaves 18–19 (past the window of 8) wait."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    gate = threading.Event()
    with FakeLLM("openai", faults=lambda n, body: gate.wait(20) and None) as server:
        configure(home, server)
        mem = Memory.at("m")
        mem.append([{"kind": "user", "text": long_text(k)} for k in range(20)])
        mem.write_nodes([(0, k, f"user: leaf {k} " + "x" * 300, {}) for k in range(10)])
        sched = scheduler.Scheduler()
        sched.add(builder.Builder(Memory.open("m"), retries=0))
        runner = threading.Thread(target=sched.run, kwargs={"once": True})
        runner.start()
        while len(server.requests) < 8:
            threading.Event().wait(0.02)
        threading.Event().wait(0.2)  # nothing else may start while 8 calls are in flight
        tasks = [r["messages"][1]["content"].rsplit("Compaction: ", 1)[1] for r in server.requests]
        gate.set()
        runner.join(30)
    leaves = sorted(int(t.split("compress message ", 1)[1].split()[0]) for t in tasks if t.startswith("compress"))
    merges = sorted(t.split("lines ", 1)[1].split(" into")[0] for t in tasks if t.startswith("merge"))
    assert len(tasks) == 8 and leaves == [10, 11, 12]
    assert merges == sorted(f"{2 * k}+1 and {2 * k + 1}+1" for k in range(5))
    assert_complete(mem)


def test_dry_run_counts_calls_and_max_cost_stops_spending(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", latency=0.05) as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 30)
        dry = run("build-tree", "m", "--dry-run", "--json")
        assert dry.exit_code == 0 and server.requests == []
        row = orjson.loads(dry.stdout)
        assert row["leaves"] == 20 and row["calls"] >= 20 and row["cost"] > 0
        assert "at most" in run("build-tree", "m", "--dry-run").stdout
        out = run("build-tree", "m", "--max-cost", "0.02")
        assert out.exit_code == 6 and "stopped before spending more than $0.02" in out.stderr
        assert "and the next call may cost up to $0.0" in out.stderr and "nodes remain unbuilt" in out.stderr
        spent = builder.spent(Memory.open("m"))
        assert 0 < spent["cost"] <= 0.02  # never passed: the calls in flight count at their worst case
        assert spent["calls"] < 20
    unpriced = run("model", "m", "openai/x", "--base-url", server.url)
    assert unpriced.exit_code == 0
    assert run("build-tree", "m", "--max-cost", "1").exit_code == 2


def test_the_dry_run_of_a_small_memory_counts_the_little_history_its_first_calls_see(run, home, monkeypatch):
    """A call is shown the view of what came before it: small until the history passes ``cview``'s hi (here a
    memory far below it), with tool traffic as the markers a compactor is shown. So the input the dry run
    predicts is what the build records (the code before took every call for a view near the budget's middle:
    2.4× here). One call at a time, so that every call is shown all that was built before it: with 8 in flight
    a call is shown the lines built when it starts, which depends on the timing of the others (1.13–1.33× in
    runs here, 2× on a loaded machine; ``bench/model_cost.py`` measures a backlog built 8 at once)."""
    monkeypatch.setattr(scheduler, "CONCURRENCY", 1)
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", usage="bytes") as server:  # (tokens: a quarter of the bytes sent)
        server.reply = lambda body: ("a summary of the span" + filler(560))[:480]  # (a full line: no free merges)
        configure(home, server, price_in=1.0, price_out=2.0)
        (home / "config.json").write_bytes(orjson.dumps({**orjson.loads((home / "config.json").read_bytes()),
                                                        "cview": {"hi": 32_000, "lo": 16_000}}))
        Memory.at("m").append([r for k in range(20) for r in (
            {"kind": "user", "text": long_text(k)},
            {"kind": "tool", "text": f"bash: pytest tests/test_{k}.py", "meta": {"command": f"pytest tests/test_{k}.py"}},
            {"kind": "echo", "text": f"output {k}: " + "log line with details\n" * 150})])
        predicted = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)["tokens_in"]
        assert run("build-tree", "m").exit_code == 0
    recorded = builder.spent(Memory.open("m"))["tokens_in"]
    assert 0.85 <= predicted / recorded <= 1.15, (predicted, recorded)


def test_the_dry_run_after_appends_counts_the_merges_that_join_free(run, home, monkeypatch):
    """A summary of 480 bytes beside a short message fits in a line with it: that merge costs no call. Once
    the memory's lines are known, the dry run says so (it took every pending merge for a call: 1.25× the
    calls and 1.35× the tokens the build then took here)."""
    monkeypatch.setattr(scheduler, "CONCURRENCY", 1)  # (every call sees what was built before it)
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", usage="bytes") as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:480]
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 24)
        assert run("build-tree", "m").exit_code == 0
        mem.append([{"kind": "user" if k % 2 else "pi", "text": f"short {k}" if k % 3 == 0 else long_text(k)}
                    for k in range(24, 120)])
        predicted = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        out = run("build-tree", "m", "--json")
    done = orjson.loads(out.stdout.splitlines()[-1])
    assert done["event"] == "done" and done["calls"] == predicted["calls"]
    assert 0.85 <= predicted["tokens_in"] / done["tokens_in"] <= 1.15, (predicted, done)


def test_the_dry_run_counts_the_calls_the_faithfulness_guard_asks_again(run, home, monkeypatch):
    """A line naming a port its span does not hold is asked for again: the node's request is sent twice, and
    its metadata counts both (tokens, cost) and says ``asked_again``. The dry run took every node for one
    request (0.58x the tokens and dollars of a tester's run on the Codex sample, where most lines came out
    suspect): once nodes are built, it counts the calls ahead asked again as often as those were, and says
    "about", not "at most", for a count that takes a line not written yet for the lines written so far."""
    monkeypatch.setattr(scheduler, "CONCURRENCY", 1)  # (every call sees what was built before it)
    monkeypatch.setenv("TEST_LLM_KEY", "k")

    def reply(body):  # an invented port in every other leaf's line and every other merge's, asked twice alike
        task = body["messages"][-1]["content"].rsplit("</chat>", 1)[-1]
        leaf, merge = re.search(r"compress message (\d+) ", task), re.search(r"adjacent lines (\d+)\+(\d+) ", task)
        invented = int(leaf[1]) % 2 == 0 if leaf else int(merge[1]) // int(merge[2]) % 4 == 0
        return (("the port was 65123; " if invented else "") + "a summary of the span" + filler(560))[:480]

    with FakeLLM("openai", usage="bytes") as server:
        server.reply = reply
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 48)
        assert "at most" in run("build-tree", "m", "--dry-run").stdout  # (no line written yet: a bound)
        assert run("build-tree", "m").exit_code == 0
        lines = stored_lines(mem)
        asked = sum(node.get("asked_again") is True for node in lines)
        assert 0 < asked < len(lines) and len(server.requests) == len(lines) + asked
        assert all(node["suspect"] == ["65123"] for node in lines if node.get("asked_again"))
        mem.append([{"kind": "user" if k % 2 else "pi", "text": f"short {k}" if k % 3 == 0 else long_text(k)}
                    for k in range(48, 160)])
        said = run("build-tree", "m", "--dry-run").stdout
        predicted = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        sent = len(server.requests)
        out = run("build-tree", "m", "--json")
    done = orjson.loads(out.stdout.splitlines()[-1])
    assert said.startswith(f"m: about {predicted['calls']} calls to openai/m1 ")
    assert f" and about {predicted['asked_again']} more the faithfulness guard asks again, " in said
    assert not predicted["bound"] and predicted["asked_again"] > 0
    assert 0.85 <= (predicted["calls"] + predicted["asked_again"]) / (len(server.requests) - sent) <= 1.15
    for key in ("tokens_in", "tokens_out", "cost"):
        assert 0.85 <= predicted[key] / done[key] <= 1.15, (key, predicted, done)


def test_the_dry_run_of_a_built_memory_says_no_call_without_about(run, home, monkeypatch):
    """Nothing left to build is no estimate: the dry run said 'about 0 calls', 'about 0 tokens in'."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server)
        fill("m", 6)
        assert run("build-tree", "m").exit_code == 0
        said = run("build-tree", "m", "--dry-run").stdout
    assert said.startswith("m: 0 calls to openai/m1 (0 leaves, 0 merges), 0 tokens in and 0 out, "), said


@pytest.mark.parametrize("long", [True, False])
def test_the_dry_run_of_the_offline_compactor_says_the_nodes_the_build_writes(run, home, long):
    """With the offline compactor the dry run said '0 calls to extractive (0 leaves, 30 merges)' of a build
    that then wrote 18 nodes: it says how many nodes the build makes (no calls, no cost), the summaries of long
    messages among them, and its ``--json`` row their number (``pending``), which the build's written and free
    nodes then make; a built memory, none."""
    configure(home)
    if long:
        fill("m", 40)
    else:  # (every message a line of its own, no summary of one: merges alone)
        Memory.at("m").append([{"kind": "user", "text": f"message {k} " + "word " * 30} for k in range(40)])
    row = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
    pending, leaves = row["pending"], row["leaves"]
    assert pending > 0 and row["nodes"] - row["built"] == pending and (leaves > 0) == long
    summaries = f"{leaves} long message{'s' if leaves != 1 else ''} to summarise; " if leaves else ""
    said = (f"m: {pending} nodes to build offline with extractive, no calls and no cost ({summaries}{pending - leaves} "
            f"merges, each written or joined free); {row['built']} of {row['nodes']} nodes built\n")
    assert run("build-tree", "m", "--dry-run").stdout == said
    done = orjson.loads(run("build-tree", "m", "--json").stdout.splitlines()[-1])
    assert done["calls"] + done["free"] == pending, done
    nodes = row["nodes"]
    assert run("build-tree", "m", "--dry-run").stdout == f"m: 0 nodes to build offline with extractive; {nodes} of {nodes} nodes built\n"


def test_a_cap_the_worst_cases_in_flight_reach_but_the_build_does_not_lets_it_finish(run, home, monkeypatch):
    """Calls held back while others were in flight at their worst case start once those cost what they did: a
    build whose real cost fits the cap ends complete, exit 0, not "stopped before spending more"."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", latency=0.05) as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 12)
        out = run("build-tree", "m", "--max-cost", "0.05")  # (8 calls at their worst case pass it; their real cost does not)
    assert out.exit_code == 0, out.stderr
    assert 0 < builder.spent(Memory.open("m"))["cost"] <= 0.05
    assert_complete(Memory.open("m"))


def test_empty_replies_are_billed_and_count_against_max_cost(run, home, monkeypatch):
    """A 200 with no text is still paid for: its tokens count against --max-cost, so a model that keeps
    answering nothing stops the build at the cap instead of being retried for ever."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "empty") as server:  # 1,000 tokens in and 100 out each
        configure(home, server, price_in=1.0, price_out=2.0, retry_seconds=0.01)
        fill("m", 6)
        out = run("build-tree", "m", "--max-cost", "0.05", "--retries", "1000")
        billed = len(server.requests) * (1000 * 1.0 + 100 * 2.0) / 1e6
    assert out.exit_code == 6 and "stopped before spending more than $0.05" in out.stderr, out.stderr
    assert 0 < billed <= 0.05  # what the server billed, within the cap (uncounted, it ran on to 1,000 retries a node)


@pytest.mark.parametrize("fault", ["empty", "nochoices"])
def test_what_calls_that_built_nothing_cost_is_in_status(run, home, monkeypatch, fault):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: fault) as server:  # 1,000 tokens in and 100 out each
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 3)
        assert run("build-tree", "m", "--retries", "1").exit_code == 6
        billed = len(server.requests) * (1000 * 1.0 + 100 * 2.0) / 1e6
    spent = orjson.loads(run("status", "m", "--json").stdout)["spent"]
    assert spent["calls"] == 0 and spent["cost_unbuilt"] == pytest.approx(billed) and billed > 0
    assert f"spent     ${billed:.4f} more on calls that built nothing" in run("status", "m").stdout


def test_a_reply_with_no_choice_says_so_not_that_the_model_stopped(run, home, monkeypatch):
    """A reply whose choices list was empty (a server that filtered the answer out) failed its call saying
    ``returned no text (finish: stop)``, as if the model had answered an empty line; it says there was no choice."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "nochoices") as server:
        configure(home, server)
        fill("m", 3)
        out = run("build-tree", "m")
    assert out.exit_code == 6 and "returned no text (the reply holds no choice)" in out.stderr, out.stderr
    assert "finish: stop" not in run("status", "m").stdout


def test_a_reply_in_content_parts_is_its_text_and_one_that_is_no_text_fails(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "parts") as server:
        configure(home, server)
        fill("m", 4)
        assert run("build-tree", "m").exit_code == 0
    shown = run("view", "m", "--include-tools").stdout
    assert "summary of" in shown and "'type': 'text'" not in shown, shown
    with FakeLLM("openai", faults=lambda n, body: "number") as server:
        configure(home, server)
        fill("n", 4)
        out = run("build-tree", "n", "--retries", "0")
    assert out.exit_code == 6 and "2 nodes could not be built" in out.stderr, out.stderr
    assert "unexpected chat-completions reply" in run("status", "n").stdout


def test_a_command_that_prints_more_than_it_was_asked_for_costs_no_more_than_max_cost(run, home):
    configure(home)
    fill("m", 30)
    assert run("model", "m", "command", "--command", "cat >/dev/null; python3 -c 'print(\" \".join(\"user: asked %d; pi: said.\" % k for k in range(4000)))'",
               "--price-in", "1", "--price-out", "10").exit_code == 0
    out = run("build-tree", "m", "--max-cost", "0.05")
    spent = builder.spent(Memory.open("m"))
    assert out.exit_code == 6 and 0 < spent["cost"] <= 0.05, (spent, out.stderr)


def test_the_faithfulness_guards_second_call_is_within_max_cost(run, home, monkeypatch):
    """A line naming what its span lacks is asked for once more: a call's worst case is two."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        server.reply = lambda body: "user: fixed port 9999 in zzz_unknown.py"  # unfounded every time
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 10)
        run("build-tree", "m", "--max-cost", "0.05")
        billed = len(server.requests) * (1000 * 1.0 + 100 * 2.0) / 1e6
    spent = builder.spent(Memory.open("m"))
    assert 0 < spent["cost"] <= 0.05 and billed <= 0.05 + 1e-9 and spent["suspect"]
    assert spent["tokens_in"] == 2000 * spent["calls"]  # both calls on the node


def test_more_cached_tokens_than_prompt_tokens_cost_no_less_than_nothing_and_the_cap_holds(run, home, monkeypatch):
    """A reply claiming 100 times its prompt from the cache: the cached count is held to the prompt's, so a
    call never costs less than nothing (a negative spend lifted --max-cost: every node was built for $-3.69)."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "overcached") as server:  # 1,000 in (100,000 "cached"), 100 out
        configure(home, server, price_in=1.0, price_out=2.0, price_cached_in=0.1)
        fill("m", 30)
        out = run("build-tree", "m", "--max-cost", "1")
        calls = len(server.requests)
    spent = builder.spent(Memory.open("m"))
    assert out.exit_code == 0, out.stderr
    assert spent["cost"] == pytest.approx(calls * (1000 * 0.1 + 100 * 2.0) / 1e6) and spent["cost"] > 0
    assert spent["tokens_cached"] == spent["tokens_in"]
    assert "100% from the prompt cache" in run("status", "m").stdout


@pytest.mark.parametrize("fault, billed", [("overbilled", 1.0002), ("overbilled_huge", 200.0002)])
def test_a_provider_billing_past_a_calls_worst_case_stops_the_run_and_says_so(run, home, monkeypatch, fault, billed):
    """A million tokens reported for a few kilobytes sent: no reservation can hold such a bill, so what it cost
    is kept as billed, no call starts after it (under a cap that would still let them), and the error says why."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", latency=0.2, faults=lambda n, body: fault) as server:  # (every call: the first answered stops it)
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 30)
        out = run("build-tree", "m", "--max-cost", "10000", "--json")  # (a cap all the calls fit under, as billed)
        calls = len(server.requests)
    assert out.exit_code == 6, out.stderr
    assert f"m1 billed ${billed:.4f} for node" in out.stderr and "against --max-cost $10000;" in out.stderr
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert [e["cost"] for e in events if e["event"] == "overbilled"] == [pytest.approx(billed)]
    assert [e.get("overbilled") for e in events if e["event"] == "done"] == [True]
    assert calls <= scheduler.CONCURRENCY  # only the calls already in flight with the first (the cap held the rest)
    assert builder.spent(Memory.open("m"))["cost"] == pytest.approx(billed * calls)


@pytest.mark.parametrize("port", ["65432", "65,432"])
def test_a_merge_repeating_a_suspect_childs_facts_is_marked_too_across_runs(run, home, monkeypatch, port):
    """Two leaves name a port and a path their messages lack (marked suspect); merges faithfully repeat their
    left child. The child's line is no evidence for those facts, so the merges above them are marked as well,
    without being asked again, also over a child stored by an earlier run (before, the mark stopped at the leaves, and a
    folded view showed the invented port with no warning), and also when they write the port another way
    (``65,432``: it was asked again)."""
    import re

    monkeypatch.setenv("TEST_LLM_KEY", "k")

    def reply(body):
        task = body["messages"][1]["content"]
        if "compress message 0 " in task or "compress message 1 " in task:  # (too long for a free merge)
            return "user: set port 65432 in /etc/fake/thing.conf; pi: " + filler(420)
        if "compress message" in task:
            n = int(re.search(r"compress message (\d+)", task).group(1))
            return f"user: the port was {5000 + n}; pi: " + filler(420)
        return re.search(r"<input>\d+\+\d+\|(.*)\n", task).group(1).replace("65432", port)  # a merge: its left
        # child's line

    with FakeLLM("openai") as server:
        server.reply = reply
        configure(home, server)
        mem = Memory.at("m")
        mem.append([{"kind": "user", "text": long_text(k)} for k in (0, 1)])
        assert run("build-tree", "m").exit_code == 0
        mem.append([{"kind": "user", "text": long_text(k)} for k in (2, 3)])
        assert run("build-tree", "m").exit_code == 0
        merges = [b for b in server.requests if "compress message" not in b["messages"][1]["content"]]
    nodes = {(n["l"], n["i"]): n for n in stored_lines(mem)}
    assert set(nodes) == {(0, 0), (0, 1), (0, 2), (0, 3), (1, 0), (1, 1), (2, 0)}
    marked = {k: sorted(n["suspect"]) for k, n in nodes.items() if "suspect" in n}
    assert marked == {**dict.fromkeys([(0, 0), (0, 1)], ["/etc/fake/thing.conf", "65432"]),
                      **dict.fromkeys([(1, 0), (2, 0)], ["/etc/fake/thing.conf", port])}
    assert len(merges) == 3  # each asked once: it said what it was given
    assert "suspect   4 summaries" in run("status", "m").stdout


def test_the_mark_follows_a_suspect_fact_through_free_lines(run, home, monkeypatch):
    """Short leaf lines, joined for free up to four messages, name a port no message holds; the model merge
    over eight repeats it from the free line it was given, so it is marked, and ``view --stats`` counts a free
    line showing a suspect one (before, a free line broke the chain: the merge went unmarked, and so did the
    view's line)."""
    import re

    monkeypatch.setenv("TEST_LLM_KEY", "k")

    def reply(body):
        task = body["messages"][1]["content"]
        found = re.search(r"compress message (\d+) ", task)
        if found:
            n = int(found.group(1))
            return (f"user: port 65432 {n}" if n < 4 else f"user: the port was {5000 + n}") + filler(90)
        return re.search(r"<input>\d+\+\d+\|(.{1,200})", task).group(1)  # a merge: the start of its left line

    with FakeLLM("openai") as server:
        server.reply = reply
        configure(home, server)
        mem = Memory.at("m")
        mem.append([{"kind": "user", "text": long_text(k)} for k in range(8)])
        assert run("build-tree", "m").exit_code == 0
        merges = [b for b in server.requests if "compress message" not in b["messages"][1]["content"]]
    nodes = {(n["l"], n["i"]): n for n in stored_lines(mem)}
    assert (2, 0) not in nodes and (3, 0) in nodes and len(merges) == 1  # 0+4 free, 0+8 asked once
    assert {k for k, n in nodes.items() if "suspect" in n} == {(0, 0), (0, 1), (0, 2), (0, 3), (3, 0)}
    mem.save_config({"view": {"hi": 920, "lo": 900}})  # (folded just enough: 0+4 and 4+4 shown, both free)
    stats = orjson.loads(run("view", "m", "--stats", "--json").stdout)
    assert [line.split("|")[0] for line in run("view", "m").stdout.splitlines()] == ["0+4", "4+4"]
    assert stats["suspect"] == ["0+4"]


def test_a_reader_of_the_events_that_goes_away_stops_the_telling_not_the_build(home, monkeypatch):
    import subprocess

    from conftest import pimem_cmd, subprocess_env

    with FakeLLM("openai", latency=0.05) as server:
        configure(home, server)
        fill("m", 12)
        proc = subprocess.Popen(pimem_cmd("build-tree", "m", "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                env=subprocess_env(TEST_LLM_KEY="k"))
        assert proc.stdout.readline().startswith(b"{")
        proc.stdout.close()  # (as `| head -1` does)
        assert proc.wait(60) == 0 and proc.stderr.read() == b""
        paid = len(server.requests)
    assert_complete(Memory.open("m"))  # every call paid for is kept
    assert builder.spent(Memory.open("m"))["calls"] == paid


def test_a_write_that_fails_on_the_last_batch_is_said_not_dropped(home, monkeypatch):
    import errno

    monkeypatch.setenv("TEST_LLM_KEY", "k")

    def full(self, nodes):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.path / "tree"))

    with FakeLLM("openai") as server:
        configure(home, server)
        Memory.at("m").append([{"kind": "user", "text": long_text(0)}])  # one call, its node written inline at the end
        monkeypatch.setattr(Memory, "write_nodes", full)
        with pytest.raises(OSError, match="No space left"):
            scheduler.build_tree([Memory.open("m")])


def test_a_usage_count_that_is_not_a_number_is_not_billed_and_a_huge_one_is_held_not_dropped():
    """A count past any call's worst case is a bill all the same (dropped, it hid the worst overbilling of all
    behind the local estimate): held to a bound that keeps the cost finite, it stops a capped run."""
    from pimem.compactor.providers import MAX_TOKENS_A_CALL, _count

    assert [_count(v) for v in (1200, 1200.0, 2e8, 1.5e30, -3, "12", None, True, 1.5, MAX_TOKENS_A_CALL + 1)] == \
        [1200, 1200, 200_000_000, MAX_TOKENS_A_CALL, 0, 0, 0, 0, 0, MAX_TOKENS_A_CALL]


def test_offline_build_tree_and_the_view(run, home):
    configure(home)
    mem = fill("m", 200)
    out = run("build-tree", "m")
    assert out.exit_code == 0 and "written by extractive" in out.stderr
    lines = assert_complete(mem)
    assert {n["model"] for n in lines} == {"extractive"}
    assert "(not summarized yet" not in run("view", "m").stdout
    assert run("build-tree", "m", "--json").stdout.splitlines()[-1].startswith('{"event":"done"')


@pytest.mark.parametrize("api", ["extractive", "openai"])
def test_a_memory_with_shorter_lines_gets_lines_that_fit_them(run, home, monkeypatch, api):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", line_bytes=480) as server:  # a model that writes 480-byte lines whatever it is told
        configure(home, server if api == "openai" else None)
        mem = fill("m", 40)
        mem.save_config({"line_bytes": 128})
        out = run("build-tree", "m")
        assert out.exit_code == 0, out.stderr
        lines = assert_complete(Memory.open("m"))
        assert lines and max(len(n["text"].encode()) for n in lines) <= 128
        if api == "openai":
            assert all("at most 128 bytes" in r["messages"][-1]["content"] for r in server.requests)
    assert run("fsck", "m").exit_code == 0


def test_each_call_sees_only_built_lines_before_its_boundary(run, home, monkeypatch):
    import re

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", pad=200) as server:
        configure(home, server)
        fill("m", 40)
        assert run("build-tree", "m").exit_code == 0
    seen_context = 0
    for body in server.requests:
        system, user = (m["content"] for m in body["messages"])
        assert "Write exactly one line" in system and body["max_tokens"] == 170
        chat, task = user.split("</chat>\n\n")
        leaf = re.search(r"compress message (\d+)", task)
        merge = re.search(r"covering messages (\d+) to (\d+)", task)
        boundary = int(leaf[1]) if leaf else int(merge[2]) + 1
        lines = chat.removeprefix("<chat>\n").splitlines()
        seen_context += len(lines)
        for line in lines:
            start, n = map(int, line.split("|", 1)[0].split("+"))
            assert start + n <= boundary and "not summarized yet" not in line
        assert "<input>" in task and task.count("-" * 512) == 1
    assert seen_context > 0


def chat_bytes(body: dict) -> int:
    user = body["messages"][-1]["content"]
    text = user if isinstance(user, str) else "".join(block["text"] for block in user)
    return len(text.split("<chat>\n", 1)[1].split("</chat>", 1)[0].encode())


def test_a_backlog_build_keeps_every_context_within_twice_hi_and_its_median_within_hi(run, home, monkeypatch):
    """An import, then build-tree: the compactor's context must stay near its budget however long the history
    (cview hi 8,000 here), not grow with every leaf waiting for a merge (the whole-log view did: 8× hi).

    The server answers after 20 ms, as any provider does: with answers at once, the calls' order is decided by
    which of a dozen threads the interpreter runs next, and on a loaded machine the median of such a run has
    come out at 2.5–8.0 KB; with 20 ms it stays at 6.2–6.8 KB, under three busy loops too."""
    import statistics

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", line_bytes=300, latency=0.02) as server:
        configure(home, server)
        mem = fill("m", 240, short_every=5)
        mem.save_config({"cview": {"hi": 8000, "lo": 4000}})  # about 25 lines of 300 bytes
        assert run("build-tree", "m").exit_code == 0
    contexts = [chat_bytes(body) for body in server.requests]
    assert len(contexts) > 300
    # (no lower bound: <chat> stops at the first unbuilt leaf, so one slow call on a loaded machine keeps every
    # context after it short; the whole-log view this replaces gave 29 KB here)
    assert max(contexts) <= 2 * 8000
    assert statistics.median(contexts) <= 8000
    assert_complete(Memory.open("m"))


def test_a_budget_of_a_few_lines_keeps_the_median_context_within_hi_too(run, home, monkeypatch):
    """Full lines (480 bytes) against hi 8,000: 16 lines. A leaf in flight used to be a placeholder in the
    compactor's view, whose most due pair was then a recent one waiting for it, so the view did not fold
    while the leaves after it were sent it whole: a median of about 1.5× hi here, 1.77× with 2,048-byte
    lines against the default hi. Leaves after an unbuilt one are now pushed once it is built."""
    import statistics

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", latency=0.01) as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:480]
        configure(home, server)
        mem = fill("m", 400, short_every=5)
        mem.save_config({"cview": {"hi": 8000, "lo": 4000}})
        assert run("build-tree", "m").exit_code == 0
    contexts = [chat_bytes(body) for body in server.requests]
    assert max(contexts) <= 2 * 8000
    assert statistics.median(contexts) <= 8000, statistics.median(contexts)
    assert_complete(Memory.open("m"))


def test_a_view_that_fell_behind_is_sent_within_twice_hi_its_oldest_and_newest_lines(home, monkeypatch):
    """No merge built, 4,000 leaves of 300 bytes against hi 2,000: the view cannot fold, yet a call's <chat>
    stays within 2·hi, keeping the view's first lines (the prefix a prompt cache holds) and the newest ones.
    (Leaves after a batch waiting for a merge are held back, up to ``HELD_MOST`` bytes of them: past that
    they are pushed all the same, as here, where no merge comes.)"""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server)
        mem = fill("m", 4000, short_every=100_000)
        view = builder.ContextView(Memory.open("m"), lambda l, i: None)
        for k in range(4000):
            view.push(f"user: leaf {k} " + "x" * 280)
        whole = view.view.render(cut_unbuilt=True)
        assert len("\n".join(whole).encode()) > 10 * 2000  # nothing folded
        sent = view.context(0, 4000).splitlines()
        assert len("\n".join(sent).encode()) <= 2 * 2000
        assert sent[0] == whole[0] and sent[-1] == whole[-1]
        assert [line for line in whole if line in sent] == sent  # the view's own lines, in order
        assert view.context(0, 5).splitlines() == whole[:5]  # within the bound: whole
    mem.close()


def test_a_zero_retry_delay_is_kept_not_replaced_by_the_default(home):
    mem = fill("z", 2)
    mem.save_config({"compactor": {"provider": "openai", "model": "m", "retry_seconds": 0}})
    assert builder.Builder(Memory.open("z")).retry_seconds == 0.0
    mem.save_config({"compactor": {"provider": "openai", "model": "m", "retry_seconds": None}})
    assert builder.Builder(Memory.open("z")).retry_seconds == 10.0  # unset: the default


def test_a_node_waiting_for_its_retry_is_a_call_in_flight_until_it_keeps_failing(home):
    """A 429 to one call in 15 with a short ``Retry-After``: each refused node was folded around at once, a hole
    no merge can cross, and it waited 10 s for its retry whatever the server asked. A dozen holes at a time held
    the calls' contexts near twice ``hi`` (p90 51 KB at hi 32,000, the dry run 0.63x the tokens). The server's
    delay is now honoured, sooner or later, and a node that failed fewer than ``STUCK_TRIES`` times in a row
    holds the view as a call in flight does (p90 30 KB, 0.88x); past that it is folded around."""
    import time

    with FakeLLM("openai") as server:
        configure(home, server, retry_seconds=30)
        fill("m", 40, short_every=1000)
        watch = builder.Builder(Memory.open("m"))  # (retried for ever)
        watch.admit()
        assert watch.cview.view.T == 1 and len(watch.cview.held) == builder.WINDOW  # (message 0 is short)

        def failed(retry_after):
            watch.failed(0, 1, "HTTP 429: slow down", retry_after)
            return heapq.heappop(watch.waiting)[0] - time.monotonic()

        assert 0.5 < failed(1.0) <= 1.0  # as the server asked, not retry_seconds' 30
        assert watch.cview.failing == set() and watch.cview.view.T == 1  # held back behind it
        assert 59 < failed(None) <= 60  # (its second failure in a row: twice retry_seconds)
        assert watch.cview.failing == set() and watch.cview.view.T == 1
        assert 0.5 < failed(0.0) <= builder.LEAST_RETRY_WAIT  # (0: not at once, for ever)
        assert (0, 1) in watch.cview.failing and watch.cview.view.T == 1 + builder.WINDOW  # folded around
        assert builder.MAX_RETRY_WAIT - 1 < failed(1e9) <= builder.MAX_RETRY_WAIT

        again = builder.Builder(Memory.open("m"))  # a watcher started again: the node failed 4 times in a row
        again.admit()
        again.failed(0, 1, "HTTP 429: slow down", 1.0)
        assert (0, 1) in again.cview.failing  # (folded around, as readers' views fold it: compactor.json counts)

        once = builder.Builder(Memory.open("m"), retries=0)  # build-tree: given up at once, so folded around
        once.admit()
        once.failed(0, 1, "HTTP 429: slow down", 1.0)
        assert (0, 1) in once.cview.failing and once.cview.view.T == 1 + builder.WINDOW and once.waiting == []


def test_leaves_build_tree_gave_up_on_leave_the_window_to_the_others(run, home, monkeypatch):
    """build-tree (no retries) gives up on a leaf whose call failed; it kept its place in the window of unbuilt
    leaves all the same, so once eight had failed (spread through the log, others built between them) no later
    message was sent in that run. A leaf given up while other calls were answered now leaves its place; a server
    that answers nothing still ends the run after the window's first eight."""
    bad = set(range(3, 30, 3))  # nine leaves, others between them

    def faults(n, body):
        task = body["messages"][-1]["content"].rsplit("Compaction:", 1)[-1]
        found = re.search(r"message ([0-9]+)\b", task)
        return "500" if found and int(found.group(1)) in bad else None

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=faults) as server:
        configure(home, server)
        fill("m", 40, short_every=1000)
        out = run("build-tree", "m")
        assert out.exit_code == 6, out.stderr
        assert builder.survey(Memory.open("m"))["leaves"] == len(bad), (out.stderr, len(server.requests))
        fill("d", 40, short_every=1000)
    with FakeLLM("openai", faults=lambda n, body: "500") as down:
        configure(home, down)
        assert run("build-tree", "d").exit_code == 6
        assert len(down.requests) == builder.WINDOW + 1  # (message 0 is short; the window's 8 and one probe)


def poisoned(name: str, bad: int = 10, n: int = 40) -> Memory:
    """``n`` long replies, the first ``bad`` of them holding POISON, each followed by a short message."""
    mem = Memory.at(name)
    mem.append([row for k in range(n) for row in ({"kind": "pi", "text": long_text(k) + (" POISON" if k < bad else "")},
                                                  {"kind": "user", "text": f"short {k}"})])
    return mem


def refuses_poison(n, body):
    return "500" if "POISON" in body["messages"][-1]["content"].rsplit("Compaction:", 1)[-1] else None


def test_a_window_of_leaves_that_always_fail_is_passed_once_a_probe_past_it_is_answered(run, home, monkeypatch):
    """Ten leaves the server always refuses (a 500 for what they hold), the first ten long messages: the window's
    eight failed with no other call answered, so they kept their places (for all anyone knew the server was
    down) and every build-tree run sent those eight and nothing else, for good. Once every leaf of the window
    is stuck, one later leaf is sent as a probe; the failed ones are passed over by the next run's probe, and
    once one is answered the stuck leaves leave the window and the rest is built. A run sends the window's 8
    and one probe, no more, while nothing is answered."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=refuses_poison) as server:
        configure(home, server)
        mem = poisoned("m")
        sent = []
        for _ in range(4):
            before = len(server.requests)
            assert run("build-tree", "m").exit_code == 6
            sent.append(len(server.requests) - before)
        assert sent[:2] == [builder.WINDOW + 1] * 2, sent  # (the probes: message 16, then 18)
        assert builder.survey(Memory.open("m"))["leaves"] == 10, sent  # only the poisoned ones wait
        assert set(BuildState(mem.path).failures) == {f"{2 * k}+1" for k in range(10)}


def test_parked_probes_are_probed_again_once_the_log_ends(run, home, monkeypatch):
    """Every long message poisoned, the log's last leaf the second run's probe: the probes that failed were
    parked (no place, not retried until a probe was answered), and with no later leaf to probe none was ever
    sent again, even once the server would answer them, until a new message came. Past the log's end the
    parked leaves are the probes now, oldest first; one answered, the others are retried in the same run."""
    refused = {"poison": True}

    def faults(n, body):
        task = body["messages"][-1]["content"].rsplit("Compaction:", 1)[-1]
        k = int(re.search(r"message ([0-9]+)\b", task).group(1)) if "POISON" in task else None  # (its index)
        return "500" if k is not None and (refused["poison"] or k < 2 * builder.WINDOW) else None

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=faults) as server:
        configure(home, server)
        mem = poisoned("m", n=10)  # (leaves 0, 2, ... 18: the window's 8, then 16 and 18 as probes)
        for _ in range(3):
            assert run("build-tree", "m").exit_code == 6
        refused["poison"] = False  # (the server refuses the window's 8 only)
        before = len(server.requests)
        assert run("build-tree", "m").exit_code == 6
        assert builder.survey(Memory.open("m"))["leaves"] == builder.WINDOW, len(server.requests) - before
        assert set(BuildState(mem.path).failures) == {f"{2 * k}+1" for k in range(builder.WINDOW)}


def failing_nodes(mem) -> int:
    return len(BuildState(mem.path).failures)


def test_an_outage_records_a_few_failing_leaves_not_one_more_each_run(run, home, monkeypatch):
    """A server that answers nothing: each run's probe was a leaf never tried, a new failing node in
    compactor.json every run (a cron build-tree every 10 minutes: 144 a day). The leaves parked are probed
    again instead, and a new one only once their failures add up to twice as many as the last time: a few."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "500") as server:
        configure(home, server)
        mem = fill("m", 80, short_every=1000)
        for _ in range(16):
            assert run("build-tree", "m").exit_code == 6
            assert len(server.requests) % (builder.WINDOW + 1) == 0  # (the window's 8 and one probe a run)
    assert failing_nodes(mem) <= builder.WINDOW + 2 * builder.FRESH_PROBES, failing_nodes(mem)


def test_a_watcher_in_an_outage_records_a_few_failing_leaves(home, monkeypatch):
    """A watcher of a server that answers nothing, stopped after 300 failed calls: a new failing leaf was
    probed every round of retries (a minute, at most): 1,440 a day. Now a few."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "500") as server:
        configure(home, server)
        mem = fill("m", 400, short_every=1000)
        failed = []

        def count(event):
            if event["event"] == "failed":
                failed.append(event)
            if len(failed) >= 300:
                watcher.stop()

        watcher = scheduler.Scheduler(on_event=count)
        watcher.add(builder.Builder(Memory.open("m")))
        watcher.run()
    assert failing_nodes(mem) <= builder.WINDOW + 2 * builder.FRESH_PROBES, failing_nodes(mem)


def refuses_poison_400(n, body):
    return "400" if "POISON" in body["messages"][-1]["content"].rsplit("Compaction:", 1)[-1] else None


def test_leaves_the_server_refuses_as_their_own_fault_are_probed_past_one_a_run(run, home, monkeypatch):
    """Sixteen leaves in a row refused with a 400 (too long, say: the leaf's own fault, not the server's), the
    others answered: each probe that fails so lets the next probe be a leaf after it, not a parked one, so
    the window's eight and the eight after them are passed in nine runs, one probe each, as before."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=refuses_poison_400) as server:
        configure(home, server)
        mem = poisoned("m", bad=16)
        runs = 0
        while builder.survey(Memory.open("m"))["leaves"] > 16 and runs < 20:
            run("build-tree", "m")
            runs += 1
    assert runs <= 10, runs
    assert set(BuildState(mem.path).failures) == {f"{2 * k}+1" for k in range(16)}


def test_a_retry_time_an_earlier_run_recorded_is_waited_for_as_a_call_in_flight(home):
    """A node an earlier run failed, its retry time to come (``compactor.json``): a new builder called it at once.
    A watcher waits for it (``MAX_RETRY_WAIT`` at most: the clock may have moved), the compactor's view held
    behind it as behind a retried failure; build-tree waits up to ``ONCE_RETRY_WAIT`` and past that leaves it
    failed, folded around, its record as it was. A time past, or none, changes nothing."""
    import time

    with FakeLLM("openai") as server:
        configure(home, server, retry_seconds=30)
        fill("m", 40, short_every=1000)  # (message 0 is short: leaf 1 is the first call)
        path = home / "m" / "compactor.json"

        def first(retry, retries=None, tries=1):
            path.unlink(missing_ok=True)
            for _ in range(tries):
                BuildState(home / "m").failed("1+1", "HTTP 429: slow down", "2026-10-08T09:29:00+08:00", retry)
            recorded = path.read_bytes()
            built = builder.Builder(Memory.open("m"), retries=retries)
            task = built.next_task(time.monotonic())
            assert path.read_bytes() == recorded
            waits = [due - time.monotonic() for due, l, i in built.waiting if (l, i) == (0, 1)]
            return built, (task.l, task.i), waits

        watch, task, waits = first("2026-10-08T09:30:20+08:00")  # (the clock: 09:30:00)
        assert task == (0, 2) and len(waits) == 1 and 19 < waits[0] <= 20
        assert watch.cview.failing == set() and watch.cview.view.T == 1  # held back behind it
        again = watch.next_task(time.monotonic() + 21)  # (then it goes, though this clock stands still)
        assert (again.l, again.i) == (0, 1) and watch.waiting == []
        once, task, waits = first("2026-10-08T09:30:20+08:00", retries=0)
        assert task == (0, 2) and len(waits) == 1 and 19 < waits[0] <= 20 and once.gave_up == set()
        once, task, waits = first("2026-10-08T09:31:01+08:00", retries=3)
        assert task == (0, 2) and waits == [] and once.gave_up == {(0, 1)}
        assert (0, 1) in once.cview.failing and once.cview.view.T > 1  # folded around
        watch, task, waits = first("2026-10-08T09:31:01+08:00")
        assert task == (0, 2) and 60 < waits[0] <= 61 and watch.gave_up == set()
        _, task, waits = first("2027-10-08T09:30:00+08:00")
        assert task == (0, 2) and builder.MAX_RETRY_WAIT - 1 < waits[0] <= builder.MAX_RETRY_WAIT
        watch, task, waits = first("2026-10-08T09:30:20+08:00", tries=builder.STUCK_TRIES)
        assert task == (0, 2) and len(waits) == 1 and (0, 1) in watch.cview.failing  # (failing: folded around)
        for retry in ("2026-10-08T09:29:59+08:00", None):
            assert first(retry)[1:] == ((0, 1), [])


def test_build_tree_leaves_a_node_the_server_asks_to_wait_minutes_for_to_the_next_run(home, sh):
    """A 429 with ``Retry-After: 300`` to ``build-tree --retries 3``: the run slept 5 minutes before each retry (15
    in all, so a cron run every 10 minutes found the next one's lease held and exited 4). A wait past
    ``ONCE_RETRY_WAIT`` (a minute) leaves the node to the next run: it is a failed node (exit 6), and
    ``compactor.json`` keeps the time the server allows. A watcher waits as asked (``retries`` None).
    The next run honours that time: started at once (by hand, or cron), it called the node straight away, so the
    server was asked again at once; now it sends nothing for it and leaves it failing as recorded (exit 6), and
    a run started within a minute of that time waits for it."""
    import datetime

    with FakeLLM("openai", faults=lambda n, body: "429" if n == 0 else None, retry_after="300") as server:
        configure(home, server)
        mem = fill("m", 6)
        out = sh("build-tree", "m", "--retries", "3", timeout=60, TEST_LLM_KEY="k")
        assert out.returncode == 6 and b"1 node could not be built" in out.stderr and b"HTTP 429" in out.stderr
        assert len(server.requests) == 4  # (the three others built, the refused one not retried)
        ((node, failure),) = BuildState(mem.path).failures.items()
        assert failure["tries"] == 1
        asked = datetime.datetime.fromisoformat(failure["retry"]) - datetime.datetime.fromisoformat(failure["at"])
        assert asked == datetime.timedelta(seconds=300)
        again = sh("build-tree", "m", "--retries", "3", timeout=60, TEST_LLM_KEY="k")  # (at once: same clock)
        assert again.returncode == 6 and f"1 node could not be built (first m {node}: ".encode() in again.stderr
        assert len(server.requests) == 4 and BuildState(mem.path).failures == {node: failure}  # (nothing sent)
        soon = sh("build-tree", "m", timeout=60, TEST_LLM_KEY="k", PIMEM_NOW="2026-10-08T09:34:59+08:00")
        assert soon.returncode == 0, soon.stderr  # (a second before it: waited for)
        assert len(server.requests) == 5
    assert_complete(mem)
    watch = builder.Builder(Memory.open("m"))
    watch.failed(0, 1, "HTTP 429: slow down", 300.0)
    assert watch.gave_up == set() and [(l, i) for _, l, i in watch.waiting] == [(0, 1)]


def test_build_tree_sends_no_probe_the_server_asks_to_wait_minutes_for(home, sh):
    """Every call refused with a 429's ``Retry-After: 300`` to ``build-tree --retries 1``, over more unbuilt leaves
    than the window holds: each node was left to the next run, but the probe after the window (one later
    message) failed so too, and the run then sat idle until the next probe was due, 5 minutes, before it
    sent it and exited (a cron run every 10 minutes still waiting, or found holding the lease). A probe the
    server asks to wait more than ``ONCE_RETRY_WAIT`` for is the last of the run: it exits 6 at once."""
    with FakeLLM("openai", faults=lambda n, body: "429", retry_after="300") as server:
        configure(home, server)
        fill("m", 40)
        out = sh("build-tree", "m", "--retries", "1", timeout=45, TEST_LLM_KEY="k")
    assert out.returncode == 6 and b"nodes could not be built" in out.stderr and b"HTTP 429" in out.stderr, out.stderr
    assert len(server.requests) == builder.WINDOW + 1  # (the window's leaves, then one probe)


def test_build_tree_without_retries_keeps_the_time_the_server_asks_for(home, sh):
    """``build-tree`` with no ``--retries`` (as typed by hand) gives a refused node up at once: the time a 429's
    ``Retry-After: 300`` asked for was not kept, so the next run, started at once, asked the server again straight
    away. It is kept, and that run sends nothing for the node (exit 6), saying so: its line said the error
    alone, as if the server had been asked again and refused."""
    with FakeLLM("openai", faults=lambda n, body: "429" if n == 0 else None, retry_after="300") as server:
        configure(home, server)
        mem = fill("m", 6)
        assert sh("build-tree", "m", timeout=60, TEST_LLM_KEY="k").returncode == 6
        ((node, failure),) = BuildState(mem.path).failures.items()
        assert failure["retry"] == "2026-10-08T09:35:00+08:00", failure  # (at 09:30:00)
        again = sh("build-tree", "m", timeout=60, TEST_LLM_KEY="k")
        assert again.returncode == 6 and (f"1 node could not be built (first m {node}: not sent before "
                                          f"2026-10-08T09:35:00+08:00, the retry time recorded when it failed: "
                                          f"{failure['error']})").encode() in again.stderr, again.stderr
        assert len(server.requests) == 4 and BuildState(mem.path).failures == {node: failure}  # (nothing sent)


def test_build_tree_says_when_it_waits_for_a_recorded_retry_time(home, sh):
    """A run started within a minute of a failed node's recorded retry time waits for it, and waited in silence
    (up to a minute), its ``done`` event's seconds the calls' time alone. It says so once on stderr (with --json
    too, and a ``waiting`` event), naming the node and its error, and ``seconds`` is how long the run took."""
    with failed_first_run(home, sh) as (mem, node, failure):
        out = sh("build-tree", "m", "--json", timeout=60, TEST_LLM_KEY="k", PIMEM_NOW="2026-10-08T09:30:28+08:00")
    assert out.returncode == 0, out.stderr
    assert out.stderr.decode().splitlines() == [
        f"pimem: m: waiting 2 s to retry node {node} at the time an earlier run recorded (it failed: {failure['error']})"]
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    (waiting,) = [e for e in events if e["event"] == "waiting"]
    assert (waiting["node"], waiting["nodes"], waiting["seconds"]) == (node, 1, 2)
    (done,) = [e for e in events if e["event"] == "done"]
    assert done["calls"] >= 1 and done["seconds"] >= 2 and done["call_seconds"] < done["seconds"]
    assert_complete(mem)


def test_a_retry_after_in_milliseconds_is_read_first():
    import httpx

    from pimem.compactor.providers import _retry_after

    assert _retry_after(httpx.Headers({"Retry-After-Ms": "250", "Retry-After": "7"})) == 0.25
    assert _retry_after(httpx.Headers({"retry-after-ms": "soon", "retry-after": "7"})) == 7.0
    assert _retry_after(httpx.Headers({"retry-after": "-3"})) == 0.0


@pytest.mark.parametrize("zone", ["Asia/Tokyo", "America/New_York"])
def test_a_retry_after_date_is_gmt_whatever_the_local_time_zone(zone, monkeypatch):
    """An HTTP date with ``-0000`` (as Python's ``email.utils.formatdate`` writes it) or no zone was read as this
    machine's local time: 20 s asked for was none in Tokyo, five hours (held to 5 minutes) in New York. And a
    delay that is no number (``nan``) was read as 0, a retry at once, where a word is no delay asked for."""
    import email.utils
    import time

    import httpx

    from pimem.compactor.providers import _retry_after

    monkeypatch.setenv("TZ", zone)
    time.tzset()
    try:
        soon = time.time() + 20
        for date in (email.utils.formatdate(soon), email.utils.formatdate(soon, usegmt=True),
                     email.utils.formatdate(soon).removesuffix(" -0000")):
            assert 15 < _retry_after(httpx.Headers({"retry-after": date})) <= 20, date
    finally:
        monkeypatch.undo()
        time.tzset()
    for word in ("nan", "inf", "-inf", "1e3", "soon"):
        assert _retry_after(httpx.Headers({"retry-after": word})) is None
        assert _retry_after(httpx.Headers({"retry-after-ms": word})) is None
    assert _retry_after(httpx.Headers({"retry-after": " 2.5 "})) == 2.5
    assert _retry_after(httpx.Headers({})) is None


HOLDER = """
import sys
from pimem import Memory, lease
held = lease.Lease(Memory.at("a")).acquire()
print("held", flush=True)
sys.stdin.read()
"""


def test_build_tree_of_every_memory_builds_those_a_watcher_does_not_hold_then_exits_4(run, home):
    """A cron ``pimem build-tree`` while a watcher builds one memory (a real process holds its lease): the
    others are built, the held one is named, exit 4."""
    import subprocess
    import sys

    from conftest import subprocess_env

    configure(home)
    for name in ("a", "b", "c"):
        fill(name, 12)
    proc = subprocess.Popen([sys.executable, "-c", HOLDER], env=subprocess_env(), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == b"held\n"
        out = run("build-tree")
    finally:
        proc.stdin.close()
        proc.wait()
    assert out.exit_code == 4 and "memory 'a' is being built by pid" in out.stderr, out.stderr
    pending = {name: orjson.loads(run("status", name, "--json").stdout)["tree"]["pending"] for name in "abc"}
    assert pending["a"] > 0 and pending["b"] == pending["c"] == 0, pending


def test_nodes_given_up_name_the_first_ones_error(run, home, monkeypatch):
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", faults=lambda n, body: "500") as server:
        configure(home, server)
        fill("m", 6)
        out = run("build-tree", "m", "--retries", "0")
    error = [line for line in out.stderr.splitlines() if line.startswith("pimem: error: ")]
    assert out.exit_code == 6 and len(error) == 1 and "could not be built (first m 1+1: " in error[0], out.stderr
    assert "HTTP 500" in error[0]


def test_nodes_given_up_name_the_first_in_the_log_as_status_lists_them(run, home, monkeypatch):
    """The error named the lowest level's first node given up (a leaf late in the log before a join of its
    first messages), where status lists the failing nodes first in the log first: both say the same node."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")

    def refuse(n, body):
        task = body["messages"][-1]["content"]
        return "500" if "compress message 37 " in task or "adjacent lines 0+8 and 8+8 " in task else None

    with FakeLLM("openai", faults=refuse) as server:
        configure(home, server)
        fill("m", 40)
        out = run("build-tree", "m", "--retries", "0")
    failing = [fail["node"] for fail in orjson.loads(run("status", "m", "--json").stdout)["failures"]]
    assert failing == ["0+16", "37+1"], failing
    error = [line for line in out.stderr.splitlines() if line.startswith("pimem: error: ")]
    assert out.exit_code == 6 and "2 nodes could not be built (first m 0+16: " in error[0], out.stderr


def build_refusing_message_10(home, monkeypatch, n: int, cview: dict | None = None):
    """``build-tree`` of ``n`` messages against a server that fails message 10's leaf every time: the
    scheduler and the requests it sent."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")

    def refuse_10(n, body):
        return "500" if "compress message 10 " in body["messages"][-1]["content"] else None

    with FakeLLM("openai", faults=refuse_10, latency=0.01) as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:300]
        configure(home, server)
        mem = fill("m", n)
        if cview:
            mem.save_config({"cview": cview})
        return scheduler.build_tree([Memory.open("m")], retries=2), server.requests


def test_a_leaf_that_fails_every_time_holds_nothing_back_and_later_calls_see_past_it(home, monkeypatch):
    """Message 10's call fails every time (a provider refusing that one message). The leaves after it used to be
    held back from the compactor's view for as long as it stayed unbuilt: kept in memory, one per message (a
    watcher's grew with the log for good), and every later call was shown the history before message 10 only.
    A failed leaf is a placeholder in that view (its line is left out of what a call is shown); the others
    after it are pushed and folded."""
    sched, requests = build_refusing_message_10(home, monkeypatch, 300)
    built = sched.builders[0] if sched.builders else sched.retired[0]
    assert built.gave_up == {(0, 10)}
    cview = built.cview
    assert len(cview.held) <= builder.WINDOW and cview.view.T == 300
    assert cview.view.total <= 2 * 2000 + 600  # folded as the leaves came (a line past 2·hi at most)
    late = []
    for body in requests:
        chat, task = body["messages"][-1]["content"].split("</chat>\n\n")
        leaf = re.search(r"compress message (\d+)", task)
        if leaf and int(leaf[1]) >= 100:
            starts = [int(line.split("+", 1)[0]) for line in chat.removeprefix("<chat>\n").splitlines()]
            assert "not summarized yet" not in chat and chat_bytes(body) <= 2 * 2000
            late.append(max(starts, default=0))
    # shown lines past message 10, not only messages 0-9 (how far past depends on the calls in flight: one in
    # flight for long holds up the view the calls after it are shown, as a leaf after an unbuilt one is held)
    assert late and min(late) > 10 and max(late) > 150, late
    found = builder.survey(Memory.open("m"))
    assert found["leaves"] == 1 and found["pending"] == 9  # message 10 and its 8 ancestors, nothing else


def test_with_a_leaf_that_fails_every_time_the_calls_after_it_are_sent_within_hi(home, monkeypatch):
    """Message 10's call fails every time. Its pair was the view's most due, so the batch waited for it until
    the view passed twice ``hi`` and only then merged other pairs: the calls after it were sent 2× ``hi``
    (a median of 15,847 bytes against hi 8,000). The batch now folds the rest around a pair whose call
    failed; what stays is one line a level on either side of the hole, which no merge can cross."""
    import statistics

    _, requests = build_refusing_message_10(home, monkeypatch, 800, {"hi": 8000, "lo": 4000})
    late = [chat_bytes(body) for body in requests
            if (leaf := re.search(r"compress message (\d+)", body["messages"][-1]["content"])) and int(leaf[1]) >= 100]
    assert len(late) > 300 and max(late) <= 2 * 8000
    assert statistics.median(late) <= 8000, statistics.median(late)


def test_the_view_folds_around_a_leaf_that_keeps_failing_and_waits_again_once_it_is_built(run, home, monkeypatch):
    """The reader's view, hi 8,000: message 10's call failed 3 times (``compactor.json``). Its pair was the
    most due, so the batch waited for it until twice ``hi`` and stayed there: every turn's view 15,879 bytes.
    It now folds the rest around it. A node that failed fewer times is still waited for (a call in flight
    after a 429, say), and once it is built the view takes it in."""
    from pimem import viewfile

    build_refusing_message_10(home, monkeypatch, 800)
    mem = Memory.open("m")
    mem.save_config({"view": {"hi": 8000, "lo": 4000}})
    (mem.path / "view.json").unlink()  # (folded afresh with the new budget)
    assert Memory.open("m").views.failing() == {"10+1"}
    shown = run("view", "m").stdout
    assert len(shown.encode()) <= 8000 and "10+1|" in shown

    state = orjson.loads((mem.path / "compactor.json").read_bytes())
    state["failures"]["10+1"]["tries"] = viewfile.STUCK_TRIES - 1
    (mem.path / "compactor.json").write_bytes(orjson.dumps(state))
    (mem.path / "view.json").unlink()
    assert Memory.open("m").views.failing() == set()
    assert len(run("view", "m").stdout.encode()) > 1.5 * 8000  # (waiting, as for a node on its way)

    with FakeLLM("openai") as server:  # the provider takes message 10 at last
        server.reply = lambda body: "message ten, summarised at last"
        configure(home, server)
        assert run("build-tree", "m").exit_code == 0
    shown = run("view", "m").stdout
    assert len(shown.encode()) <= 8000 and "not summarized yet" not in shown
    assert Memory.open("m").views.failing() == set()


def test_the_dry_run_of_an_anthropic_build_counts_its_cache_writes(run, home, monkeypatch):
    """Anthropic caches the prefixes a request marks (the system prompt and the view) and bills what it writes
    at 1.25x the input price; calls whose views end at the same message share one (the fake server caches as
    it does). The dry run counted no writes: 0.90x the dollars the run recorded. It now counts a write for each
    view first sent (1.00x), and once calls were made, the share they wrote; the best case (every prefix read
    at the cached price, none written) stays below what was recorded."""
    monkeypatch.setattr(scheduler, "CONCURRENCY", 1)  # (every call sees what was built before it)
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("anthropic", usage="bytes") as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:512]
        configure(home, server, api="anthropic", price_in=1.0, price_out=2.0, price_cached_in=1.0)
        (home / "config.json").write_bytes(orjson.dumps({**orjson.loads((home / "config.json").read_bytes()),
                                                        "cview": {"hi": 32_000, "lo": 16_000}}))
        fill("m", 240)
        predicted = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        assert run("build-tree", "m", "--max-cost", f"{predicted['cost'] / 3:.6f}").exit_code == 6
        first = builder.spent(Memory.open("m"))
        again = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        assert run("build-tree", "m").exit_code == 0
    total = builder.spent(Memory.open("m"))
    assert 0 < first["tokens_written"] < total["tokens_written"] < total["tokens_in"]
    assert 0.95 <= predicted["cost"] / total["cost"] <= 1.05, (predicted, total)
    assert 0.90 <= again["cost"] / (total["cost"] - first["cost"]) <= 1.10, (again, total, first)
    assert predicted["cost_cached"] < total["cost"]


@contextlib.contextmanager
def _one_call_at_a_time(home, monkeypatch):
    """A fake server answering 480-byte lines, one call at a time (every call sees what was built before it),
    the compactor's view 8,000 bytes at most."""
    monkeypatch.setattr(scheduler, "CONCURRENCY", 1)
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", usage="bytes") as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:480]
        configure(home, server, price_in=1.0, price_out=2.0)
        (home / "config.json").write_bytes(orjson.dumps({**orjson.loads((home / "config.json").read_bytes()),
                                                        "cview": {"hi": 8000, "lo": 4000}}))
        yield server


def _short_turns_last(name: str) -> None:
    """A backlog of 120 long messages, then 480 short turns."""
    fill(name, 120).append([{"kind": "user" if k % 2 else "pi", "text": f"step {k}: checked the retry loop again, "
                             f"nothing new in the logs around port {5400 + k % 90}; tests pass"} for k in range(120, 600)])


@pytest.mark.parametrize("share", [0.5, 0.8])
def test_the_dry_run_after_a_max_cost_stop_counts_the_view_the_rest_is_shown(run, home, monkeypatch, share):
    """A backlog whose short turns come last, stopped by ``--max-cost``: the rest is mostly merges over those
    turns, sent as soon as the builder reads past them while the compactor's view holds at the first leaf still
    unbuilt; and a stop that leaves the saved view within twice its budget (the whole log, its old lines
    folded) has the next build start from it, a call shown its lines before its first placeholder. The dry run
    took each call for the view over the messages before its node, pushed from the first message: 1.16x and
    1.57x the input the rest then took here (1.10-1.64x over other stops, up to 4x on bench/model_cost.py's)."""
    with _one_call_at_a_time(home, monkeypatch):
        _short_turns_last("m")
        whole = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        assert run("build-tree", "m", "--max-cost", f"{whole['cost'] * share:.6f}").exit_code == 6
        first = builder.spent(Memory.open("m"))
        predicted = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        assert run("build-tree", "m").exit_code == 0
    rest = {key: builder.spent(Memory.open("m"))[key] - first[key] for key in ("calls", "tokens_in")}
    assert predicted["calls"] == rest["calls"] > 0
    assert 0.85 <= predicted["tokens_in"] / rest["tokens_in"] <= 1.15, (predicted, rest)

@pytest.mark.parametrize("line_bytes", [256, 2048])
def test_the_dry_run_of_shorter_or_longer_lines_is_within_15_percent(run, home, monkeypatch, line_bytes):
    """Each task carries a ruler of ``line_bytes`` and a merge its two lines, and a model's line is at most what
    ``max_tokens`` (170) lets it write (about 680 bytes, however long a line may be): the dry run took every task
    for one of 512-byte lines and, before any call, every line for ``line_bytes`` long. Off by 1.3× the input
    with 256-byte lines, 1.9× the calls and 1.5× the input with 2,048-byte ones."""
    monkeypatch.setattr(scheduler, "CONCURRENCY", 1)  # (every call sees what was built before it)
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    answer = min(line_bytes, 4 * 170)  # (a full line, or all that 170 tokens hold)
    with FakeLLM("openai", usage="bytes") as server:
        server.reply = lambda body: ("a summary of the span" + filler(2800))[:answer]
        configure(home, server, price_in=1.0, price_out=2.0)
        (home / "config.json").write_bytes(orjson.dumps({**orjson.loads((home / "config.json").read_bytes()),
                                                        "line_bytes": line_bytes, "cview": {"hi": 32_000, "lo": 16_000}}))
        Memory.at("m").append([{"kind": "user" if k % 2 else "pi", "text": f"short {k}" if k % 3 == 0 else long_text(k, 400)}
                               for k in range(160)])
        predicted = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        assert run("build-tree", "m").exit_code == 0
    recorded = builder.spent(Memory.open("m"))
    for key in ("calls", "tokens_in", "tokens_out", "cost"):
        assert 0.85 <= predicted[key] / recorded[key] <= 1.15, (key, predicted, recorded)


def test_a_budget_of_eight_lines_keeps_the_median_within_hi_and_the_dry_run_within_15_percent(run, home, monkeypatch):
    """cview hi 4,000 against 480-byte lines. A leaf built while the view's batch waited for a merge in flight
    was pushed all the same, so the view grew past hi one leaf after another until that merge came (as a live
    build's never does: its merges are in before the next message): a median of 1.4× hi on the samples'
    backlog, and the dry run, whose view builds every node as soon as it is asked for, counted 0.66× the input.
    The leaves after a batch waiting for a merge are now held back until it is built."""
    import statistics

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", latency=0.02, usage="bytes") as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:480]
        configure(home, server, price_in=1.0, price_out=2.0)
        for name in ("m", "n"):
            fill(name, 600, short_every=4).save_config({"cview": {"hi": 4000, "lo": 2000}})
        assert run("build-tree", "m").exit_code == 0
        contexts = [chat_bytes(body) for body in server.requests]
        # (the dry run against a build whose calls come one at a time: what 8 at once are shown depends on
        # which of them the server answers first, by a tenth or so under load)
        monkeypatch.setattr(scheduler, "CONCURRENCY", 1)
        server.latency = 0.0
        predicted = orjson.loads(run("build-tree", "n", "--dry-run", "--json").stdout)
        assert run("build-tree", "n").exit_code == 0
    assert max(contexts) <= 2 * 4000
    assert statistics.median(contexts) <= 4000, statistics.median(contexts)
    recorded = builder.spent(Memory.open("n"))
    assert 0.85 <= predicted["tokens_in"] / recorded["tokens_in"] <= 1.15, (predicted, recorded)
def leaf_lags(requests, least: int) -> list[int]:
    """For each leaf call of a message from ``least`` on: how many messages before its own the view it was
    shown ends."""
    lags = []
    for body in requests:
        chat, task = body["messages"][-1]["content"].split("</chat>\n\n")
        leaf = re.search(r"compress message (\d+) ", task)
        if leaf and int(leaf[1]) >= least:
            ends = [int(a) + int(b) for a, b in re.findall(r"^(\d+)\+(\d+)\|", chat.removeprefix("<chat>\n"), re.M)]
            lags.append(int(leaf[1]) - max(ends, default=0))
    return lags


@pytest.mark.parametrize("slow", ["leaf", "merge"])
def test_a_call_far_slower_than_the_others_does_not_hold_the_view_of_the_calls_after_it_back(home, monkeypatch, slow):
    """Providers answer most calls in tenths of a second and a few in seconds (or at their timeout). The leaves
    after a leaf in flight, and those that come while the view's batch waits for a merge in flight, are held
    back from the compactor's view until it is built: with message 31's leaf (or the merge of 32+32) answered
    after 4 s, every later call was shown the history before it, up to 250 messages behind. Once 24 calls are
    in since it started, such a call is late: the view folds around it, as around a failed call, and takes
    its line when it comes."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    needle = "compress message 31 " if slow == "leaf" else "lines 32+16 and 48+16 "

    def latency(n, body):
        return 4.0 if needle in body["messages"][-1]["content"] else 0.01

    with FakeLLM("openai", latency=latency) as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:300]
        configure(home, server)
        mem = fill("m", 300)
        sched = scheduler.build_tree([Memory.open("m")])
        requests = server.requests
    assert any(needle in body["messages"][-1]["content"] for body in requests)
    lags = leaf_lags(requests, 120)
    assert len(lags) > 50 and max(lags) <= 60, lags
    assert max(chat_bytes(body) for body in requests) <= 2 * 2000
    assert not sched.builders[0].cview.failing and not sched.builders[0].cview.held
    assert_complete(mem)


def test_memories_built_together_share_the_calls(home, monkeypatch):
    """``build-tree`` of two memories (or ``watch`` over a memory keeping up beside an import): the calls went to
    the memories in their order, so the first one's backlog had all 8 until it was nearly built and the second
    got its first call after 389 of the first's 396. A free call now goes to the memory with the fewest in
    flight."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", latency=0.01) as server:
        server.reply = lambda body: ("a summary of the span" + filler(560))[:300]
        configure(home, server)
        fill("a", 300)
        Memory.at("b").append([{"kind": "user", "text": f"short {k}" if k % 3 == 0 else "zebra " + long_text(k)}
                               for k in range(300)])
        scheduler.build_tree([Memory.open("a"), Memory.open("b")])
        tasks = [body["messages"][-1]["content"].rsplit("</chat>", 1)[-1] for body in server.requests]
    theirs = ["zebra" in task for task in tasks if "compress message" in task]  # (b's leaves)
    first = theirs[: len(theirs) // 2]
    assert 0.3 <= sum(first) / len(first) <= 0.7, (sum(first), len(first))
    for name in ("a", "b"):
        assert_complete(Memory.open(name))


@pytest.mark.parametrize("proxy, why", [("socks5://127.0.0.1:1080", "a socks proxy needs the socksio package: pip install 'httpx[socks]'"),
                                        ("socks4://127.0.0.1:1080", "Unknown scheme for proxy URL")])
def test_a_socks_proxy_without_its_package_stops_the_memory_in_one_line_not_retried(run, home, monkeypatch, proxy, why):
    """No call can go out through a socks proxy without the socksio package, nor through a proxy of a scheme
    httpx does not know (a setup to mend, not a server down): build-tree says so in one line at once and exits
    6, retrying nothing and recording no failure."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    monkeypatch.setitem(sys.modules, "socksio", None)  # (absent, installed here or not: its import fails)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("ALL_PROXY", proxy)
    with FakeLLM("openai") as server:
        server.url = "http://llm.example.invalid/v1"  # (remote: a server on this machine is never proxied)
        configure(home, server)
        mem = fill("m", 6)
        out = run("build-tree", "m", "--retries", "50", "--json")
    assert out.exit_code == 6 and out.stderr.count("\n") == 1, out.stderr
    assert out.stderr.startswith(f"pimem: error: m: http://llm.example.invalid/v1/chat/completions via proxy "
                                 f"{proxy}: {why}"), out.stderr
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    assert [e["event"] for e in events if e["event"] != "done"] == ["refused"] and server.requests == []
    assert BuildState(mem.path).failures == {}


KEY = "sk-test-0123456789abcdefXYZ"  # (long enough to be a secret: every error hides it)
REFUSED_KEY = {"401": "the server refused the API key in $TEST_LLM_KEY",
               "400-key": "the server refused the API key in $TEST_LLM_KEY",
               "403": "the server refused access with the API key in $TEST_LLM_KEY",
               "403-region": "the server refused access with the API key in $TEST_LLM_KEY"}


@pytest.mark.parametrize("api, fault", [("openai", "401"), ("anthropic", "401"), ("anthropic", "403"),
                                        ("openai", "403-region"), ("openai", "400-key")])
def test_a_refused_api_key_stops_the_memory_in_one_line_not_retried_node_after_node(run, home, monkeypatch, api, fault):
    """A server refusing the API key (HTTP 401; a 403 saying the key may not do this: its permissions, the model,
    the region; Google's 400 API_KEY_INVALID, which was taken for a request refused for what it holds) refuses every call alike until a person mends the key or the compactor: build-tree sent every
    node again and again (36 requests for 20 messages with --retries 3) and recorded each as failing. It stops
    calling that compactor at once: one line naming the variable (never the key), exit 6, no failure recorded,
    nothing counted as spent, and the other memories are built; ``status`` and compactor.json say why."""
    monkeypatch.setenv("TEST_LLM_KEY", KEY)
    with FakeLLM(api) as good, FakeLLM(api, faults=lambda n, body: fault) as server:
        configure(home, good, api=api, price_in=1.0, price_out=2.0)
        fill("a", 6)
        mem = fill("m", 20)
        mem.save_config({"compactor": {"base_url": server.url}, "max_cost_per_day": 1.0})
        out = run("build-tree", "--retries", "50", "--json")
        sent = len(server.requests)
        assert run("build-tree", "m").exit_code == 6 and len(server.requests) <= sent + 8  # (the next run: one try)
    assert out.exit_code == 6 and out.stderr.count("\n") == 1, out.stderr
    said = f"{REFUSED_KEY[fault]} (the compactor of m, {api}/m1"
    assert out.stderr.startswith(f"pimem: error: m: {said}"), out.stderr
    assert f"HTTP {fault[:3]}: " in out.stderr and KEY not in out.stderr and KEY not in out.stdout
    assert "nothing more is sent with it" in out.stderr and "'pimem model m'" in out.stderr
    assert ("[API key]" in out.stderr) is (fault == "401")  # (the key the server echoed, hidden)
    assert 1 <= sent <= 8  # (the calls in flight when the first was refused: none sent after it)
    events = [orjson.loads(line) for line in out.stdout.splitlines()]
    (refused,) = [e for e in events if e["event"] == "refused"]
    assert refused["memory"] == "m" and refused["error"].startswith(said) and "settings" not in refused
    assert not [e for e in events if e["event"] == "failed"]
    assert_complete(Memory.open("a"))
    state = BuildState(mem.path)
    assert state.failures == {} and state.pending == {} and state.unbuilt_cost == {}
    assert builder.spent(Memory.open("m"))["cost"] == 0
    assert orjson.loads((mem.path / "compactor.json").read_bytes())["key_refused"]["error"].startswith(said)
    status = orjson.loads(run("status", "m", "--json").stdout)
    assert status["key_refused"]["error"].startswith(said) and status["key_refused"]["at"] == "2026-10-08T09:30:00+08:00"
    assert status["failures"] == [] and status["spent"]["cost_unbuilt"] == 0
    shown = run("status", "m").stdout
    assert f"stopped   {said}" in shown and "(at 2026-10-08T09:30:00+08:00)" in shown, shown
    dry = run("build-tree", "m", "--dry-run")  # (the next run may be refused its key as well: said)
    assert dry.exit_code == 0 and "; but the server refused its API key at 2026-10-08T09:30:00+08:00 (see 'pimem " \
        "status m')\n" in dry.stdout, dry.stdout
    assert orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)["key_refused"] == "2026-10-08T09:30:00+08:00"
    # once the key is mended, the next run builds it, and status no longer says it was refused
    with FakeLLM(api) as mended:
        mem.save_config({"compactor": {"base_url": mended.url}})
        assert run("build-tree", "m").exit_code == 0
    assert_complete(Memory.open("m"))
    assert orjson.loads(run("status", "m", "--json").stdout)["key_refused"] is None
    assert "key_refused" not in orjson.loads((mem.path / "compactor.json").read_bytes())


def test_calls_still_queued_when_their_memory_is_left_are_not_sent(run, home, monkeypatch):
    """The pool's threads slow to start (a loaded machine): the first call was refused its key and the memory
    left while the other 7 still waited for a thread, and each was sent all the same when one took it. A call
    whose memory was left by then is not sent."""
    monkeypatch.setenv("TEST_LLM_KEY", KEY)
    first, left = threading.Lock(), threading.Event()
    work, retire = scheduler._Pool._work, scheduler.Scheduler.retire

    class Told:  # (the first thread, its call answered, takes the next one once the answer was read)
        def __init__(self, results):
            self.results = results

        def put(self, item):
            self.results.put(item)
            left.wait(30)

    def late(pool):  # (one thread starts at once, the others once the memory was left)
        if first.acquire(blocking=False):
            pool.results = Told(pool.results)
        else:
            left.wait(30)
        work(pool)

    def retired(sched, builder):
        retire(sched, builder)
        left.set()

    monkeypatch.setattr(scheduler._Pool, "_work", late)
    monkeypatch.setattr(scheduler.Scheduler, "retire", retired)
    with FakeLLM("openai", faults=lambda n, body: "401") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 20)
        mem.save_config({"max_cost_per_day": 1.0})
        out = run("build-tree", "m")
        assert len(server.requests) == 1
    assert out.exit_code == 6 and "the server refused the API key" in out.stderr, out.stderr
    assert BuildState(mem.path).pending == {} and BuildState(mem.path).unbuilt_cost == {}


def test_a_server_asking_for_a_key_the_compactor_does_not_send_says_so(run, home, monkeypatch):
    """A local server behind a key (vLLM's --api-key) and a compactor set up without one: the 401 says that no
    key is sent, not that one was refused."""
    with FakeLLM("openai", faults=lambda n, body: "401") as server:
        configure(home, server)
        mem = fill("m", 6)
        mem.save_config({"compactor": {"key_env": None}})
        out = run("build-tree", "m")
        assert len(server.requests) <= 8
    assert out.exit_code == 6 and out.stderr.count("\n") == 2, out.stderr  # (its done line, then the error)
    assert ("pimem: error: m: the server asks for an API key, and the compactor of m (openai/m1) sends none "
            "(--key-env): ") in out.stderr, out.stderr


def test_a_call_refused_for_its_key_after_a_billed_request_counts_that_request(run, home, monkeypatch):
    """A reasoning model's call is two requests when the first spent its budget thinking; the first is billed
    even when the second is refused for its key: it counts as spent on a call that built nothing."""
    monkeypatch.setenv("TEST_LLM_KEY", KEY)
    with FakeLLM("openai", faults=lambda n, body: "length" if n == 0 else "401") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 2, short_every=1000)  # (one long message: one call)
        out = run("build-tree", "m")
        assert len(server.requests) == 2
    assert out.exit_code == 6 and "the server refused the API key in $TEST_LLM_KEY" in out.stderr, out.stderr
    assert BuildState(mem.path).unbuilt_cost == {"2026-10-08": pytest.approx((1000 * 1.0 + 100 * 2.0) / 1e6)}


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_403_for_what_a_request_holds_is_a_refused_node_not_a_refused_key(run, home, monkeypatch, api):
    """A 403 that says moderation flagged the input (OpenRouter's: that message's content) is no refused key: that
    node is refused for what it holds, as a 400 is (``"refused": true``: not the server's failure), and the
    others are built."""
    monkeypatch.setenv("TEST_LLM_KEY", KEY)
    flagged = lambda n, body: "403-flagged" if "w5x1 " in orjson.dumps(body).decode() else None  # noqa: E731
    with FakeLLM(api, faults=flagged) as server:
        configure(home, server, api=api)
        mem = fill("m", 12)
        out = run("build-tree", "m", "--retries", "1")
    assert out.exit_code == 6 and "m 5+1: " in out.stderr and "flagged" in out.stderr, out.stderr
    state = BuildState(mem.path)
    assert list(state.failures) == ["5+1"] and state.failures["5+1"]["refused"] is True
    assert "key_refused" not in orjson.loads((mem.path / "compactor.json").read_bytes())
    assert builder.survey(Memory.open("m"))["pending"] == 4  # (that leaf, and the merges above it)


@pytest.mark.parametrize("api", ["openai", "anthropic"])
def test_a_403_unexplained_a_429_and_a_500_are_retried_as_ever(run, home, monkeypatch, api):
    """A 403 whose words name neither the key nor its access is not taken for a refused key: it is retried, as
    a 500 is; and so are a 429 and a 500."""
    monkeypatch.setenv("TEST_LLM_KEY", KEY)
    faults = {1: "403-other", 2: "429", 3: "500"}
    with FakeLLM(api, faults=lambda n, body: faults.get(n), retry_after="0") as server:
        configure(home, server, api=api)
        mem = fill("m", 12)
        out = run("build-tree", "m", "--retries", "2", "--json")
    assert out.exit_code == 0, out.stderr
    assert_complete(mem)
    failed = [e for e in map(orjson.loads, out.stdout.splitlines()) if e["event"] == "failed"]
    assert sorted(e["error"].split(": HTTP ", 1)[1][:3] for e in failed) == ["403", "429", "500"], failed
    assert "key_refused" not in orjson.loads((mem.path / "compactor.json").read_bytes())


@contextlib.contextmanager
def _proxy_asking_for_credentials():
    """A proxy on 127.0.0.1 that answers every request (a CONNECT too) 407 Proxy Authentication Required: its
    URL and the requests it was sent, while the block runs."""
    import socketserver

    asked = []

    class Handler(socketserver.StreamRequestHandler):
        def handle(self):
            head = b""
            while not head.endswith(b"\r\n\r\n") and (line := self.rfile.readline()):
                head += line
            asked.append(head.split(b" ", 1)[0])
            self.wfile.write(b"HTTP/1.1 407 Proxy Authentication Required\r\nProxy-Authenticate: Basic realm=\"x\"\r\n"
                             b"Content-Length: 0\r\nConnection: close\r\n\r\n")

    with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler) as server:
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}", asked
        finally:
            server.shutdown()


@pytest.mark.parametrize("scheme", ["https", "http"])
def test_a_proxy_asking_for_credentials_stops_the_memory_in_one_line_not_retried(run, home, monkeypatch, scheme):
    """A proxy answering 407 (it wants a user and password its URL does not give, or refuses them) refuses every
    call alike until its URL in the environment is mended, which a running process never sees: each node was
    sent again and again (a ProxyError for an https:// URL, an HTTP 407 for an http:// one). build-tree leaves
    the memory at once with one line saying so (exit 6), recording no failure."""
    monkeypatch.setenv("TEST_LLM_KEY", KEY)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "no_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    with _proxy_asking_for_credentials() as (proxy, asked), FakeLLM("openai") as server:
        monkeypatch.setenv(f"{scheme.upper()}_PROXY", proxy)
        server.url = f"{scheme}://llm.example.invalid/v1"  # (remote: a server on this machine is never proxied)
        configure(home, server)
        mem = fill("m", 20)
        out = run("build-tree", "m", "--retries", "50")
    assert out.exit_code == 6, out.stderr
    assert (f"pimem: error: m: {scheme}://llm.example.invalid/v1/chat/completions via proxy {proxy}: "
            f"{'407 Proxy Authentication Required' if scheme == 'https' else 'HTTP 407'}: the proxy asks for a user and "
            "password it was not given, or refused them: give them in its URL (http://user:password@host:port)\n") in out.stderr
    assert 1 <= len(asked) <= 8 and set(asked) == {b"CONNECT" if scheme == "https" else b"POST"}, asked
    assert BuildState(mem.path).failures == {}


def _node_of(body: dict) -> str:
    task = body["messages"][-1]["content"].rsplit("</chat>", 1)[-1]
    return re.search(r"message \d+|lines \S+ and \S+", task)[0]


@pytest.mark.parametrize("share", [0.95, 0.99])
def test_the_rest_after_a_late_max_cost_stop_is_shown_the_view_an_unstopped_build_shows(run, home, monkeypatch, share):
    """A backlog stopped by ``--max-cost`` near its end leaves a saved compactor's view within twice its budget
    (the whole log, its old lines folded) and a few placeholders: the next build started from it, and each of
    its calls was shown the lines before the first placeholder, however far along the log its node lies (a
    median of a third of what an unstopped build shows the same nodes here; 2-4 KB against hi 32,000 on
    bench/model_cost.py's). It is now shown about what an unstopped build shows, within the budget, and the dry
    run at the stop counts that."""
    import statistics

    with _one_call_at_a_time(home, monkeypatch) as server:
        for name in ("m", "whole"):
            _short_turns_last(name)
        assert run("build-tree", "whole").exit_code == 0
        unstopped = {_node_of(body): chat_bytes(body) for body in server.requests}
        cost = builder.spent(Memory.open("whole"))["cost"]
        assert run("build-tree", "m", "--max-cost", f"{cost * share:.6f}").exit_code == 6
        first, spent = len(server.requests), builder.spent(Memory.open("m"))
        predicted = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        assert run("build-tree", "m").exit_code == 0
        rest = {_node_of(body): chat_bytes(body) for body in server.requests[first:]}
    tokens = builder.spent(Memory.open("m"))["tokens_in"] - spent["tokens_in"]
    assert 0.85 <= predicted["tokens_in"] / tokens <= 1.15, (predicted, tokens)  # (the dry run counts it so)
    assert len(rest) > 10 and set(rest) <= set(unstopped)
    assert max(rest.values()) <= 2 * 8000 and statistics.median(rest.values()) <= 8000
    ratio = statistics.median(rest[node] / unstopped[node] for node in rest)
    assert ratio >= 0.8, (ratio, sorted(rest.values()))


def test_the_benchmark_servers_lines_differ_and_hold_no_fact():
    """bench/model_cost.py's server answered every call with the same line: each summary was then a copy of
    every long tool message's summary, and a line joining summaries (2,048-byte lines) was shown as the tool
    markers a copy of tool traffic is shown as, so the rest after a ``--max-cost`` stop was shown a third less
    than the dry run foresaw (1.27-1.31x). Its lines now differ from one request to the next, in words the
    faithfulness guard does not look up."""
    from bench.model_cost import reply
    from pimem.compactor.faith import unfounded

    bodies = [{"messages": [{"role": "user", "content": f"<chat>\n</chat>\n\nCompaction: compress message {n}"}]}
              for n in range(50)]
    lines = [reply(body, 480) for body in bodies]
    assert len(set(lines)) == len(lines) and {len(line.encode()) for line in lines} == {480}
    assert reply(bodies[0], 480) == lines[0]  # (a request asked again is answered alike)
    assert all(unfounded(line, ["a summary"]) == [] for line in lines)


def test_a_build_starts_from_the_saved_view_cut_at_its_first_placeholder(run, home, monkeypatch):
    """A compactor that kept up, then a few new messages, a long one among them: the saved compactor's view holds
    the new messages after its placeholder. A build starts from that view cut at the placeholder, as its own
    view stands at its first unbuilt leaf, and pushes the messages after it again; its call for the long message
    is shown every line before it."""
    monkeypatch.setattr(scheduler, "CONCURRENCY", 1)
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server)
        fill("m", 60)
        assert run("build-tree", "m").exit_code == 0
        Memory.open("m").append([{"kind": "user", "text": "short 60"}, {"kind": "pi", "text": long_text(61)},
                                 {"kind": "user", "text": "short 62"}, {"kind": "pi", "text": "short 63"}])
        saved = Memory.open("m").views.current(create=False).cview
        assert saved.T == 64 and saved.placeholders() == [(0, 61)]
        kept = builder.kept_up(Memory.open("m"))
        assert kept.T == 61 and kept.pending() == 0 and [ln[:2] for ln in kept.lines] == [ln[:2] for ln in saved.lines[:len(kept.lines)]]
        assert kept.total == sum(saved.line(j)[3] for j in range(len(kept.lines)))
        first = len(server.requests)
        assert run("build-tree", "m").exit_code == 0
    leaf = server.requests[first]
    assert "compress message 61 " in leaf["messages"][-1]["content"]
    chat = leaf["messages"][-1]["content"].split("<chat>\n", 1)[1].split("</chat>", 1)[0]
    assert re.search(r"^60\+1\|user: short 60$", chat, re.M)  # (its view ends just before its message)


def test_build_tree_keeps_the_daily_cap_a_watcher_keeps_and_status_says_so(run, home, monkeypatch):
    """``max_cost_per_day`` caps build-tree too (a cron run), on the day's ledger a watcher keeps: it stops at
    the cap with the watcher's ``capped`` event, exit 6, and the next run that day sends nothing; ``--max-cost``
    still holds per run. Once no cap holds, a run builds it all and ``status`` no longer says capped."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", latency=0.05) as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 30)
        mem.save_config({"max_cost_per_day": 0.02})  # (a call's worst case is $0.018)
        out = run("build-tree", "m", "--json")
        assert out.exit_code == 6, out.stderr
        events = [orjson.loads(line) for line in out.stdout.splitlines()]
        (capped,) = [e for e in events if e["event"] == "capped"]
        assert (capped["day"], capped["max_cost_per_day"]) == ("2026-10-08", 0.02)
        assert "stopped: m: spent $0.0" in out.stderr and "of the daily cap of $0.02 on 2026-10-08" in out.stderr, out.stderr
        assert "nodes remain unbuilt" in out.stderr
        spent = builder.spent(Memory.open("m"), day="2026-10-08")
        assert 0 < spent["cost"] <= 0.02 and builder.survey(Memory.open("m"))["pending"]
        calls = len(server.requests)
        again = run("build-tree", "m")
        assert again.exit_code == 6 and len(server.requests) == calls  # (the day's ledger: nothing more today)
        assert "capped    the daily spend cap was reached on 2026-10-08" in run("status", "m").stdout
        mem.save_config({"max_cost_per_day": 1.0})
        per_run = run("build-tree", "m", "--max-cost", "0.01")
        assert per_run.exit_code == 6 and "stopped before spending more than $0.01" in per_run.stderr
        assert run("build-tree", "m").exit_code == 0
    assert_complete(Memory.open("m"))
    status = orjson.loads(run("status", "m", "--json").stdout)
    assert status["capped"] is None and status["tree"]["pending"] == 0


def test_build_tree_says_a_daily_cap_below_one_calls_worst_case_as_watch_says_it(run, home, monkeypatch):
    """A ``max_cost_per_day`` no call fits under stops build-tree at once (exit 6, nothing sent) in the words
    ``watch`` uses for it, naming the setting and the nodes left, not as a day's spending reached."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 4)
        mem.save_config({"max_cost_per_day": 0.0001})
        out = run("build-tree", "m", "--json")
        assert out.exit_code == 6 and server.requests == [], out.stderr
    (capped,) = [e for e in map(orjson.loads, out.stdout.splitlines()) if e["event"] == "capped"]
    pending = builder.survey(Memory.open("m"))["pending"]
    assert out.stderr == (f"pimem: error: m: a call may cost up to ${capped['next_call']:.4f} at its worst case, more "
                          f"than the daily cap of $0.0001 (max_cost_per_day): nothing is built until it is raised; "
                          f"{pending} nodes remain unbuilt\n"), out.stderr


def test_a_mark_a_watcher_left_under_its_flag_is_lifted_by_a_build_tree_that_builds_it_all(run, home, monkeypatch):
    """A watcher capped by ``--max-cost-per-day`` (no setting) left its mark; build-tree, with no cap of its
    own, builds everything: ``status`` no longer claims that nothing more is built until tomorrow."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        mem = fill("m", 6)
        BuildState(mem.path).cap_reached("2026-10-08", "2026-10-08T16:00:00+00:00")
        assert "capped    the daily" in run("status", "m").stdout
        assert run("build-tree", "m").exit_code == 0
    assert_complete(Memory.open("m"))
    assert "\ncapped  " not in run("status", "m").stdout


def test_the_dry_runs_at_best_with_the_prompt_cache_is_no_more_than_the_rest_then_costs(run, home, monkeypatch):
    """After a partial build, "at best with the prompt cache" took the cache share of the first calls for the
    rest (which read more of it as the view grows): it said $0.99 where the rest cost $0.61. It is a lower bound
    now, every call's system prompt and view taken from the cache, and no more than the rest then costs."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai", usage="bytes") as server:
        configure(home, server, price_in=1.0, price_out=2.0, price_cached_in=0.1)
        fill("m", 200, short_every=100)
        assert run("build-tree", "m", "--max-cost", "0.03").exit_code == 6
        before = builder.spent(Memory.open("m"))
        assert 0 < before["tokens_cached"] < before["tokens_in"]
        dry = orjson.loads(run("build-tree", "m", "--dry-run", "--json").stdout)
        assert run("build-tree", "m").exit_code == 0
        after = builder.spent(Memory.open("m"))
    assert dry["cost_cached"] <= after["cost"] - before["cost"], (dry, before, after)
    assert dry["cost_cached"] < dry["cost"]


def test_free_counts_only_the_nodes_a_run_made_free(run, home, monkeypatch):
    """``free`` in ``done`` counts the joins that need no call above the lines this run wrote: a run that built
    nothing said "151 free" again each time (every short message and join of them, free before any run)."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server, price_in=1.0, price_out=2.0)
        fill("m", 40, short_every=2)

        def done() -> dict:
            out = run("build-tree", "m", "--json")
            assert out.exit_code == 0, out.stderr
            return next(e for e in map(orjson.loads, out.stdout.splitlines()) if e["event"] == "done")

        first = done()
        assert first["calls"] and first["free"] < builder.survey(Memory.open("m"))["nodes"] - first["calls"]
        assert done()["free"] == done()["calls"] == 0
        again = run("build-tree", "m")
        assert again.exit_code == 0 and ": 0 written by openai/m1, 0 free" in again.stderr, again.stderr


def test_build_tree_refuses_a_daily_cap_on_a_compactor_without_prices(home, sh):
    """As ``watch`` refuses it: no cap can count what a call of unknown cost spent, so nothing is sent."""
    with FakeLLM("openai") as server:
        configure(home, server)  # no prices
        fill("m", 6, short_every=1000)
        Memory.open("m").save_config({"max_cost_per_day": 0.5})
        out = sh("build-tree", "m", TEST_LLM_KEY="x")
        assert out.returncode == 2 and "needs prices" in out.stderr.decode(), out.stderr
        assert server.requests == []


def test_max_cost_on_compactors_without_prices_names_the_memory_to_price(home, sh):
    """The line says the command to run, the memory's name filled in, as the daily cap's line does."""
    from conftest import snapshot

    with FakeLLM("openai") as server:
        configure(home, server)  # no prices
        fill("m", 6, short_every=1000)
        fill("n", 6, short_every=1000)
        before = snapshot(home)
        one = sh("build-tree", "m", "--max-cost", "1", TEST_LLM_KEY="x").stderr.decode()
        both = sh("build-tree", "--max-cost", "1", TEST_LLM_KEY="x").stderr.decode()
        assert server.requests == [] and snapshot(home) == before
    assert one == ("pimem: error: --max-cost needs prices for the compactor of m: set them with "
                   "'pimem model m PROVIDER/MODEL --price-in USD --price-out USD'\n")
    assert both.endswith("of m, n: set them with 'pimem model m PROVIDER/MODEL --price-in USD --price-out USD' "
                         "(and so for n)\n"), both



def test_a_process_building_again_and_again_keeps_no_thread_or_file_of_its_builds(home, monkeypatch):
    """Each model build (the library's ``build_tree``, a long-lived application's) left its eight pool threads
    running, each holding the last memory it called for with its log and databases open: a test run reached
    select()'s 1,024 descriptors. The threads end with the build, and nothing of the memory stays open."""
    import gc
    import os
    import time

    def pool() -> list:
        return [t for t in threading.enumerate() if t.name.endswith("(_work)")]

    monkeypatch.setenv("TEST_LLM_KEY", "k")
    with FakeLLM("openai") as server:
        configure(home, server)
        for k in range(3):
            fill("m", 6 * (k + 1))
            with Memory.open("m") as mem:
                sched = scheduler.build_tree([mem])
            assert sum(b.stats.calls for b in sched.builders) > 0
            del sched, mem
            deadline = time.monotonic() + 60  # (the pool's threads end once the build is over)
            while pool() and time.monotonic() < deadline:
                time.sleep(0.05)
            assert pool() == []
    gc.collect()
    held = [os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")]
    assert [path for path in held if path.startswith(str(home))] == []
