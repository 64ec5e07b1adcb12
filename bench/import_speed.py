"""Import throughput on the largest session sample, against baselines measured in the same run.

    python bench/import_speed.py                       # the largest file in ../shared/samples
    python bench/import_speed.py FILE --repeat 16      # FILE, its lines repeated 16 times (a bigger session)

Rows (MB/s of source file by wall time and by CPU time, best of ``--runs``):
  parse      read the file and decode every line with orjson: the floor any importer pays
  append     log the same messages with ``Memory.append`` in one batch (what the import writes)
  import     ``pimem.importers`` into a fresh memory: parse, validate, dedup keys, log, the view, the index
  unchanged  the same file again: recognised as read before (prefix hash), nothing parsed
  rebuild    again after deleting the import state: every key rebuilt from the log, every message present
Ratios are against ``parse``. Nothing here is asserted; see bench/README.md for measured figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pimem import Memory  # noqa: E402
from pimem.importers import plan, run  # noqa: E402
from pimem.importers.state import KEYS, STATE  # noqa: E402


def largest_sample() -> Path:
    for folder in (Path(os.environ.get("PIMEM_SAMPLES", "")), ROOT.parent / "shared" / "samples", ROOT.parent.parent / "shared" / "samples"):
        if str(folder) and folder.is_dir():
            files = sorted(folder.glob("*.jsonl"), key=lambda p: p.stat().st_size)
            if files:
                return files[-1]
    sys.exit("no sample found: give a FILE or set PIMEM_SAMPLES")


def best(func, runs: int) -> tuple[float, float]:
    """The shortest wall time and the shortest CPU time (all threads) of ``runs`` calls. On a busy machine
    the CPU time says what an idle one would do; the index thread makes wall < CPU possible on two cores."""
    walls, cpus = [], []
    for _ in range(runs):
        wall, cpu = time.perf_counter(), time.process_time()
        func()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return min(walls), min(cpus)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("file", nargs="?", type=Path)
    parser.add_argument("--repeat", type=int, default=1, help="repeat the file's lines (after its first) N times")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    source = args.file or largest_sample()
    work = Path(tempfile.mkdtemp(prefix="pimem-bench-import-"))
    os.environ["PIMEM_HOME"] = str(work / "home")
    try:
        path = work / source.name
        lines = source.read_bytes().splitlines(keepends=True)
        path.write_bytes(lines[0] + b"".join(lines[1:]) * args.repeat)
        size = path.stat().st_size
        sources = plan([str(path)])
        counter = iter(range(10**6))

        def parse():
            with open(path, "rb") as f:
                for line in f:
                    orjson.loads(line)

        def fresh_import():
            run(Memory.at(f"m{next(counter)}"), sources)

        fresh_import()
        sample = Memory.open("m0")
        records = [{k: m[k] for k in ("kind", "text", "date", "meta")} for m in sample.messages()]

        def append():
            Memory.at(f"a{next(counter)}").append(records)

        def unchanged():
            run(sample, sources)

        def rebuild():
            for name in (STATE, KEYS):
                (sample.path / name).unlink(missing_ok=True)
            run(sample, sources)

        rows = [("parse", best(parse, args.runs)), ("append", best(append, args.runs)), ("import", best(fresh_import, args.runs)),
                ("unchanged", best(unchanged, args.runs)), ("rebuild", best(rebuild, args.runs))]
        print(f"{source.name} ×{args.repeat}: {size / 1e6:.1f} MB, {len(records)} messages")
        base = rows[0][1][0]
        print(f"  {'':<10} {'wall':>13} {'CPU':>13} {'msg/s (wall)':>14} {'× parse':>8}")
        for name, (wall, cpu) in rows:
            print(f"  {name:<10} {size / 1e6 / wall:8.1f} MB/s {size / 1e6 / cpu:8.1f} MB/s {len(records) / wall:14,.0f} {wall / base:8.2f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
