"""Surfaces: how long `map`, `fsck` and an MCP round trip take, as ratios to reading the same log once.

Baseline: `pimem since NAME '#0' --include-tools > /dev/null`, a real process streaming every message of the
same memory (what any full pass over the log costs). Each figure is the median of a few runs.

    python bench/surfaces.py [MESSAGES]      # default 20,000 synthetic messages
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.synth import messages  # noqa: E402
from pimem import Memory  # noqa: E402

RUNS = 3


def timed(args: list[str], env: dict) -> float:
    best = []
    for _ in range(RUNS):
        start = time.perf_counter()
        subprocess.run(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        best.append(time.perf_counter() - start)
    return statistics.median(best)


def mcp_round_trip(env: dict) -> float:
    """Start `pimem mcp`, initialise, list tools, read 100 messages with `since`, hang up."""
    import anyio
    import mcp

    async def session():
        params = mcp.StdioServerParameters(command=sys.executable, args=["-m", "pimem", "mcp"], env=env)
        async with mcp.stdio_client(params) as (read, write):
            async with mcp.ClientSession(read, write) as client:
                await client.initialize()
                await client.list_tools()
                await client.call_tool("since", {"name": "bench", "limit": 100})

    runs = []
    for _ in range(RUNS):
        start = time.perf_counter()
        anyio.run(session)
        runs.append(time.perf_counter() - start)
    return statistics.median(runs)


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PIMEM_HOME": home, "PYTHONPATH": str(ROOT)}
        os.environ["PIMEM_HOME"] = home
        Memory.at("bench").append(messages(count, seed=7))
        # the offline compactor builds the tree, so the view is folded to its budget as in real use
        subprocess.run([sys.executable, "-m", "pimem", "build-tree", "bench"], env=env, check=True, stderr=subprocess.DEVNULL)
        lines = subprocess.run([sys.executable, "-m", "pimem", "view", "bench"], env=env, capture_output=True, check=True).stdout.count(b"\n")
        size = sum(p.stat().st_size for p in (Path(home) / "bench" / "main").iterdir())
        pimem = [sys.executable, "-m", "pimem"]
        base = timed([*pimem, "since", "bench", "#0", "--include-tools"], env)
        print(f"{count:,} messages, {size / 1e6:.1f} MB of log, tree built, view of {lines:,} lines")
        print(f"baseline  since '#0' (one pass over the log)   {base:7.3f} s   1.00")
        for label, args in (
            ("map --width 120", [*pimem, "map", "bench", "--width", "120"]),
            ("map --svg", [*pimem, "map", "bench", "--width", "120", "--svg", os.path.join(home, "m.svg")]),
            ("fsck", [*pimem, "fsck", "bench"]),
            ("list (start-up floor)", [*pimem, "list"]),
        ):
            t = timed(args, env)
            print(f"{label:<44} {t:7.3f} s  {t / base:5.2f}")
        t = mcp_round_trip(env)
        print(f"{'mcp: start, initialise, list tools, since':<44} {t:7.3f} s  {t / base:5.2f}")


if __name__ == "__main__":
    main()
