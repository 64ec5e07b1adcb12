"""Compactor throughput: the scheduler against a local server with a fixed latency, and build-tree offline.

1. A local OpenAI-compatible server (its own process) answers every call after 50 ms. The limit is
   8 calls in flight / 0.05 s = 160 calls/s. The scheduler builds a memory of long messages (every node a
   call) against it; the baseline is 8 bare threads posting a request of the same shape and typical size
   (system prompt, half the final compactor view as context, one leaf task) with httpx in a loop.
   Reported: calls/s, the ratio to the limit (target ≥ 0.85) and to the bare threads, and the CPU the
   scheduler spends per node beyond what the bare threads spend per request.
2. build-tree of a synthetic 100,000-message memory with the offline (extractive) compactor: nodes/s (free
   nodes included; target ≥ 2,000), also per CPU-second (the worker processes' CPU included), as shipped
   (worker processes, with a second core) against the baseline of the same build inline (``workers`` 0),
   one after the other in one run, each in a home of its own; and against reading the log once.

    python bench/compactor.py [--messages 100000] [--calls-messages 1500]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import orjson

os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # users have bytecode
sys.dont_write_bytecode = False  # (the variable was read at start-up: this process writes its bytecode too)
os.environ.setdefault("PIMEM_EMBEDDER", "off")  # build-tree would also embed every message (the semantic extra)
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.synth import messages  # noqa: E402
from pimem import Memory, builder, scheduler  # noqa: E402

LATENCY = 0.05
LIMIT = 8 / LATENCY


def start_server() -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "bench" / "llm_server.py"), "--latency", str(LATENCY), "--pad", "300"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, proc.stdout.readline().strip()


def bare_threads(url: str, requests: int, context: str) -> tuple[float, float]:
    """(requests/s, CPU seconds per request) for 8 threads posting one request like the scheduler's in a loop."""
    import httpx

    from pimem.compactor import Task, prompt

    task = Task(0, 1, kind="user", text="message 1: " + " ".join(f"w1x{j}" for j in range(150)))
    body = {"model": "m", "max_tokens": 170, "temperature": 0.2,
            "messages": [{"role": "system", "content": prompt.SYSTEM},
                         {"role": "user", "content": prompt.user_content(context, task.prompt())}]}
    left = [requests]
    lock = threading.Lock()
    client = httpx.Client(timeout=30)

    def work():
        while True:
            with lock:
                if left[0] <= 0:
                    return
                left[0] -= 1
            client.post(url + "/chat/completions", json=body).json()

    cpu, wall = time.process_time(), time.perf_counter()
    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    client.close()
    return requests / wall, cpu / requests


def scheduled(url: str, count: int) -> tuple[float, float, int, str]:
    """(calls/s, CPU seconds per call, calls, a typical context) for build-tree of ``count`` long messages."""
    os.environ["BENCH_KEY"] = "k"
    mem = Memory.at("calls")
    mem.path.mkdir(parents=True, exist_ok=True)
    mem.save_config({"compactor": {"provider": "openai", "model": "m", "base_url": url, "key_env": "BENCH_KEY"}})
    mem.append([{"kind": "user", "text": f"message {k}: " + " ".join(f"w{k}x{j}" for j in range(150))} for k in range(count)])
    cpu, wall = time.process_time(), time.perf_counter()
    built = scheduler.build_tree([mem])
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    calls = built.builders[0].stats.calls
    assert builder.survey(mem)["pending"] == 0
    lines = mem.view_lines(compactor=True)
    return calls / wall, cpu / calls, calls, "\n".join(lines[: len(lines) // 2])  # the context grows: half is typical


def synthetic(count: int) -> Memory:
    """Memory ``offline`` of ``count`` synthetic messages (seed 5), appended 10,000 at a time."""
    mem = Memory.at("offline")
    batch = []
    for record in messages(count, seed=5):
        batch.append(record)
        if len(batch) == 10_000:
            mem.append(batch)
            batch = []
    if batch:
        mem.append(batch)
    return mem


def offline(count: int, workers: int | None = None) -> tuple[float, float, float, int, float, float]:
    """(nodes/s, compactor-written nodes/s, seconds, nodes, log read seconds, nodes per CPU-second, the
    worker processes' included) for build-tree offline (``workers``: ``compactor.workers``, 0 inline)."""
    if workers is not None:
        (Path(os.environ["PIMEM_HOME"]) / "config.json").write_bytes(
            orjson.dumps({"compactor": {"provider": "extractive", "workers": workers}}))
    mem = synthetic(count)
    read = time.perf_counter()
    for _ in mem.messages():
        pass
    read = time.perf_counter() - read
    wall, cpu = time.perf_counter(), _cpu()
    built = scheduler.build_tree([mem])
    wall, cpu = time.perf_counter() - wall, _cpu() - cpu
    b = built.builders[0]
    return b.settled / wall, b.stats.calls / wall, wall, b.settled, read, b.settled / cpu


def _cpu() -> float:
    """CPU seconds of this process and of its children that ended (the workers, once a build returns)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--calls-messages", type=int, default=1500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["PIMEM_HOME"] = tmp
        (Path(tmp) / "config.json").write_text("{}")
        proc, url = start_server()
        try:
            rps, cpu, calls, context = scheduled(url, args.calls_messages)
            bare_rps, bare_cpu = bare_threads(url, 2 * args.calls_messages, context)
        finally:
            proc.stdin.close()
            proc.wait()
        print(f"limit 8 / {LATENCY * 1000:.0f} ms             {LIMIT:8.1f} calls/s")
        print(f"bare 8 threads (baseline)     {bare_rps:8.1f} calls/s  {bare_rps / LIMIT:.2f}× limit, {bare_cpu * 1e3:.2f} ms CPU/request")
        print(f"scheduler ({calls} calls)      {rps:8.1f} calls/s  {rps / LIMIT:.2f}× limit, {rps / bare_rps:.2f}× bare; "
              f"{cpu * 1e3:.2f} ms CPU/node, {max(0.0, cpu - bare_cpu) * 1e3:.2f} ms of it the scheduler's own")
    inline = None
    for label, workers in (("inline (workers 0)", 0), ("as shipped", None)):
        with tempfile.TemporaryDirectory() as tmp:  # each build in a home of its own, the same messages
            os.environ["PIMEM_HOME"] = tmp
            (Path(tmp) / "config.json").write_text("{}")
            nps, cps, wall, nodes, read, per_cpu = offline(args.messages, workers)
        inline = inline or nps
        print(f"offline build-tree, {label:<18} {args.messages:,} messages, {nodes:,} nodes in {wall:.1f} s: "
              f"{nps:,.0f} nodes/s, {nps / inline:.2f}× inline ({cps:,.0f} summarised/s; {per_cpu:,.0f} nodes per "
              f"CPU-second, the workers' included); reading the log once takes {read:.1f} s ({wall / read:.1f}× that)")


if __name__ == "__main__":
    main()
