"""Model-build cost of a backlog: an import, then `build-tree`, against a local fake OpenAI-compatible server.

The backlog is the three transcripts in ../shared/samples imported into one memory, plus short synthetic
turns up to ``--messages`` (2,000). The server (bench/llm_server.py, in this process) answers every call after
``--latency`` seconds with a line of ``--answer-bytes`` (480) bytes and reports a token per 4 bytes, with the
prefix a request shares with the one before it as cached tokens. Prices: $1 in, $0.10 cached in, $5 out per
million tokens. Reported, for each checkout given (this one first; ``--compare DIR`` adds e.g. the previous
commit's, measured in the same run):

- calls per message, bytes sent per message;
- the compactor's context (the ``<chat>`` of each request) in bytes: median, 90th percentile and max, against
  the compactor view's ``hi`` (32,000: designed 16–32 KB, bounds: median ≤ hi, max ≤ 2·hi);
- the dry run's prediction (calls, tokens in and out, dollars) against what the run then recorded, as ratios
  (target: within ±15%);
- the cache-hit share of input tokens;
- how far behind its message the view a leaf's call was shown ends (messages; 0: everything before it).

Calls that take their time apart, as a real provider's do: ``--slow-every 20 --slow 2`` (one request in 20 answers
after 2 s, the others after ``--latency``), or ``--tail 1.2 --slow 20`` (Pareto-distributed delays, at most 20 s).
``--hi`` sets the compactor view's budget (``lo`` half of it), ``--line-bytes`` the memory's lines (the server
answers ``--answer-bytes``: at most what ``max_tokens`` holds, 680 bytes). ``--fail-every 15 [--fault 429|500]`` refuses one
request in 15 (the 429 with ``Retry-After: 1``), and ``build-tree`` then runs with ``--retries 5``.

    python bench/model_cost.py [--messages 2000] [--samples GLOB] [--compare /path/to/other/checkout]

``--samples 'codex*' --messages 0`` (or ``'spotter*'``) measures a small memory alone: there the first calls see
little history, and the dry run must say so.

``--max-cost USD`` first runs ``build-tree --max-cost USD`` (it stops before spending more), then measures the
rest as above: the dry run against what the second run recorded (what the memory's nodes say after it, less what
they said at the stop), its calls and contexts alone. The same messages and the same server for both runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.llm_server import FakeLLM, filler  # noqa: E402

SAMPLES = next((p for p in (Path(os.environ.get("PIMEM_SAMPLES", "")), ROOT.parent / "shared" / "samples",
                             ROOT.parent.parent / "shared" / "samples") if str(p) != "." and p.is_dir()), None)
HI = 32_000


def pimem(checkout: Path, home: Path, *args: str, input: bytes | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env.update(PYTHONPATH=str(checkout), PIMEM_HOME=str(home), BENCH_KEY="k")
    return subprocess.run([sys.executable, "-m", "pimem", *args], env=env, input=input, capture_output=True, cwd=home)


def synthetic_turns(n: int) -> bytes:
    """Short user/agent turns (every one a free leaf)."""
    topics = ["the staging db", "the retry loop", "flaky test_orders", "the deploy script", "pnpm lockfile"]
    lines = []
    for k in range(n):
        topic = topics[k % len(topics)]
        if k % 2 == 0:
            text = f"can you look at {topic} again? step {k}: check the logs for errors around port {5400 + k % 90}"
            lines.append({"kind": "user", "text": text})
        else:
            text = f"checked {topic} (step {k}): nothing new in the logs; the fix from step {k - 1} holds, tests pass"
            lines.append({"kind": "pi", "text": text})
    return b"".join(json.dumps(rec).encode() + b"\n" for rec in lines)


WORDS = ("amber", "birch", "cedar", "dune", "ember", "fjord", "grove", "heath", "inlet", "juniper", "knoll", "larch",
         "marsh", "nettle", "oxbow", "prairie")


def reply(body: dict, answer_bytes: int) -> str:
    """A line of ``answer_bytes`` that differs from one request to the next, in plain lowercase words (no fact the
    faithfulness guard would look up). Every reply the same made each summary a copy of every long tool message's
    summary, so a line joining summaries (``line_bytes`` of two or more of them) was shown as tool markers: the
    runs with 2,048-byte lines were shown a third less than a model's distinct lines would have been."""
    key = zlib.crc32(json.dumps(body["messages"][-1]).encode())
    words = " ".join(WORDS[key >> (4 * k) & 15] for k in range(8))
    return (f"a summary of the span: {words}" + filler(answer_bytes))[:answer_bytes]


def context_bytes(body: dict) -> int:
    user = body["messages"][-1]["content"]
    text = user if isinstance(user, str) else "".join(b.get("text", "") for b in user)
    chat = text.split("<chat>\n", 1)[1].split("</chat>", 1)[0]
    return len(chat.encode())


def lag(body: dict) -> int | None:
    """How many messages before a leaf's own the compactor's view it was shown ends (None for a merge): 0 when
    it was shown everything before its message, as a live build keeping up would have it."""
    user = body["messages"][-1]["content"]
    text = user if isinstance(user, str) else "".join(b.get("text", "") for b in user)
    leaf = re.search(r"compress message (\d+) ", text.rsplit("</chat>", 1)[-1])
    if leaf is None:
        return None
    chat = text.split("<chat>\n", 1)[1].split("</chat>", 1)[0]
    ends = [sum(map(int, m.groups())) for m in re.finditer(r"^(\d+)\+(\d+)\|", chat, re.M)]
    return int(leaf[1]) - max(ends, default=0)


def latencies(latency: float, slow_every: int, slow: float, tail: float):
    """``latency``, or a function of the request (``FakeLLM``'s) when calls take their time apart: every
    ``slow_every``-th request (by a hash of its body, so not in step with the scheduler) ``slow`` seconds; or with
    ``tail`` a Pareto-distributed delay of shape ``tail`` (heavy: most near ``latency``, a few far longer, at most
    ``slow``)."""
    import random

    if not slow_every and not tail:
        return latency
    rng = random.Random(7)

    def delay(n: int, body: dict) -> float:
        if tail:
            return min(slow, latency * rng.paretovariate(tail))
        return slow if zlib.crc32(json.dumps(body).encode()) % slow_every == 0 else latency
    return delay


def measure(checkout: Path, messages: int, latency, answer_bytes: int, pattern: str = "*.jsonl", faults=None,
            hi: int = HI, max_cost: float | None = None, line_bytes: int | None = None) -> dict:
    subprocess.run([sys.executable, "-m", "compileall", "-q", "-f", str(checkout / "pimem")], check=True)
    with tempfile.TemporaryDirectory() as tmp, FakeLLM("openai", latency=latency, line_bytes=answer_bytes,
                                                       usage="bytes", faults=faults) as server:
        home = Path(tmp)
        config = {**({"cview": {"hi": hi, "lo": hi // 2}} if hi != HI else {}),
                  **({"line_bytes": line_bytes} if line_bytes else {})}
        if config:
            (home / "config.json").write_text(json.dumps(config))
        # a faithful line (no number or name its span does not hold), so the faithfulness guard asks again only
        # where a real model would have made something up; ``summary_for``'s node numbers would fail it every time
        server.reply = lambda body: reply(body, answer_bytes)
        if SAMPLES is None:
            sys.exit("no samples found: set PIMEM_SAMPLES to ../shared/samples")
        samples = sorted(str(p) for p in SAMPLES.glob(pattern))
        done = pimem(checkout, home, "import", *samples, "--name", "backlog")
        assert done.returncode == 0, done.stderr
        imported = int(json.loads(pimem(checkout, home, "status", "backlog", "--json").stdout)["messages"])
        if messages > imported:
            done = pimem(checkout, home, "append", "backlog", "--ndjson", input=synthetic_turns(messages - imported))
            assert done.returncode == 0, done.stderr
        done = pimem(checkout, home, "model", "backlog", "openai/fake", "--base-url", server.url, "--key-env", "BENCH_KEY",
                     "--price-in", "1", "--price-out", "5", *(["--price-cached-in", "0.1"] if _has_cached_price(checkout) else []))
        assert done.returncode == 0, done.stderr
        total = int(json.loads(pimem(checkout, home, "status", "backlog", "--json").stdout)["messages"])
        before, first = {}, 0
        if max_cost is not None:  # a first run stopped by its budget: the rest is what is measured
            done = pimem(checkout, home, "build-tree", "backlog", "--max-cost", str(max_cost),
                         *(["--retries", "5"] if faults else []))
            assert done.returncode in (0, 6), done.stderr[-2000:]
            before = json.loads(pimem(checkout, home, "status", "backlog", "--json").stdout)["spent"]
            first = len(server.requests)
        predicted = json.loads(pimem(checkout, home, "build-tree", "backlog", "--dry-run", "--json").stdout)
        started = time.perf_counter()
        done = pimem(checkout, home, "build-tree", "backlog", "--json", *(["--retries", "5"] if faults else []))
        seconds = time.perf_counter() - started
        assert done.returncode == 0, done.stderr[-2000:]
        status = json.loads(pimem(checkout, home, "status", "backlog", "--json").stdout)
        recorded = {key: value - before.get(key, 0) if isinstance(value, (int, float)) else value
                    for key, value in status["spent"].items()}
        # the same calls priced without the cache (input at $1, output at $5 per million tokens)
        recorded["cost_uncached"] = (recorded["tokens_in"] * 1 + recorded["tokens_out"] * 5) / 1e6
        requests = server.requests[first:]
        contexts = sorted(context_bytes(body) for body in requests)
        lags = sorted(k for k in map(lag, requests) if k is not None)
        sent = sum(len(raw) for raw in server.raw[first:])
        return {"messages": total, "requests": len(requests), "seconds": seconds, "sent": sent, "first": first,
                "contexts": contexts, "lags": lags, "predicted": predicted, "recorded": recorded,
                "pending": status["tree"]["pending"], "hi": hi}


def _has_cached_price(checkout: Path) -> bool:
    return "price-cached-in" in (checkout / "pimem" / "commands" / "model.py").read_text()


def report(name: str, row: dict) -> None:
    n, contexts, pred, rec, hi = row["messages"], row["contexts"], row["predicted"], row["recorded"], row["hi"]
    q = statistics.quantiles(contexts, n=10) if len(contexts) > 1 else contexts * 9
    first = f" after a first run's {row['first']:,} (stopped by --max-cost)" if row["first"] else ""
    print(f"{name}: {n:,} messages, {row['requests']:,} requests{first} in {row['seconds']:.1f} s, {row['pending']} nodes left")
    print(f"  calls per message      {row['requests'] / n:.3f}")
    print(f"  bytes sent per message {row['sent'] / n:,.0f}")
    print(f"  context bytes          median {statistics.median(contexts):,.0f} ({statistics.median(contexts) / hi:.2f}× hi), "
          f"p90 {q[8]:,.0f}, max {contexts[-1]:,} ({contexts[-1] / hi:.2f}× hi)")
    lags = row["lags"]
    if lags:
        print(f"  a leaf's view behind its message: median {statistics.median(lags):,.0f} messages, "
              f"p90 {lags[int(0.9 * (len(lags) - 1))]:,}, p99 {lags[int(0.99 * (len(lags) - 1))]:,}, max {lags[-1]:,}")
    for key in ("calls", "tokens_in", "tokens_out", "cost"):
        p, r = pred.get(key) or 0, rec.get(key) or 0
        if key == "cost" and "cost_cached" in pred:  # what the run recorded had the cache's prices
            p, r = pred["cost"], rec["cost_uncached"]
            print(f"  dry run vs run: {'cost':<10} {p:>14,.4f} predicted {r:>14,.4f} recorded at full input price  "
                  f"({p / r if r else float('nan'):.2f}×)")
            p, r, key = pred["cost_cached"], rec["cost"], "cost, cache"
        print(f"  dry run vs run: {key:<10} {p:>14,.4f} predicted {r:>14,.4f} recorded  ({p / r if r else float('nan'):.2f}×)")
    if rec.get("tokens_cached") is not None and rec.get("tokens_in"):
        print(f"  input tokens from the cache: {rec['tokens_cached'] / rec['tokens_in']:.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--latency", type=float, default=0.02)
    parser.add_argument("--answer-bytes", type=int, default=480)
    parser.add_argument("--compare", type=Path, action="append", default=[], help="another checkout, measured alike")
    parser.add_argument("--samples", default="*.jsonl", help="which samples make the backlog (a glob)")
    parser.add_argument("--slow-every", type=int, default=0, help="one request in N answers after --slow seconds")
    parser.add_argument("--slow", type=float, default=2.0, help="seconds of a slow answer (--tail: the longest)")
    parser.add_argument("--tail", type=float, default=0.0, help="Pareto shape of every answer's delay (e.g. 1.2)")
    parser.add_argument("--hi", type=int, default=HI, help="the compactor view's hi (lo: half)")
    parser.add_argument("--fail-every", type=int, default=0, help="one request in N is refused (--fault)")
    parser.add_argument("--fault", default="429", help="how it is refused: 429 (Retry-After: 1), 500, …")
    parser.add_argument("--line-bytes", type=int, default=None, help="the memory's line_bytes (answers: --answer-bytes)")
    parser.add_argument("--max-cost", type=float, default=None,
                        help="a first build-tree stopped at this many dollars; the rest is measured")
    args = parser.parse_args()

    def refused(n: int, body: dict) -> str | None:  # (by the request's number too: its retry may be answered)
        return args.fault if zlib.crc32(f"{n}{json.dumps(body)}".encode()) % args.fail_every == 0 else None

    latency = latencies(args.latency, args.slow_every, args.slow, args.tail)
    for checkout in [ROOT, *args.compare]:
        report(str(checkout), measure(checkout.resolve(), args.messages, latency, args.answer_bytes, args.samples,
                                      faults=refused if args.fail_every else None, hi=args.hi, max_cost=args.max_cost,
                                      line_bytes=args.line_bytes))


if __name__ == "__main__":
    main()
