from __future__ import annotations

import contextlib
from importlib import resources
from typing import Annotated

import orjson
import typer

from .. import output
from ..errors import BadInput, Busy, PimemError
from ..home import ensure_dir
from ..memory import Memory
from ..options import Home


WAIT = 8.0  # seconds the demo gives a watcher building it to write the summaries the view waits for
DEMO_BUDGETS = {"view": {"hi": 2000, "lo": 1000}, "cview": {"hi": 1200, "lo": 600}}


def command(
    name: Annotated[str, typer.Option("--name", help="Memory to log the sample into.")] = "demo",
    home: Home = None,
) -> None:
    """Log a bundled sample conversation into a memory, build its summary tree offline and print the view.

    The tree is built by the extractive compactor (no key, no network) whatever model is configured; run it
    twice and nothing is logged or built twice. A new demo memory gets a view budget of 1,000-2,000 bytes
    (instead of 64-128 KB) so that twenty messages are enough to see old spans folded into summary lines.

    Examples:
      pimem demo
      pimem demo --home /tmp/pimem-demo
    """
    sample = [orjson.loads(line) for line in resources.files("pimem.data").joinpath("sample.ndjson").read_bytes().splitlines() if line.strip()]
    mem = Memory.at(name, home)
    have = mem.count() if mem.exists() else 0
    held = [(m["kind"], m["text"]) for m in mem.messages(0, min(have, len(sample)))] if have else []
    if have > len(sample) or held != [(m["kind"], m["text"]) for m in sample[: len(held)]]:
        raise BadInput(f"'{mem.name}' holds messages of its own, not the demo's sample: run the demo into a memory of "
                       "its own (pimem demo --name NAME)")
    config = mem.path / "config.json"
    made_config = not have and not config.exists()
    if not have:
        # the sample is far below the real 64-128 KB budget: a small one shows the view folding old spans
        ensure_dir(mem.path)
        mem.save_config(DEMO_BUDGETS)
    if have < len(sample):
        try:
            mem.append(sample[have:])
        except BaseException:
            if made_config and not mem.exists():  # a failed first write leaves no memory, nor its budgets
                config.unlink(missing_ok=True)
                with contextlib.suppress(PimemError, OSError), mem.lock(0):
                    mem.unmake()  # (nor the directory they were in)
            raise
        output.info(f"logged {len(sample) - have} sample messages into '{mem.name}' ({mem.path})")
    else:
        output.info(f"'{mem.name}' already holds the sample ({output.count(have, 'message')})")
    from .. import scheduler
    from ..builder import survey
    from ..compactor import Compactor

    views = mem.views.current(create=False)
    # (the tree unbuilt, or its view waiting for it: built; else the store is left untouched)
    if views is None or any(v.pending() or v.waiting() for v in views.both()) or survey(mem)["pending"]:
        try:
            sched = scheduler.build_tree([mem], compactor=Compactor({"provider": "extractive"}))
        except Busy:  # a watcher builds it (`pimem watch` of the whole home, say): its summaries waited for
            from ..context import wait_for_summaries

            output.info(f"another pimem (a watch or a build-tree) is building '{mem.name}': the view as it stands")
            wait_for_summaries(mem, WAIT, include_tools=True)
        else:
            stats = sched.builders[0].stats
            if stats.calls:
                output.info(f"built the tree: {output.count(stats.calls, 'node')} summarised offline, {stats.free:,} free")
    for line in mem.view_lines():
        output.line(line)
    output.info(f"next: pimem zoom {mem.name} 0+16 · pimem search 5433 {mem.name} · pimem status {mem.name}")
