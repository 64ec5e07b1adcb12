"""Search and index benchmark: ``pimem search`` against ``grep -rFi`` over the same log files, in one run.

    python bench/search.py --n 1000000          # builds (or reuses) the memory under --home, then measures
    python bench/search.py --n 100000 --runs 5

Builds a memory of ``--n`` synthetic messages (``bench/synth.py``; a few user messages get a rare word so
there is something rare to find), times ``pimem reindex`` (messages/s, index size against the log's), then
each query with ``pimem search`` and with ``grep -rFi`` writing its matches to a file (GNU grep stops at the
first match when writing to /dev/null). pimem's own time is its wall time minus a no-op ``pimem`` command
measured in the same run. Prints medians and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RARE = "zanzibar"
QUERIES = [  # (label, pimem search arguments, grep pattern)
    ("rare word", [RARE], RARE),
    ("common word", ["staging"], "staging"),
    ("3-word AND", ["refund rounding cent"], "refund"),
    ("phrase", ['"the staging database"'], "the staging database"),
    ("2-char Chinese", ["蓝鲸"], "蓝鲸"),
    ("--limit 20 --rank", ["database", "--rank", "--limit", "20"], "database"),
    ("1-char", ["鲸"], "鲸"),
    ("rare, with tools", [RARE, "--include-tools"], RARE),
]


def records(n: int, seed: int):
    from bench.synth import messages

    planted = -1
    for k, record in enumerate(messages(n, seed)):
        if k // 100_000 > planted and k % 100_000 > 50_000 and record["kind"] == "user":  # ten in a million
            record["text"] += f" the {RARE} incident"
            planted = k // 100_000
        yield record


def build(home: Path, n: int, seed: int) -> None:
    if (home / "bench" / "main").is_dir():
        return
    started = time.perf_counter()
    proc = subprocess.Popen(pimem("append", "bench", "--ndjson", home=home), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    batch = []
    for record in records(n, seed):
        batch.append(orjson.dumps(record))
        if len(batch) >= 10_000:
            proc.stdin.write(b"\n".join(batch) + b"\n")
            batch.clear()
    if batch:
        proc.stdin.write(b"\n".join(batch) + b"\n")
    proc.stdin.close()
    if proc.wait():
        sys.exit("append failed")
    print(f"built {n:,} messages in {time.perf_counter() - started:.1f} s", file=sys.stderr)


def pimem(*args, home: Path) -> list[str]:
    return [sys.executable, "-m", "pimem", *args, "--home", str(home)]


def timed(cmd: list[str], stdout=subprocess.DEVNULL, env=None) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, stdout=stdout, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def median(cmd: list[str], runs: int, out_path: Path | None = None, env=None) -> float:
    times = []
    for _ in range(runs):
        if out_path is None:
            times.append(timed(cmd, env=env))
        else:
            with open(out_path, "wb") as out:
                times.append(timed(cmd, stdout=out, env=env))
    return statistics.median(times)


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--home", type=Path, default=None, help="store to build in and reuse (default: a temporary one)")
    parser.add_argument("--skip-reindex", action="store_true", help="reuse the existing index")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="pimem-bench-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8")
    os.environ.update(env)
    build(home, args.n, args.seed)
    mem = home / "bench"
    log_bytes = size_of(mem / "main")
    print(f"memory: {args.n:,} messages, log {log_bytes / 1e6:,.0f} MB in {len(list((mem / 'main').iterdir()))} files")

    if not args.skip_reindex or not (mem / "index.sqlite").exists():
        seconds = timed(pimem("reindex", "bench", home=home), env=env)
        index_bytes = (mem / "index.sqlite").stat().st_size
        print(f"reindex: {seconds:.1f} s, {args.n / seconds:,.0f} messages/s (target >= 30,000); "
              f"index {index_bytes / 1e6:,.0f} MB = {index_bytes / log_bytes:.2f}x the log (target <= 3x)")

    empty = Path(tempfile.mkdtemp(prefix="pimem-empty-"))
    noop = median(pimem("list", home=empty), args.runs, env=env)
    print(f"no-op pimem (list of an empty home): {noop * 1000:.0f} ms")
    scratch = Path(tempfile.mkdtemp(prefix="pimem-grep-"))
    print(f"{'query':<20} {'grep ms':>9} {'pimem ms':>9} {'own ms':>8} {'grep/own':>9} {'hits':>5}")
    for label, search_args, pattern in QUERIES:
        grep = median(["grep", "-rFi", "--", pattern, str(mem / "main")], args.runs, scratch / "grep.out", env=env)
        wall = median(pimem("search", *search_args, "bench", home=home), args.runs, scratch / "pimem.out", env=env)
        hits = len((scratch / "pimem.out").read_bytes().splitlines())
        own = max(wall - noop, 1e-4)
        print(f"{label:<20} {grep * 1000:9.0f} {wall * 1000:9.0f} {own * 1000:8.1f} {grep / own:8.0f}x {hits:5d}")
    shutil.rmtree(scratch)
    shutil.rmtree(empty)
    if args.home is None:
        shutil.rmtree(home)


if __name__ == "__main__":
    main()
