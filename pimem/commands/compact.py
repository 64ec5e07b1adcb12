from __future__ import annotations

from typing import Annotated

import typer

from .. import naming, output
from ..memory import Memory
from ..numbers import MAX_I, count, param
from ..options import Home, Json, Name, Timeout, apart


def command(
    keep: Annotated[int, typer.Option("--keep", help="Bytes of recent messages to keep (message sizes).", metavar="BYTES", click_type=param(count, "BYTES", hi=MAX_I))],
    name: Name = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Show the boundary and checkpoint; write nothing.")] = False,
    json: Json = False,
    timeout: Timeout = None,
    home: Home = None,
) -> None:
    """Write a deterministic compaction checkpoint and print it.

    Chooses the latest boundary keeping at least --keep bytes of tail that never separates a tool call
    from its result (meta.call_id), falling back to earlier ones; exit 2 when there is none. Records the
    window in windows.jsonl and derives provisional memories (files, commands with exit codes, test counts).
    The checkpoint holds counts and a hash, never history text. Running it again writes nothing new.

    Examples:
      pimem compact main --keep 64000
      pimem compact main --keep 64000 --dry-run --json | jq .keptStart
    """
    from .. import compaction  # (here, not at the top: ``pimem --help`` imports every command's module)

    apart(("--dry-run", dry_run), ("--timeout", timeout), why="a dry run takes no lock to wait for")
    result = compaction.compact(Memory.open(naming.given(name), home), keep, dry_run=dry_run, timeout=timeout)
    if json:
        output.json_line(result)
        return
    output.line(result["checkpoint"])
    # (a dry run over a span already compacted says so too: the run would write nothing new)
    verb = "already compacted" if result["alreadyCompacted"] else "would compact" if dry_run else "compacted"
    fell = f" (fell back from #{result['proposedKeptStart']} to keep a tool call with its result)" if result["fellBack"] else ""
    output.info(
        f"{verb} #{result['sourceStart']}…#{result['keptStart'] - 1} ({output.count(result['sourceCount'], 'message')}), keeping from "
        f"#{result['keptStart']}{fell}; window {result['windowId']}; {output.count(len(result['derived']), 'rule memory', 'rule memories')}"
    )
