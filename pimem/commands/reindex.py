from __future__ import annotations

import time
from typing import Annotated, Optional

import typer

from .. import naming, output
from ..memory import Memory
from ..options import Home, Json


def command(
    names: Annotated[Optional[list[str]], typer.Argument(help="Memories whose index to rebuild (default: all).", metavar="NAME…", show_default=False)] = None,
    json: Json = False,
    home: Home = None,
) -> None:
    """Rebuild the search and lookup index (index.sqlite) of memories from their logs.

    Never needed for correctness: every command catches the index up from the log, and a deleted or
    damaged index is rebuilt on first use. Use it to rebuild at a time of your choosing. With the semantic
    extra installed (pip install '.[semantic]' in pimem's checkout) it also embeds the messages not embedded yet.

    Examples:
      pimem reindex
      pimem reindex main
      pimem reindex main work --json
    """
    from .. import semantic
    from ..index import rebuild, stderr_progress

    unread = output.Unread()
    memories = Memory.named(names, home) if names else Memory.all(home, refused=unread)
    if not memories and not unread.said:
        naming.say_none(home, "index")
    for mem in memories:
        started = time.perf_counter()
        count = unread.run(mem, lambda: rebuild(mem.path, mem.log, stderr_progress(mem.name)))
        if count is None:
            continue
        seconds = time.perf_counter() - started
        row = {"memory": mem.name, "messages": count, "seconds": round(seconds, 3)}
        if semantic.available():  # the semantic extra's vectors: caught up, not rebuilt (delete vectors/ for that)
            started = time.perf_counter()
            row["embedded"] = semantic.catch_up(mem) or 0
            row["embed_seconds"] = round(time.perf_counter() - started, 3)
        if json:
            output.json_line(row)
        else:
            embedded = f"; {row['embedded']:,} embedded in {row['embed_seconds']:.1f} s" if "embedded" in row else ""
            output.line(f"{mem.name}: {output.count(count, 'message')} indexed in {seconds:.1f} s{embedded}")
    unread.check()
