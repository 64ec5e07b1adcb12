"""``held`` costs what the hits cost: read from view.json's saved shape around each message (the marks and at most
``MARK_EVERY`` characters of the shape), never by loading the view, and always equal to what the loaded,
caught-up view says."""

from __future__ import annotations

import tempfile

import orjson
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from pimem import Memory, view, viewfile
from pimem.tree import byte_size

SMALL = {"view": {"hi": 900, "lo": 450}, "cview": {"hi": 600, "lo": 300}}


def summary(l: int, i: int) -> str:
    return f"summary {l}.{i} " + "y" * 300  # two of them never join for free: a merge needs a stored node


def build_some(mem: Memory, pick) -> None:
    """Write some of the nodes a compactor would (``pick(l, i)`` says which), lowest levels first, each only
    once its halves are built: a tree half built."""
    count, tree = mem.count(), mem.tree
    for l in range(count.bit_length()):
        nodes = []
        for i in range(count >> l):
            if tree.text(l, i, count) is not None or not pick(l, i):
                continue
            if l and (tree.text(l - 1, 2 * i, count) is None or tree.text(l - 1, 2 * i + 1, count) is None):
                continue
            nodes.append((l, i, summary(l, i), None))
        if nodes:
            mem.write_nodes(nodes)


def loaded_held(home: str, ids: list[int]) -> dict:
    """The old computation: the whole view loaded and caught up, then each message looked up in it."""
    mem = Memory.open("t", home)
    mem.views.current()
    return mem.held_each(ids)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches=st.lists(st.lists(st.sampled_from([5, 40, 250, 700]), min_size=1, max_size=12), min_size=1,
                        max_size=10),
       built=st.sets(st.tuples(st.integers(0, 6), st.integers(0, 40)), max_size=60))
def test_held_from_view_json_equals_held_from_the_loaded_view(batches, built):
    with tempfile.TemporaryDirectory() as home:
        mem = Memory.at("t", home)
        mem.append([{"kind": "user", "text": "hello"}])
        mem.save_config(SMALL)
        for k, sizes in enumerate(batches):
            Memory.at("t", home).append([{"kind": "pi" if k % 3 else "tool", "text": "x" * size} for size in sizes])
            if k % 2:
                build_some(Memory.at("t", home), lambda l, i: (l, i) in built)
        ids = list(range(Memory.at("t", home).count() + 1))  # (one past the end: not in the view)
        fresh = Memory.open("t", home)
        fast = fresh.held_each(ids)
        assert fresh.views.loaded is None, "held loaded the view"
        assert fast == loaded_held(home, ids)
        assert fresh.held_each(ids, lines=False) == {i: h and {k: v for k, v in h.items() if k != "line"}
                                                     for i, h in fast.items()}


def test_held_after_the_tree_grew_behind_view_json_reflects_the_tree(home):
    mem = Memory.at("t")
    mem.append([{"kind": "user", "text": "hello"}, {"kind": "pi", "text": "z" * 700}])
    assert Memory.open("t").held(1)["held"] == "pending"
    mem.tree.append_many([(0, 1, "pi: a long reply", None)])  # a node stored without telling the view
    fresh = Memory.open("t")
    assert fresh.held(1) == {"held": "summarized", "label": "1+1", "n": 1, "line": "1+1|pi: a long reply"}
    assert fresh.held(1) == loaded_held(str(home), [1])[1]


def test_a_view_json_without_marks_is_loaded_instead(home):
    """A view.json written before the marks existed holds the same view; held then loads it."""
    mem = Memory.at("t")
    mem.append([{"kind": "user", "text": f"message {k}"} for k in range(40)])
    path = home / "t" / "view.json"
    data = orjson.loads(path.read_bytes())
    for key in ("view", "cview"):
        del data[key]["marks"]
    body = {k: data[k] for k in ("T", "view", "cview", "tree")}
    path.write_bytes(orjson.dumps({"version": 1, "check": viewfile.checksum(body), **body}) + b"\n")
    assert viewfile.SavedShape.read(path) is None
    fresh = Memory.open("t")
    assert fresh.held_each(list(range(40))) == loaded_held(str(home), list(range(40)))
    assert fresh.views.loaded is not None
    assert viewfile.SavedShape.read(path) is not None  # (and the reader wrote it again, with its marks)


class _Log:
    def __init__(self, count: int):
        self.n = count

    def count(self) -> int:
        return self.n

    def read(self, start, stop):
        raise AssertionError("read the log")


class _Tree:
    def file_sizes(self) -> dict:
        return {}

    def text(self, *_):
        raise AssertionError("read a line's text")

    stored = text


def test_held_on_an_unfolded_million_line_view_is_computed_without_loading_it(tmp_path, monkeypatch):
    """A million messages and no compactor (a big import): the view is a line per message or a few, and
    view.json holds a million-character shape. held reads the marks and a few hundred characters of it:
    neither the view, nor the log, nor a text is loaded, and it agrees with the view in memory."""
    n, line_bytes = 1_000_000, 512
    # mostly 300-byte messages (a line each), with runs of short ones that join into lines of 2…32 messages
    sizes = [20 if (i // 64) % 15 == 3 else 300 for i in range(n)]
    config = {"view": {"hi": 128_000, "lo": 64_000}, "cview": {"hi": 32_000, "lo": 16_000}, "line_bytes": line_bytes}

    def resolve(l, i, left, right):
        joined = f"{left}\n{right}"
        return joined if byte_size(joined) <= line_bytes else None

    views = viewfile.Views(config, resolve)
    views.free_join_bytes = line_bytes
    views.push_leaves(sizes, lambda k: "user: " + "x" * (sizes[k] - 6), line_bytes)
    v = views.view
    assert len(v.lines) > 900_000 and any(ln[0] for ln in v.lines)
    (tmp_path / "view.json").write_bytes(views.to_bytes())

    def refuse(*_):
        raise AssertionError("loaded the view")

    monkeypatch.setattr(viewfile.Views, "load", refuse)
    monkeypatch.setattr(view.View, "load", refuse)
    monkeypatch.setattr(viewfile.ViewFile, "current", refuse)
    held = viewfile.ViewFile(tmp_path, _Log(n), _Tree(), None, lambda: config)
    ids = [0, 1, 255, 256, 4_483, 500_000, 777_777, 960_000, 999_998, n - 1, n]
    got = held.held(ids, lambda i: sizes[i], lines=False)
    assert got[n] is None
    back = v.held_back(2 * 128_000, line_bytes)  # (past twice its budget: the oldest lines are shown as spans)
    assert 0 < back.lines < len(v.lines)
    shown = v.shown_for(back)
    for i in ids[:-1]:
        l, idx, _ = shown(i)
        assert got[i] == {"held": "inside" if l else "verbatim", "label": f"{idx << l}+{1 << l}", "n": 1 << l}
    assert got[0]["label"] == "0+524288" and got[n - 1]["label"] == f"{n - 1}+1"


@pytest.mark.parametrize("damage", [b"", b"{", b'{"version":1,"check":1,"T":5,"view":{"lines":"00000"}}\n'])
def test_a_damaged_view_json_reads_as_no_saved_shape(tmp_path, damage):
    (tmp_path / "view.json").write_bytes(damage)
    assert viewfile.SavedShape.read(tmp_path / "view.json") is None


def test_held_for_many_hits_works_out_what_is_held_back_once(home, monkeypatch):
    """A view past twice its budget shows its oldest lines as spans standing in (``view.held_back``): ``held``
    for a search's thousands of hits works those spans out once and finds each hit's by bisection, from
    view.json's shape and from the view loaded (worked out per hit, a search of 4,000 hits took minutes).
    Asking again, a hit at a time as recall does, works nothing out again while view.json stays the same."""
    mem = Memory.at("big")
    mem.append([{"kind": "user", "text": "m0 " + "word " * 60}])
    mem.save_config({"view": {"hi": 3_000, "lo": 1_500}, "cview": {"hi": 2_000, "lo": 1_000}})
    mem.append([{"kind": "user", "text": f"m{k} " + "word " * 60} for k in range(1, 600)])  # (nothing built)
    calls = []

    def counted(*args):
        calls.append(args[1])
        return held_back(*args)

    held_back = view.held_back
    monkeypatch.setattr(view, "held_back", counted)
    monkeypatch.setattr(viewfile, "held_back", counted)
    ids = list(range(600))

    def refuse(*_, **__):
        raise AssertionError("loaded the view")

    with monkeypatch.context() as patched:
        patched.setattr(viewfile.ViewFile, "current", refuse)
        reader = Memory.open("big")
        shaped = reader.held_each(ids, lines=False)
        assert calls == [600]  # (the view's lines: one per message, nothing built)
        assert [reader.held_each([i], lines=False)[i] for i in ids] == [shaped[i] for i in ids] and len(calls) == 1
    assert shaped[0]["held"] == "inside" and shaped[599] == {"held": "verbatim", "label": "599+1", "n": 1}
    loaded = Memory.open("big")
    loaded.views.current()
    calls.clear()
    assert loaded.held_each(ids, lines=False) == shaped and calls == [600]
