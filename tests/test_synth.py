"""The synthetic log generator the benchmarks (and other issues' tests) use."""

import subprocess
import sys

import orjson

from bench.synth import messages
from pimem.message import normalise

from conftest import ROOT


def test_same_seed_same_messages_and_shaped_like_agent_logs():
    batch = list(messages(3000, seed=5))
    assert batch == list(messages(3000, seed=5))
    assert batch != list(messages(3000, seed=6))
    kinds = {k: sum(m["kind"] == k for m in batch) for k in ("user", "pi", "tool", "echo")}
    assert set(m["kind"] for m in batch) == set(kinds)
    assert 0.08 < kinds["echo"] / len(batch) < 0.12
    for m in batch:
        size = len(m["text"].encode())
        if m["kind"] == "echo":
            assert 1_000 < size <= 30_720
        else:
            assert 0 < size <= 600
        normalise(m)  # every record is valid input for append --ndjson
    dates = [m["date"] for m in batch]
    assert dates == sorted(dates) and len({d[:10] for d in dates}) > 2
    assert any("\u4e00" <= ch <= "\u9fff" for m in batch for ch in m["text"][:5])


def test_script_writes_ndjson():
    out = subprocess.run([sys.executable, str(ROOT / "bench" / "synth.py"), "50", "--seed", "5"], capture_output=True, check=True).stdout
    assert [orjson.loads(line) for line in out.splitlines()] == list(messages(50, seed=5))
