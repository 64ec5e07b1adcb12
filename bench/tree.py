"""The tree and the view at a million messages: the view update per appended message must stay O(1).

Sets up a memory of N synthetic agent messages (bench/synth.py) whose summary tree is already written (every
node that is not free gets a deterministic 200–480 byte summary, the way a compactor keeping up would leave
it), then measures, in the same run:

- the view update per appended message (push, batch, save of view.json) at T = N and at T = 10,000, one
  message per append, next to the log's own append with its fsync: each message is written to the log alone
  (``log_append``: the writer lock, ``Log.seal`` and ``Log.write``, what ``Memory.append`` does before the
  derived state), then ``Memory.views.current()`` brings the view up to it (reading the message back from the log);
- bulk ``append`` in batches of 10,000 with and without the view update, on a memory with no tree at all
  (no compactor has run: the view cannot merge what is not built, so it grows past its budget).
  Only the library's public API is used (no patching).
- ``pimem view`` wall time against a no-op ``pimem`` command (start-up).

Run: ``python bench/tree.py [--messages 1000000] [--bulk 200000]`` (needs about 1.2 GB of disk per million).
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

from bench.synth import messages  # noqa: E402
from pimem.memory import Memory, Prepared  # noqa: E402
from pimem.tree import byte_size, free_merge, label  # noqa: E402

SINGLE = 2000  # one-message appends measured at each size


def summary(l: int, i: int) -> str:
    return f"summary of {label(l, i)}: " + "x" * (200 + (i * 37 + l * 11) % 280)


def write_tree(mem: Memory, records: list[dict]) -> int:
    """Write every non-free node over ``records`` to one tree file, bottom-up like a binary counter (only
    the right spine is kept in memory). Returns how many nodes were written."""
    tree = mem.path / "tree"
    tree.mkdir(parents=True, exist_ok=True)
    spine: list[str | None] = []  # spine[l]: the text of the left child waiting at level l
    written = 0
    with open(tree / "2026-01-01.jsonl", "wb", buffering=1 << 20) as out:
        def node(l, i, text):
            nonlocal written
            out.write(orjson.dumps({"l": l, "i": i, "text": text, "size": byte_size(text)}) + b"\n")
            written += 1

        for i, rec in enumerate(records):
            leaf = f"{rec['kind']}: {rec['text']}"
            if byte_size(leaf) > 512:
                leaf = summary(0, i)
                node(0, i, leaf)
            text, l, k = leaf, 0, i
            while k % 2 == 1:
                joined = free_merge(spine[l], text)
                if joined is None:
                    joined = summary(l + 1, k // 2)
                    node(l + 1, k // 2, joined)
                spine[l] = None
                text, l, k = joined, l + 1, k // 2
            if l == len(spine):
                spine.append(None)
            spine[l] = text
    return written


def make_memory(home: Path, name: str, records: list[dict], tree_over: list[dict] | None,
                with_view: bool = True) -> tuple[Memory, float]:
    """A memory holding ``records``, with the tree written over ``tree_over`` (which may go on past the log:
    those nodes count once the log reaches them). Returns it and the seconds the bulk append took (without
    the view update unless ``with_view``)."""
    mem = Memory.at(name, home)
    prepared = mem.prepare(records)
    mem.append(Prepared(prepared[:1]))
    if tree_over:
        write_tree(mem, tree_over)
        mem.tree.catch_up()
    started = time.perf_counter()
    for k in range(1, len(prepared), 10_000):
        if with_view:
            mem.append(Prepared(prepared[k:k + 10_000]))
        else:
            log_append(mem, prepared[k:k + 10_000])
    return mem, time.perf_counter() - started


def log_append(mem: Memory, batch: list[dict]) -> None:
    """Write prepared messages to the log alone (durably, under the writer lock), leaving the view behind."""
    with mem.lock():
        mem.log.write(batch, mem.log.seal())


def single_appends(mem: Memory, extra: list[dict]) -> dict:
    """Append ``extra`` one message per call (an fsync each): the log write, then the view brought up to it."""
    prepared = mem.prepare(extra)
    whole, hook = [], []
    mem.views.current()
    for rec in prepared:
        t = time.perf_counter()
        log_append(mem, [rec])
        logged = time.perf_counter()
        mem.views.current()
        done = time.perf_counter()
        whole.append(done - t)
        hook.append(done - logged)
    ms = lambda xs: 1000 * statistics.mean(xs)  # noqa: E731
    hook.sort()
    return {"append_ms": ms(whole), "view_ms": ms(hook), "view_p99_ms": 1000 * hook[int(len(hook) * 0.99)],
            "view_max_ms": 1000 * hook[-1], "lines": len(mem.views.current().view.lines),
            "view_bytes": mem.views.current().view.total}


def bulk(home: Path, records: list[dict]) -> dict:
    """Bulk append with and without the view update (no tree: the view grows past its budget)."""
    out = {}
    for label_, hooked in (("log only", False), ("log + view", True)):
        mem, seconds = make_memory(home, f"bulk{int(hooked)}", records, None, with_view=hooked)
        out[label_] = seconds / (len(records) - 1) * 1e6
        if hooked:
            out["lines"] = len(mem.views.current().view.lines)
            out["view.json bytes"] = (mem.path / "view.json").stat().st_size
    return out


def walls(commands: list[tuple[list[str], list[str] | None]], env: dict, runs: int = 15) -> list[tuple[float, float]]:
    """For each ``(command, before)``, the command's fastest wall time and median CPU time (user + system: not
    inflated by a loaded machine), ``before`` run untimed ahead of each run; the commands alternate so that a
    change in the machine's load hits them alike."""
    times: list[tuple[list, list]] = [([], []) for _ in commands]
    for _ in range(runs):
        for (args, before), (walls_, cpus) in zip(commands, times):
            if before:
                subprocess.run([sys.executable, "-m", "pimem", *before], env=env, check=True, stdout=subprocess.DEVNULL)
            t = time.perf_counter()
            proc = subprocess.Popen([sys.executable, "-m", "pimem", *args], env=env, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            _, _, usage = os.wait4(proc.pid, 0)
            walls_.append(time.perf_counter() - t)
            cpus.append(usage.ru_utime + usage.ru_stime)
    return [(min(w), statistics.median(c)) for w, c in times]


def view_vs_startup(home: Path, name: str, env: dict) -> str:
    """``pimem view NAME`` against a no-op command (``list`` of an empty home): start-up. Three ways: again
    (every line's text in lines.json), right after appending a message (an agent's turn), and cold."""
    (startup, startup_cpu), (again, again_cpu), (turn, turn_cpu) = walls([
        (["list", "--home", str(home / "empty")], None),
        (["view", name], None),
        (["view", name], ["append", name, "--kind", "pi", "one more turn of the conversation"]),
    ], env)
    (home / name / "lines.json").unlink(missing_ok=True)
    [(cold, cold_cpu)] = walls([(["view", name], None)], env, runs=1)
    row = lambda what, w, c: (f"  {what}: {w * 1000:.0f} ms wall, {c * 1000:.0f} ms CPU: "  # noqa: E731
                              f"{w / startup:.2f}× start-up wall, {c / startup_cpu:.2f}× CPU")
    return "\n".join([f"  start-up (a no-op command): {startup * 1000:.0f} ms wall, {startup_cpu * 1000:.0f} ms CPU",
                      row("pimem view", again, again_cpu), row("pimem view after an append", turn, turn_cpu),
                      row("pimem view cold (no lines.json, one run)", cold, cold_cpu)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--bulk", type=int, default=200_000)
    parser.add_argument("--home", help="work directory (default: a temporary one, removed afterwards)")
    parser.add_argument("--view-only", action="store_true", help="only time `pimem view` on an existing --home")
    args = parser.parse_args()
    home = Path(args.home or tempfile.mkdtemp(prefix="pimem-bench-tree-"))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PIMEM_HOME": str(home)}
    # as installed: bytecode compiled (this checkout may run with PYTHONDONTWRITEBYTECODE set); forced, since
    # compileall trusts a .pyc whose source changed within the same second and the import system does not
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-f", str(ROOT / "pimem")], check=True)
    if args.view_only:
        mem = Memory.at("big", home)
        print(f"pimem view at T={mem.count():,}, {len(mem.log.files())} day files:")
        print(view_vs_startup(home, "big", env))
        return
    try:
        print(f"# tree and view: {args.messages:,} messages, {SINGLE:,} single appends, bulk {args.bulk:,}")
        for n, name in ((10_000, "small"), (args.messages, "big")):
            records = list(messages(n + SINGLE, seed=11))
            t = time.perf_counter()
            mem, seconds = make_memory(home, name, records[:n], records)
            print(f"setup T={n:,}: bulk append with a built tree {seconds / n * 1e6:.1f} us/msg "
                  f"(setup {time.perf_counter() - t:.0f} s)")
            row = single_appends(mem, records[n:])
            print(f"T={n:,}: append {row['append_ms']:.2f} ms/msg (fsync'd log + view.json), of which the view "
                  f"update {row['view_ms']:.3f} ms (p99 {row['view_p99_ms']:.2f}, max {row['view_max_ms']:.1f}); "
                  f"view {row['lines']} lines, {row['view_bytes']:,} B")
            if name == "big":
                print(f"pimem view at T={n:,}, {len(mem.log.files())} day files:")
                print(view_vs_startup(home, name, env))
            del records
        row = bulk(home, list(messages(args.bulk, seed=5)))
        print(f"bulk append, no tree, {args.bulk:,} msgs: log only {row['log only']:.1f} us/msg, log + view "
              f"{row['log + view']:.1f} us/msg (ratio {row['log + view'] / row['log only']:.2f}); view "
              f"{row['lines']:,} lines, view.json {row['view.json bytes']:,} B")
    finally:
        if not args.home:
            shutil.rmtree(home, ignore_errors=True)


if __name__ == "__main__":
    main()
