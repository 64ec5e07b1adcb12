"""The store never follows a symbolic link it did not make: a real link planted anywhere under the home (a day
file, memory.jsonl, a tree file, write.lock, ranges.writing, index.sqlite, imports.keys, a memory's directory,
its main/ or tree/) is refused with exit 5 and one line naming it, and nothing outside the home is created or
written. The home itself may be a link."""

from __future__ import annotations

import orjson
import pytest

from conftest import snapshot

DAY = "2026-10-08"


@pytest.fixture
def outside(tmp_path):
    """A directory outside the home, with a file a link may point at."""
    path = tmp_path / "outside"
    path.mkdir()
    (path / "victim.jsonl").write_bytes(b'{"i":0,"kind":"user","text":"not pimem\'s","size":17,"date":"2026-10-08T09:00:00+08:00"}\n')
    return path


@pytest.fixture
def memory(sh, home, tmp_path):
    """Memory m with a message on DAY, a memory, a built tree and caught-up derived state; an NDJSON file to import."""
    assert sh("append", "m", "--date", f"{DAY}T09:00:00+08:00", "the staging db listens on 5433").returncode == 0
    assert sh("append", "m", "--date", f"{DAY}T09:01:00+08:00", "a long one: " + "words " * 200).returncode == 0
    assert sh("remember", "m", "never touch production").returncode == 0
    assert sh("search", "staging", "m").returncode == 0 and sh("build-tree", "m").returncode == 0
    session = tmp_path / "session.jsonl"
    session.write_bytes(orjson.dumps({"kind": "user", "text": "imported", "date": f"{DAY}T10:00:00+08:00"}) + b"\n")
    return home / "m"


def plant(link, target) -> None:
    if link.exists() or link.is_symlink():
        if link.is_dir() and not link.is_symlink():
            link.rename(link.with_name(link.name + ".moved"))
        else:
            link.unlink()
    link.symlink_to(target)


# (where the link goes, relative to the memory; whether it points at a file or dangles; commands that must refuse)
CASES = [
    (f"main/{DAY}.jsonl", "file", [["append", "m", "--date", f"{DAY}T11:00:00+08:00", "x"], ["since", "m", "#0"]]),
    ("memory.jsonl", "file", [["remember", "m", "y"], ["memories", "m"]]),
    ("write.lock", "dangling", [["append", "m", "x"], ["remember", "m", "y"]]),
    ("ranges.writing", "dangling", [["append", "m", "x"]]),
    ("index.sqlite", "dangling", [["search", "staging", "m"]]),
    ("imports.keys", "dangling", [["import", "SESSION", "-n", "m"]]),
    ("imports.journal", "dangling", [["import", "SESSION", "-n", "m"]]),
    ("view.json", "file", [["view", "m"]]),
    ("main", "dir", [["append", "m", "x"], ["since", "m", "#0"], ["view", "m"]]),
    ("tree", "dir", [["build-tree", "m"], ["view", "m"]]),
]


@pytest.mark.parametrize("where,kind,commands", CASES, ids=[c[0] for c in CASES])
def test_a_planted_link_is_refused_and_nothing_outside_is_touched(sh, home, memory, outside, tmp_path, where, kind, commands):
    link = memory / where
    target = {"file": outside / "victim.jsonl", "dangling": outside / "created-through-a-link", "dir": outside}[kind]
    plant(link, target)
    before = snapshot(outside)
    for argv in commands:
        argv = [str(tmp_path / "session.jsonl") if a == "SESSION" else a for a in argv]
        out = sh(*argv)
        err = out.stderr.decode()
        assert out.returncode == 5, (argv, err)
        assert err.count("\n") == 1 and err.startswith("pimem: error: ") and str(link) in err and "symbolic link" in err, (argv, err)
        assert snapshot(outside) == before, argv  # nothing created, grown or changed where the link points


def test_fsck_refuses_a_planted_tree_or_chain_link_and_never_reads_through_it(sh, home, memory, outside):
    """fsck read the files of a tree/ that was a link (where no view.json sent it through the tree's readers)
    and said ok, and took a memory.jsonl linked to nothing for no file: like every reader, it refuses both."""
    (outside / "2026-10-08.jsonl").write_bytes(b'{"x":1}\n')
    (memory / "view.json").unlink()
    for where, target in (("tree", outside), ("memory.jsonl", outside / "nothing-here")):
        link = memory / where
        plant(link, target)
        out = sh("fsck", "m")
        err = out.stderr.decode()
        assert out.returncode == 5 and out.stdout == b"", (where, out)
        assert err.count("\n") == 1 and str(link) in err and "symbolic link" in err, (where, err)
        link.unlink()
        if link.with_name(where + ".moved").exists():
            link.with_name(where + ".moved").rename(link)


def test_a_tree_file_planted_as_a_link_is_never_written_through(sh, home, memory, outside):
    tree_file = next((memory / "tree").glob("*.jsonl"))
    plant(tree_file, outside / "victim.jsonl")
    before = snapshot(outside)
    for argv in (["build-tree", "m"], ["zoom", "m", "0+2"], ["view", "m"]):
        out = sh(*argv)
        assert out.returncode == 5 and str(tree_file) in out.stderr.decode(), argv
    assert snapshot(outside) == before


def test_a_memory_directory_planted_as_a_link_is_refused(sh, home, memory, outside):
    (outside / "main").mkdir()
    (home / "evil").symlink_to(outside)
    before = snapshot(outside)
    for argv in (["append", "evil", "x"], ["since", "evil", "#0"], ["remember", "evil", "x"]):
        out = sh(*argv)
        assert out.returncode == 5 and f"{home / 'evil'} is a symbolic link" in out.stderr.decode(), argv
    assert b"evil" not in sh("list").stdout
    assert snapshot(outside) == before


def test_a_link_to_a_memory_is_named_by_the_commands_over_every_memory(sh, home, memory):
    (home / "linked").symlink_to(memory)  # (a memory of its own, to look at)
    for argv in (["list"], ["fsck"], ["search", "staging"], ["reindex"]):
        out = sh(*argv)
        err = out.stderr.decode()
        assert out.returncode == 5 and f"linked: {home / 'linked'} is a symbolic link" in err, (argv, err)
        assert b"linked" not in out.stdout, argv  # named, never read through


def test_the_home_itself_may_be_a_link(sh, home, tmp_path):
    real = tmp_path / "real-home"
    real.mkdir()
    linked = tmp_path / "linked-home"
    linked.symlink_to(real)
    assert sh("append", "m", "via the link", "--home", str(linked)).stdout == b"0\n"
    assert (real / "m" / "main").is_dir()
    assert sh("since", "m", "#0", "--text", "--home", str(linked)).returncode == 0


@pytest.mark.parametrize("where", ["tree", "view.json"])
def test_an_append_refused_for_a_planted_derived_file_logs_nothing(sh, home, memory, outside, where):
    """A link among the files append brings forward after logging (a tree file, view.json) is found before the
    log is written: exit 5 and the log byte-identical, not messages logged and then refused."""
    link = next((memory / "tree").glob("*.jsonl")) if where == "tree" else memory / where
    plant(link, outside / "victim.jsonl")
    before, outside_before = snapshot(memory / "main"), snapshot(outside)
    for argv in (["append", "m", "x"], ["append", "m", "--ndjson"]):
        out = sh(*argv, input=b'{"kind": "user", "text": "y"}\n' if "--ndjson" in argv else None)
        err = out.stderr.decode()
        assert out.returncode == 5 and err.count("\n") == 1 and str(link) in err, (argv, err)
        assert snapshot(memory / "main") == before, argv  # nothing logged
    assert snapshot(outside) == outside_before
