"""Pushing many leaves at once (``view.push_messages``, what ``append`` and catching up use) gives exactly the
views that pushing and fitting one leaf at a time gives: the same lines, texts, costs, blocked pairs, batch
state and change count, whatever the chunking, the budgets, and whether a tree is stored or not."""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from pimem import view as views_module
from pimem.tree import byte_size, free_merge, label
from pimem.view import UNLOADED, View, Views

LINE_BYTES = 512


def summary(l: int, i: int) -> str:
    return f"summary of {label(l, i)}: " + "s" * (100 + (i * 37 + l * 11) % 300)


class Log:
    """Messages as the log holds them, and the texts a view reads back (free leaves, joins, summaries)."""

    def __init__(self, sizes: list[int], stored: set[tuple[int, int]]):
        self.messages = []
        for i, size in enumerate(sizes):
            text = "é" * (size // 4) + "x" * (size - 2 * (size // 4))  # some bytes are two-byte characters
            self.messages.append({"kind": "user", "text": text, "size": byte_size(f"user: {text}"), "i": i})
        self.stored = stored

    def stored_node(self, l: int, i: int) -> str | None:
        return summary(l, i) if (l, i) in self.stored else None

    def stored_leaf(self, i: int) -> str | None:
        return self.stored_node(0, i)

    def resolve(self, l: int, i: int, left: str, right: str) -> str | None:
        """What ``view.make`` resolves: the free join, else a stored node."""
        return free_merge(left, right, LINE_BYTES) or self.stored_node(l + 1, i // 2)

    def fetch(self, l: int, i: int) -> str:
        if l == 0:
            msg = self.messages[i]
            text = f"user: {msg['text']}" if msg["size"] <= LINE_BYTES else self.stored_node(0, i)
        else:
            left, right = self.fetch(l - 1, 2 * i), self.fetch(l - 1, 2 * i + 1)
            text = free_merge(left, right, LINE_BYTES) or self.stored_node(l, i)
        assert text is not None, f"{label(l, i)} is not built"
        return text


def make(log: Log, hi: int, chi: int, stored_any: bool) -> Views:
    config = {"view": {"hi": hi, "lo": hi // 2}, "cview": {"hi": chi, "lo": chi // 3}}
    views = Views(config, log.resolve, log.fetch)
    views.free_join_bytes = LINE_BYTES
    if stored_any:
        views.saw_tree({"2026-10-08.jsonl": 1})  # pairs must then be asked of resolve, not decided by size
    return views


def one_at_a_time(log: Log, views: Views) -> None:
    """The reference: each leaf pushed, then each view fitted, as views were always updated."""
    for msg in log.messages:
        if msg["size"] <= LINE_BYTES:
            leaf = f"{msg['kind']}: {msg['text']}", msg["size"]
        else:
            leaf = (log.stored_leaf(msg["i"]) if views.tree_seen else None), None
        for v in views.both():
            v.push(*leaf)
            if v.shrinking or v.total > v.hi:
                v.fit()


def state(v: View) -> tuple:
    rows = v.rows()  # texts read back where they were left unloaded
    assert all(text is not UNLOADED for _, _, text, _ in rows)
    blocked = sorted((l, i) for l, lst in v.blocked.items() for i in lst)
    ready = sorted((l, i) for l, lst in v.ready.items() for i in lst)
    return rows, v.starts, v.total, v.T, v.shrinking, blocked, ready, v.n_ready, v.changes, v.to_json()


sizes = st.lists(st.one_of(st.integers(1, 200), st.integers(200, 700)), min_size=1, max_size=600)


@settings(max_examples=400, deadline=None)
@example(sizes=[142, 358, 1, 1], hi=0, chi=76, chunk=12, with_tree=True, seed=153)  # a merge ends the flood
@given(sizes, st.integers(0, 6000), st.integers(0, 3000), st.integers(1, 300), st.booleans(), st.integers(0, 2**32))
def test_bulk_push_equals_one_at_a_time(sizes, hi, chi, chunk, with_tree, seed):
    stored = {(l, i) for l in range(8) for i in range(700) if (l * 7 + i * 13 + seed) % 5 == 0} if with_tree else set()
    log = Log(sizes, stored)
    reference = make(log, hi, chi, with_tree)
    one_at_a_time(log, reference)
    bulk = make(log, hi, chi, with_tree)
    for start in range(0, len(sizes), chunk):  # batches as append gives them
        views_module.PUSH_CHUNK, saved = max(1, chunk // 3), views_module.PUSH_CHUNK
        try:
            views_module.push_messages(bulk, log.messages[start:start + chunk], LINE_BYTES,
                                       log.stored_leaf if with_tree else None)
        finally:
            views_module.PUSH_CHUNK = saved
    for a, b in zip(reference.both(), bulk.both()):
        assert state(a) == state(b)
    assert reference.to_bytes() == bulk.to_bytes()


def test_a_bulk_push_past_twice_the_budget_leaves_free_lines_unloaded_and_reads_them_back():
    """A big import with no compactor: the views keep each free line's cost, not its text (memory stays
    small), and the text is read back from the log when a reader renders the line."""
    log = Log([100, 150, 600, 120, 90, 80, 300, 310] * 50, set())
    bulk = make(log, 300, 100, False)
    views_module.push_messages(bulk, log.messages, LINE_BYTES, None)
    assert any(line[2] is UNLOADED for line in bulk.view.lines)
    reference = make(log, 300, 100, False)
    one_at_a_time(log, reference)
    assert bulk.view.render() == reference.view.render()
    assert bulk.cview.render(cut_unbuilt=True) == reference.cview.render(cut_unbuilt=True)


def test_pairs_whose_join_is_exactly_a_line_merge_and_one_byte_more_do_not():
    """Deciding by size alone must agree with the join's bytes at the edge (512 fits, 513 does not)."""
    sizes = [250, 249, 250, 250, 600, 249, 250, 249] * 40  # "user: " + text: 256 + 1 + 255 = 512 bytes joined
    log = Log(sizes, set())
    reference, bulk = make(log, 200, 100, False), make(log, 200, 100, False)
    one_at_a_time(log, reference)
    views_module.push_messages(bulk, log.messages, LINE_BYTES, None)
    for a, b in zip(reference.both(), bulk.both()):
        assert state(a) == state(b)
    assert any(l == 1 for l, _, _, _ in bulk.view.lines) and any(l == 0 for l, _, _, _ in bulk.view.lines)
