"""Search and index benchmark: ``pimem search`` against ``grep -rFi`` over the same log files, in one run, in
both states of a big memory: unfolded (bulk-appended, no tree: the view is a line per message or a few) and
with the tree built by the offline compactor.

    python bench/search.py --n 1000000 --home /tmp/b1m       # builds (or reuses) both memories, then measures
    python bench/search.py --n 100000 --runs 5

Builds a memory of ``--n`` synthetic messages (``bench/synth.py``; a few user messages get a rare word so
there is something rare to find), times ``pimem reindex`` (messages/s, index size against the log's), makes a
second memory over the same day files (hard links) and builds its tree offline (``pimem build-tree``), then
runs each query on both with ``pimem search`` and with ``grep`` writing its matches to a file (GNU grep
stops at the first match when writing to /dev/null): ``grep -rFi`` of the same string, and for ``--rank``
with a 12-word question ``grep -rEi`` of its content words as one alternation. pimem's own time is its wall
time minus a no-op ``pimem`` command measured in the same rounds. Every hit carries ``held`` (how the view
holds it), so the view is part of what is measured. Prints medians and ratios; asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import resource
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
QUESTION = "why does the staging database refuse connections since this morning on port 5433"
QUERIES = [  # (label, pimem search arguments, grep options, grep pattern)
    ("rare word", [RARE], "-rFi", RARE),
    ("common word", ["staging"], "-rFi", "staging"),
    ("3-word AND", ["refund rounding cent"], "-rFi", "refund"),
    ("phrase", ['"the staging database"'], "-rFi", "the staging database"),
    ("2-char Chinese", ["蓝鲸"], "-rFi", "蓝鲸"),
    ("--rank, 12 words", [QUESTION, "--rank"], "-rEi", "staging|database|refuse|connections|morning|5433"),
]
STATES = {"unfolded": "unfolded", "tree built": "built"}  # state -> its memory's home under --home


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


def build_tree_copy(home: Path, built: Path, env: dict) -> None:
    """A second memory over the same day files (hard links: the log is append-only and never rewritten), with
    the first one's other files copied and its whole tree written: every node that is not free, with a
    deterministic summary, as a compactor that kept up leaves it (``bench.tree.write_tree``: the offline
    ``build-tree`` writes the same nodes, with extracts for texts, but folding a million-line view as they
    arrive took hours on a loaded machine). The view is then folded afresh over log and tree (``pimem view``,
    which saves view.json), as a memory whose compactor kept up has it."""
    if (built / "bench" / "tree").is_dir():
        return
    from bench.tree import write_tree
    from pimem import Memory

    shutil.rmtree(built, ignore_errors=True)
    (built / "bench").mkdir(parents=True)
    shutil.copytree(home / "bench" / "main", built / "bench" / "main", copy_function=os.link)
    for path in (home / "bench").iterdir():
        if path.is_file() and path.name not in ("view.json", "lines.json"):
            shutil.copy2(path, built / "bench" / path.name)
    started = time.perf_counter()
    mem = Memory.open("bench", built)
    nodes = write_tree(mem, mem.messages())
    mem.close()
    subprocess.run(pimem("view", "bench", "--stats", home=built), env=env, check=True, stdout=subprocess.DEVNULL)
    print(f"wrote {nodes:,} nodes and folded the view over them in {time.perf_counter() - started:.0f} s",
          file=sys.stderr)


def pimem(*args, home: Path) -> list[str]:
    return [sys.executable, "-m", "pimem", *args, "--home", str(home)]


def timed(cmd: list[str], stdout=subprocess.DEVNULL, env=None) -> float:
    started = time.perf_counter()
    subprocess.run(cmd, stdout=stdout, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - started


def ms(values: list[float]) -> str:
    return f"{min(values) * 1000:.0f} ({statistics.median(values) * 1000:.0f})"


def library_ms(home: Path, search_args: list[str], runs: int) -> float:
    """Median milliseconds of ``pimem.search.search`` alone for these command-line arguments, each call on a
    fresh ``Memory`` (a new SQLite connection), in this process."""
    from pimem import Memory
    from pimem.search import search

    query, options = search_args[0], search_args[1:]
    kwargs = {"rank": "--rank" in options}
    times = []
    for _ in range(runs):
        mem = Memory.open("bench", home)
        started = time.perf_counter()
        search([mem], query, **kwargs)
        times.append(time.perf_counter() - started)
        mem.close()
    return statistics.median(times) * 1000


def size_of(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--home", type=Path, default=None, help="store to build in and reuse (default: a temporary one)")
    parser.add_argument("--skip-reindex", action="store_true", help="reuse the existing index")
    parser.add_argument("--skip-queries", action="store_true", help="only build and reindex")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="pimem-bench-"))
    env = dict(os.environ, PYTHONPATH=str(ROOT), LC_ALL="C.UTF-8")
    env.pop("PYTHONDONTWRITEBYTECODE", None)  # an installed pimem has its .pyc files; compiling is not search
    os.environ.update(env)
    build(home / "unfolded", args.n, args.seed)
    mem = home / "unfolded" / "bench"
    log_bytes = size_of(mem / "main")
    print(f"memory: {args.n:,} messages, log {log_bytes / 1e6:,.0f} MB in {len(list((mem / 'main').iterdir()))} files")

    if not args.skip_reindex or not (mem / "index.sqlite").exists():
        cpu_before = resource.getrusage(resource.RUSAGE_CHILDREN)
        seconds = timed(pimem("reindex", "bench", home=home / "unfolded"), env=env)
        cpu_after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu_after.ru_utime - cpu_before.ru_utime) + (cpu_after.ru_stime - cpu_before.ru_stime)
        index_bytes = sum((mem / f).stat().st_size for f in ("index.sqlite", "index-1.sqlite"))
        print(f"reindex: {seconds:.1f} s, {args.n / seconds:,.0f} messages/s (target >= 30,000); CPU {cpu:.1f} s of "
              f"all threads, {args.n / cpu:,.0f} messages per CPU-second; load average {os.getloadavg()[0]:.1f}")
        print(f"index: {index_bytes / 1e6:,.0f} MB = {index_bytes / log_bytes:.2f}x the log (target <= 3x)")

    build_tree_copy(home / "unfolded", home / "built", env)
    if args.skip_queries:
        return
    empty = Path(tempfile.mkdtemp(prefix="pimem-empty-"))
    scratch = Path(tempfile.mkdtemp(prefix="pimem-grep-"))
    noop_cmd = pimem("list", home=empty)
    print("rounds of (no-op pimem, pimem search in each state, grep) interleaved; figures are the minimum over "
          "rounds (the median in brackets); own = min(search) - min(no-op of the same rounds); library = the search "
          "call alone, in process")
    print(f"{'query':<18} {'state':<11} {'grep ms':>11} {'pimem ms':>11} {'own ms':>7} {'grep/own':>9} "
          f"{'library ms':>11} {'hits':>5}")
    rows, all_noops = [], []
    for label, search_args, grep_options, pattern in QUERIES:
        greps, noops, walls = [], [], {state: [] for state in STATES}
        for _ in range(args.runs):
            noops.append(timed(noop_cmd, env=env))
            for state, where in STATES.items():
                with open(scratch / "pimem.out", "wb") as out:
                    walls[state].append(timed(pimem("search", *search_args, "bench", home=home / where), stdout=out,
                                              env=env))
            with open(scratch / "grep.out", "wb") as out:
                greps.append(timed(["grep", grep_options, "--", pattern, str(mem / "main")], stdout=out, env=env))
        for state, where in STATES.items():
            with open(scratch / "pimem.out", "wb") as out:
                subprocess.run(pimem("search", *search_args, "bench", home=home / where), stdout=out, env=env)
            hits = len((scratch / "pimem.out").read_bytes().splitlines())
            library = library_ms(home / where, search_args, args.runs)
            rows.append((label, state, greps, walls[state], noops, library, hits))
        all_noops += noops
    for label, state, greps, walls, noops, library, hits in rows:
        own = max(min(walls) - min(noops), 1e-3)  # (the no-op of the same rounds: as many runs as the search)
        print(f"{label:<18} {state:<11} {ms(greps):>11} {ms(walls):>11} {own * 1000:7.0f} {min(greps) / own:8.0f}x "
              f"{library:11.1f} {hits:5d}")
    print(f"no-op pimem (list of an empty home): {ms(all_noops)} ms")
    shutil.rmtree(scratch)
    shutil.rmtree(empty)
    if args.home is None:
        shutil.rmtree(home)


if __name__ == "__main__":
    main()
