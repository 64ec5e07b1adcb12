from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

from .. import output
from ..errors import BadInput
from ..memory import Memory
from ..options import Home, Json, Name


def command(
    name: Name,
    compactor: Annotated[bool, typer.Option("--compactor", help="The compactor's view (cut at its first unbuilt line).")] = False,
    wait: Annotated[Optional[float], typer.Option("--wait", help="Wait up to S seconds for pending summaries (a running watcher builds them).", metavar="S")] = None,
    stats: Annotated[bool, typer.Option("--stats", help="Bytes, lines and lines per level instead of the lines.")] = False,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print the view: one line per span, old spans coarse, new ones fine, each as ID+N|text.

    This is what the model reads each turn. A leaf not summarised yet shows a placeholder telling the model
    to zoom it. --json gives one object per line: label, level, index, bytes, text (null when unbuilt).

    Examples:
      pimem view main
      pimem view main --wait 8
      pimem view main --stats
      pimem view main --compactor --json | jq .label
    """
    if wait is not None and wait < 0:
        raise BadInput("--wait takes a number of seconds ≥ 0")
    mem = Memory.open(name, home)
    views = mem.views()
    if wait:
        deadline = time.monotonic() + wait
        while (views.view.pending() or views.view.waiting()) and time.monotonic() < deadline:
            time.sleep(0.1)
            views = mem.views()
        if views.view.pending():
            output.info(f"{views.view.pending()} lines still wait for a summary after {wait:g} s")
    v = views.cview if compactor else views.view
    from ..tree import label
    from ..view import render_line

    rows = [(l, i, text, cost - 1) for l, i, text, cost in v.rows()]  # bytes without the newline
    if compactor:
        rows = rows[: next((k for k, row in enumerate(rows) if row[2] is None), len(rows))]
    if stats:
        levels: dict[int, int] = {}
        for l, _, _, _ in rows:
            levels[l] = levels.get(l, 0) + 1
        total = sum(size + 1 for *_, size in rows)
        pending = sum(text is None for _, _, text, _ in rows)
        if json:
            output.json_line({"bytes": total, "lines": len(rows), "messages": views.T, "pending": pending,
                              "levels": {str(l): levels[l] for l in sorted(levels)}})
            return
        output.line(f"bytes     {total:,}  (budget {v.lo:,}–{v.hi:,})")
        output.line(f"lines     {len(rows):,}  for {views.T:,} messages ({pending} waiting for a summary)")
        for l in sorted(levels):
            output.line(f"level {l:<3} {levels[l]:>5} lines of {1 << l} message{'s' if l else ''}")
        return
    for l, i, text, size in rows:
        if json:
            output.json_line({"label": label(l, i), "level": l, "index": i, "bytes": size, "text": text})
        else:
            output.line(render_line(l, i, text))
