"""Live capture: `pimem hook claude-code` per event, and `pimem import --follow` lag.

hook: a memory of N messages (synthetic, imported from earlier sessions as far as its import keys go,
indexed, its tree built, five pinned memories) gets a Claude Code session's
transcript; each round writes what Claude Code would (a prompt line, a reply line) and runs the hook for
SessionStart, UserPromptSubmit, PreCompact and Stop, alternating with the start-up baseline: a minimal typer
app with one no-op command (bench/typer_noop.py), the floor of every pimem command, and `pimem --version`
where it exists. Target: each event's median <= 1.5x the baseline's. Wall time on a shared machine varies
with load, so it prints the fastest run, the median and the CPU time (user + system) of each.

follow: `pimem import --follow DIR --json` runs against the same memory while this script appends a line
to a transcript every 50-250 ms; the lag of a line is from its write to the follower's report that it was
logged (printed after the batch is durable). Target: max < 2 s.

    python bench/agents.py [--messages 100000] [--runs 20] [--lines 100] [--home DIR]

``--home DIR`` keeps the memory it builds in DIR/home and runs on a copy of it (built once, reused).
The memory has no sentence vectors (``PIMEM_EMBEDDER=off`` while it is built): the hook ranks lexically.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

CWD = "/home/dev/api"
EVENTS = ("SessionStart", "UserPromptSubmit", "PreCompact", "Stop")
PROMPTS = ("why does the staging database refuse connections since this morning?", "which port does the staging db listen on",
           "fix the refund rounding off by one cent", "update the README section about exit codes")


def transcript_line(session: str, n: int, kind: str, text: str) -> str:
    line = {"parentUuid": None, "isSidechain": False, "userType": "external", "cwd": CWD, "sessionId": session, "version": "2.1.38",
            "type": kind, "uuid": f"{session}-{kind}-{n}", "timestamp": "2026-10-10T10:00:00.000Z",
            "message": {"role": kind, "content": text} if kind == "user" else {"role": "assistant", "model": "m", "content": [{"type": "text", "text": text}]}}
    return json.dumps(line) + "\n"


def measure(cmd: list[str], env: dict, stdin: bytes | None = None) -> tuple[float, float]:
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    proc.stdin.write(stdin or b"")
    proc.stdin.close()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) or err:
        raise SystemExit(f"{cmd} failed: {err.decode()}")
    return elapsed, usage.ru_utime + usage.ru_stime


def build(home: Path, messages: int, env: dict) -> None:
    """The memory: synthetic messages marked as imported from earlier Claude Code sessions (so the memory's
    import keys hold one key each, as a real history's do)."""
    from bench.synth import messages as synthetic

    lines = bytearray()
    for n, record in enumerate(synthetic(messages, seed=3)):
        record["meta"] = {**record.get("meta", {}), "source": "claude", "session": f"old-{n // 500}", "entry": f"e{n}"}
        lines += json.dumps(record).encode() + b"\n"
    subprocess.run([sys.executable, "-m", "pimem", "append", "api", "--ndjson"], input=bytes(lines), env=env, check=True, stdout=subprocess.DEVNULL)
    subprocess.run([sys.executable, "-m", "pimem", "reindex", "api"], env=env, check=True, capture_output=True)
    # its summaries, as a running `pimem watch` keeps them (without them the view cannot shrink, and every
    # append, the hook's included, pays for loading a view of tens of thousands of lines)
    subprocess.run([sys.executable, "-m", "pimem", "build-tree", "api"], env=env, check=True, capture_output=True)
    for k in range(5):
        subprocess.run([sys.executable, "-m", "pimem", "remember", "api", "--pin", f"rule {k}: never deploy staging on a friday"], env=env,
                       check=True, capture_output=True)


def bench_hook(home: Path, env: dict, runs: int) -> None:
    transcript = home.parent / "session.jsonl"
    with open(transcript, "w") as f:
        f.writelines(transcript_line("cur", n, "user", f"turn {n}: please check the build") for n in range(200))
    hook = [sys.executable, "-m", "pimem", "hook", "claude-code"]
    payload = lambda event, **extra: json.dumps({"session_id": "cur", "transcript_path": str(transcript), "cwd": CWD,  # noqa: E731
                                                 "hook_event_name": event, **extra}).encode()
    measure(hook, env, payload("Stop"))  # the session's first 200 lines, and the memory's import keys (built once)
    baselines = {"minimal typer app, one no-op command": [sys.executable, str(ROOT / "bench" / "typer_noop.py"), "noop", "x"]}
    if subprocess.run([sys.executable, "-m", "pimem", "--version"], env=env, capture_output=True).returncode == 0:
        baselines["pimem --version"] = [sys.executable, "-m", "pimem", "--version"]
    rows: dict[str, list] = {label: [] for label in list(baselines) + list(EVENTS)}
    for cmd in baselines.values():
        measure(cmd, env)
    for n in range(runs):
        for label, cmd in baselines.items():
            rows[label].append(measure(cmd, env))
        rows["SessionStart"].append(measure(hook, env, payload("SessionStart", source="resume")))
        prompt = PROMPTS[n % len(PROMPTS)]
        with open(transcript, "a") as f:
            f.write(transcript_line("cur", 1000 + n, "user", prompt))
        rows["UserPromptSubmit"].append(measure(hook, env, payload("UserPromptSubmit", prompt=prompt)))
        with open(transcript, "a") as f:
            f.write(transcript_line("cur", 1000 + n, "assistant", f"Looked into it: {prompt} is fixed now."))
        rows["PreCompact"].append(measure(hook, env, payload("PreCompact", trigger="auto", custom_instructions="")))
        with open(transcript, "a") as f:
            f.write(transcript_line("cur", 2000 + n, "user", "thanks"))
        rows["Stop"].append(measure(hook, env, payload("Stop", stop_hook_active=False)))
    base = rows[next(iter(baselines))]
    print(f"hook, {runs} rounds, alternating                  fastest    median  CPU median   ratio (median, CPU)")
    for label, runs_ in rows.items():
        walls, cpus = [w for w, _ in runs_], [c for _, c in runs_]
        ratio = statistics.median(walls) / statistics.median(w for w, _ in base)
        cpu_ratio = statistics.median(cpus) / statistics.median(c for _, c in base)
        print(f"{label:<46}{min(walls) * 1000:7.1f} ms {statistics.median(walls) * 1000:7.1f} ms {statistics.median(cpus) * 1000:7.1f} ms"
              f"   {ratio:5.2f}x {cpu_ratio:5.2f}x")


def bench_follow(home: Path, env: dict, lines: int) -> None:
    folder = home.parent / "projects"
    folder.mkdir()
    path = folder / "live.jsonl"
    path.write_text(transcript_line("live", 0, "user", "hello"))
    proc = subprocess.Popen([sys.executable, "-m", "pimem", "import", "--follow", str(folder), "--json"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    reports: list[tuple[float, int]] = []  # (when it arrived, messages it logged)

    def read() -> None:
        for raw in proc.stdout:
            reports.append((time.perf_counter(), json.loads(raw)["imported"]))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while not reports:  # the first line, and the memory's import state
        time.sleep(0.05)
    rng = random.Random(5)
    written = []
    for n in range(1, lines + 1):
        time.sleep(rng.uniform(0.05, 0.25))
        with open(path, "a") as f:
            f.write(transcript_line("live", n, "user", f"line {n} of the live session"))
        written.append(time.perf_counter())
    deadline = time.monotonic() + 30
    while sum(k for _, k in reports) < lines + 1 and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.terminate()
    proc.wait(timeout=30)
    arrivals = []
    for at, count in reports[1:]:
        arrivals.extend([at] * count)
    if len(arrivals) != lines:
        raise SystemExit(f"the follower logged {len(arrivals)} of {lines} lines")
    lags = [a - w for a, w in zip(arrivals, written)]
    print(f"follow, {lines} lines written 50-250 ms apart: lag median {statistics.median(lags) * 1000:.0f} ms, "
          f"max {max(lags) * 1000:.0f} ms (target max < 2000 ms)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--lines", type=int, default=100)
    parser.add_argument("--home", type=Path, help="keep the built memory here (reused when already built)")
    args = parser.parse_args()
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-f", str(ROOT / "pimem")], check=True)  # as installed
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        built = args.home.absolute() / "home" if args.home else home
        built.parent.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "PIMEM_HOME": str(home), "PYTHONPATH": str(ROOT)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        if not (built / "api").exists():
            build(built, args.messages, {**env, "PIMEM_HOME": str(built), "PIMEM_EMBEDDER": "off"})
        if built != home:  # each run starts from the memory as built
            subprocess.run(["cp", "-a", str(built), str(home)], check=True)
        print(f"memory 'api': {args.messages:,} messages, indexed, tree built; load average {os.getloadavg()[0]:.1f}")
        bench_hook(home, env, args.runs)
        bench_follow(home, env, args.lines)
        print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
