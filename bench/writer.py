"""The writer thread of an offline ``build-tree``: ``Memory.write_nodes`` over the batches a build hands it.

A build of N synthetic messages (bench/synth.py, seed 5) with the offline compactor is recorded once: the
memory as it was before the build, and every batch the builder's writer thread wrote (batches of 1,024 nodes,
each written before the next is built, so they are the same on every run). Then each checkout in turn (this
one and ``--compare DIR``, alternating) replays those batches through its own ``write_nodes`` on a copy of that
memory, alone in its process: what the writer costs without the compactor's thread beside it. Reported: the
seconds for the replays, their ratio, and a hash of what they leave (every stored ``(l, i, text)``, both views'
lines as a fresh reader renders them, ``view.json``'s bytes), which must be the same for both.

    python bench/writer.py [--messages 20000] [--compare DIR] [--runs 3]

Instructions instead of seconds (deterministic): ``--keep DIR`` keeps the recording, then
``valgrind --tool=callgrind --callgrind-out-file=/dev/null python bench/writer.py --replay DIR --code CHECKOUT``
(and once more with ``--batches 0`` for what the set-up costs).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # users have bytecode (for the replays, run as new processes)
os.environ["PIMEM_EMBEDDER"] = "off"
ROOT = Path(__file__).resolve().parent.parent
BATCH = 1024


def record(count: int, where: Path) -> None:
    """Build ``count`` messages offline, keeping the memory before the build (``where/home``) and the batches
    the writer wrote (``where/batches``)."""
    home = where / "build"
    home.mkdir(parents=True)
    (home / "config.json").write_text("{}")
    os.environ["PIMEM_HOME"] = str(home)
    sys.path.insert(0, str(ROOT))
    from bench.compactor import synthetic
    from pimem import builder, memory, scheduler

    mem = synthetic(count)
    shutil.copytree(home, where / "home")
    scheduler.FLUSH_EVERY, builder.OFFLINE_FLUSH_SECONDS = BATCH, 1e9  # batches by count, not by the clock
    flush, write_nodes, batches = builder.Builder.flush, memory.Memory.write_nodes, []

    def flush_and_wait(self, wait=False):
        flush(self, wait)
        if self._writing is not None:
            self._writing.join()

    def recorded(self, nodes, *args, **kwargs):
        batches.append([(l, i, text, dict(meta or {})) for l, i, text, meta in nodes])
        return write_nodes(self, nodes, *args, **kwargs)

    builder.Builder.flush, memory.Memory.write_nodes = flush_and_wait, recorded
    scheduler.build_tree([mem])
    (where / "batches").write_bytes(pickle.dumps(batches))


def replay(where: Path, code: Path, limit: int | None) -> None:
    """Replay the recorded batches with the pimem of ``code``; print the seconds and the hash."""
    sys.path.insert(0, str(code))
    home = Path(tempfile.mkdtemp())
    shutil.rmtree(home)
    shutil.copytree(where / "home", home)
    os.environ["PIMEM_HOME"] = str(home)
    from pimem import Memory
    import pimem.index, pimem.tree, pimem.view, pimem.viewfile  # noqa: F401 (imported before the clock starts)

    batches = pickle.loads((where / "batches").read_bytes())[:limit]
    mem = Memory.at("offline")
    started = time.perf_counter()
    for batch in batches:
        mem.write_nodes(batch)
    seconds = time.perf_counter() - started
    rows = sorted(mem.tree.nodes.db.execute("SELECT l, i, text FROM tree_nodes"))
    reader = Memory.at("offline")
    digest = hashlib.sha256(repr((rows, reader.view_lines(), reader.view_lines(compactor=True))).encode())
    digest.update((home / "offline" / "view.json").read_bytes())
    print(f"{seconds:.4f} {sum(map(len, batches))} {digest.hexdigest()[:16]}")
    shutil.rmtree(home)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--compare", type=Path, help="a checkout of the code before")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--keep", type=Path, help="record into this directory and keep it")
    parser.add_argument("--replay", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--code", type=Path, default=ROOT, help=argparse.SUPPRESS)
    parser.add_argument("--batches", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.replay:
        return replay(args.replay, args.code, args.batches)
    where = args.keep or Path(tempfile.mkdtemp()) / "rec"
    record(args.messages, where)
    checkouts = [ROOT] + ([args.compare.resolve()] if args.compare else [])
    seconds: dict[Path, list[float]] = {code: [] for code in checkouts}
    outputs = set()
    for _ in range(args.runs):
        for code in checkouts:
            out = subprocess.run([sys.executable, __file__, "--replay", str(where), "--code", str(code)],
                                 capture_output=True, text=True, check=True).stdout.split()
            seconds[code].append(float(out[0]))
            outputs.add(out[2])
            print(f"{str(code):40s} {out[1]} nodes in {float(out[0]):.3f} s  output {out[2]}  load {os.getloadavg()[0]:.1f}")
    print("the same output from every replay" if len(outputs) == 1 else f"OUTPUTS DIFFER: {sorted(outputs)}")
    if args.compare:
        print(f"this checkout / the code before: {min(seconds[ROOT]) / min(seconds[checkouts[1]]):.2f}× the time (best of {args.runs})")
    if not args.keep:
        shutil.rmtree(where.parent)


if __name__ == "__main__":
    main()
