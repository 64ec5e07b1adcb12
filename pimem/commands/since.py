from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import naming, output, when
from ..errors import BadInput, NotFound, PimemError
from ..memory import Memory
from ..message import TOOL_KINDS, kind_of
from ..options import MESSAGE_KINDS, Home, IncludeTools, Json, Name, apart

FOLLOW_POLL = 0.2  # seconds between looks at the log while following


def command(
    name: Name = None,
    start: Annotated[Optional[str], typer.Argument(help="A date or time (2026-10-08, 09:30, 2 hours ago, yesterday 9:30, last monday) or #I.", metavar="WHEN", show_default=False)] = None,
    until: Annotated[Optional[str], typer.Option("--until", help="Only messages before #I, or dated before this date/time.", metavar="WHEN")] = None,
    kind: Annotated[Optional[list[str]], typer.Option("--kind", "-k", help="Only these kinds (repeatable).", autocompletion=MESSAGE_KINDS)] = None,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new messages as they are logged, like tail -f.")] = False,
    cursor: Annotated[Optional[str], typer.Option("--cursor", help="Resume where this consumer stopped, and remember where it stops now.", metavar="CONSUMER")] = None,
    include_tools: IncludeTools = False,
    text: Annotated[bool, typer.Option("--text", help="Print one readable line per message instead of NDJSON.")] = False,
    json: Json = False,  # (NDJSON is the default: --json only says so)
    home: Home = None,
) -> None:
    """Stream messages from a date, a time or a message number, as NDJSON.

    Each line is the message exactly as stored. Tool calls and results are left out unless --include-tools
    or --kind names them. With --cursor CONSUMER, a consumer gets each message once across runs: the cursor
    moves only after its messages were written (a run killed midway repeats them, never skips them), and
    through a pipe only past the lines the reader took: each is written once the reader took the one before,
    so '| head -1' leaves the rest for the next run (a line a reader took but did not use counts as read).
    --until a date filters by date (an earlier session imported later is found), but with --cursor the run
    stops at the first message dated at or after it, where the next run starts; a cursor already past --until
    gives nothing (exit 0). --until before WHEN is refused (exit 2).

    Examples:
      pimem since 2026-10-08 | jq .text
      pimem since main 2026-10-08 | jq .text
      pimem since main '#120' --until '#130'
      pimem since main 2h --kind user --text
      pimem since main --cursor mailer --follow
    """
    apart(("--text", text), ("--json", json))
    apart(("--follow", follow), ("--until", until))
    name, start = naming.lone(name, start, home, reads_as=_reads_as_when)
    start_bound, until_bound = when.bound(start), when.bound(until)  # (a bad WHEN is reported before a missing memory)
    for first, last in zip(start_bound, until_bound):  # (numbers with numbers, moments with moments)
        when.refuse_reversed(first, last, f"the start {start}", f"--until {until}")
    mem = Memory.open(name, home)
    kinds = {kind_of(k) for k in kind or ()}
    hidden = frozenset() if include_tools else TOOL_KINDS  # (a kind another hand wrote is shown, not a tool)
    saved = mem.cursor(cursor) if cursor is not None else None
    if saved is not None:
        start_i, since_date = saved, None
    elif start is not None:
        start_i, since_date = start_bound
    elif cursor is not None:
        start_i, since_date = 0, None
    else:
        raise BadInput("give WHEN (a date, a time, or #I) or --cursor CONSUMER")
    stop_i, stop_date = until_bound
    stop = when.Threshold(stop_date) if stop_date is not None else None
    end = stop_i if stop_date is None else mem.end_before(stop_date)  # no message from here on is before --until
    if since_date is not None:
        # messages logged while we read are picked up by --follow and by the next --cursor run
        position, entries = mem.count(), mem.since_entries(since_date)
    else:
        position, entries = start_i, mem.entries(start_i)
    # a cursor read through a pipe moves past the lines the reader took out of it, not those it left there
    taken = output.Taken.on_stdout() if cursor is not None else None
    out = taken or output.Lines()
    followed = mem.identity()
    while True:
        try:
            for msg, line in entries:
                i = msg["i"]
                if end is not None and i >= end:
                    position = i
                    break
                if stop is not None and stop.reached_by(msg["date"]):  # (dates need not follow i: read on)
                    if cursor is None:
                        continue
                    position = i  # a cursor stops at the first message left out: the next run starts there
                    break
                if i >= position:
                    position = i + 1
                if (msg["kind"] in kinds) if kinds else (msg["kind"] not in hidden):
                    shown = (output.message_line(msg) + "\n").encode("utf-8", "surrogateescape") if text else line
                    if taken is None:
                        out.add(shown)
                    else:
                        taken.add(shown, i)
            out.flush()
        except BrokenPipeError:
            if taken is not None and taken.untaken is not None:
                mem.save_cursor(cursor, taken.untaken)
            raise
        if cursor is not None:
            mem.save_cursor(cursor, position)
        if not follow:
            return
        while (mem := _followed(mem, followed, home)).count() <= position:
            output.idle(FOLLOW_POLL)  # (ends the run once the reader has gone)
        entries = mem.entries(position)


def _followed(mem: Memory, identity: tuple, home) -> Memory:
    """The memory being followed, after a ``rename`` too (found again through the pointer its old name keeps);
    ``NotFound`` once it was deleted."""
    if mem.identity() == identity:
        return mem
    try:
        moved = Memory.open(mem.name, home)
    except NotFound:
        moved = None
    if moved is None or moved.identity() != identity:
        raise NotFound(f"memory '{mem.name}' was deleted while it was followed")
    return moved


def _reads_as_when(word: str) -> bool:
    if when.looks_like(word):  # (its parse says what is wrong with it, not "no memory named …")
        return True
    try:
        when.bound(word)
    except PimemError:
        return False
    return True

