"""Properties of the view algebra (hypothesis), and what a realistic log costs in rewritten lines."""

from __future__ import annotations

import tempfile

from hypothesis import HealthCheck, Phase, given, settings, strategies as st

from bench.synth import messages
from pimem import Memory
from pimem.tree import byte_size, free_merge, label
from pimem.view import View, render_line


def shape(v):
    return [(l, i) for l, i, _, _ in v.lines]


def tiles(v) -> bool:
    at = 0
    for l, i, _, _ in v.lines:
        if i << l != at:
            return False
        at = (i + 1) << l
    return at == v.T


def summary(l: int, i: int) -> str:
    """What a compactor might write: a few hundred bytes."""
    return f"summary of {label(l, i)}: " + "x" * (200 + (i * 37 + l * 11) % 280)


class Tree:
    """A tree whose nodes are built when ``built(l, i)`` says so: free joins, else summaries."""

    def __init__(self, built=lambda l, i: True):
        self.built = built

    def resolve(self, l, i, left, right):
        return free_merge(left, right) or (summary(l + 1, i // 2) if self.built(l + 1, i // 2) else None)


ops = st.lists(st.tuples(st.integers(1, 700), st.booleans(), st.integers(0, 3)), min_size=1, max_size=400)


@settings(max_examples=60, deadline=None)
@given(ops, st.integers(600, 3000))
def test_the_view_tiles_the_log_and_between_batches_only_grows_at_its_tail(steps, hi):
    """Messages of random sizes; some parents never get built, others are built later (each step may build
    the parent of the most due pair). The view always tiles [0, T) and, whenever no merge happened, the old
    lines are a prefix of the new ones."""
    late: set[tuple[int, int]] = set()
    tree = Tree(lambda l, i: (l * 7 + i) % 5 != 0 and (l, i) not in late)
    v = View(hi, hi // 2, tree.resolve, fetch=None)
    for size, long_and_unbuilt, build in steps:
        before = shape(v)
        text = None if long_and_unbuilt and size > 512 else "u: " + "y" * min(size, 509)
        best = v.best()
        if best and build >= 2:
            parent = (best[0] + 1, best[1] // 2)
            if build == 3 and parent in late:
                late.discard(parent)
                v.built(*parent, summary(*parent))  # what writing a node tells the views
            elif build == 2 and not v.is_blocked(*best):
                late.add(parent)
        v.push(text)
        merged = v.fit()
        assert tiles(v)
        if not merged:
            assert shape(v)[:-1] == before
        if v.over():  # past twice the budget, nothing built may be left to merge
            pairs = [(a, b) for a, b in zip(v.lines, v.lines[1:]) if a[0] == b[0] and a[1] % 2 == 0 and b[1] == a[1] + 1]
            assert all(a[2] is None or b[2] is None or tree.resolve(a[0], a[1], a[2], b[2]) is None for a, b in pairs)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(5, 600), min_size=1, max_size=1500), st.integers(11_000, 40_000))
def test_with_every_parent_built_the_view_never_exceeds_hi(sizes, hi):
    tree = Tree()
    v = View(hi, hi // 2, tree.resolve)
    for n, size in enumerate(sizes):
        v.push("u: " + "z" * max(0, min(size, 512) - 3))
        v.fit()
        assert v.total <= hi, f"T={n + 1}"
        assert not v.shrinking
        assert v.total == sum(c for *_, c in v.lines)


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 700), st.booleans()), min_size=2, max_size=300), st.integers(300, 4000),
       st.data())
def test_a_batch_of_built_nodes_ends_as_node_by_node(messages_, hi, data):
    """``built_many`` (a writer's batch: all filled, then one sweep while the view stays past twice its
    budget) leaves a view exactly as ``built`` then ``fit`` node by node does: lines, texts, totals, the
    batch flag and the pairs waiting, whatever the nodes and however far past its budget the view is."""
    stored: set[tuple[int, int]] = set()

    def resolve(l, i, left, right):
        return free_merge(left, right) or (summary(l + 1, i // 2) if (l + 1, i // 2) in stored else None)

    batch, one = View(hi, hi // 2, resolve), View(hi, hi // 2, resolve)
    for size, unbuilt in messages_:
        text = None if unbuilt and size > 512 else "u: " + "y" * min(size, 509)
        for v in (batch, one):
            v.push(text)
            v.fit()
    T = batch.T
    for _ in range(data.draw(st.integers(1, 6))):
        # unbuilt leaves, and the parents (and grandparents) of pairs in the view, in any order
        lines = batch.lines
        leaves = [(0, i) for l, i, text, _ in lines if text is None]
        pairs = [(a[0] + 1 + up, a[1] >> 1 + up) for a, b in zip(lines, lines[1:]) for up in (0, 1)
                 if a[0] == b[0] and a[1] % 2 == 0 and b[1] == a[1] + 1]
        choices = [n for n in dict.fromkeys(leaves + pairs) if n not in stored and (n[1] + 1) << n[0] <= T]
        if not choices:
            break
        nodes = list(dict.fromkeys(data.draw(st.lists(st.sampled_from(choices), max_size=60))))
        stored.update(nodes)
        built = [(l, i, f"u: {i}" if l == 0 and i % 3 == 0 else summary(l, i)) for l, i in nodes]  # (some shorter than a placeholder)
        batch.built_many(built)
        for node in built:
            one.built(*node)
            one.fit()
        assert batch.lines == one.lines and batch.starts == one.starts
        assert (batch.total, batch.changes, batch.shrinking, batch.n_ready) == (one.total, one.changes, one.shrinking,
                                                                               one.n_ready)
        for table in ("ready", "blocked"):
            assert {l: lst for l, lst in getattr(batch, table).items() if lst} == {
                l: lst for l, lst in getattr(one, table).items() if lst}, table


def test_realistic_log_rewrites_fewer_than_three_lines_per_message():
    """5,000 synthetic agent messages (short turns, one in ten a long tool result), every node built as soon
    as it is due: count the lines after the first changed one (what a prompt cache must re-read)."""
    v = View(128_000, 64_000, Tree().resolve)
    rewritten, batches = 0, 0
    for msg in messages(5000, seed=3):
        text = f"{msg['kind']}: {msg['text']}"
        if len(text.encode()) > 512:
            text = summary(0, v.T)
        before = [(l, i, t) for l, i, t, _ in v.lines]
        v.push(text)
        if v.fit():
            batches += 1
            after = [(l, i, t) for l, i, t, _ in v.lines]
            same = next((k for k, (a, b) in enumerate(zip(before, after)) if a != b), min(len(before), len(after)))
            rewritten += len(after) - same - 1  # the new leaf is not a rewrite
    assert batches >= 5
    assert 64_000 <= v.total <= 128_000
    assert rewritten / 5000 < 3, rewritten / 5000
    print(f"lines rewritten per message: {rewritten / 5000:.2f} over {batches} batches")


@settings(max_examples=10, deadline=None, phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])
@given(names=st.lists(st.text(st.characters(codec="utf-8", categories=["L", "N"]), min_size=1, max_size=40),
                      min_size=1, max_size=4),
       sizes=st.lists(st.integers(1, 200), min_size=40, max_size=80),
       hi=st.integers(600, 1500))
def test_what_every_reader_shows_stays_within_twice_the_budget_whatever_the_speakers_names(names, sizes, hi):
    """Whatever the speakers' names (``meta.speaker``: readers say them, ``user Caroline: …``) and the budget,
    what ``view``, ``context``, ``map`` and MCP show (all through ``ViewFile.shown``, with tool traffic or without)
    is at most twice ``hi``, the bound the view is designed to."""
    with tempfile.TemporaryDirectory() as home:
        mem = Memory.at("t", home)
        mem.append([{"kind": "note", "text": "start"}])
        mem.save_config({"view": {"hi": hi, "lo": hi // 2}})
        for k, size in enumerate(sizes):
            Memory.at("t", home).append([{"kind": "user" if k % 2 else "pi", "text": "w" * size,
                                          "meta": {"speaker": names[k % len(names)]}}])
            mem = Memory.open("t", home)
            views = mem.views.current()
            for include_tools in (False, True):
                shown = mem.views.shown(views, include_tools=include_tools, save=False)
                assert sum(byte_size(render_line(l, i, text)) + 1 for l, i, text, _ in shown) <= 2 * hi


@settings(max_examples=10, deadline=None, phases=[Phase.generate], suppress_health_check=[HealthCheck.too_slow])
@given(kinds=st.lists(st.sampled_from(["user", "pi", "tool", "echo"]), min_size=40, max_size=80),
       programs=st.lists(st.sampled_from(["psql", "pytest", "git", "npm", "kubectl", "x"]), min_size=1, max_size=4),
       hi=st.integers(600, 1500))
def test_what_every_reader_shows_of_long_tool_messages_not_summarised_yet_stays_within_the_budget(kinds, programs, hi):
    """A long tool call or result not summarised yet is shown as its marker (``tool: ran psql (hidden)``) where
    the view counts a placeholder's bytes (``(not summarized yet: zoom it)``, 29): what ``view``, ``context``,
    ``map`` and MCP show (``ViewFile.shown``, ``view_lines``) takes no more than the view counts for each line,
    and at most twice ``hi`` in all. The marker shown was the long one (``tool: ran psql (details hidden; include
    tools to see it)``, 56 bytes), and a view of such messages showed nearly twice its bound."""
    from pimem.view import line_bytes_cost

    with tempfile.TemporaryDirectory() as home:
        mem = Memory.at("t", home)
        mem.append([{"kind": "note", "text": "start"}])
        mem.save_config({"view": {"hi": hi, "lo": hi // 2}})
        for k, kind in enumerate(kinds):
            text = (f"{programs[k % len(programs)]} --host db.internal --verbose " if kind == "tool" else
                    f"said {k} ") + "w" * 600  # (past line_bytes: a placeholder until it is summarised)
            Memory.at("t", home).append([{"kind": kind, "text": text}])
            mem = Memory.open("t", home)
            views = mem.views.current()
            for include_tools in (False, True):
                shown = mem.views.shown(views, include_tools=include_tools, save=False)
                costs = [byte_size(render_line(l, i, text)) + 1 for l, i, text, _ in shown]
                assert all(cost <= line_bytes_cost(l, i, None, None) for cost, (l, i, text, _) in zip(costs, shown)
                           if l == 0 and text is not None and text.startswith(("tool", "echo"))), shown
                assert sum(costs) <= 2 * hi
                lines = mem.view_lines(include_tools=include_tools)
                assert sum(byte_size(line) + 1 for line in lines) <= 2 * hi
