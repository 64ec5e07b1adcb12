"""A memory claimed for a project before anything was logged in it (a hook or follower stopped before its first
message: its directory holds ``projects.json`` and ``write.lock``, no ``main/``) is a memory of no messages to
every command: read as one, writing nothing there, and made an ordinary memory by its first write."""

from __future__ import annotations

import json
import shutil
import subprocess
import time

import pytest

from conftest import pimem_cmd, snapshot, subprocess_env
from pimem import Memory, projects
from pimem.importers.detect import choices

CLIENT = "/home/x/client-a/api"

READS = [
    ["status", "{}"], ["status", "{}", "--json"], ["view", "{}"], ["view", "{}", "--json"], ["context", "{}"],
    ["context", "{}", "--json"], ["map", "{}"], ["search", "db", "{}"], ["search", "db", "{}", "--json"],
    ["since", "{}", "#0"], ["since", "{}", "2h", "--json"], ["since", "{}", "--cursor", "mailer"], ["zoom", "{}", "0+1"], ["date", "{}", "0"],
    ["date", "{}", "--at", "today"], ["message", "{}", "0"], ["recall", "{}"], ["recall", "{}", "db", "--json"],
    ["memories", "{}"], ["memories", "{}", "--json"], ["model", "{}"], ["fsck", "{}"],
]


@pytest.fixture
def claim(home):
    """Memory ``api`` claimed for a project, nothing logged; ``blank`` the same directory with an empty ``main/``
    (a memory made, with nothing logged in it), to read alike."""
    assert projects.claim(CLIENT, choices(CLIENT)) == "api"
    shutil.copytree(home / "api", home / "blank")
    (home / "blank" / "main").mkdir(mode=0o700)
    return home / "api"


def test_every_read_command_reads_a_claim_as_a_memory_of_no_messages_and_writes_nothing(sh, home, claim):
    """`list` showed the claim with 0 messages, while status, view, search, since, recall and the others said
    exit 3, no memory named 'api' (recall and memories took the lone name for their query, in memory main).
    Each says what it says of a memory with nothing logged, with its exit code, and leaves the claim as it was
    (no index, no view, no main/, no consumer's cursor at #0)."""
    before = snapshot(claim)
    for argv in READS:
        blank = sh(*[arg.replace("{}", "blank") for arg in argv])
        got = sh(*[arg.replace("{}", "api") for arg in argv])
        assert (got.returncode, got.stdout, got.stderr) == (
            blank.returncode, blank.stdout.replace(b"blank", b"api"), blank.stderr.replace(b"blank", b"api")), argv
        assert got.returncode != 3 or b"no memory named" not in got.stderr, argv
        assert snapshot(claim) == before, argv
    assert sorted(p.name for p in claim.iterdir()) == ["projects.json", "write.lock"]


def test_a_claims_index_is_made_in_memory_and_on_disk_once_something_is_logged(home, claim):
    """An index opened on a claim writes no file; a message logged meanwhile (by another writer) is found by its
    next question, from the files made then."""
    from pimem.search import containing

    mem = Memory.open("api")
    assert containing(mem, "staging", ["user"]) == [] and not (claim / "index.sqlite").exists()
    Memory.open("api").append([{"kind": "user", "text": "the staging db listens on 5433"}])
    assert [m["i"] for m in containing(mem, "staging", ["user"])] == [0] and (claim / "index.sqlite").exists()
    mem.close()


def test_a_write_makes_a_claim_an_ordinary_memory_keeping_its_project(sh, home, claim, tmp_path):
    """append, remember and import log into the claim (a lone name is the claim's, as any memory's); it is then
    an ordinary memory holding the project."""
    assert sh("append", "api", input=b"from stdin\n").returncode == 0  # (api, not the text for main)
    assert (claim / "main").is_dir() and not (home / "main").exists()
    assert json.loads((claim / "projects.json").read_bytes())["projects"] == [CLIENT]
    assert sh("remember", "api", "use pnpm").returncode == 0
    session = tmp_path / "s.ndjson"
    session.write_text('{"kind":"user","text":"from a file"}\n')
    assert sh("import", session, "-n", "api").returncode == 0
    assert [m["text"] for m in Memory.open("api").messages()] == ["from stdin\n", "from a file"]
    assert sh("list").stdout.split()[:3] == [b"api", b"2", b"messages"]
    assert not Memory.at("api").claimed() and projects.claim(CLIENT, choices(CLIENT)) == "api"


def test_a_write_refused_or_of_derived_state_leaves_a_claim_a_claim(sh, home, claim):
    """forget and remember --supersede of a record a claim cannot hold said so, but made its main/ (an empty
    memory, no claim: a rename over it was refused); reindex (the index, the semantic extra's vectors) and build-tree
    make nothing there either."""
    before = snapshot(claim)
    for argv in (["forget", "api", "mem_0000"], ["remember", "api", "--supersede", "mem_0000", "new text"]):
        result = sh(*argv)
        assert (result.returncode, result.stderr) == (3, b"pimem: error: no memory 'mem_0000' in 'api' (see 'pimem memories api')\n")
        assert snapshot(claim) == before, argv
    for extra in ({}, {"PIMEM_EMBEDDER": "tests.embedder_stub:load"}):  # (and the semantic extra's vectors)
        row = json.loads(sh("reindex", "api", "--json", **extra).stdout)
        assert (row["memory"], row["messages"], row.get("embedded", 0)) == ("api", 0, 0) and len(row) == 3 + 2 * bool(extra)
    assert sh("build-tree", "api").returncode == 0
    assert snapshot(claim) == before
    assert sh("append", "notes", "the notes").returncode == 0
    assert sh("rename", "notes", "api").returncode == 0  # (the claim taken over, as an untouched one is)
    assert [m["text"] for m in Memory.open("api").messages()] == ["the notes"]


def test_renaming_a_claim_moves_it_with_its_project(sh, home, claim):
    """rename of a claim said there was no memory 'api': it moves it, projects.json and all; the old name leads to
    it, so the project's next claim finds it again."""
    before = snapshot(claim)
    result = sh("rename", "api", "web")
    assert result.returncode == 0, result.stderr
    assert snapshot(home / "web") == before and json.loads((home / "api").read_bytes()) == {"renamedTo": "web"}
    assert sh("list").stdout.split()[:3] == [b"blank", b"0", b"messages"] and b"web " in sh("list").stdout
    assert projects.claim(CLIENT, choices(CLIENT)) == "api" and Memory.open("api").path == home / "web"
    assert sh("status", "api", "--json").returncode == 0


def test_a_rename_refused_leaves_the_claim_at_its_new_name(sh, home, claim):
    """rename api api released the claim it was asked to rename (the new name's claim, taken over, was its own)
    and then said 'api' is already named 'api', exit 2, the project's record gone (now: already exists, as of a
    memory); rename notes api while a
    watcher held notes released api's claim, then exit 4. A rename refused leaves every claim as it was."""
    before = snapshot(home)
    result = sh("rename", "api", "api")
    assert (result.returncode, result.stderr) == (2, f"pimem: error: cannot rename 'api' to 'api': 'api' already exists in {home}\n".encode())
    assert snapshot(home) == before and Memory.at("api").claimed()
    assert sh("append", "notes", "the notes").returncode == 0
    watcher = subprocess.Popen(pimem_cmd("watch", "notes"), env=subprocess_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while not (home / "notes" / "lock.json").exists():
            assert watcher.poll() is None and time.monotonic() < deadline, "pimem watch did not take the lease"
            time.sleep(0.05)
        before = snapshot(claim)
        result = sh("rename", "notes", "api")
        assert result.returncode == 4 and b"holds it; stop that process first" in result.stderr, result.stderr
        assert snapshot(claim) == before and Memory.at("api").claimed()
    finally:
        watcher.kill()
        watcher.wait()


def test_a_rename_that_waits_in_vain_for_its_lock_leaves_the_claim_at_its_new_name(sh, home, claim):
    """rename notes api released api's claim before it waited for notes' writer lock, so one that gave up (exit 4,
    another writer at notes) left api's project unrecorded. The claim is released under the lock, once the rename
    goes ahead."""
    assert sh("append", "notes", "the notes").returncode == 0
    before = snapshot(claim)
    with Memory.open("notes").lock():
        result = sh("rename", "notes", "api", "--timeout", "0")
    assert result.returncode == 4 and result.stderr.endswith(b"locked by another writer; try again or raise --timeout\n"), result.stderr
    assert snapshot(claim) == before and Memory.at("api").claimed()
    assert sh("rename", "notes", "api").returncode == 0  # (then taken over, as before)
    assert [m["text"] for m in Memory.open("api").messages()] == ["the notes"]


def _watching(home, name):
    """A real ``pimem watch NAME``, once it holds ``name``'s lease."""
    watcher = subprocess.Popen(pimem_cmd("watch", name), env=subprocess_env(), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while not (home / name / "lock.json").exists():
        assert watcher.poll() is None and time.monotonic() < deadline, "pimem watch did not take the lease"
        time.sleep(0.05)
    return watcher


def test_a_claim_a_killed_watcher_held_is_taken_over_by_a_rename_and_one_a_live_watcher_holds_is_not(sh, home, claim):
    """A watcher SIGKILLed while it held claim api left its lock.json there, and rename notes api said 'api' already
    exists (exit 2): the claim held a file more than a claim's. A dead holder's lease is the claim's leftover, taken
    over with it; a live watcher's keeps the claim, and the rename says who holds it (exit 4), as of its own name."""
    assert sh("append", "notes", "the notes").returncode == 0
    watcher = _watching(home, "api")
    try:
        before = snapshot(home)
        result = sh("rename", "notes", "api")
        assert (result.returncode, result.stderr.decode()) == (4, (
            "pimem: error: cannot rename 'notes' to 'api': a tree builder, pimem watch or build-tree "
            f"(pid {watcher.pid}, since 2026-10-08T09:30:00+08:00), holds 'api'; stop that process first\n"))
        assert snapshot(home) == before and Memory.at("api").claimed()
    finally:
        watcher.kill()
        watcher.wait()
    assert (claim / "lock.json").exists()
    result = sh("rename", "notes", "api")
    assert result.returncode == 0, result.stderr
    assert [m["text"] for m in Memory.open("api").messages()] == ["the notes"]
    assert not (home / "api" / "lock.json").exists()


def test_a_claim_a_killed_watcher_held_is_released_as_a_claim_is(home, claim):
    """A claim released (an import of nothing) stayed when a killed watcher's lock.json was in it."""
    watcher = _watching(home, "api")
    watcher.kill()
    watcher.wait()
    projects.release(Memory.at("api"), [CLIENT])
    assert not claim.exists()
