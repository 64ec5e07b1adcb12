"""The view algebra against the reference vectors (optchat-spec.md §2) and Taelin's rollback push."""

from __future__ import annotations

from pimem.tree import label
from pimem.view import View


def unit_view(hi, lo, built=lambda l, i: True):
    """A view where every line costs 1 and ``built(l, i)`` says whether node (l, i) exists."""
    return View(hi, lo, lambda l, i, a, b: f"{label(l + 1, i // 2)}" if built(l + 1, i // 2) else None,
                fetch=lambda l, i: label(l, i), cost=lambda l, i, text, size: 1)


def shown(v):
    return " ".join(label(l, i) for l, i, _, _ in v.lines)


def push(s, st):
    """Taelin's rollback push: states newest first as (keep, state, older)."""
    if st is None:
        return (0, s, None)
    keep, state, older = st
    return (1, state, older) if keep == 0 else (0, s, push(state, older))


def push_lines(st, T):
    starts = []
    while st:
        starts.append(st[1])
        st = st[2]
    starts.reverse()
    out = []
    for k, s in enumerate(starts):
        n = (starts[k + 1] if k + 1 < len(starts) else T) - s
        out.append((n.bit_length() - 1, s // n))
    return out


def test_push_lists_match_the_gist_table():
    st, got = None, []
    for t in range(15):
        st = push(t, st)
        got.append(" ".join(label(*p) for p in push_lines(st, t + 1)))
    assert got[:11] == ["0+1", "0+2", "0+2 2+1", "0+2 2+2", "0+4 4+1", "0+4 4+2", "0+4 4+2 6+1", "0+4 4+2 6+2",
                        "0+4 4+4 8+1", "0+4 4+4 8+2", "0+8 8+2 10+1"]
    assert got[12] == "0+8 8+4 12+1" and got[14] == "0+8 8+4 12+2 14+1"


def test_with_hi_lo_at_the_push_length_the_view_is_rollback_push_at_every_step():
    st, v = None, unit_view(0, 0)
    for t in range(3001):
        st = push(t, st)
        want = push_lines(st, t + 1)
        v.hi = v.lo = len(want)
        v.push("x", 1)
        v.fit()
        assert [(l, i) for l, i, _, _ in v.lines] == want, f"T={t + 1}"


def test_due_priority_beats_the_v1_rule_at_t10():
    v = unit_view(3, 3)
    v.load({"lines": "2200", "bytes": 4, "shrinking": False, "blocked": []})
    assert shown(v) == "0+4 4+4 8+1 9+1"
    assert v.best() == (0, 8)  # due 1 for 8&9 against 3/4 for 0..7


def test_sawtooth_vector():
    v, seen = unit_view(6, 3), {}
    for t in range(24):
        v.push("x", 1)
        if v.fit():
            seen[t + 1] = shown(v)
    assert seen == {
        7: "0+4 4+2 6+1",
        11: "0+8 8+2 10+1",
        15: "0+8 8+4 12+2 14+1",
        16: "0+8 8+4 12+4",
        20: "0+16 16+2 18+2",
        24: "0+16 16+4 20+4",
    }


def test_wait_vector_keeps_the_old_line_one_message_longer():
    late = {"on": True}
    v = unit_view(6, 3, built=lambda l, i: not ((l, i) == (1, 4) and late["on"]))
    trace = {}
    for t in range(12):
        if t == 11:
            late["on"] = False
            v.built(1, 4, "8+2")  # what Memory.write_node tells the views
        v.push("x", 1)
        v.fit()
        trace[t + 1] = (shown(v), v.shrinking)
    assert trace[7] == ("0+4 4+2 6+1", False)
    assert trace[11] == ("0+4 4+4 8+1 9+1 10+1", True)
    assert trace[12] == ("0+8 8+2 10+2", False)


def test_past_twice_hi_the_batch_falls_back_to_the_best_built_pair():
    # only (1, 5) = 10+2 is ever built: up to 2*hi the batch waits for 0&1; past it, it merges what it can
    v = unit_view(3, 2, built=lambda l, i: (l, i) == (1, 5))
    for _ in range(12):
        v.push("x", 1)
        v.fit()
        if v.T == 6:
            assert shown(v) == "0+1 1+1 2+1 3+1 4+1 5+1" and v.shrinking
    assert shown(v) == " ".join(f"{k}+1" for k in range(10)) + " 10+2"
