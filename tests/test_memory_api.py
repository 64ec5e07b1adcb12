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
