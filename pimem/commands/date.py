from __future__ import annotations

from typing import Annotated, Optional

import typer

from .. import output, when
from ..errors import BadInput, NothingFound
from ..memory import Memory
from ..options import Home, Json, Name


def command(
    name: Name,
    i: Annotated[Optional[int], typer.Argument(help="Message number.", metavar="I", show_default=False)] = None,
    at: Annotated[Optional[str], typer.Option("--at", help="Print the first message number at or after WHEN instead.", metavar="WHEN")] = None,
    json: Json = False,
    home: Home = None,
) -> None:
    """Print the date of message I, or with --at WHEN the first message number at or after WHEN.

    Exit 1 when no message is at or after WHEN.

    Examples:
      pimem date main 42
      pimem date main --at 2026-10-08
    """
    if (i is None) == (at is None):
        raise BadInput("give either a message number I or --at WHEN")
    mem = Memory.open(name, home)
    if at is not None:
        found = mem.first_at(when.parse_when(at))
        if found is None:
            raise NothingFound(f"no message in '{mem.name}' at or after {at}")
        msg = mem.message(found)
    else:
        msg = mem.message(i)
    if json:
        output.json_line({"i": msg["i"], "date": msg["date"]})
    else:
        output.line(str(msg["i"]) if at is not None else msg["date"])
