"""A view past twice its budget with nothing built to fold (a bulk arrival of messages the compactor has not
reached: an import, a watcher's backlog) is shown within twice its budget: its newest lines as they are, and
before them the coarsest aligned spans that tile the rest, placeholders a model zooms down to the messages.
``view.json`` stays as it is, ``held`` says what is shown, and once summaries come the view folds as ever."""

from __future__ import annotations

import orjson
import pytest

from pimem import Memory, api, view
from pimem.view import View, line_bytes_cost

HI = 3_000
BUDGETS = {"view": {"hi": HI, "lo": HI // 2}, "cview": {"hi": 2_000, "lo": 1_000}}


def chat(n: int, start: int = 0) -> list[dict]:
    return [{"kind": "user" if k % 2 == 0 else "pi", "text": f"m{k} " + "word " * 60} for k in range(start, start + n)]


@pytest.fixture
def big(home):
    mem = Memory.at("big")
    mem.append(chat(1))
    mem.save_config(BUDGETS)
    mem.append(chat(599, 1))
    return mem


def labels(lines: list[str]) -> list[tuple[int, int]]:
    """Each line's first message and message count, checked to tile the messages in order."""
    out, at = [], 0
    for line in lines:
        first, n = map(int, line.split("|", 1)[0].split("+"))
        assert first == at and n & (n - 1) == 0 and first % n == 0, line
        out.append((first, n))
        at += n
    return out


def test_every_reader_shows_a_view_past_twice_its_budget_within_it(big, run):
    mem = Memory.open("big")
    views = mem.views.current()
    assert views.view.total > 20 * HI  # (nothing built: a line per message, as appended)
    saved = (big.path / "view.json").read_bytes()
    context = run("context", "big").stdout
    shown = context.split("<chat>\n", 1)[1].split("\n</chat>", 1)[0].split("\n")
    assert len((("\n".join(shown)) + "\n").encode()) <= 2 * HI
    assert run("view", "big").stdout.splitlines() == shown
    assert [orjson.loads(line)["label"] for line in run("view", "big", "--json").stdout.splitlines()] == \
        [line.split("|")[0] for line in shown]
    mcp = api.view("big", lines=10_000)
    assert mcp["lines"] == shown and mcp["bytes"] <= 2 * HI and mcp["messages"] == 600
    assert Memory.open("big").view_lines() == shown
    spans = labels(shown)
    assert sum(n for _, n in spans) == 600 and shown[-1].startswith("599+1|pi: m599 ")
    first = next(k for k, (_, n) in enumerate(spans) if n == 1)
    assert first < 8 and all(line.endswith(f"|{view.PLACEHOLDER}") for line in shown[:first])  # (600 = 512+64+16+8)
    assert (big.path / "view.json").read_bytes() == saved  # what the view is stays as it was

    # every message stays reachable: zoom opens a span down to the messages, and held says what is shown
    halves = run("zoom", "big", shown[0].split("|")[0]).stdout.splitlines()
    assert halves == [f"0+{spans[0][1] // 2}|(not summarized yet: zoom it for its two halves)",
                      f"{spans[0][1] // 2}+{spans[0][1] // 2}|(not summarized yet: zoom it for its two halves)"]
    assert run("zoom", "big", "3+1").stdout.startswith("3+1|pi: m3 word")
    held = Memory.open("big").held_each(list(range(600)))
    loaded = Memory.open("big")
    loaded.views.current()
    assert loaded.held_each(list(range(600))) == held  # (from view.json's shape, and from the view loaded)
    for (first_i, n), line in zip(spans, shown):
        for i in (first_i, first_i + n - 1):
            assert held[i]["label"] == f"{first_i}+{n}" and held[i]["line"] == line
            assert held[i]["held"] == ("inside" if n > 1 else "verbatim")


def test_view_stats_says_what_is_held_back(big, run):
    stats = run("view", "big", "--stats").stdout
    assert "held back" in stats and "past twice its budget" in stats
    doc = orjson.loads(run("view", "big", "--stats", "--json").stdout)
    back = doc["held_back"]
    assert doc["bytes"] <= 2 * HI and back["messages"] + doc["lines"] - back["spans"] == 600
    assert back["view_bytes"] > 20 * HI
    Memory.at("small").append(chat(4))
    assert orjson.loads(run("view", "small", "--stats", "--json").stdout)["held_back"] is None


def test_what_is_shown_only_grows_at_its_tail_between_moves_of_what_is_held_back(big, run):
    def shown() -> list[str]:
        return run("view", "big").stdout.splitlines()

    before, moves = shown(), 0
    for k in range(600, 700):
        Memory.at("big").append(chat(1, k))
        after = shown()
        assert len("".join(line + "\n" for line in after).encode()) <= 2 * HI
        if after[:len(before)] != before:
            moves += 1
        before = after
    step = 2 * HI // 2 // (512 + 16)  # (lines held back go by about half the lines that fit: 5 here)
    assert 0 < moves <= 100 // step + 1  # not one more every message


def test_once_summaries_come_the_view_folds_as_ever(big, run):
    assert run("build-tree", "big").exit_code == 0
    doc = orjson.loads(run("view", "big", "--stats", "--json").stdout)
    assert doc["held_back"] is None and doc["bytes"] <= HI
    assert labels(run("view", "big").stdout.splitlines())


def test_a_view_within_twice_its_budget_holds_nothing_back():
    v = View(100, 50, lambda *_: None)
    for k in range(10):
        v.push("user: " + "x" * 10)
    assert v.held_back(v.total, 512) == view.NOTHING_HELD and v.stand_ins(view.NOTHING_HELD) == []
    assert v.held_back(v.total - 1, 64).lines > 0


@pytest.mark.parametrize("stop", [1, 2, 3, 600, 1 << 20, (1 << 20) + 5])
def test_the_spans_standing_in_tile_the_messages_held_back(stop):
    spans = view.tiling(stop)
    at = 0
    for l, i in spans:
        assert i << l == at
        at += 1 << l
    assert at == stop and len(spans) == bin(stop).count("1")


def test_lines_held_back_are_counted_at_the_most_a_line_can_take():
    """A placeholder counts its own bytes, any other line the most its text can be: so the bound holds
    whatever the texts are, and the shape alone (view.json's) decides it."""
    v = View(1_000, 500, lambda *_: None)
    for k in range(300):
        v.push(None if k % 3 == 0 else "user: " + "x" * (k % 400))
    back = v.held_back(2_000, 512)
    rows = v.stand_ins(back) + v.rows(back.lines)
    assert sum(cost for *_, cost in rows) <= 2_000
    assert back == (back.lines, False) == view.held_back(((ln[0], ln[2] is None) for ln in reversed(v.lines)), len(v.lines), v.T,
                                           2_000, 512, lambda l, i: None if v.find(l, i) < 0 else v.text(v.find(l, i)) is None)
    assert all(line_bytes_cost(l, i, text, None) == cost for l, i, text, cost in rows)


def test_a_budget_of_a_few_hundred_bytes_is_kept_where_even_the_newest_line_with_the_span_before_may_pass_it(home, run):
    """Twice ``hi`` is 600 bytes: the newest line (up to 512 bytes of text) and the span before it, a line of the
    view (a free join, counted at the most a line can take), may pass it. Both were shown all the same: 823
    bytes. The span is shown as a placeholder instead (zoom opens it), and held says so; with ``hi`` 200 even
    the newest line may not fit, and every line is held back."""
    mem = Memory.at("tiny")
    mem.append([{"kind": "pi", "text": "w0 " * 50}])
    mem.save_config({"view": {"hi": 300, "lo": 67}, "cview": {"hi": 300, "lo": 67}})
    mem.append([{"kind": "user", "text": "w1 " * 50}, {"kind": "echo", "text": "w2 " * 160}])
    v = Memory.open("tiny").views.current().view
    assert [(l, i) for l, i, *_ in v.lines] == [(1, 0), (0, 2)] and 600 < v.total  # (nothing builds 0+4)
    shown = run("view", "tiny", "--include-tools").stdout
    assert shown.splitlines()[0] == f"0+2|{view.PLACEHOLDER}" and shown.splitlines()[1].startswith("2+1|echo: w2 w2 ")
    assert len(shown.encode()) <= 600 and len(shown.splitlines()) == 2
    context = run("context", "tiny").stdout
    assert context.split("<chat>\n", 1)[1].split("\n</chat>", 1)[0] + "\n" == run("view", "tiny").stdout
    assert [orjson.loads(line)["label"] for line in run("view", "tiny", "--json").stdout.splitlines()] == ["0+2", "2+1"]
    held = Memory.open("tiny").held_each([0, 1, 2], include_tools=True)
    assert [(held[i]["label"], held[i]["line"]) for i in range(3)] == [
        ("0+2", f"0+2|{view.PLACEHOLDER}"), ("0+2", f"0+2|{view.PLACEHOLDER}"), ("2+1", shown.splitlines()[1])]
    assert run("zoom", "tiny", "0+2").stdout.startswith("0+1|pi: w0 w0 ")
    stats = run("view", "tiny", "--stats").stdout
    assert "held back 1 line (messages 0–1), shown as 1 span" in stats, stats
    Memory.open("tiny").save_config({"view": {"hi": 200, "lo": 67}})
    shown = run("view", "tiny", "--include-tools").stdout
    assert shown == f"0+2|{view.PLACEHOLDER}\n2+1|{view.PLACEHOLDER}\n"
    assert run("view", "tiny").stdout.splitlines()[1] == "2+1|echo: (hidden)"  # (standing in; a placeholder's bytes)
    held = Memory.open("tiny").held_each([2], include_tools=True)
    assert (held[2]["held"], held[2]["line"]) == ("pending", f"2+1|{view.PLACEHOLDER}")
    assert "held back 2 lines (messages 0–2), shown as 2 spans" in run("view", "tiny", "--stats").stdout


def test_a_view_loaded_from_its_json_waits_on_the_same_pairs():
    """``View.load`` finds the sibling pairs a run of lines at a time: the same pairs, ready or waiting, as
    the view that was saved, with placeholders, merged lines and pairs waiting for a parent among them."""
    import random

    rnd = random.Random(5)
    for _ in range(200):
        built: set[tuple[int, int]] = set()
        v = View(rnd.choice([200, 500, 2_000]), 100, lambda l, i, a, b: f"s{l}.{i}" if (l + 1, i // 2) in built else None)
        for _ in range(rnd.randint(1, 300)):
            v.push(None if rnd.random() < 0.3 else "user: " + "x" * rnd.randint(1, 300))
            if rnd.random() < 0.2:
                built.add((rnd.randint(1, 5), rnd.randint(0, 40)))
            if v.shrinking or v.total > v.hi:
                v.fit()
        w = View(v.hi, v.lo, v.resolve)
        w.load(v.to_json())
        assert w.ready == {l: lst for l, lst in v.ready.items() if lst}
        assert w.blocked == {l: lst for l, lst in v.blocked.items() if lst} and w.n_ready == v.n_ready
        assert w.starts == v.starts and w.to_json() == v.to_json()


def test_held_says_what_is_shown_with_part_of_the_tree_built(big, run):
    """Summaries of the oldest messages fold them (past twice its budget the view merges every pair whose
    parent is built), and the rest is still held back: a span standing in is the view's own line where it is
    one, and held names the line shown for every message."""
    mem = Memory.open("big")
    for l in range(1, 10):  # the first 512 messages summarized, level by level
        mem.write_nodes([(l, i, f"summary {l}.{i}", None) for i in range(512 >> l)])
    shown = run("view", "big").stdout.splitlines()
    spans = labels(shown)
    assert len("".join(line + "\n" for line in shown).encode()) <= 2 * HI
    assert shown[0] == "0+512|summary 9.0" and spans[1][1] > 1 and shown[1].endswith(view.PLACEHOLDER)
    assert run("zoom", "big", shown[1].split("|")[0]).stdout.count(view.PLACEHOLDER[:-1]) == 2
    held = Memory.open("big").held_each(list(range(600)))
    for (first, n), line in zip(spans, shown):
        for i in range(first, first + n, max(1, n // 4)):
            assert (held[i]["label"], held[i]["line"]) == (f"{first}+{n}", line)


def test_view_stats_says_how_many_spans_standing_in_are_not_summarized(big, run):
    """A span standing in for lines held back may be a line of the view that is built: it is not said to wait
    for a summary."""
    mem = Memory.open("big")
    for l in range(1, 10):
        mem.write_nodes([(l, i, f"summary {l}.{i}", None) for i in range(512 >> l)])
    shown = run("view", "big").stdout.splitlines()
    doc = orjson.loads(run("view", "big", "--stats", "--json").stdout)
    spans = doc["held_back"]["spans"]
    unbuilt = sum(line.endswith(view.PLACEHOLDER) for line in shown[:spans])
    assert shown[0] == "0+512|summary 9.0" and 0 < unbuilt < spans
    stats = run("view", "big", "--stats").stdout
    assert f"shown as {spans} spans, {unbuilt} not summarized yet:" in stats, stats


def test_a_tool_message_standing_in_shows_its_marker(home, run):
    """A span standing in for lines held back that is a tool message's placeholder is shown as its marker, as
    it is when not held back: a reader without tools is not told to zoom what zoom refuses it."""
    mem = Memory.at("t")
    mem.append([{"kind": "user", "text": "hello"}])
    mem.save_config({"view": {"hi": 300, "lo": 150}})
    Memory.at("t").append([{"kind": "user", "text": "message 1 " + "w" * 300},
                           {"kind": "echo", "text": "KEY=hunter2 " + "z" * 700}, {"kind": "user", "text": "x" * 300}])
    assert orjson.loads(run("view", "t", "--stats", "--json").stdout)["held_back"]["spans"] == 1  # (0+2 shown bare)
    shown = run("view", "t").stdout.splitlines()
    assert shown[1] == "2+1|echo: (hidden)", shown  # (in no more bytes than the placeholder the view counts)
    assert run("view", "t", "--include-tools").stdout.splitlines()[1] == f"2+1|{view.PLACEHOLDER}"
    context = run("context", "t").stdout
    assert "2+1|echo: (hidden)" in context and "hunter2" not in context
