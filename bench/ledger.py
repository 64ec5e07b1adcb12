"""Memories, compaction, recall and the per-turn context: what each costs, as ratios to one pass over the log.

Baseline: `pimem since NAME '#0' --include-tools`, a real process streaming every message of the same memory.
`pimem context --system` reads nothing, so it shows the start-up cost every command pays. Each figure is the
median of a few runs.

    python bench/ledger.py [MESSAGES]      # default 20,000 synthetic messages
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.surfaces import timed  # noqa: E402  (median of a few real processes)
from bench.synth import messages  # noqa: E402
from pimem import Memory, memories  # noqa: E402


def main() -> None:
    count = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "PIMEM_HOME": home, "PYTHONPATH": str(ROOT)}
        os.environ["PIMEM_HOME"] = home
        mem = Memory.at("bench")
        logged = list(messages(count, seed=7))
        for k, msg in enumerate(logged):  # source entry ids, as an importer keeps them
            msg["meta"] = {**(msg.get("meta") or {}), "entry": f"{k * 2654435761 % 2**32:08x}"}
        mem.append(logged)
        for n in range(200):
            memories.remember(mem, f"memory {n}: the staging db listens on {5000 + n}", pin=n % 20 == 0)
        pimem = [sys.executable, "-m", "pimem"]
        base = timed([*pimem, "since", "bench", "#0", "--include-tools"], env)
        print(f"{count:,} messages, 200 memories; baseline (one pass over the log with since): {base * 1000:.0f} ms")
        cases = [
            ("context --system (start-up reference)", ["context", "--system"]),
            ("context (the per-turn context)", ["context", "bench", "--cwd", "/w"]),
            ("memories pnpm (rank 200 memories)", ["memories", "bench", "staging", "5033"]),
            ("remember (one chained, fsync'd event)", ["remember", "bench", "use pnpm"]),
            ("recall refund rounding (search)", ["recall", "bench", "refund", "rounding", "--include-tools"]),
            ("recall --kind user --limit 8 (list)", ["recall", "bench", "--kind", "user"]),
            ("recall --ids 5,500 --raw (read)", ["recall", "bench", "--ids", "5,500", "--raw", "--include-tools"]),
            ("recall --ids entry:… (read by entry id)",
             ["recall", "bench", "--ids", f"entry:{count // 2 * 2654435761 % 2**32:08x}", "--include-tools"]),
            ("compact --keep 64000 --dry-run", ["compact", "bench", "--keep", "64000", "--dry-run"]),
        ]
        for label, args in cases:
            took = timed([*pimem, *args], env)
            print(f"  {label:<42} {took * 1000:7.0f} ms  {took / base:5.2f}× baseline")


if __name__ == "__main__":
    main()
