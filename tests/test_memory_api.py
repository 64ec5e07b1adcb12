"""The library API (``pimem.Memory``) held to what the README promises: nothing it is handed can corrupt the
log or write outside the memory, and every failure is a ``PimemError``."""

from __future__ import annotations

import pytest

from conftest import snapshot
from pimem import Memory
from pimem.errors import BadInput


def test_records_not_from_prepare_are_checked_before_anything_is_written(home):
    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "ok"}])
    before = snapshot(home)
    for bad in ({"kind": "user", "text": "x", "date": "garbage"},
                {"kind": "user", "text": "x", "size": 7, "date": "../../escape"}):
        with pytest.raises(BadInput):
            mem.append([bad])
        with pytest.raises(BadInput):  # a stream's batch that is not prepare()'s is checked as append checks it
            list(mem.append_stream([[bad]]))
        with pytest.raises(TypeError):  # (no keyword skips the checks any more)
            mem.append([bad], prepared=True)
    changed = mem.prepare([{"kind": "user", "text": "x"}])
    changed[0]["date"] = "../../escape"  # (changed after it was checked: the log still names no such file)
    with pytest.raises(BadInput):
        mem.append(changed)
    assert snapshot(home) == before
    # a raw batch in a stream is logged as append logs it; a prepared one as it is
    logged = list(mem.append_stream([[{"kind": "user", "text": "two"}], mem.prepare([{"kind": "pi", "text": "three"}])]))
    assert logged == [[1], [2]]
    assert [(m["kind"], m["text"], m["size"]) for m in mem.messages(1)] == [("user", "two", 9), ("pi", "three", 9)]


def test_one_memory_object_may_be_shared_by_threads(home, capfd):
    """A writer thread appending while another reads the view through the same object: no raw error, and
    view.json is never saved in a state the log contradicts."""
    import threading

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "start"}])
    failures, done = [], threading.Event()

    def write():
        try:
            for k in range(150):
                mem.append([{"kind": "user" if k % 2 else "pi", "text": f"message {k} " + "x" * 40}])
        finally:
            done.set()

    def read():
        while not done.is_set():
            try:
                mem.view_lines()
                last = mem.count() - 1
                mem.held(last)
                mem.message(last)
            except Exception as exc:  # (any at all is the failure this test is about)
                failures.append(repr(exc))

    threads = [threading.Thread(target=write), threading.Thread(target=read), threading.Thread(target=read)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == [] and mem.count() == 151
    assert "unusable" not in capfd.readouterr().err
    saved = Memory.at("main").view_lines()  # restored from view.json
    (home / "main" / "view.json").unlink()
    assert Memory.at("main").view_lines() == saved == mem.view_lines()  # folded again from the log


def test_every_public_method_refuses_a_wrong_value_as_bad_input(home):
    from pimem import compaction
    from pimem.errors import NotFound

    mem = Memory.at("main")
    mem.append([{"kind": "user", "text": "ok"}])
    before = snapshot(home)
    one = [{"kind": "user", "text": "x"}]
    for call in (lambda: mem.append(one, timeout="5"), lambda: mem.append(one, timeout=-1),
                 lambda: mem.append(one, timeout=float("nan")), lambda: mem.append(one, timeout=True),
                 lambda: mem.append(one, timeout=400 * 86400), lambda: list(mem.append_stream([one], timeout="5")),
                 lambda: list(mem.append_stream(5)), lambda: mem.write_node(0, 0, "t", timeout=-1),
                 lambda: mem.save_config("x"), lambda: mem.save_config(None),
                 lambda: mem.prepare([{"kind": "robot"}], labels=5), lambda: mem.held("x"),
                 lambda: mem.held_each("01"), lambda: mem.held(-1), lambda: mem.write_node(0, 0, "t", meta="x"),
                 lambda: mem.write_nodes("abc"), lambda: mem.write_nodes([(0, 0)]), lambda: mem.view_lines(end="3"),
                 lambda: mem.view_lines(end=-1), lambda: compaction.compact(mem, "5"),
                 lambda: mem.lock("x").__enter__()):
        with pytest.raises(BadInput):
            call()
    with pytest.raises(NotFound, match="first append"):  # (settings of a memory not yet made: as save_cursor's)
        Memory.at("new").save_config({"view": {"hi": 64000, "lo": 32000}})
    assert snapshot(home) == before
    assert mem.append(one, timeout=0) == [1] and mem.append(one, timeout=2.5) == [2]


def test_api_errors_name_the_python_argument_not_the_cli_option(home):
    from pimem import api

    Memory.at("main").append([{"kind": "user", "text": "staging"}])
    for kwargs, said in (({"limit": 99}, "limit must be a whole number from 1 to 30"),
                         ({"limit": 0}, "limit must be a whole number from 1 to 30"),
                         ({"page": 0}, "page must be a whole number from 1"),
                         ({"ids": [""]}, "ids '' names no message"),
                         ({"ids": [-1]}, "ids -1 names no message")):
        with pytest.raises(BadInput) as refused:
            api.recall("main", **kwargs)
        assert said in str(refused.value) and "--" not in str(refused.value) and "comma" not in str(refused.value)
    assert [r["id"] for r in api.recall("main", ids=[0, "0"])["results"]] == [0]
