"""Bulk log: `pimem append --ndjson` of N synthetic agent-log messages (bench/synth.py; 1,000,000 ≈ 1 GB),
then `pimem since` of all of them into a file, each against a plain-Python baseline doing the least the job
needs, measured in the same run. Targets: append >= 100,000 msg/s; since >= 200,000 msg/s with peak
memory <= 100 MB.

Baselines: for append, read the NDJSON, parse each line with orjson, encode it back with its number and
write it to one file in 32 MiB chunks with one fsync each (no validation, no daily files, no lock); for
since, read those lines back, parse each one (as any reader that checks what it passes on must) and write
it out.

    python bench/bulk.py [--messages 1000000] [--dir /tmp/pimem-bench]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

# pimem's NDJSON path with the view update left out, through the public API: parse in batches, validate, write
# and fsync under the writer lock (what `append --ndjson` does before it updates the view): the log's own cost
LOG_ONLY = r"""
import sys
import pimem.cli, pimem.commands.append
from pimem import Memory, home, ingest
mem = Memory.at(sys.argv[1])
home.ensure_dir(mem.path / "main")
records = []
def batch():
    out = records[:]
    records.clear()
    return out
out = sys.stdout
for chunk in ingest.read_batches(sys.stdin.buffer, lambda record, n, raw: records.append(record), batch, mem.text_cap):
    prepared = mem.prepare(chunk)
    with mem.lock():
        out.write("".join(f"{i}\n" for i in mem.log.write(prepared, mem.log.seal())))
"""

ROOT = Path(__file__).resolve().parent.parent

BASELINE_APPEND = r"""
import os, sys, orjson
out = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
chunk, size, i = [], 0, 0
for line in sys.stdin.buffer:
    msg = orjson.loads(line)
    chunk.append(orjson.dumps({"i": i, **msg})); i += 1
    size += len(line)
    if size >= 32 << 20:
        chunk.append(b""); os.write(out, b"\n".join(chunk)); os.fsync(out); chunk, size = [], 0
chunk.append(b""); os.write(out, b"\n".join(chunk)); os.fsync(out)
print(i)
"""

BASELINE_SINCE = r"""
import sys, orjson
out = sys.stdout.buffer
with open(sys.argv[1], "rb", buffering=1 << 20) as f:
    for line in f:
        if type(orjson.loads(line)) is dict:
            out.write(line)
"""


def run(cmd: list[str], stdin_path: Path | None, stdout_path: Path, env: dict) -> tuple[float, float, float]:
    """Wall seconds, CPU seconds (user + system) and peak resident memory (MB) of one process."""
    with open(stdin_path or os.devnull, "rb") as stdin, open(stdout_path, "wb") as stdout:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=stdout, env=env)
        _, status, usage = os.wait4(proc.pid, 0)
        elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status):
        raise SystemExit(f"{cmd[:4]} failed")
    return elapsed, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--dir", type=Path, default=Path("/tmp/pimem-bench"))
    args = parser.parse_args()
    n = args.messages
    work = args.dir
    work.mkdir(parents=True, exist_ok=True)
    source = work / f"synth-{n}-{args.seed}.ndjson"
    if not source.exists():
        with open(source, "wb") as f:
            subprocess.run([sys.executable, str(ROOT / "bench" / "synth.py"), str(n), "--seed", str(args.seed)], stdout=f, check=True)
    home = work / "home"
    shutil.rmtree(home, ignore_errors=True)
    env = {**os.environ, "PIMEM_HOME": str(home), "PYTHONPATH": str(ROOT)}
    py = sys.executable
    # as installed: bytecode compiled (this checkout may run with PYTHONDONTWRITEBYTECODE set)
    subprocess.run([py, "-m", "compileall", "-q", "-f", str(ROOT / "pimem")], check=True)
    mb = source.stat().st_size / 1e6
    print(f"{n:,} synthetic messages, {mb:,.0f} MB of NDJSON")

    base_append = run([py, "-c", BASELINE_APPEND, str(work / "baseline.jsonl")], source, work / "ids.txt", env)
    log_append = run([py, "-c", LOG_ONLY, "logonly"], source, work / "ids.txt", env)
    with open(work / "ids.txt", "rb") as f:
        assert sum(1 for _ in f) == n, "the log-only append did not acknowledge every message"
    ours_append = run([py, "-m", "pimem", "append", "bulk", "--ndjson"], source, work / "ids.txt", env)
    with open(work / "ids.txt", "rb") as f:
        assert sum(1 for _ in f) == n, "append did not acknowledge every message"

    base_since = run([py, "-c", BASELINE_SINCE, str(work / "baseline.jsonl")], None, work / "out.ndjson", env)
    ours_since = run([py, "-m", "pimem", "since", "bulk", "#0", "--include-tools"], None, work / "out.ndjson", env)
    with open(work / "out.ndjson", "rb") as f:
        assert sum(1 for _ in f) == n, "since did not print every message"
    first_day = source.open("rb").readline().split(b'"date":"')[1][:10].decode()
    ours_dated = run([py, "-m", "pimem", "since", "bulk", first_day, "--include-tools"], None, work / "out.ndjson", env)

    def row(label: str, measured: tuple[float, float, float], baseline: tuple | None, target: str = "") -> None:
        seconds, cpu, rss = measured
        ratio = f"{seconds / baseline[0]:5.2f}x" if baseline else "     "
        print(f"{label:<44}{seconds:7.2f} s {cpu:7.2f} s {n / seconds:10,.0f}/s {n / cpu:10,.0f}/s  {ratio} {rss:6.0f} MB  {target}")

    print(f"{'':<44}{'wall':>9} {'CPU':>9} {'rate':>12} {'CPU rate':>12}  {'vs base':>6} {'peak RSS':>9}")
    row("baseline: parse + encode + one file", base_append, None)
    row("pimem append --ndjson, log only (no view)", log_append, base_append, "target >= 100,000 msg/s")
    row("pimem append --ndjson (log + view update)", ours_append, base_append)
    row("baseline: read + parse + write", base_since, None)
    row("pimem since '#0' --include-tools > file", ours_since, base_since, "target >= 200,000 msg/s, <= 100 MB")
    row(f"pimem since {first_day} --include-tools > file", ours_dated, base_since)
    shutil.rmtree(home, ignore_errors=True)
    for name in ("baseline.jsonl", "out.ndjson", "ids.txt"):
        (work / name).unlink(missing_ok=True)


if __name__ == "__main__":
    main()
