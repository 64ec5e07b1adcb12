"""The start-up cost of noticing a log changed behind pimem's back: `pimem append` and `pimem view` at a million
messages (~870 day files), this checkout against another one without the checks (BASE), side by side, runs
alternating. Target: at most 5% slower.

Each checkout gets its own copy of the same store (its appends must not disturb the other's ranges.json), made
once under DIR from DIR/main-src (a million-message log: built with bench/search.py's build when missing), or
with ``--built MEMORY`` from a memory whose tree is built (its log and tree are copied; each checkout derives its
own view and index from them), so that an append folds a view of a few hundred lines, not a million.

    git worktree add --detach /tmp/pimem-base <commit without the checks>
    python bench/log_checks.py --home /tmp/robust-1m --base /tmp/pimem-base [--runs 30]
    python bench/log_checks.py --home /tmp/lc-1m --base /tmp/pimem-base --built /tmp/b1m/built/bench
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

from startup import measure

ROOT = Path(__file__).resolve().parent.parent


def prepare(home: Path, name: str, code: Path, built: Path | None) -> dict:
    """DIR/<name>/bench: a copy of the million-message log (and ``built``'s tree), its view and index built by
    ``code``."""
    store = home / name
    if not (store / "bench" / "main").is_dir():
        source = built / "main" if built else home / "main-src"
        if built:
            shutil.copytree(built / "tree", store / "bench" / "tree")
        elif not source.is_dir():
            sys.path.insert(0, str(ROOT))
            from bench.search import build

            build(home / "built-src", 1_000_000, 7)
            source = home / "built-src" / "bench" / "main"
        (store / "bench").mkdir(parents=True, exist_ok=True)
        shutil.copytree(source, store / "bench" / "main")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PIMEM_HOME=str(store), PYTHONPATH=str(code))
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(code / "pimem")], check=True)
    for argv in (["append", "bench", "warm-up"], ["view", "bench"], ["search", "warm-up", "bench"]):
        subprocess.run([sys.executable, "-m", "pimem", *argv], env=env, stdout=subprocess.DEVNULL, check=True)
    return env


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--home", type=Path, required=True)
    parser.add_argument("--base", type=Path, required=True, help="a checkout without the log checks")
    parser.add_argument("--ours", type=Path, default=ROOT, help="the checkout with the checks (default: this one)")
    parser.add_argument("--built", type=Path, help="a memory with its tree built: copy its log and tree")
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    envs = {who: prepare(args.home, who, code, args.built) for who, code in (("base", args.base), ("ours", args.ours))}
    commands = {"append": ["append", "bench", "the staging db listens on 5433"], "view": ["view", "bench"]}
    results = {(cmd, who): [] for cmd in commands for who in envs}
    for _ in range(args.runs):
        for cmd, argv in commands.items():
            for who, env in envs.items():
                results[cmd, who].append(measure([sys.executable, "-m", "pimem", *argv], env))
    files = len(os.listdir(args.home / "ours" / "bench" / "main"))
    print(f"runs: {args.runs} each, alternating; {files} day files        fastest    median    CPU median")
    for cmd in commands:
        for who in envs:
            runs = results[cmd, who]
            walls, cpus = [w for w, _ in runs], [c for _, c in runs]
            print(f"pimem {cmd:<7} {who:<6} {min(walls) * 1000:20.1f} ms {statistics.median(walls) * 1000:7.1f} ms "
                  f"{statistics.median(cpus) * 1000:7.1f} ms")
        ours, base = results[cmd, "ours"], results[cmd, "base"]
        ratio = [min(w for w, _ in ours) / min(w for w, _ in base),
                 statistics.median(w for w, _ in ours) / statistics.median(w for w, _ in base),
                 statistics.median(c for _, c in ours) / statistics.median(c for _, c in base)]
        print(f"pimem {cmd:<7} ratio (target <= 1.05) {ratio[0]:10.3f}x   {ratio[1]:7.3f}x   {ratio[2]:7.3f}x")


if __name__ == "__main__":
    main()
