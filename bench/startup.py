"""Start-up: `pimem append NAME TEXT` (a real, fsync'd append) against a minimal typer app with one no-op
command, run alternately in the same session. Target: ratio <= 1.3.

A third row writes the message to the log alone (no view update), with the same imports, to show the log's
own share. On a shared, loaded machine single runs vary by 2x, so it reports the fastest run (the least disturbed), the
median, and the CPU time (user + system, which scheduling delays do not inflate) of each.

    python bench/startup.py [--runs 60] [--against CHECKOUT]

``--against CHECKOUT`` adds a row: the same ``pimem append`` run from another checkout (say a worktree at an
earlier commit, ``git worktree add --detach /tmp/before COMMIT``), alternating with the others, so a change
can show it did not slow start-up.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# the log's own cost: what `pimem append` imports, then the message written to the log alone (the writer lock,
# Log.seal and Log.write: what Memory.append does before the view update), through the public API
LOG_ONLY = """import sys
import pimem.cli, pimem.commands.append
from pimem import Memory, home
mem = Memory.at(sys.argv[2])
home.ensure_dir(mem.path / "main")
batch = mem.prepare([{"kind": "user", "text": sys.argv[3]}])
with mem.lock():
    print(mem.log.write(batch, mem.log.seal())[0])
"""


def measure(cmd: list[str], env: dict) -> tuple[float, float]:
    """Wall time and CPU time (user + system) of one run."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode:
        raise SystemExit(f"{cmd} failed with exit {proc.returncode}")
    return elapsed, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--against", type=Path, metavar="CHECKOUT", help="also time pimem append from this checkout")
    args = parser.parse_args()
    # as installed: bytecode compiled (this checkout may run with PYTHONDONTWRITEBYTECODE set)
    for checkout in (ROOT, args.against) if args.against else (ROOT,):
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-f", str(checkout / "pimem")], check=True)
    with tempfile.TemporaryDirectory() as home:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env.update(PIMEM_HOME=home, PYTHONPATH=str(ROOT))
        other_env = {**env, "PYTHONPATH": str(args.against)} if args.against else None
        text = "the staging db listens on 5433"
        pimem = [sys.executable, "-m", "pimem", "append", "bench", text]
        log_only = [sys.executable, "-c", LOG_ONLY, "append", "logonly", text]
        baseline = [sys.executable, str(ROOT / "bench" / "typer_noop.py"), "noop", "bench", "hello"]
        other = pimem[:-2] + ["against", text]
        for cmd in (pimem, log_only, baseline):  # warm the page cache and the .pyc files
            measure(cmd, env)
        if other_env:
            measure(other, other_env)
        ours, logs, theirs, before = [], [], [], []
        for _ in range(args.runs):
            ours.append(measure(pimem, env))
            logs.append(measure(log_only, env))
            theirs.append(measure(baseline, env))
            if other_env:
                before.append(measure(other, other_env))
    print(f"runs: {args.runs} each, alternating          fastest    median    CPU median")
    rows = {
        "minimal typer app, one no-op command": theirs,
        "pimem append, log only (no view)": logs,
        "pimem append (log + view update)": ours,
    }
    if before:
        rows[f"pimem append from {args.against.name}"] = before
    for label, runs in rows.items():
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{label:<38}{min(walls) * 1000:7.1f} ms {statistics.median(walls) * 1000:7.1f} ms {statistics.median(cpus) * 1000:7.1f} ms")
    for label, runs in (("ratio, log only (target <= 1.30)", logs), ("ratio, log + view update", ours)) + (
            (("this checkout / the other", ours),) if before else ()):
        base = before if label.startswith("this checkout") else theirs
        ratio = [
            min(w for w, _ in runs) / min(w for w, _ in base),
            statistics.median(w for w, _ in runs) / statistics.median(w for w, _ in base),
            statistics.median(c for _, c in runs) / statistics.median(c for _, c in base),
        ]
        print(f"{label:<38}{ratio[0]:7.2f}x   {ratio[1]:7.2f}x   {ratio[2]:7.2f}x")


if __name__ == "__main__":
    main()
