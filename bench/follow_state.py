"""A follower's cost per line against the size of its memory's import state (``imports.json``).

    python bench/follow_state.py                 # states of ~0 and ~3 MB, 200 lines each
    python bench/follow_state.py --mb 1 3 6 --lines 500

A Codex rollout is followed (``importers.follow.Follower``, in this process) while one line is added to it
at a time; each ``poll`` logs that line. The state is made large by files read before (entries copied from
the real one under other paths, as a year of Codex sessions leaves about 2,000 of them, 3 MB). Rows: the
state's size, ms a line (median, 90th percentile and worst of the polls: the worst holds a fold of the
journal into imports.json, the first line's here; wall time, fsyncs included, and the CPU's median), the KB the process wrote a line (log, index, state), and
the ms of the follower's stop (which folds the journal in). Nothing here is asserted; see bench/README.md for measured figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def line(n: int, role: str = "user") -> dict:
    kind = "input_text" if role == "user" else "output_text"
    return {"timestamp": "2026-05-11T08:27:00.000Z", "type": "response_item",
            "payload": {"type": "message", "role": role, "content": [{"type": kind, "text": f"line {n} of the turn"}]}}


def measure(mb: float, lines: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PIMEM_HOME"] = str(Path(tmp) / "home")
        import orjson

        from pimem import Memory
        from pimem.importers.follow import Follower

        sessions = Path(tmp) / "sessions"
        sessions.mkdir()
        rollout = sessions / "rollout.jsonl"
        meta = {"timestamp": "2026-05-11T08:27:00.000Z", "type": "session_meta",
                "payload": {"id": "0196b5d2-0000-7000-8000-000000000001", "timestamp": "2026-05-11T08:27:00.000Z",
                            "cwd": "/repo/tool"}}
        rollout.write_text(json.dumps(meta) + "\n" + json.dumps(line(0)) + "\n")
        follower = Follower([str(sessions)], name="m")
        follower.poll()
        mem = Memory.at("m")
        state_path = mem.path / "imports.json"
        state = orjson.loads(state_path.read_bytes())
        entry = next(iter(state["files"].values()))
        n, each = 0, len(orjson.dumps(entry)) + 60
        while n * each < mb * 1e6:
            state["files"][f"/home/dev/.codex/sessions/2026/01/01/rollout-{n:06d}.jsonl"] = entry
            n += 1
        state.pop("journal", None)  # (as written before the journal: folded in at the first line)
        state_path.write_bytes(orjson.dumps(state) + b"\n")
        follower = Follower([str(sessions)], name="m")  # (a restart: the state read from the disk)
        follower.poll()
        times, cpu, before = [], [], None
        with open(rollout, "a") as f:
            for k in range(1, lines + 1):
                f.write(json.dumps(line(k, "assistant" if k % 2 else "user")) + "\n")
                f.flush()
                if before is None:
                    before = _written()
                start, started = time.perf_counter(), time.process_time()
                logged = follower.poll()
                times.append(time.perf_counter() - start)
                cpu.append(time.process_time() - started)
                assert logged == 1, logged
        after = _written()
        start = time.perf_counter()
        follower.close()  # (a stop folds the journal into imports.json, where there is one)
        stop = time.perf_counter() - start
        times.sort()
        return {"state_mb": os.path.getsize(state_path) / 1e6, "files": n + 1,
                "ms_median": statistics.median(times) * 1e3, "ms_p90": times[int(len(times) * 0.9)] * 1e3,
                "kb_written_per_line": (after - before) / lines / 1e3, "ms_stop": stop * 1e3,
                "ms_worst": times[-1] * 1e3, "cpu_ms": statistics.median(cpu) * 1e3}


def _written() -> int:
    """The bytes this process wrote so far (Linux's ``/proc/self/io``; 0 elsewhere)."""
    try:
        for row in Path("/proc/self/io").read_text().splitlines():
            if row.startswith("wchar:"):
                return int(row.split()[1])
    except OSError:
        pass
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, nargs="+", default=[0, 3])
    parser.add_argument("--lines", type=int, default=200)
    args = parser.parse_args()
    print(f"{'state MB':>9} {'files':>6} {'ms/line p50':>12} {'p90':>7} {'worst':>7} {'CPU ms p50':>11} {'KB written/line':>16} "
          f"{'stop ms':>8}")
    for mb in args.mb:
        row = measure(mb, args.lines)
        print(f"{row['state_mb']:9.2f} {row['files']:6d} {row['ms_median']:12.2f} {row['ms_p90']:7.2f} {row['ms_worst']:7.1f} "
              f"{row['cpu_ms']:11.2f} {row['kb_written_per_line']:16.1f} {row['ms_stop']:8.1f}")


if __name__ == "__main__":
    main()
