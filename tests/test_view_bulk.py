"""Pushing many leaves at once (``viewfile.push_messages``, what ``append`` and catching up use) gives exactly the
views that pushing and fitting one leaf at a time gives: the same lines, texts, costs, blocked pairs, batch
state and change count, whatever the chunking, the budgets, and whether a tree is stored or not."""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from pimem import view, viewfile
from pimem.message import name_bytes
from pimem.tree import byte_size, free_merge, label
from pimem.view import UNLOADED, View
from pimem.viewfile import Views

LINE_BYTES = 512


def summary(l: int, i: int) -> str:
    return f"summary of {label(l, i)}: " + "s" * (100 + (i * 37 + l * 11) % 300)


class Log:
    """Messages as the log holds them, and the texts a view reads back (free leaves, joins, summaries)."""

    def __init__(self, sizes: list[int], stored: set[tuple[int, int]], names: int = 0):
        self.messages = []
        for i, size in enumerate(sizes):
            text = "é" * (size // 4) + "x" * (size - 2 * (size // 4))  # some bytes are two-byte characters
            self.messages.append({"kind": "user", "text": text, "size": byte_size(f"user: {text}"), "i": i})
            if names and (i * 7 + names) % 3:  # (speakers' names of 1 to 60 bytes, some messages naming none)
                self.messages[-1]["meta"] = {"speaker": "Ñ" * ((i * names) % 20) + "B" * (1 + i % 20)}
        self.stored = stored

    def stored_node(self, l: int, i: int) -> str | None:
        return summary(l, i) if (l, i) in self.stored else None

    def stored_leaf(self, i: int) -> str | None:
        return self.stored_node(0, i)

    def resolve(self, l: int, i: int, left: str, right: str) -> str | None:
        """What ``ViewFile.make`` resolves: the free join, else a stored node."""
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
        extra = 0
        if msg["size"] <= LINE_BYTES:
            leaf = f"{msg['kind']}: {msg['text']}", msg["size"]
            extra = min(name_bytes(msg), LINE_BYTES - msg["size"])
        else:
            leaf = (log.stored_leaf(msg["i"]) if views.tree_seen else None), None
        for v in views.both():
            v.push(*leaf, extra=extra)
            if v.shrinking or v.total > v.hi:
                v.fit()


def state(v: View) -> tuple:
    rows = v.rows()  # texts read back where they were left unloaded
    assert all(text is not UNLOADED for _, _, text, _ in rows)
    blocked = sorted((l, i) for l, lst in v.blocked.items() for i in lst)
    ready = sorted((l, i) for l, lst in v.ready.items() for i in lst)
    assert v.total == sum(cost for *_, cost in rows)
    assert set(v.extras) <= {(l, i) for l, i, _, _ in rows}
    return rows, v.starts, v.total, v.T, v.shrinking, blocked, ready, v.n_ready, v.changes, v.to_json(), v.extras


sizes = st.lists(st.one_of(st.integers(1, 200), st.integers(200, 700)), min_size=1, max_size=600)


@settings(max_examples=400, deadline=None)
@example(sizes=[142, 358, 1, 1], hi=0, chi=76, chunk=12, with_tree=True, seed=153, names=0)  # a merge ends the flood
@example(sizes=[144, 200, 200, 1], hi=286, chi=300, chunk=1, with_tree=True, seed=1, names=0)  # merges end it below lo
@example(sizes=[1, 1, 1, 300, 1, 2], hi=100, chi=100, chunk=3, with_tree=False, seed=0, names=1)
@given(sizes, st.integers(0, 6000), st.integers(0, 3000), st.integers(1, 300), st.booleans(), st.integers(0, 2**32),
       st.sampled_from([0, 0, 1, 2, 5]))
def test_bulk_push_equals_one_at_a_time(sizes, hi, chi, chunk, with_tree, seed, names):
    """(``names``: some messages name their speaker, whose name the lines count: ``View``)"""
    stored = {(l, i) for l in range(8) for i in range(700) if (l * 7 + i * 13 + seed) % 5 == 0} if with_tree else set()
    log = Log(sizes, stored, names)
    reference = make(log, hi, chi, with_tree)
    one_at_a_time(log, reference)
    bulk = make(log, hi, chi, with_tree)
    for start in range(0, len(sizes), chunk):  # batches as append gives them
        viewfile.PUSH_CHUNK, saved = max(1, chunk // 3), viewfile.PUSH_CHUNK
        try:
            viewfile.push_messages(bulk, log.messages[start:start + chunk], LINE_BYTES,
                                       log.stored_leaf if with_tree else None)
        finally:
            viewfile.PUSH_CHUNK = saved
    for a, b in zip(reference.both(), bulk.both()):
        assert state(a) == state(b)
    assert reference.to_bytes() == bulk.to_bytes()


def test_a_bulk_push_past_twice_the_budget_leaves_free_lines_unloaded_and_reads_them_back():
    """A big import with no compactor: the views keep each free line's cost, not its text (memory stays
    small), and the text is read back from the log when a reader renders the line."""
    log = Log([100, 150, 600, 120, 90, 80, 300, 310] * 50, set())
    bulk = make(log, 300, 100, False)
    viewfile.push_messages(bulk, log.messages, LINE_BYTES, None)
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
    viewfile.push_messages(bulk, log.messages, LINE_BYTES, None)
    for a, b in zip(reference.both(), bulk.both()):
        assert state(a) == state(b)
    assert any(l == 1 for l, _, _, _ in bulk.view.lines) and any(l == 0 for l, _, _, _ in bulk.view.lines)


small_sizes = st.lists(st.one_of(st.integers(1, 60), st.integers(200, 260), st.integers(500, 700)), min_size=1,
                       max_size=400)


@settings(max_examples=300, deadline=None)
@given(small_sizes, st.integers(0, 400), st.integers(0, 400), st.integers(1, 200), st.sampled_from([0, 1, 3]))
def test_the_second_view_copying_the_first_ones_steps_changes_nothing(sizes, hi, chi, chunk, names):
    """Small budgets: both views flood at once and mostly share their tail, so the compactor's view copies the
    view's steps (``View.replay``) chunk after chunk, up to where a merge brings it to its own flood line."""
    log = Log(sizes, set(), names)
    reference = make(log, hi, chi, False)
    one_at_a_time(log, reference)
    bulk = make(log, hi, chi, False)
    viewfile.PUSH_CHUNK, saved = chunk, viewfile.PUSH_CHUNK
    try:
        viewfile.push_messages(bulk, log.messages, LINE_BYTES, None)
    finally:
        viewfile.PUSH_CHUNK = saved
    for a, b in zip(reference.both(), bulk.both()):
        assert state(a) == state(b)


def clone(v: View) -> View:
    w = View(v.hi, v.lo, v.resolve, v.fetch)
    w.lines, w.starts = list(v.lines), list(v.starts)
    w.ready, w.blocked = ({l: list(lst) for l, lst in table.items()} for table in (v.ready, v.blocked))
    w.total, w.shrinking, w.T, w.n_ready, w.changes = v.total, v.shrinking, v.T, v.n_ready, v.changes
    return w


def test_steps_are_not_copied_where_a_merge_would_bring_the_copy_to_its_own_flood_line():
    """One-byte messages: a push that completes a deep run of free joins leaves the view smaller than before
    it (message 159 closes five levels). A view whose flood line lies in that dip must run its own ``fit``
    rather than copy the other's steps."""
    log = Log([1] * 400, set())
    texts = [f"user: {msg['text']}" for msg in log.messages]
    a = View(0, 0, log.resolve, log.fetch)
    for text in texts[:159]:
        a.push(text)
        a.fit()
    b, c = clone(a), clone(a)  # (sharing its lines, as the two views share theirs)
    leaves = [(0, i, UNLOADED, view.line_bytes_cost(0, i, texts[i], None)) for i in range(159, 200)]
    trace = view.Trace(a)
    a.push_many(leaves, lambda k: texts[159 + k], LINE_BYTES, trace)
    assert not trace.general and trace.least < b.total - 2  # the dip below the total the chunk started from
    for v in (b, c):
        v.hi = (trace.least + b.total) // 4  # its flood line, 2·hi, inside the dip
    assert b.total > b.flood_line() >= trace.least
    assert not b.replay(a, trace)
    b.push_many(leaves, lambda k: texts[159 + k], LINE_BYTES)
    d = clone(c)
    d.hi = 0  # with its flood line below the dip, the same view copies the steps
    assert d.replay(a, trace) and state(d) == state(a)
    for text in texts[159:200]:
        c.push(text)
        if c.shrinking or c.total > c.hi:
            c.fit()
    assert state(b) == state(c)


def test_a_view_file_gone_between_its_stat_and_its_read_is_missing_not_unusable(tmp_path, monkeypatch, capsys):
    """A memory moved or deleted while a watcher read its view: view.json was there at its stat and gone at its
    read, and the watcher warned that it was unusable before it said the memory had gone."""
    from pimem.memory import Memory

    mem = Memory.at("m", home=tmp_path)
    mem.append([{"kind": "user", "text": f"message {n}"} for n in range(5)])
    mem.view_lines()
    assert (mem.path / "view.json").exists()

    def gone(path, *args, **kwargs):
        raise FileNotFoundError(2, "No such file or directory", str(path))

    monkeypatch.setattr(viewfile, "read_bytes", gone)
    fresh = Memory.open("m", home=tmp_path)
    assert len(fresh.view_lines()) == 5 and "unusable" not in capsys.readouterr().err
