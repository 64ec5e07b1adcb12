"""Tree nodes, labels, free nodes, node writing, view.json persistence, held, zoom and the commands."""

from __future__ import annotations

import re

import orjson
import pytest

from bench.llm_server import FakeLLM, filler
from pimem import Memory
from pimem.errors import BadInput, NotFound
from pimem.tree import free_merge, label, parse_label
from pimem.viewfile import checksum as view_check

from conftest import snapshot

SMALL = {"view": {"hi": 300, "lo": 150}, "cview": {"hi": 200, "lo": 100}}


def small_memory(n=0, config=SMALL, texts=None):
    mem = Memory.at("t")
    mem.append([{"kind": "user", "text": "hello"}])
    mem.save_config(config)
    mem = Memory.at("t")
    rest = texts if texts is not None else [f"message {k}" for k in range(1, n)]
    if rest:
        mem.append([{"kind": "user", "text": t} for t in rest])
    return Memory.at("t")


def test_labels():
    assert label(3, 5) == "40+8" and label(0, 7) == "7+1"
    assert parse_label("40+8") == (3, 5)
    assert parse_label("0+1", count=1) == (0, 0)
    for bad, why in [("40", "malformed"), ("4+3", "power of two"), ("4+8", "misaligned"), ("-1+1", "malformed"),
                     ("0+0", "power of two")]:
        with pytest.raises(BadInput, match=why):
            parse_label(bad)
    with pytest.raises(NotFound, match="out of range"):
        parse_label("8+8", count=15)


def test_free_merge_is_the_join_when_it_fits():
    assert free_merge("a" * 255, "b" * 256) == "a" * 255 + "\n" + "b" * 256
    assert free_merge("a" * 256, "b" * 256) is None


def test_write_node_validates_and_builds_once(home):
    mem = small_memory(2, texts=["x" * 600])
    with pytest.raises(BadInput, match="already built"):
        mem.write_node(0, 0, "hello again")  # a short message is its own (free) leaf
    with pytest.raises(BadInput, match="halves"):
        mem.write_node(1, 0, "both")
    with pytest.raises(BadInput, match="over the 512-byte line"):
        mem.write_node(0, 1, "y" * 513)
    with pytest.raises(NotFound, match="out of range"):
        mem.write_node(0, 2, "nothing there")
    before = snapshot(home)
    with pytest.raises(BadInput, match="empty"):
        mem.write_node(0, 1, "  ")
    assert snapshot(home) == before
    summary = "user: " + "a long line of x; " * 28  # 510 bytes: joined with "user: hello" it needs a model
    mem.write_node(0, 1, summary, meta={"model": "m", "input_tokens": 10})
    with pytest.raises(BadInput, match="already built"):
        mem.write_node(0, 1, "again")
    assert mem.tree.text(0, 1) == summary
    mem.write_node(1, 0, "user said hello, then a long x line")
    (line,) = [orjson.loads(l) for f in (home / "t" / "tree").iterdir() for l in f.read_bytes().splitlines()][-1:]
    assert {k: line[k] for k in ("l", "i", "text", "size")} == {"l": 1, "i": 0, "text": "user said hello, then a long x line", "size": 35}
    # deleting the derived index loses nothing
    mem.tree.close()
    (home / "t" / "index.sqlite").unlink()
    assert Memory.at("t").tree.text(1, 0) == "user said hello, then a long x line"


def test_a_batch_with_a_node_already_built_is_rejected_whole(home):
    """``write_nodes`` looks a batch's nodes up in one query: a node stored before (by this Memory or another
    one), or twice in the batch, rejects the whole batch, and nothing is written."""
    mem = small_memory(texts=["x" * 600] * 7)
    mem.write_nodes([(0, 1, "user: long 1", {}), (0, 3, "user: long 3", {})])
    Memory.at("t").write_nodes([(0, 6, "user: long 6", {})])
    before = snapshot(home)
    for batch, built in [([(0, 5, "user: long 5", {}), (0, 3, "again", {})], "3+1"),
                         ([(0, 5, "user: long 5", {}), (0, 6, "again", {})], "6+1"),
                         ([(0, 5, "user: long 5", {}), (0, 5, "twice", {})], "5+1")]:
        with pytest.raises(BadInput, match=rf"node {re.escape(built)} is already built"):
            mem.write_nodes(batch)
        assert snapshot(home) == before
    with pytest.raises(NotFound, match="out of range"):  # the first failing node decides, as before
        mem.write_nodes([(0, 9, "past the log", {}), (0, 3, "again", {})])
    mem.write_nodes([(0, 5, "user: long 5", {})])
    assert [Memory.at("t").tree.text(0, k) for k in (1, 3, 5, 6)] == [f"user: long {k}" for k in (1, 3, 5, 6)]


def test_nodes_written_after_a_torn_tree_line_are_read_back(home):
    """A crash can cut a tree line before its newline: the next write ends that line and reads the file back
    from where the table stopped (the new lines are not indexed as given, so the ended line is not lost)."""
    mem = small_memory(texts=["x" * 600] * 4)
    mem.write_nodes([(0, 1, "user: long 1", {})])
    (path,) = (home / "t" / "tree").iterdir()
    with open(path, "ab") as f:
        f.write(orjson.dumps({"l": 0, "i": 4, "text": "user: long 4", "size": 12}))  # (no newline)
    mem.write_nodes([(0, 2, "user: long 2", {}), (0, 3, "user: long 3", {})])
    assert path.read_bytes().count(b"\n") == 4
    for reader in (mem, Memory.at("t")):
        assert [reader.tree.text(0, k) for k in range(1, 5)] == [f"user: long {k}" for k in range(1, 5)]
    with pytest.raises(BadInput, match=r"node 4\+1 is already built"):
        mem.write_nodes([(0, 4, "again", {})])


def test_tree_lines_the_table_does_not_hold_are_read_back_on_the_next_append(home, monkeypatch):
    """Lines another writer added that the table does not hold yet, before an append or during it, are read
    back with it (an append's own lines are indexed as given only when they are all that is new)."""
    from pimem import tree

    mem = small_memory(texts=["x" * 600] * 4)
    mem.write_nodes([(0, 1, "user: long 1", {})])
    (path,) = (home / "t" / "tree").iterdir()

    def another_writer(k):
        with open(path, "ab") as f:
            f.write(orjson.dumps({"l": 0, "i": k, "text": f"user: long {k}", "size": 12}) + b"\n")

    another_writer(2)
    mem.tree.append(0, 3, "user: long 3")
    append_durably = tree.append_durably
    monkeypatch.setattr(tree, "append_durably", lambda *args: (another_writer(4), append_durably(*args)))
    mem.tree.append(1, 0, "user: long 1 and 2")
    got = Memory.at("t").tree
    assert [got.text(0, k) for k in range(1, 5)] + [got.text(1, 0)] == [f"user: long {k}" for k in range(1, 5)] + [
        "user: long 1 and 2"]


def test_a_new_leaf_shows_a_placeholder_until_built(home, run):
    mem = small_memory(1, texts=["z" * 700])
    assert mem.view_lines()[-1] == "1+1|(not summarized yet: zoom it)"
    assert mem.held(1)["held"] == "pending"
    mem.write_node(0, 1, "user: seven hundred z")
    assert mem.view_lines()[-1] == "1+1|user: seven hundred z"
    assert mem.held(1) == {"held": "summarized", "label": "1+1", "n": 1, "line": "1+1|user: seven hundred z"}
    assert mem.held(0)["held"] == "verbatim"


# within twice its budget, and past it (the oldest lines held back, shown by the spans tiling them; at 600 bytes
# even the newest line with them may pass it, counted at the most a line can take: every line is held back)
@pytest.mark.parametrize("config, summary, back", [({"view": {"hi": 600, "lo": 300}}, "user: 635 x", 0),
                                                   (SMALL, "56+4|", 13)])
def test_restart_gives_a_byte_identical_view(home, sh, config, summary, back):
    texts = [f"message {k}" if k % 7 else "x" * (600 + k) for k in range(1, 60)]
    mem = small_memory(config=config, texts=texts)
    for k in (7, 14, 21, 28, 35):  # some long messages summarised, the later ones still placeholders
        mem.write_node(0, k, f"user: {600 + k} x")
    first = mem.view_lines()
    assert "not summarized yet" in "".join(first) and summary in "".join(first)
    assert mem.views.held_back(mem.views.current()).lines == back
    raw = (home / "t" / "view.json").read_bytes()
    out = sh("view", "t")
    assert out.returncode == 0 and out.stdout.decode().splitlines() == first
    assert (home / "t" / "view.json").read_bytes() == raw


def test_a_corrupt_view_json_is_refolded_with_a_warning(home, run):
    mem = small_memory(40)
    want = mem.view_lines()
    path = home / "t" / "view.json"
    good = path.read_bytes()
    data = orjson.loads(good)
    assert data["view"]["lines"] == "443"
    bad_shapes = {"343": "cannot start", "44": "different messages", "445": "different messages"}
    for shape, why in bad_shapes.items():
        data["view"]["lines"] = shape
        body = {k: data[k] for k in ("T", "view", "cview", "tree")}
        path.write_bytes(orjson.dumps({**data, "check": view_check(body)}))
        out = run("view", "t")
        assert out.exit_code == 0, shape
        assert "refolding the view" in out.stderr and why in out.stderr, (shape, out.stderr)
        assert out.stdout.splitlines() == want  # refolding the same history gives the same view here
        assert path.read_bytes() == good, (path.read_bytes(), good)
    for damage in (b"{not json", good.replace(b'"443"', b'"434"'), good[: len(good) // 2]):
        path.write_bytes(damage)
        out = run("view", "t")
        assert "refolding the view" in out.stderr and out.stdout.splitlines() == want
        assert path.read_bytes() == good, (path.read_bytes(), good)


def test_a_changed_line_bytes_refolds_the_view_instead_of_failing(home, run):
    long = "word " * 80  # 400 bytes: a line of its own at 512 bytes, to be summarised at 256
    assert run("append", "lb", long).exit_code == 0
    assert run("view", "lb").stdout == f"0+1|user: {long}\n"
    (home / "lb" / "config.json").write_bytes(b'{"line_bytes": 256}')
    for argv in (["view", "lb"], ["context", "lb"]):
        out = run(*argv)
        assert out.exit_code == 0 and "0+1|(not summarized yet: zoom it)" in out.stdout, (argv, out.stderr)
        if argv[0] == "view":  # said once, then saved as refolded
            assert "folded with 512-byte lines, and line_bytes is now 256" in out.stderr
    assert run("build-tree", "lb").exit_code == 0
    assert run("view", "lb").stdout.startswith("0+1|user: word word") and run("view", "lb").stderr == ""
    (home / "lb" / "config.json").write_bytes(b"{}")  # back to 512: the message is its own line again
    assert run("view", "lb").stdout == f"0+1|user: {long}\n"


def test_a_lowered_line_bytes_rebuilds_the_lines_built_longer_and_fsck_passes(home, sh):
    """Nodes built under 512-byte lines were shown as they were once ``line_bytes`` was lowered to 256, and
    ``fsck`` called them damage that ``--repair`` could not clear (exit 5): readers now pass over a node longer
    than the memory's line, the compactor builds it again, and ``fsck`` notes the longer line (exit 0)."""
    for k in range(1, 41):
        assert sh("append", "lb", f"message {k} about the staging database port and pool size settings " * 12).returncode == 0
    Memory.at("lb").save_config({"view": {"hi": 500, "lo": 250}})
    assert sh("build-tree", "lb").returncode == 0

    def lines() -> list[dict]:
        out = sh("view", "lb", "--json")
        assert out.returncode == 0, out.stderr
        return [orjson.loads(line) for line in out.stdout.splitlines()]

    assert max(line["bytes"] for line in lines()) > 256  # (the summaries fill much of a 512-byte line)
    Memory.at("lb").save_config({"line_bytes": 256})
    before = lines()  # not built again yet: the lines that no longer fit are not shown (their halves are)
    assert all(line["bytes"] <= 256 for line in before), before
    assert sh("build-tree", "lb").returncode == 0
    after = lines()
    assert all(line["bytes"] <= 256 and "not summarized" not in line["text"] for line in after), after
    out = sh("fsck", "lb")
    assert out.returncode == 0, out.stdout + out.stderr
    assert b"over the 256-byte line" in out.stdout and b"built twice" not in out.stdout
    assert sh("build-tree", "lb", "--json").returncode == 0 and lines() == after  # (nothing left to build)
    # raised back: both lines of such a node fit, and readers use the first. fsck called the second "built twice",
    # exit 5, which no --repair cleared; it notes it (the view, folded with 256-byte lines, is folded afresh)
    Memory.at("lb").save_config({"line_bytes": 512})
    assert sh("fsck", "--repair", "lb").returncode == 0
    out = sh("fsck", "lb")
    assert out.returncode == 0 and b"built twice" not in out.stdout, out.stdout + out.stderr
    assert b"built again shorter, as a lowered line_bytes has it built (first at tree/" in out.stdout


def test_zoom_command(home, run):
    mem = small_memory(8)
    mem.append([{"kind": "echo", "text": "secret output"}])
    assert run("zoom", "t", "4+4").stdout == "4+2|user: message 4 user: message 5\n6+2|user: message 6 user: message 7\n"
    assert run("zoom", "t", "3+1").stdout == "3+1|user: message 3\n"
    out = run("zoom", "t", "8+1")
    assert out.exit_code == 2 and "--include-tools" in out.stderr
    assert run("zoom", "t", "8+1", "--include-tools").stdout == "8+1|echo: secret output\n"
    before = snapshot(home)
    for bad, code in [("3+2", 2), ("0+3", 2), ("zz", 2), ("0+16", 3), ("9+1", 3)]:
        out = run("zoom", "t", bad)
        assert out.exit_code == code, bad
        assert out.stderr.startswith("pimem: error: ")
    assert snapshot(home) == before
    assert run("zoom", "nope", "0+1").exit_code == 3


def test_view_json_and_stats(home, run):
    small_memory(40, config={"view": {"hi": 350, "lo": 150}})  # (692 bytes: within twice the budget)
    rows = [orjson.loads(l) for l in run("view", "t", "--json").stdout.splitlines()]
    assert [r["label"] for r in rows] == ["0+16", "16+16", "32+4", "36+2", "38+2"]
    assert rows[2] == {"label": "32+4", "level": 2, "index": 8, "bytes": len(rows[2]["text"]) + 5, "text": rows[2]["text"]}
    stats = orjson.loads(run("view", "t", "--stats", "--json").stdout)
    assert stats["lines"] == 5 and stats["levels"] == {"1": 2, "2": 1, "4": 2} and stats["messages"] == 40
    assert stats["bytes"] == sum(r["bytes"] + 1 for r in rows) and stats["held_back"] is None


def test_compactor_view_stats_say_the_messages_after_its_cut(home, run):
    # the compactor's view stops at its first unbuilt line: the messages after it are in no line, and wait
    mem = Memory.at("t")
    mem.append([{"kind": "user", "text": "short one"}, {"kind": "user", "text": "word " * 200},
                {"kind": "user", "text": "short two"}])
    out = run("view", "t", "--compactor", "--stats")
    assert out.stdout.splitlines()[1] == ("lines     1  for 1 of 3 messages (it stops at its first unbuilt line: "
                                          "2 messages after it wait for a summary)"), out.stdout
    stats = orjson.loads(run("view", "t", "--compactor", "--stats", "--json").stdout)
    assert (stats["lines"], stats["messages"], stats["cut"]) == (1, 3, 2)
    assert "cut" not in orjson.loads(run("view", "t", "--stats", "--json").stdout)  # (the view tiles them all)
    assert run("build-tree", "t").exit_code == 0
    assert run("view", "t", "--compactor", "--stats").stdout.splitlines()[1] == "lines     3  for 3 messages (0 waiting for a summary)"
    assert orjson.loads(run("view", "t", "--compactor", "--stats", "--json").stdout)["cut"] == 0


def test_view_and_zoom_hide_tool_traffic_unless_asked(home, run):
    mem = small_memory(2)
    mem.append([{"kind": "tool", "text": "cat .env"}, {"kind": "echo", "text": "KEY=hunter2"}])
    out = run("view", "t").stdout
    assert "hunter2" not in out and "3+1|echo: (hidden)\n" in out  # (its line's bytes: the longer marker passed them)
    assert "hunter2" in run("view", "t", "--include-tools").stdout
    assert "hunter2" not in run("zoom", "t", "0+4").stdout + run("zoom", "t", "2+2").stdout
    assert "echo: KEY=hunter2" in run("zoom", "t", "2+2", "--include-tools").stdout
    out = run("zoom", "t", "3+1")
    assert (out.exit_code, out.stderr) == (2, "pimem: error: message 3 is a tool result; add --include-tools to show it\n")
    with pytest.raises(BadInput, match=r"^message 2 is a tool call; add include_tools=True to show it$"):
        mem.zoom("2+1")


def test_zoom_shows_a_long_tool_message_not_summarised_yet_as_the_view_does_not_as_a_placeholder_it_refuses(home, run):
    """A half that is a long tool message not summarised yet said `(not summarized yet: zoom it)`, and zooming it
    was refused without --include-tools: it shows the marker the view shows for it (`--json`'s text too)."""
    run("append", "z", "run it")
    run("append", "z", "-k", "tool", "-", input="x" * 600)
    assert run("view", "z").stdout == "0+1|user: run it\n1+1|tool: (hidden)\n"
    assert run("zoom", "z", "0+2").stdout == "0+1|user: run it\n1+1|tool: (hidden)\n"
    assert orjson.loads(run("zoom", "z", "0+2", "--json").stdout.splitlines()[1])["text"] == "tool: (hidden)"
    assert run("zoom", "z", "0+2", "--include-tools").stdout.endswith("1+1|(not summarized yet: zoom it)\n")


def test_a_joined_line_of_short_tool_messages_hides_them_briefly_and_says_the_bytes_it_shows(home, run):
    mem = small_memory(2, config={"view": {"hi": 60, "lo": 30}})
    mem.append([{"kind": "tool" if k % 2 == 0 else "echo", "text": "ls" if k % 2 == 0 else "ok"} for k in range(6)])
    assert run("build-tree", "t").exit_code == 0
    rows = [orjson.loads(l) for l in run("view", "t", "--json").stdout.splitlines()]
    for row in rows:  # every line's bytes are the bytes it shows ("id+n|text")
        assert row["bytes"] == len(f"{row['label']}|{row['text']}".encode()), row
    shown = "".join(r["text"] for r in rows)
    assert "tool ×3, echo ×3 (hidden)" in shown and "echo: ok" not in shown, shown  # (each marker was longer)
    stats = orjson.loads(run("view", "t", "--stats", "--json").stdout)
    assert stats["bytes"] == sum(r["bytes"] + 1 for r in rows)


def test_a_joined_line_says_its_days_once_and_where_the_day_changes(home, run):
    # short summaries of the offline compactor, each headed by its span's days, joined two by two for free
    said = "the and of to a " * 10  # (long enough to be summarised; words too common to be said)
    messages = [{"kind": "pi" if k % 2 else "user", "text": ("done. " if k % 2 else "fix colors.ts now. ") + said,
                 "date": f"2025-11-{21 if k < 6 else 22}T10:{k:02d}:00Z"} for k in range(16)]
    Memory.at("t").append(messages[:1])
    Memory.at("t").save_config({"line_bytes": 128, "view": {"hi": 450, "lo": 300}})
    Memory.at("t").append(messages[1:])
    assert run("build-tree", "t").exit_code == 0
    once = "22 November 2025: user: fix colors.ts now. user: fix colors.ts now."
    view = run("view", "t").stdout
    assert f"8+4|{once}\n" in view, view
    assert run("zoom", "t", "0+8").stdout == (
        "0+4|21 November 2025: user: fix colors.ts now. user: fix colors.ts now.\n"
        "4+4|21 November 2025: user: fix colors.ts now. 22 November 2025: user: fix colors.ts now.\n")
    assert f"8+4|{once}\n" in run("context", "t").stdout
    assert once in run("map", "t", "--width", "120").stdout
    rows = [orjson.loads(l) for l in run("view", "t", "--json").stdout.splitlines()]
    joined = next(r for r in rows if r["label"] == "8+4")
    assert joined["text"] == "22 November 2025: user: fix colors.ts now.\n22 November 2025: user: fix colors.ts now."
    for row, line in zip(rows, view.splitlines()):  # every line's bytes are the bytes it shows
        assert row["bytes"] == len(line.encode()), row
    stats = orjson.loads(run("view", "t", "--stats", "--json").stdout)
    assert stats["bytes"] == len(view.encode())
    from pimem import api

    assert f"8+4|{once}" in api.view("t")["lines"] and api.view("t")["bytes"] == len(view.encode())
    # the tree keeps the children's lines as written
    assert Memory.at("t").tree.text(2, 2) == joined["text"]


def test_a_repeated_heading_is_dropped_and_the_parts_joined_as_the_compactor_joins_pieces():
    from pimem.tree import days_once, flat

    assert days_once("8 May 2023: ran cat\n8 May 2023: pi: diff") == "8 May 2023: ran cat; pi: diff"
    assert flat("8 May 2023: ran cat\n8 May 2023: pi: diff\n8 May 2023: ran ls") == "8 May 2023: ran cat; pi: diff; ran ls"
    assert days_once("8 May 2023: pi: done.\n8 May 2023: user: go") == "8 May 2023: pi: done. user: go"
    # after a part without a heading (a hidden part's): the day is said again (joined, the part would read as its)
    for text in ("8 May 2023: pi: a\nuser: hi\n8 May 2023: pi: b", "1 March 2026: pi: did A\ntool: ran git (hidden)\n1 March 2026: ran npm"):
        assert days_once(text) == text
    assert days_once("8 May 2023: a\nuser: hi\n8 May 2023: b\n8 May 2023: c") == "8 May 2023: a\nuser: hi\n8 May 2023: b; c"
    # other days are kept: they say where the day changes, and a day said again after them is said again
    for text in ("8 May 2023: a\n9 May 2023: b", "8, 9 May 2023: a\n9 May 2023: b", "8 May..2 July 2023: a\n2 July 2023: b"):
        assert days_once(text) == text
    assert days_once("8 May 2023: a\n9 May 2023: b\n8 May 2023: c") == "8 May 2023: a\n9 May 2023: b\n8 May 2023: c"
    assert days_once("8 May..2 July 2023: a\n8 May..2 July 2023: b") == "8 May..2 July 2023: a; b"
    assert days_once("30 December 2026, 2 January 2027: a\n30 December 2026, 2 January 2027: b") == (
        "30 December 2026, 2 January 2027: a; b")
    # a memory in Chinese: its days in digits, its parts joined by ；, nothing after a sentence's end
    assert days_once("2026-03-01: user: 修复登录\n2026-03-01: pi: 已修复") == "2026-03-01: user: 修复登录；pi: 已修复"
    assert days_once("2026-03-01: user: 修复登录。\n2026-03-01: pi: 好") == "2026-03-01: user: 修复登录；pi: 好"
    assert days_once("2026-03-01: user: 修复登录。\n2026-03-01: ran npm") == "2026-03-01: user: 修复登录。ran npm"  # (。 kept)
    assert days_once("2026-03-01: user: 为什么？\n2026-03-01: pi: 好") == "2026-03-01: user: 为什么？pi: 好"
    assert days_once("2023-05-08: user: 直してください。\n2023-05-08: pi: はい") == "2023-05-08: user: 直してください。pi: はい"
    assert days_once("2026-03-01..2026-03-04: user: 修复\n2026-03-01..2026-03-04: pi: 好") == (
        "2026-03-01..2026-03-04: user: 修复；pi: 好")
    # what is no heading stays as it is
    text = "user: one\nMay 2023: two\n2023: three"
    assert days_once(text) is text


def test_a_larger_line_bytes_joins_more_messages_and_their_tool_traffic_is_still_hidden(home, run):
    mem = small_memory(0, config={"line_bytes": 40_000, "view": {"hi": 40_000, "lo": 500}})  # (twice hi: room for a line)
    rows = [{"kind": "user", "text": f"note {k}"} for k in range(1, 2100)]
    rows[10], rows[11] = {"kind": "tool", "text": "cat pw.txt"}, {"kind": "echo", "text": "pw=hunter2"}
    mem.append(rows)
    assert run("build-tree", "t").exit_code == 0
    lines = run("view", "t").stdout.splitlines()
    assert any(line.startswith("0+2048|") for line in lines), lines[:2]  # 2,048 messages joined whole in one line
    assert "hunter2" not in "\n".join(lines) and "cat pw.txt" not in "\n".join(lines)
    assert "pw=hunter2" in run("view", "t", "--include-tools").stdout


def test_a_line_a_model_wrote_for_a_tool_result_hides_only_that_result_not_the_same_line_written_for_others(home, run, monkeypatch):
    """A model answers every request with the same stock line, and a larger ``line_bytes`` joins its lines:
    the copy written for the tool result is a marker; the same line written for the first half (a node)
    and for a user's message stays, and the result's own text is nowhere."""
    monkeypatch.setenv("TEST_LLM_KEY", "k")
    stock = "Nothing new happened in this part of the session." + filler(510)
    long = " The quick brown fox jumps over the lazy dog." * 60
    with FakeLLM("openai") as server:
        server.reply = lambda body: stock
        mem = Memory.at("t")
        mem.path.mkdir(parents=True)
        mem.save_config({"line_bytes": 2048, "view": {"hi": 1100, "lo": 50}, "compactor": {
            "provider": "openai", "model": "fake", "base_url": server.url, "key_env": "TEST_LLM_KEY"}})
        mem.append([*({"kind": "user", "text": f"read log {k}." + long} for k in range(4)),
                    {"kind": "tool", "text": "cat /var/log/app.log", "meta": {"command": "cat /var/log/app.log"}},
                    {"kind": "echo", "text": "swordfish99" + long},
                    {"kind": "user", "text": "so what now?" + long},
                    {"kind": "pi", "text": "done"}])
        assert run("build-tree", "t").exit_code == 0
    line = stock.strip()
    assert run("view", "t", "--include-tools").stdout == f"0+8|{line} tool: cat /var/log/app.log {line} {line} pi: done\n"
    shown = f"0+8|{line} tool: read log/app.log (hidden) echo: (hidden) {line} pi: done"
    assert run("view", "t").stdout == shown + "\n"
    assert shown in run("context", "t").stdout
    assert run("zoom", "t", "0+8").stdout == f"0+4|{line}\n4+4|tool: read log/app.log (hidden) echo: (hidden) {line} pi: done\n"


def test_the_mask_spares_a_line_that_joins_another_speakers_words_as_a_tool_printed_them(home, run):
    mem = small_memory(0, config={"view": {"hi": 100, "lo": 50}})
    mem.append([{"kind": "tool", "text": "read src/index.ts"},
                {"kind": "echo", "text": "import { renderWidgetTree, paddingOptions } from './widget';\n" + "// filler\n" * 80},
                {"kind": "pi", "text": "The module exports renderWidgetTree. It also exports paddingOptions. " + "Both are used widely. " * 20}])
    assert run("build-tree", "t").exit_code == 0
    mem.append([{"kind": "user", "text": "ok"}])
    shown = run("view", "t").stdout
    assert shown.startswith("0+4|") and "renderWidgetTree, " in shown, shown  # the pi's words, joined by ", "
    assert "[tool output hidden]" not in shown, shown


def test_a_hidden_tool_message_says_what_it_ran_and_how_it_ended(home, run):
    mem = small_memory(2)
    mem.append([
        {"kind": "tool", "text": "bash: psql -h db.internal -U admin -c 'select password from users'", "meta": {"tool": "bash", "command": "psql -h db.internal -U admin -c 'select password from users'"}},
        {"kind": "echo", "text": "psql: error: connection to server failed: ECONNREFUSED (password swordfish32)", "meta": {"exit_code": 2}},
        {"kind": "tool", "text": "edit src/app.py: replace 5432 with 5433", "meta": {"tool": "edit", "file": "src/app.py"}},
        {"kind": "echo", "text": "EXTREMELY long diff, all fine"},
    ])
    lines = run("view", "t").stdout.splitlines()
    assert lines[-4:] == [
        "2+1|tool: ran psql (details hidden; include tools to see it)",  # what ran, not its arguments
        "3+1|echo: exit 2: ECONNREFUSED (details hidden; include tools to see it)",  # how it ended, not its text
        "4+1|tool: edited src/app.py (hidden)",  # (as briefly as in a joined line: the longer marker passed its bytes)
        "5+1|echo: (hidden)",  # it ended well and says nothing more ("EXTREMELY" is no errno)
    ], lines
    assert "swordfish32" not in run("view", "t").stdout + run("zoom", "t", "2+2").stdout


def test_compactor_view_is_cut_at_the_first_unbuilt_line_and_at_the_boundary(home):
    from pimem.tree import context_end

    mem = small_memory(1, config={"view": {"hi": 10**6, "lo": 10**6}, "cview": {"hi": 10**6, "lo": 10**6}},
                       texts=["short one", "x" * 600, "short two"])
    assert mem.view_lines(compactor=True) == ["0+1|user: hello", "1+1|user: short one"]
    assert mem.view_lines(compactor=True, end=context_end(0, 1)) == ["0+1|user: hello"]
    mem.write_node(0, 2, "user: six hundred x")
    assert mem.view_lines(compactor=True, end=context_end(1, 1)) == [
        "0+1|user: hello", "1+1|user: short one", "2+1|user: six hundred x", "3+1|user: short two"]
    assert mem.view_lines(compactor=True, end=context_end(0, 3)) == mem.view_lines(compactor=True)[:3]


def test_nodes_written_by_another_process_reach_the_view(home, run):
    mem = small_memory(1, texts=["x" * 600, "y" * 600])
    assert run("view", "t").stdout.count("not summarized yet") == 2
    tree = home / "t" / "tree"
    tree.mkdir()
    lines = [{"l": 0, "i": 1, "text": "user: many x", "size": 12},
             {"l": 0, "i": 7, "text": "past the end of the log: ignored", "size": 32}]
    (tree / "2026-10-08.jsonl").write_bytes(b"".join(orjson.dumps(n) + b"\n" for n in lines) + b'{"l":0,"i":2,"te')
    assert run("view", "t").stdout.splitlines()[1:] == ["1+1|user: many x", "2+1|(not summarized yet: zoom it)"]
    assert Memory.at("t").tree.text(0, 7) is None
    mem.append([{"kind": "user", "text": f"m{k}"} for k in range(6)])
    assert Memory.at("t").tree.text(0, 7) == "user: m4"  # a free leaf now: the stray stored line is not its text


def test_date_of_a_node(home, run):
    small_memory(8)
    assert run("date", "t", "4+4").stdout == "2026-10-08T09:30:00+08:00 2026-10-08T09:30:00+08:00\n"
    assert run("date", "t", "4+3").exit_code == 2
    assert run("date", "t", "8+8").exit_code == 3


def test_wait_needs_a_watcher(home, run):
    small_memory(1, texts=["x" * 600])
    out = run("view", "t", "--wait", "30")
    assert out.exit_code == 0 and "no watcher is building 't'" in out.stderr
    assert out.stdout.endswith("1+1|(not summarized yet: zoom it)\n")


def test_a_huge_unbuilt_view_saves_amortised_and_at_exit(home, sh):
    """Without a compactor long messages stay placeholders and the view cannot shrink; past 8,192 lines its
    saves are amortised (O(1) a message), and the process still leaves view.json complete when it ends."""
    lines = b"".join(orjson.dumps({"kind": "echo", "text": f"{k} " + "x" * 600}) + b"\n" for k in range(15_000))
    out = sh("append", "big", "--ndjson", input=lines)
    assert out.returncode == 0, out.stderr
    data = orjson.loads((home / "big" / "view.json").read_bytes())
    assert data["T"] == 15_000 and data["view"]["lines"] == "_" * 15_000
    assert sh("view", "big", "--stats", "--json").stdout.startswith(b'{"bytes":')


def test_view_wait_returns_once_a_running_watcher_has_summarised(home, sh):
    import signal
    import subprocess
    import time

    from conftest import pimem_cmd, subprocess_env
    from pimem import lease

    mem = small_memory(1)
    watcher = subprocess.Popen(pimem_cmd("watch", "t"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               env=subprocess_env())
    try:
        deadline = time.monotonic() + 30
        while lease.holder(mem) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        mem.append([{"kind": "user", "text": f"long message {k}: " + "words and more words " * 40} for k in range(3)])
        out = sh("view", "t", "--wait", "30")  # the watcher notices new messages within 2 s: this waits
        assert out.returncode == 0 and b"not summarized yet" not in out.stdout, out.stderr
        assert len(out.stdout.splitlines()) >= 1
    finally:
        watcher.send_signal(signal.SIGTERM)
        watcher.wait(timeout=30)


def test_a_batch_of_built_nodes_lets_the_waiting_view_fold(home):
    """Regression: nodes written in one batch (as build-tree does) must unblock pairs whose parent is in that
    very batch; the view used to keep waiting above its budget with every node built."""
    from pimem import scheduler
    from pimem.compactor import Compactor

    mem = Memory.at("fold")
    mem.path.mkdir(parents=True)
    mem.save_config({"view": {"hi": 1200, "lo": 600}, "cview": {"hi": 1200, "lo": 600}})
    mem.append([{"kind": "user" if k % 2 else "pi", "text": f"message {k} " + "words and more words " * 7} for k in range(20)])
    assert Memory.open("fold").views.current().view.total > 1200  # waiting for summaries
    scheduler.build_tree([Memory.open("fold")], compactor=Compactor({"provider": "extractive"}))
    view = Memory.open("fold").views.current().view
    assert view.pending() == 0 and not any(view.blocked.values())
    assert view.total <= 1200


def test_lines_json_gives_the_same_view_as_reading_everything_again(home, run):
    """The texts shown last time are kept by label in lines.json: after appends, merges, summaries written
    and tool traffic, the view read through it equals the view read with it deleted, both with and without
    tool traffic."""
    small_memory(3, config={"view": {"hi": 600, "lo": 300}, "cview": {"hi": 200, "lo": 100}})
    cache = home / "t" / "lines.json"
    for step in range(24):
        batch = [{"kind": "user", "text": f"turn {step} " + "w" * (step % 5 * 9)}]
        if step % 4 == 1:
            batch += [{"kind": "tool", "text": f"cat secret{step}"}, {"kind": "echo", "text": f"KEY=hunter{step}"}]
        if step % 6 == 2:
            batch.append({"kind": "pi", "text": "z" * 700})  # a placeholder until summarised
        Memory.at("t").append(batch)
        if step % 6 == 5:
            mem = Memory.at("t")
            for k in [m["i"] for m in mem.messages() if m["size"] > 512 and mem.tree.stored(0, m["i"]) is None]:
                mem.write_node(0, k, f"pi: summary of {k}")
        for flags in ([], ["--include-tools"], ["--json"]):
            through_cache = run("view", "t", *flags).stdout
            assert cache.exists()
            cache.unlink()
            assert run("view", "t", *flags).stdout == through_cache
        cache.unlink()
        for flags in ([], ["--include-tools"]):  # context shows the view as view does
            chat = run("context", "t", *flags).stdout.split("<chat>\n", 1)[1].split("\n</chat>", 1)[0]
            assert cache.exists() and chat + "\n" == run("view", "t", *flags).stdout
        assert "hunter" not in run("view", "t").stdout
    assert "hunter" in run("view", "t", "--include-tools").stdout


def test_lines_json_spares_reading_the_log_and_is_ignored_when_wrong(home, run, monkeypatch):
    import pimem.store as store
    from pimem.view import render_line

    mem = small_memory(40)
    mem.append([{"kind": "tool", "text": "cat .env"}, {"kind": "echo", "text": "KEY=hunter2"}])
    expected = run("view", "t").stdout
    cache = home / "t" / "lines.json"

    def no_reading(*_):
        raise AssertionError("read the log although every line's text is in lines.json")

    with monkeypatch.context() as patched:
        patched.setattr(store, "_entries", no_reading)
        fresh = Memory.open("t")
        rows = fresh.views.shown(fresh.views.current())
    assert "".join(render_line(l, i, text) + "\n" for l, i, text, _ in rows) == expected
    assert fresh.views.held_back(fresh.views.current()).lines  # (past twice its budget: its own lines stand in too)
    for damage in (b"{not json", b'{"version": 1, "line_bytes": 999, "lines": {"0+16": "user: forged"}}',
                   b'{"version": 1, "line_bytes": 512, "lines": {"0+16": 7}}'):
        cache.write_bytes(damage)
        assert run("view", "t").stdout == expected


def test_a_verbatim_line_says_its_speaker_on_every_read_path(home, run):
    """A group chat's messages shown whole (a leaf, a free join of leaves) said ``user: …`` for every speaker,
    where the compactor's lines name them: each read path (view, zoom, context's previous exchange, map, the API
    and MCP's view) says ``user Bob: …`` as the compactor's line of one message does, with tool traffic or
    without, and a line the name would take past ``line_bytes`` keeps the kind."""
    from pimem import api

    mem = small_memory(0, config={"view": {"hi": 100, "lo": 50}, "line_bytes": 128})
    mem.append([{"kind": "user", "text": "I will not sign.", "meta": {"speaker": "Bob"}},
                {"kind": "user", "text": "Only 3 of the 12 warehouses.", "meta": {"speaker": "Chen"}},
                {"kind": "tool", "text": "bash: ls /srv/pilot", "meta": {"tool": "bash", "command": "ls /srv/pilot"}},
                {"kind": "pi", "text": "Noted both."}])
    joined = "user: hello user Bob: I will not sign. user Chen: Only 3 of the 12 warehouses."
    assert run("view", "t").stdout == f"0+4|{joined} tool: ran ls (hidden)\n4+1|pi: Noted both.\n"
    assert run("view", "t", "--include-tools").stdout == f"0+4|{joined} tool: bash: ls /srv/pilot\n4+1|pi: Noted both.\n"
    assert api.view("t")["lines"] == [f"0+4|{joined} tool: ran ls (hidden)", "4+1|pi: Noted both."]
    assert run("zoom", "t", "0+4").stdout == f"0+2|user: hello user Bob: I will not sign.\n2+2|user Chen: Only 3 of " \
                                              "the 12 warehouses. tool: ran ls (hidden)\n"
    assert [c["text"] for c in api.zoom("t", "0+2")["children"]] == ["user: hello", "user Bob: I will not sign."]
    assert run("zoom", "t", "1+1").stdout == "1+1|user Bob: I will not sign.\n"
    assert "#2 user Chen: Only 3 of the 12 warehouses.\n#4 pi: Noted both." in run("context", "t").stdout
    chat = Memory.at("u")  # (a view with room for a line a message)
    chat.append([{"kind": "user", "text": "I will not sign.", "meta": {"speaker": "Bob"}},
                 {"kind": "user", "text": "Only 3 of the 12 warehouses.", "meta": {"speaker": "Chen"}}])
    chat.save_config({"line_bytes": 128})
    shown = run("map", "u", "--width", "80").stdout
    assert " you    Bob: I will not sign.\n" in shown and " you    Chen: Only 3" in shown, shown
    assert run("view", "u").stdout == "0+1|user Bob: I will not sign.\n1+1|user Chen: Only 3 of the 12 warehouses.\n"
    fits = "x" * (128 - len("user: "))  # a line of 128 bytes as logged: "user Ada: " would pass them
    Memory.at("u").append([{"kind": "user", "text": fits, "meta": {"speaker": "Ada"}}])
    assert run("view", "u").stdout.splitlines()[-1] == f"2+1|user: {fits}"


def test_a_view_of_short_tool_messages_stays_within_its_budget_as_shown(home, run):
    """The view's budget counts its lines' bytes as logged, and a marker is longer than ``tool: ls 0``: a view of
    short tool messages showed 890 bytes against a budget of 400. Each line now shows no more bytes than it
    holds (tool messages side by side as one marker), so the view stays within its budget as shown."""
    mem = small_memory(0, config={"view": {"hi": 400, "lo": 200}})
    mem.append([m for k in range(20) for m in (
        {"kind": "tool", "text": f"ls {k}", "meta": {"tool": "bash", "command": f"ls {k}", "call_id": f"c{k}"}},
        {"kind": "echo", "text": "ok", "meta": {"call_id": f"c{k}", "exit_code": 0}})])
    assert orjson.loads(run("view", "t", "--stats", "--json").stdout)["bytes"] <= 400
    held = {row["label"]: row["bytes"] for row in map(orjson.loads, run("view", "t", "--json", "--include-tools").stdout.splitlines())}
    for row in map(orjson.loads, run("view", "t", "--json").stdout.splitlines()):
        assert row["bytes"] <= held[row["label"]] and "ls 1" not in row["text"], row
    assert "0+32|user: hello tool ×16, echo ×15 (hidden)\n" in run("view", "t").stdout


def test_a_line_a_compactor_wrote_says_no_speaker_inside_a_joined_line(home, run):
    """Readers say the speaker of a verbatim leaf only: the line a compactor wrote for a long message, opening
    with its kind (``user: …``), kept that kind alone but inside a joined line, where it was named as if it were
    the message (``user Bob: signs nothing`` for Bob's 600 bytes)."""
    mem = small_memory(0, config={"view": {"hi": 100, "lo": 50}, "line_bytes": 128})
    mem.append([{"kind": "user", "text": "no " * 200, "meta": {"speaker": "Bob"}},
                {"kind": "user", "text": "Fine.", "meta": {"speaker": "Chen"}}])
    Memory.at("t").write_nodes([(0, 1, "user: signs nothing", {})])
    Memory.at("t").append([{"kind": "pi", "text": "ok"}] * 5)
    assert run("view", "t").stdout == f"0+8|user: hello user: signs nothing user Chen: Fine.{' pi: ok' * 5}\n"
    assert run("zoom", "t", "1+1").stdout.startswith("1+1|user Bob: no no")  # (the message itself names him)


def test_a_view_saved_before_the_names_were_counted_keeps_its_lines_and_counts_them(home, run):
    """A view.json of version 1 counted its lines as logged; read now, its lines stay as they were (a refold
    would change the bytes a model has cached) and its bytes grow by what the names add, as a view folded
    with them counts them; it is saved again so counted."""
    from pimem import viewfile

    mem = small_memory(0, config={"view": {"hi": 2000, "lo": 1000}, "line_bytes": 128})
    mem.append([{"kind": "user" if k % 2 else "pi", "text": f"message {k}", "meta": {"speaker": f"Speaker {k % 3}"}}
                for k in range(40)])
    path = home / "t" / "view.json"
    saved = orjson.loads(path.read_bytes())
    views = Memory.open("t").views.current()
    extras = []
    for v in views.both():
        v.rows()
        extras.append(sum(v.extras.values()))
        assert v.total == sum(cost for *_, cost in v.rows())
    assert all(extras) and saved["version"] == viewfile.VERSION
    old = {**saved, "version": 1}
    for key, extra in zip(("view", "cview"), extras):
        old[key] = {**saved[key], "bytes": saved[key]["bytes"] - extra}
    old["check"] = view_check({k: old[k] for k in ("T", "view", "cview", "tree")})
    path.write_bytes(orjson.dumps(old))
    shown = run("view", "t").stdout
    assert run("view", "t").stderr == ""
    again = orjson.loads(path.read_bytes())
    assert again == saved  # (its lines as saved, its bytes counted again, version 2)
    assert shown == run("view", "t").stdout


def test_a_view_saved_before_the_names_were_counted_is_counted_once_while_the_writer_lock_is_busy(home, sh, monkeypatch):
    """A view.json of version 1 read while another process holds the writer lock (a reader never waits for it,
    so it cannot save the view counted): the next reader counts it from what the first kept (``lines.json``),
    reading no message, where every reader read the whole log again (2.5 s at 100,000 messages) until a
    writer saved it. view.json is left as it was (a reader replaces it only under the lock) and the next
    writer saves it counted."""
    import subprocess
    import sys

    from conftest import pimem_cmd, subprocess_env
    from pimem import store, viewfile

    mem = small_memory(600, config={"view": {"hi": 2000, "lo": 1000}, "line_bytes": 128})  # (no names in these)
    mem.append([{"kind": "user" if k % 2 else "pi", "text": f"message {k}", "meta": {"speaker": f"Speaker {k % 3}"}}
                for k in range(40)])
    path = home / "t" / "view.json"
    saved = orjson.loads(path.read_bytes())
    assert saved["T"] == 640
    old = {**saved, "version": 1}
    views = Memory.open("t").views.current()
    for key, v in zip(("view", "cview"), views.both()):
        v.rows()
        old[key] = {**saved[key], "bytes": saved[key]["bytes"] - sum(v.extras.values())}
    old["check"] = view_check({k: old[k] for k in ("T", "view", "cview", "tree")})
    path.write_bytes(orjson.dumps(old))
    holder = subprocess.Popen([sys.executable, "-c", "import sys\nfrom pimem import Memory\n"
                               "with Memory.open('t').lock():\n    print('held', flush=True)\n    sys.stdin.readline()"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=subprocess_env())
    try:
        assert holder.stdout.readline() == b"held\n"
        first = subprocess.run(pimem_cmd("view", "t"), capture_output=True, env=subprocess_env(), timeout=60)
        assert first.returncode == 0 and first.stderr == b"", first.stderr
        assert orjson.loads(path.read_bytes()) == old  # (not saved: the lock was busy)
        reads = []
        real_read = store.Log.read
        with monkeypatch.context() as patch:
            patch.setattr(store.Log, "read", lambda self, *a, **k: reads.append(a) or real_read(self, *a, **k))
            again = Memory.open("t").views.current()
        # (the names counted from what the first reader kept: the messages of the lines naming them read, not
        # the log from its start)
        assert reads and all(start >= 512 for start, *_ in reads), reads  # (read in chunks of 256)
        assert [v.total for v in again.both()] == [saved["view"]["bytes"], saved["cview"]["bytes"]]
        assert sh("view", "t").stdout == first.stdout
    finally:
        holder.communicate(b"\n", timeout=30)
    assert orjson.loads(path.read_bytes()) == old
    sh("append", "t", "one more")  # (a writer: it saves the view counted)
    assert orjson.loads(path.read_bytes())["version"] == viewfile.VERSION


def test_a_restored_view_counts_its_lines_as_the_fold_counted_them(home, run):
    """A line read back from the tree (a restart) counts what names add to it as the fold did one join at a time
    (``Tree.named``), so the bytes saved are its lines' bytes: verbatim leaves, joins of them, joins of a
    compactor's lines (newlines in them too) and of both, folded while nodes are built."""
    small_memory(0, config={"view": {"hi": 1500, "lo": 750}, "cview": {"hi": 900, "lo": 400}, "line_bytes": 300})
    assert run("model", "t", "command", "--command", "head -c 30").exit_code == 0
    joined = set()
    for part in range(6):
        Memory.at("t").append([{"kind": "user" if k % 3 else "pi", "text": f"turn {k} " + "w" * (k * 37 % 200),
                                "meta": {"speaker": f"Speaker {k % 4}"}} for k in range(part * 40, part * 40 + 40)])
        if part % 2:
            assert run("build-tree", "t").exit_code == 0
        views = Memory.open("t").views.current()
        for v in views.both():
            assert v.total == sum(cost for *_, cost in v.rows())
            joined |= {(l, i) for l, i in v.extras if l}
    assert {l for l, _ in joined} > {1, 2}  # (names counted in joined lines, of a compactor's lines too)
