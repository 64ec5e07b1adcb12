"""``append --ndjson`` with a reader process (``pimem.bulk``) logs exactly what the single-process road logs:
the same files, numbers, view and errors; and a writer that fails stops its reader."""

from __future__ import annotations

import subprocess
import sys
import time

import orjson
import pytest

from bench.synth import messages
from pimem import bulk, ingest
from pimem.memory import Memory

from conftest import pimem_cmd, snapshot, subprocess_env


def stream(n: int, seed: int = 5) -> bytes:
    """Synthetic agent traffic over several days, some records without a date or with kind aliases, some naming
    their speaker (the view counts what the name adds to a line: the reader sends it)."""
    out = []
    for k, msg in enumerate(messages(n, seed=seed)):
        if k % 7 == 3:
            msg.pop("date")
        if k % 5 == 2:
            msg.setdefault("meta", {})["speaker"] = f"Speaker {k % 9}"
        if k % 11 == 5 and msg["kind"] == "pi":
            msg["kind"] = "assistant"
        out.append(orjson.dumps(msg))
        if k % 13 == 0:
            out.append(b"  ")  # blank lines are skipped but counted
    return b"\n".join(out) + b"\n"


def both_roads(run, home, monkeypatch, data: bytes):
    """The command through the reader process, then through the thread (``bulk`` unavailable)."""
    results = []
    for name, forked in (("forked", True), ("threaded", False)):
        monkeypatch.setattr(bulk, "available", lambda forked=forked: forked)
        out = run("append", name, "--ndjson", input=data)
        files = snapshot(home / name)
        if "ranges.json" in files:  # each day file's mtime and inode differ between the two, nothing else
            rows = orjson.loads((home / name / "ranges.json").read_bytes())["files"]
            files["ranges.json"] = {day: row[:4] for day, row in rows.items()}
        results.append((out.exit_code, out.stdout, out.stderr, files))
    return results


@pytest.mark.parametrize("batch_lines", [1, 7, 10_000])
def test_the_reader_process_logs_the_same_bytes_as_one_process(run, home, monkeypatch, batch_lines):
    monkeypatch.setattr(ingest, "BATCH_LINES", batch_lines)
    data = stream(400)
    (code, out, err, forked), (code2, out2, err2, threaded) = both_roads(run, home, monkeypatch, data)
    assert code == code2 == 0 and err == err2 == ""
    assert out == out2 == "".join(f"{i}\n" for i in range(400))
    assert forked == threaded and len(forked) > 5  # day files, ranges.json, view.json: byte for byte


@pytest.mark.parametrize("bad", [b'{"kind": "user", "text": ', b'{"kind": "robot", "text": "x"}',
                                 b'{"kind": "user", "text": "x", "date": "May"}'])
def test_a_bad_line_refuses_its_batch_after_the_batches_before_it_were_logged(run, home, monkeypatch, bad):
    monkeypatch.setattr(ingest, "BATCH_LINES", 50)
    lines = stream(200).split(b"\n")
    lines[130] = bad
    data = b"\n".join(lines)
    (code, out, err, forked), (code2, out2, err2, threaded) = both_roads(run, home, monkeypatch, data)
    assert code == code2 == 2
    assert (out, err) == (out2, err2) and "that batch was refused" in err and "line 131" in err
    assert forked == threaded and Memory.open("forked").count() == len(out.split())


def test_the_first_unparsable_line_of_a_batch_is_named_even_after_a_bad_message(run, home, monkeypatch):
    """As ``Memory.prepare`` sees a batch: it is parsed whole before its messages are checked."""
    data = b'{"kind":"user","text":"a"}\n{"kind":"robot","text":"b"}\n{"kind":\n'
    (code, _, err, _), (code2, _, err2, _) = both_roads(run, home, monkeypatch, data)
    assert code == code2 == 2 and err == err2 == "pimem: error: line 3: not valid JSON\n"


def test_a_writer_that_cannot_get_the_lock_stops_its_reader_on_a_live_stream(home):
    """The reader waits on stdin that never ends; when the writer gives up (exit 4) it must not be left
    behind, nor keep the command from exiting."""
    Memory.at("main").append([{"kind": "user", "text": "hi"}])
    holder = subprocess.Popen([sys.executable, "-c", "import time; from pimem import Memory\n"
                               "with Memory.at('main').lock():\n print('locked', flush=True); time.sleep(60)"],
                              env=subprocess_env(), stdout=subprocess.PIPE)
    try:
        assert holder.stdout.readline() == b"locked\n"
        proc = subprocess.Popen(pimem_cmd("append", "main", "--ndjson", "--timeout", "0.5"), env=subprocess_env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        proc.stdin.write(b'{"kind":"user","text":"live"}\n')
        proc.stdin.flush()  # and the stream stays open
        start = time.monotonic()
        assert proc.wait(timeout=30) == 4
        assert time.monotonic() - start < 20
        assert b"locked by another writer" in proc.stderr.read()
        proc.stdin.close()
    finally:
        holder.kill()
        holder.wait()
    assert Memory.open("main").count() == 1


def test_a_live_stream_is_logged_as_it_arrives(home):
    proc = subprocess.Popen(pimem_cmd("append", "main", "--ndjson"), env=subprocess_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        for k in range(3):
            proc.stdin.write(b'{"kind":"user","text":"turn %d"}\n' % k)
            proc.stdin.flush()
            assert proc.stdout.readline() == b"%d\n" % k  # acknowledged before the next line is sent
    finally:
        proc.stdin.close()
    assert proc.wait(timeout=30) == 0
    assert [m["text"] for m in Memory.open("main").messages()] == ["turn 0", "turn 1", "turn 2"]


def test_a_killed_writer_takes_its_reader_with_it(home):
    """SIGKILL the command while its stdin stays open: nothing is left running (the reader would otherwise
    wait on stdin for ever)."""
    import signal

    proc = subprocess.Popen(pimem_cmd("append", "main", "--ndjson"), env=subprocess_env(),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdin.write(b'{"kind":"user","text":"hi"}\n')
    proc.stdin.flush()
    assert proc.stdout.readline() == b"0\n"
    children = open(f"/proc/{proc.pid}/task/{proc.pid}/children").read().split()
    assert len(children) == 1
    reader = int(children[0])
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{reader}/stat").read().rsplit(")", 1)[1].split()[0]
        except FileNotFoundError:
            break
        if state == "Z":  # dead, waiting for whoever adopted it to reap it
            break
        time.sleep(0.05)
    else:
        pytest.fail("the reader outlived its writer")
    proc.stdin.close()
    assert Memory.open("main").count() == 1


@pytest.mark.parametrize("flags", [[], ["--json"]])
def test_a_reader_of_the_numbers_that_goes_away_stops_the_printing_not_the_logging(home, tmp_path, flags):
    """``pimem append --ndjson < big | head -1``: every message is logged, exit 0, nothing said; what is still
    printed goes nowhere (as with a closed stdout)."""
    source = tmp_path / "in.ndjson"
    source.write_bytes(b"".join(b'{"kind":"user","text":"line %d"}\n' % k for k in range(30_000)))
    with open(source, "rb") as stdin:  # (their numbers overflow a pipe's buffer)
        proc = subprocess.Popen(pimem_cmd("append", "main", "--ndjson", *flags), env=subprocess_env(),
                                stdin=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline() in (b"0\n", b'{"i":0}\n')
    proc.stdout.close()  # the reader goes away
    assert (proc.wait(timeout=60), proc.stderr.read()) == (0, b"")
    assert Memory.open("main").count() == 30_000
