"""Synthetic agent-log messages, deterministic for a seed, shaped like real coding-agent logs.

Kinds follow an agent turn: the user asks, the model (``pi``) answers or calls a tool (``tool``), the tool's
output comes back (``echo``). About a third of the conversations are in Chinese. Most messages are 50–500
bytes; one in ten is a tool result of 2–30 KB (most of them short, so 1,000,000 messages come to about 1 GB).
Dates advance a few seconds to minutes per message, with overnight gaps, so a large log spans many days.

Library::

    from bench.synth import messages
    for record in messages(1000, seed=7): ...      # {"kind", "text", "date", "meta"?}

Script (NDJSON on stdout, ready for ``pimem append NAME --ndjson``)::

    python bench/synth.py 1000000 --seed 7 > /tmp/log.ndjson
"""

from __future__ import annotations

import argparse
import random
import sys
from datetime import datetime, timedelta, timezone
from typing import Iterator

import orjson

START = datetime(2026, 3, 1, 9, 0, 0, tzinfo=timezone(timedelta(hours=8)))

_EN_WORDS = (
    "the staging database refuses connections since this morning can you check why port 5433 listens "
    "config env file DATABASE_URL points service restart failed test suite passes two failures in "
    "orders refund rounding off by one cent migration schema index query plan slow build cache "
    "dependency version pinned lockfile upgrade the parser handles unicode input correctly now I will "
    "look at the log and the stack trace first then write a fix with a regression test please keep the "
    "public API stable and update the README section about exit codes thanks that works merge it"
).split()
_ZH_PHRASES = (
    "预发环境的数据库从今天早上开始拒绝连接", "帮我查一下原因", "服务在 5433 端口监听", "配置文件里的地址还是旧的",
    "我先看一下日志和调用栈", "然后写一个修复并补上回归测试", "测试套件有两个失败", "退款金额的舍入差了一分钱",
    "请保持公开接口不变", "顺便更新说明文档里关于退出码的部分", "蓝鲸副本上周迁移过去了", "索引重建以后查询快了很多",
    "这个版本的依赖需要锁定", "好的，可以合并了", "构建缓存失效导致编译很慢", "把迁移脚本拆成两步执行",
)
_TOOLS = ("bash", "read", "edit", "write", "grep")
_OUTPUT_LINES = (
    "PASSED tests/test_orders.py::test_refund_rounding[{n}]",
    "FAILED tests/test_orders.py::test_refund_roundtrip - AssertionError: assert {n} == {m}",
    "  File \"/srv/shop/orders/refund.py\", line {n}, in apply_refund",
    "2026-10-08 07:02:{s:02d}.{n:03d} UTC [{m}] LOG:  database system is ready to accept connections",
    "drwxr-xr-x  2 app app  4096 Oct  8 07:{s:02d} migrations/{n:04d}_add_index.py",
    "    def apply_refund(order, amount):  # line {n}",
    "+    return round(amount * {m} / 100, 2)",
    "npm WARN deprecated package-{n}@{m}.0.0: use the maintained fork instead",
    "构建完成：{n} 个模块，耗时 {m} 毫秒",
    "{n:08x}  7f 45 4c 46 02 01 01 00  00 00 00 00 00 00 00 00  |.ELF............|",
)


def _corpus_en(rng: random.Random, size: int) -> str:
    return " ".join(rng.choice(_EN_WORDS) for _ in range(size // 5))[:size]


def _corpus_zh(rng: random.Random, size: int) -> str:
    parts, total = [], 0
    while total < size:
        phrase = rng.choice(_ZH_PHRASES) + rng.choice("，。；")
        parts.append(phrase)
        total += len(phrase)
    return "".join(parts)


def _corpus_output(rng: random.Random, size: int) -> bytes:
    lines, total = [], 0
    while total < size:
        line = rng.choice(_OUTPUT_LINES).format(n=rng.randrange(10_000), m=rng.randrange(1000), s=rng.randrange(60))
        lines.append(line)
        total += len(line.encode()) + 1
    return "\n".join(lines).encode()


def _slice(corpus: str, rng: random.Random, length: int) -> str:
    start = rng.randrange(len(corpus) - length)
    if corpus[start] != " " and (space := corpus.find(" ", start, start + 12)) > 0:
        start = space  # start on a word, as people do
    return corpus[start : start + length].strip() or "ok"


def _slice_bytes(corpus: bytes, rng: random.Random, length: int) -> str:
    """About ``length`` bytes of tool output, cut on line boundaries so no character is split."""
    start = corpus.find(b"\n", rng.randrange(len(corpus) - length - 1)) + 1
    end = corpus.rfind(b"\n", start, start + length)
    return corpus[start : end if end > start else start + length].decode("utf-8", "ignore") or "ok"


def messages(n: int, seed: int = 0) -> Iterator[dict]:
    """``n`` input records ``{kind, text, date, meta?}``, the same ones for the same ``seed``."""
    rng = random.Random(seed)
    en, zh, out = _corpus_en(rng, 200_000), _corpus_zh(rng, 70_000), _corpus_output(rng, 400_000)
    moment = START
    chinese = False
    call = 0
    pending_tool: str | None = None
    for k in range(n):
        if k % 40 == 0:  # a new conversation now and then, sometimes in Chinese
            chinese = rng.random() < 0.35
        moment += timedelta(seconds=rng.randrange(2, 90))
        if moment.hour >= 23:  # people sleep: jump to the next morning
            moment = (moment + timedelta(days=1)).replace(hour=8, minute=rng.randrange(60))
        date = moment.isoformat()
        if pending_tool is not None:
            # a tool result: one in ten messages, 2-30 KB, most of them short (mean about 7 KB)
            length = int(2_048 * 15 ** (rng.random() ** 2))
            yield {"kind": "echo", "text": _slice_bytes(out, rng, length), "date": date,
                   "meta": {"tool": pending_tool, "call_id": f"call_{call:07d}"}}
            pending_tool = None
            continue
        roll = rng.random()
        if roll < 0.11:  # a tool call, answered by the next message
            call += 1
            pending_tool = rng.choice(_TOOLS)
            arg = _slice(en, rng, rng.randrange(20, 120))
            yield {"kind": "tool", "text": f"{pending_tool}({arg!r})", "date": date,
                   "meta": {"tool": pending_tool, "call_id": f"call_{call:07d}"}}
            continue
        kind = "user" if roll < 0.45 else "pi"
        if chinese:  # 3 bytes a character: 50-500 bytes is about 17-170 characters
            text = _slice(zh, rng, rng.randrange(17, 170))
        else:
            text = _slice(en, rng, rng.randrange(50, 500))
        yield {"kind": kind, "text": text, "date": date}


def main() -> None:
    parser = argparse.ArgumentParser(description="Write synthetic agent-log messages as NDJSON to stdout.")
    parser.add_argument("n", type=int, help="how many messages (1,000,000 is about 1 GB)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    out = sys.stdout.buffer
    buf: list[bytes] = []
    for record in messages(args.n, args.seed):
        buf.append(orjson.dumps(record))
        if len(buf) >= 4096:
            out.write(b"\n".join(buf) + b"\n")
            buf.clear()
    if buf:
        out.write(b"\n".join(buf) + b"\n")
    out.flush()


if __name__ == "__main__":
    main()
