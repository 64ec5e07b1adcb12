from __future__ import annotations

import time
from typing import Annotated, Iterator, Optional

import typer

from .. import output, when
from ..errors import BadInput
from ..memory import Memory
from ..message import TOOL_KINDS, kind_of
from ..options import Home, IncludeTools, Json, Name


def command(
    name: Name,
    start: Annotated[Optional[str], typer.Argument(help="A date or time (2026-10-08, 09:30, 3d, yesterday) or #I.", metavar="WHEN", show_default=False)] = None,
    until: Annotated[Optional[str], typer.Option("--until", help="Stop before this date/time or #I.", metavar="WHEN")] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", "-k", help="Only these kinds (repeatable).")] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new messages as they are logged, like tail -f.")] = False,
    cursor: Annotated[Optional[str], typer.Option("--cursor", help="Resume where the consumer NAME stopped, and remember where it stops now.", metavar="NAME")] = None,
    include_tools: IncludeTools = False,
    text: Annotated[bool, typer.Option("--text", help="Print one readable line per message instead of NDJSON.")] = False,
    json: Json = True,
    home: Home = None,
) -> None:
    """Stream messages from a date, a time or a message number, as NDJSON.

    Tool calls and results are left out unless --include-tools or --kind names them. With --cursor, a
    consumer gets each message exactly once across runs.

    Examples:
      pimem since main 2026-10-08 | jq .text
      pimem since main '#120' --until '#130'
      pimem since main 2h --kind user --text
      pimem since main --cursor mailer --follow
    """
    mem = Memory.open(name, home)
    kinds = {kind_of(k) for k in kind} if kind else None
    hide = set() if include_tools or (kinds and kinds & TOOL_KINDS) else set(TOOL_KINDS)
    if follow and until:
        raise BadInput("--follow and --until do not go together")
    saved = mem.cursor(cursor) if cursor else None
    if saved is not None:
        position, since_date = saved, None
    elif start is not None:
        position, since_date = _bound(start)
    elif cursor:
        position, since_date = 0, None
    else:
        raise BadInput("give WHEN (a date, a time, or #I) or --cursor NAME")
    if since_date is not None:
        stream, position = mem.since(since_date), mem.count()
    else:
        stream = mem.messages(position)
    stop_i, stop_date = _bound(until)
    while True:
        for msg in stream:
            if (stop_i is not None and msg["i"] >= stop_i) or (
                stop_date is not None and when.parse_stored(msg["date"]) >= stop_date
            ):
                break
            position = max(position, msg["i"] + 1)
            if msg["kind"] in hide or (kinds and msg["kind"] not in kinds):
                continue
            if text:
                output.line(output.message_line(msg))
            else:
                output.json_line(msg)
        output.flush()
        if cursor:
            mem.save_cursor(cursor, position)
        if not follow:
            return
        stream = _wait_for(mem, position)


def _bound(value: str | None) -> tuple[int | None, object]:
    """``#I`` as an index, anything else as a moment."""
    if value is None:
        return None, None
    if value.startswith("#"):
        try:
            i = int(value[1:])
        except ValueError:
            raise BadInput(f"bad message number {value!r}: use #I, for example #42") from None
        if i < 0:
            raise BadInput(f"bad message number {value!r}: numbers start at #0")
        return i, None
    return None, when.parse_when(value)


def _wait_for(mem: Memory, position: int) -> Iterator[dict]:
    """Poll until messages past ``position`` exist, then stream them."""
    while mem.count() <= position:
        time.sleep(0.2)
    return mem.messages(position)
