from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import naming, numbers, output, when
from ..errors import BadInput, NothingFound
from ..memory import Memory
from ..options import Home, Json, Name


def command(
    name: Name = None,
    i: Annotated[Optional[str], typer.Argument(help="Message number, or a node ID+N for the dates of its first and last messages.", metavar="I", show_default=False)] = None,
    at: Annotated[Optional[str], typer.Option("--at", help="Print the first message number at or after WHEN instead.", metavar="WHEN")] = None,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print the date of message I, or with --at WHEN the first message number at or after WHEN.

    For a node ID+N (a view line), print the dates of its first and last messages. Exit 1 when no message is
    at or after WHEN.

    Examples:
      pimem date 42
      pimem date main 42
      pimem date main 40+8
      pimem date main --at 2026-10-08
    """
    name, i = naming.lone(name, i, home, reads_as=lambda word: word.isdigit() or "+" in word)
    if (i is None) == (at is None):
        raise BadInput("give either a message number I or --at WHEN")
    mem = Memory.open(name, home)
    if at is not None:
        found = mem.first_at(when.parse_when(at))
        if found is None:
            raise NothingFound(f"no message in '{mem.name}' at or after {at}")
        msg = mem.message(found)
    elif "+" in i:
        from ..tree import label, parse_label, span

        node = parse_label(i, mem.count())
        first, end = span(*node)
        dates = [mem.message(first)["date"], mem.message(end - 1)["date"]]
        if json:  # (the label as the view writes it, as zoom gives it: 04+02 is 4+2)
            output.json_line({"label": label(*node), "first": dates[0], "last": dates[1]})
        else:
            output.line(" ".join(dates))
        return
    else:
        msg = mem.message(numbers.index(i))
    if json:
        output.json_line({"i": msg["i"], "date": msg["date"]})
    else:
        output.line(str(msg["i"]) if at is not None else msg["date"])
