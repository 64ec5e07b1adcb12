"""``pimem reindex`` of one memory by several checkouts, alternated, with each thread's CPU: the parsing thread
(which also cuts the ranker's terms) and the two writer threads (SQLite builds the trigrams without the GIL).

    python bench/synth.py 200000 --seed 7 | pimem append bench --ndjson --home /tmp/r200
    python bench/reindex.py --home /tmp/r200 --rounds 3 /work/main .          # baseline first
    python bench/reindex.py --home /tmp/r200 --rounds 1 --no-terms .          # without the ranker's tables

Each run is a fresh process importing pimem from its checkout (``PIMEM_EMBEDDER=off``, bytecode on);
``--no-terms`` patches ``rankindex.Pending.add`` out (what the ranker's tables cost). Prints wall time,
messages/s, the threads' CPU, the peak RSS and the ratio of each checkout's median wall to the first's. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def worker(home: str, no_terms: bool) -> None:
    """One reindex in this process, from the checkout in the current directory."""
    sys.path.insert(0, os.getcwd())
    from pimem import cli, indexer, rankindex

    writers: list[float] = []
    run = indexer.Writer._run

    def timed(self) -> None:
        run(self)
        writers.append(time.thread_time())

    indexer.Writer._run = timed
    if no_terms:
        rankindex.Pending.add = lambda self, i, table, msg: None
    started, cpu = time.perf_counter(), time.thread_time()
    sys.argv = ["pimem", "reindex", "bench", "--home", home]
    try:
        cli.main()
    except SystemExit:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{time.perf_counter() - started:.2f} {peak:.0f} {time.thread_time() - cpu:.2f} {' '.join(f'{w:.2f}' for w in writers)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="+")
    parser.add_argument("--home", required=True, help="a home holding a memory named bench")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-terms", action="store_true", help="without the ranker's tables")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args.home, args.no_terms)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"} | {"PIMEM_EMBEDDER": "off"}
    walls: dict[str, list[float]] = {c: [] for c in args.checkouts}
    count = None
    for _ in range(args.rounds):
        for checkout in args.checkouts:
            load = os.getloadavg()[0]
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--home", args.home,
                                  *(["--no-terms"] if args.no_terms else []), checkout],
                                 cwd=checkout, env=env, capture_output=True, text=True, check=True)
            report, times = out.stdout.strip().splitlines()
            count = int(report.split()[1].replace(",", "")) if count is None else count
            wall, peak, parsing, *writers = map(float, times.split())
            walls[checkout].append(wall)
            print(f"{checkout:24} {wall:7.1f} s {count / wall:8,.0f} msg/s  CPU: parsing {parsing:6.1f} s, writers "
                  f"{' / '.join(f'{w:.1f}' for w in writers)} s, peak {peak:.0f} MB  (load {load:.2f})", flush=True)
    first = statistics.median(walls[args.checkouts[0]])
    for checkout, values in walls.items():
        print(f"{checkout:24} median {statistics.median(values):7.1f} s = {statistics.median(values) / first:.2f}x")


if __name__ == "__main__":
    main()
