"""Real processes: writers killed mid-append, writers racing each other, and what `pimem append` imports."""

import random
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import subprocess_env
from pimem import Memory

# appends forever, printing "i text" for every message once append() has returned (= acknowledged)
WRITER = r"""
import random, sys
from pimem import Memory
mem = Memory.at("main")
rng = random.Random(int(sys.argv[1]))
print("ready", flush=True)
n = 0
while True:
    batch = []
    for _ in range(rng.choice([1, 1, 1, 5, 40])):
        n += 1
        day = rng.choice(["07", "08", "08", "08", "09"])  # some batches span several daily files
        text = f"{sys.argv[1]}:{n} " + "x" * rng.choice([10, 200, 5000, 60000])
        batch.append({"kind": rng.choice(["user", "pi", "echo"]), "text": text, "date": f"2026-10-{day}T10:00:00+08:00"})
    ids = mem.append(batch)
    sys.stdout.write("".join(f"{i} {m['text'].split()[0]}\n" for i, m in zip(ids, batch)))
    sys.stdout.flush()
"""


def test_sigkill_at_random_moments_loses_no_acknowledged_message(home):
    rng = random.Random(2)
    acknowledged: dict[int, str] = {}
    mid_append = 0  # rounds killed between writing and acknowledging (the interesting ones)
    for round_ in range(50):
        child = subprocess.Popen([sys.executable, "-c", WRITER, str(round_)], stdout=subprocess.PIPE, env=subprocess_env())
        assert child.stdout.readline() == b"ready\n"
        time.sleep(rng.uniform(0.0, 0.12))
        child.send_signal(signal.SIGKILL)
        out, _ = child.communicate()
        for line in out.split(b"\n")[:-1]:  # complete lines only
            i, tag = line.decode().split(" ", 1)
            acknowledged[int(i)] = tag
        logged = {m["i"]: m["text"].split()[0] for m in Memory.open("main").messages()}  # reads cleanly
        for i, tag in acknowledged.items():
            assert logged.get(i) == tag, f"round {round_}: acknowledged message {i} is not in the log"
        torn = sum(not p.read_bytes().endswith(b"\n") for p in (home / "main" / "main").glob("*.jsonl"))
        mid_append += bool(torn or set(logged) - set(acknowledged))
        acknowledged.update({i: tag for i, tag in logged.items()})  # written but unacknowledged is fine too
    assert len(acknowledged) > 50 and mid_append >= 5
    mem = Memory.open("main")
    total = mem.count()
    assert mem.append([{"kind": "user", "text": "after the crashes"}]) == [total]
    assert [m["i"] for m in mem.messages()] == list(range(total + 1))


# 200 appends, one message each, printing each acknowledged i
RACER = r"""
import sys
from pimem import Memory
mem = Memory.at("main")
for n in range(200):
    (i,) = mem.append([{"kind": "user", "text": f"{sys.argv[1]}:{n}"}])
    print(i, flush=True)
"""


# a real `pimem append` SIGKILLed once it has written half its line into a day file it created
KILLED_IN_A_NEW_FILE = """
import os, signal, sys
from pimem import store
real = store.write_all
def write_all(fd, data, path=None):
    if os.fspath(path).endswith(sys.argv[1]):
        real(fd, data[: len(data) // 2], path=path)
        os.kill(os.getpid(), signal.SIGKILL)
    real(fd, data, path=path)
store.write_all = write_all
from pimem.cli import main
main(sys.argv[2:])
"""


def test_a_writer_killed_in_a_day_file_it_created_leaves_it_for_the_next_writer_to_record(home, sh):
    """The next append seals the torn line and writes after it: ranges.json must then name that file (it once
    left it out while lifting the marker, so fsck found ranges.json wrong)."""
    assert sh("append", "main", "first").returncode == 0
    killed = subprocess.run([sys.executable, "-c", KILLED_IN_A_NEW_FILE, "2026-10-09.jsonl", "append", "main",
                             "--date", "2026-10-09T10:00:00+08:00", "killed"], capture_output=True, env=subprocess_env())
    assert killed.returncode == -signal.SIGKILL and (home / "main" / "ranges.writing").exists()
    assert sh("append", "main", "--date", "2026-10-09T11:00:00+08:00", "next").stdout == b"1\n"
    assert not (home / "main" / "ranges.writing").exists()
    out = sh("fsck", "main")
    assert out.returncode == 0 and b"ranges.json" not in out.stdout, out.stdout
    assert sh("since", "main", "#0").stdout.count(b"\n") == 2


def test_eight_writers_at_once_get_every_i_exactly_once(home):
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(k)], stdout=subprocess.PIPE, env=subprocess_env()) for k in range(8)]
    printed = []
    for racer in racers:
        out, _ = racer.communicate(timeout=240)
        assert racer.returncode == 0
        printed += [int(x) for x in out.split()]
    assert sorted(printed) == list(range(1600))
    messages = list(Memory.open("main").messages())
    assert [m["i"] for m in messages] == list(range(1600))
    texts = [m["text"] for m in messages]
    assert sorted(texts) == sorted(f"{k}:{n}" for k in range(8) for n in range(200))
    for k in range(8):  # each writer's messages are in its own order
        mine = [int(t.split(":")[1]) for t in texts if t.startswith(f"{k}:")]
        assert mine == list(range(200))


HEAVY = ("rich", "httpx", "pydantic", "mcp")


@pytest.mark.parametrize("argv,stdin", [
    (["append", "main", "hello"], None),
    (["append", "main", "--ndjson"], b'{"kind":"user","text":"hi"}\n'),
    (["since", "main", "#0"], None),
])
def test_the_log_commands_do_not_import_heavy_modules(home, argv, stdin):
    Memory.at("main").append([{"kind": "user", "text": "already here"}])
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "pimem", *argv], input=stdin, capture_output=True, env=subprocess_env(), timeout=60
    )
    assert out.returncode == 0, out.stderr.decode()[-500:]
    loaded = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*(\S+)\s*$", out.stderr.decode(), re.M)}
    assert "orjson" in loaded and "pimem" in loaded  # the check sees imports at all
    assert not loaded & set(HEAVY), f"{' '.join(argv)} imported {sorted(loaded & set(HEAVY))}"


def test_the_import_guard_would_notice(home, tmp_path):
    """The guard above parses real -X importtime output: a module that imports rich is caught."""
    (tmp_path / "loud.py").write_text("import rich\n")
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import loud"], capture_output=True, env={**subprocess_env(), "PYTHONPATH": str(tmp_path)})
    loaded = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s*(\S+)\s*$", out.stderr.decode(), re.M)}
    assert "rich" in loaded


# pimem run as the CLI, its import pausing before it opens its second file (or, with "start", before it
# reads any): it says so on the fifo named by argv[2] and waits until the fifo argv[3] is closed by the test
PAUSING_IMPORT = r"""
import sys
import pimem.importers
import pimem.importers.job as job
from pimem.cli import main
when, paused, go = sys.argv[1:4]
opened = []

def pause():
    with open(paused, "w") as f:
        f.write("paused\n")
    with open(go) as f:
        f.read()

def pausing(source):
    opened.append(source)
    if len(opened) == 2 and when == "between":
        pause()
    return open(source.path, "rb")

def run(*args, **kwargs):
    if when == "start":
        pause()
    return job.run(*args, **kwargs)

job._open = pausing
pimem.importers.run = run
sys.argv[1:] = sys.argv[4:]
main()
"""


@pytest.mark.parametrize("how,when", [("rename", "between"), ("delete", "between"), ("rename", "start")])
def test_an_import_whose_memory_is_renamed_or_deleted_stops_as_append_does_and_says_what_went_in(home, tmp_path, how, when):
    """Between an import's files the memory goes (another process renames or deletes it): exit 3, the
    wording of ``append --ndjson``'s and the count of what went in, no memory made again at the old path, and
    the same import again (renamed: its old name leads there) adds the rest once. It used to be exit 7 on a
    path that was no longer there (``…/im/index.lock``), with no count."""
    import os

    import orjson

    def lines(day: str, n: int) -> bytes:
        return b"".join(orjson.dumps({"kind": "user", "text": f"{day} message {k}", "date": f"2026-10-{day}T09:00:00+08:00"}) + b"\n"
                        for k in range(n))

    first, second = tmp_path / "first.ndjson", tmp_path / "second.ndjson"
    first.write_bytes(lines("08", 1200))  # (past INDEX_MIN: the import indexes as it goes, in a second thread)
    second.write_bytes(lines("09", 10))
    paused, go = tmp_path / "paused", tmp_path / "go"
    os.mkfifo(paused)
    os.mkfifo(go)
    cli = lambda *args: subprocess.run([sys.executable, "-m", "pimem", *args], env=subprocess_env(), capture_output=True)  # noqa: E731
    assert cli("append", "im", "seed").returncode == 0
    importing = subprocess.Popen([sys.executable, "-c", PAUSING_IMPORT, when, paused, go, "import", first, second, "--name", "im"],
                                 env=subprocess_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        with open(paused) as f:
            assert f.read() == "paused\n"
        assert cli(*(["rename", "im", "im2"] if how == "rename" else ["delete", "im"])).returncode == 0
    finally:
        with open(go, "w"):
            pass
    out, err = importing.communicate(timeout=120)
    assert importing.returncode == 3, err
    assert err.decode() == ("pimem: error: memory 'im' was renamed or deleted while this had it open; nothing more was "
                            f"written: run again; {'1,200' if when == 'between' else 0} messages imported; the same "
                            "import again reads on from where this one stopped\n")
    if how == "delete":
        assert not (home / "im").exists()
        return
    assert (home / "im").is_file() and Memory.open("im2").count() == (1201 if when == "between" else 1)
    again = cli("import", first, second, "--name", "im")
    assert again.returncode == 0, again.stderr
    added = "10 imported" if when == "between" else "1,210 imported"
    assert again.stdout.decode().endswith(f"im2: {added}, 0 already present, 0 malformed skipped; 1,211 messages in all\n")
    assert cli("import", first, second, "--name", "im").stdout.decode().startswith("first.ndjson: 0 imported")
    assert cli("fsck", "im2").returncode == 0
